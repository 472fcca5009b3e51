"""The modules a build backend run needs (scikit-build-core's cmake.prefix and
dynamic_metadata entry points, and what cpubuildConfig.cmake runs with `python -m`)
import with the standard library only, and run with it: cpubuild-core, the
distribution isolated builds install, depends on nothing beyond tomli (issue 23)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from testsupport import require

TOOLS = Path(__file__).resolve().parents[2]

# entry points and `python -m` targets of a build, and the runtime copied into wheels
BUILD_ENTRY_MODULES = (
    "cpubuild.cmake",
    "cpubuild.version_provider",
    "cpubuild.matrix",
    "cpubuild.torchdist",
    "cpubuild.runtime.dispatch",
    "cpubuild.runtime.select",
    "cpubuild.runtime.report",
)

# what the closure must stay within: 22 modules today
BACKEND_CLOSURE = frozenset({
    "cpubuild", "cpubuild.cache", "cpubuild.cmake", "cpubuild.contract", "cpubuild.elfdynamic", "cpubuild.errors",
    "cpubuild.hardware", "cpubuild.matrix", "cpubuild.progress", "cpubuild.pylimited",
    "cpubuild.repairexclude", "cpubuild.runtime", "cpubuild.runtime.dispatch",
    "cpubuild.runtime.errors", "cpubuild.runtime.report", "cpubuild.runtime.select",
    "cpubuild.settings", "cpubuild.settings.errors", "cpubuild.settings.model",
    "cpubuild.settings.reader", "cpubuild.torchdist", "cpubuild.version_provider",
})

_GUARD = """
import builtins, importlib, json, runpy, sys
real = builtins.__import__
def guarded(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.split('.')[0]
    if level == 0 and top not in sys.stdlib_module_names and top not in ('cpubuild', 'tomli'):
        raise ImportError('third-party import: ' + name)
    return real(name, globals, locals, fromlist, level)
builtins.__import__ = guarded
"""
_PROBE = _GUARD + """
for module in sys.argv[1:]:
    importlib.import_module(module)
print(json.dumps(sorted(m for m in sys.modules if m.startswith('cpubuild'))))
"""


def test_build_closure_imports_standard_library_only() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *BUILD_ENTRY_MODULES],
        cwd=TOOLS, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    imported = set(json.loads(result.stdout))
    assert imported <= BACKEND_CLOSURE, sorted(imported - BACKEND_CLOSURE)


def test_what_the_cmake_package_asks_torchdist_runs_with_the_standard_library() -> None:
    """`python -m cpubuild.torchdist abi|version|openmp TORCH_DIR` (cpubuildConfig.cmake), with every
    third-party import refused while it runs: libtorch's ELF facts come from elfdynamic.py."""
    spec = importlib.util.find_spec("torch")
    require(spec is not None and spec.origin is not None, "torch is not installed (run scripts/setup.sh)")
    assert spec is not None and spec.origin is not None
    torch_dir = str(Path(spec.origin).parent)
    for query in ("abi", "version", "openmp"):
        script = _GUARD + "sys.argv = ['torchdist', *sys.argv[1:]]\nrunpy.run_module('cpubuild.torchdist', run_name='__main__')\n"
        result = subprocess.run([sys.executable, "-c", script, query, torch_dir], cwd=TOOLS, capture_output=True,
                                text=True, check=False)
        assert result.returncode == 0 and result.stdout.strip(), (query, result.stderr)
