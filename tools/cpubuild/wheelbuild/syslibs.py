"""System libraries a project's variants link by name (isa_matrix.toml
`link-libraries`, e.g. vLLM's numa): does the build's compiler find them?"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..matrix import Matrix
from ..toolchain.tools import Requirement, ToolStatus, apt_fix

# Debian's development package of each library a CPU-kernel project commonly links
DEV_PACKAGES = {"numa": "libnuma-dev", "gomp": "libgomp1", "tcmalloc": "libgoogle-perftools-dev", "dnnl": "libdnnl-dev"}


def linked_libraries(matrix: Matrix, arch: str) -> tuple[str, ...]:
    """Every library name the arch's variants link, in matrix order, once."""
    names: dict[str, None] = {}
    for variant in matrix.variants_for(arch):
        names.update(dict.fromkeys(variant.link_libraries))
    return tuple(names)


def find_library(compiler: str, name: str) -> str | None:
    """Where `compiler` links lib<name>.so from (gcc and clang print the bare name when it has none)."""
    try:
        out = subprocess.run([compiler, f"-print-file-name=lib{name}.so"], capture_output=True, text=True,
                             timeout=30, check=False).stdout.strip()
    except OSError:
        return None
    return out if Path(out).is_absolute() and Path(out).exists() else None


def library_statuses(matrix: Matrix, arch: str, compiler: str = "cc") -> list[ToolStatus]:
    statuses = []
    found_compiler = shutil.which(compiler)
    for name in linked_libraries(matrix, arch):
        req = Requirement(name=f"lib{name}", command=(compiler,), purpose=f"linked by the variants (link-libraries = [\"{name}\"])",
                          fix=apt_fix(DEV_PACKAGES.get(name, f"lib{name}-dev")))
        path = find_library(found_compiler, name) if found_compiler else None
        problem = None if path else f"{compiler} finds no lib{name}.so"
        statuses.append(ToolStatus(requirement=req, path=path, version=None, problem=problem))
    return statuses
