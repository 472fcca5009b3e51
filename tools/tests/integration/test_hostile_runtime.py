"""A damaged `_manifest.json` in an installed package: `import pkg` fails with
one ImportError-family line naming the file, never a bare JSONDecodeError,
KeyError or TypeError."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from testsupport import REPO

GOOD = {
    "schema": 1, "package": "relp", "env_prefix": "RELP", "kind": "ctypes", "arch": "x86_64", "probe": "_relp_probe.so",
    "features": {}, "variants": [{"name": "baseline", "priority": 0, "requires": [], "built": True, "library": "_relp_baseline.so"}],
}
DAMAGE: dict[str, bytes] = {
    "not-json": b"{\"variants\": [",
    "empty": b"",
    "binary": b"\xff\xfe\x00garbage",
    "a-list": b"[]",
    "no-variants": json.dumps({k: v for k, v in GOOD.items() if k != "variants"}).encode(),
    "variants-a-string": json.dumps({**GOOD, "variants": "baseline"}).encode(),
    "variant-without-library": json.dumps({**GOOD, "variants": [{"name": "baseline"}]}).encode(),
    "library-escapes": json.dumps({**GOOD, "variants": [{"name": "b", "library": "../../evil.so"}]}).encode(),
    "probe-escapes": json.dumps({**GOOD, "probe": "/tmp/evil.so"}).encode(),
    "env-prefix-number": json.dumps({**GOOD, "env_prefix": 5}).encode(),
}


@pytest.mark.parametrize("case", sorted([*DAMAGE, "missing"]))
def test_a_damaged_manifest_is_one_import_error_naming_it(case: str, tmp_path: Path) -> None:
    pkg = tmp_path / "relp"
    shutil.copytree(REPO / "tools" / "cpubuild" / "runtime", pkg / "_cpubuild", ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "__init__.py").write_text("from ._cpubuild import variants\nVARIANTS = variants()\n")
    if case != "missing":
        (pkg / "_manifest.json").write_bytes(DAMAGE[case])
    probe = ("import sys\ntry:\n    import relp\nexcept ImportError as exc:\n"
             "    print(type(exc).__name__ + ': ' + str(exc)); sys.exit(3)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 3, (out.stdout, out.stderr)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and str(pkg / "_manifest.json") in lines[0], out.stdout
    assert lines[0].startswith("ManifestError: relp is not"), lines[0]
