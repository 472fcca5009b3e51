"""Where a built wheel's guarded functions are, kept in the wheel.

Release libraries are stripped (install.strip), so a static function the
project declared in `audit.allow` has no name in the wheel. `cpubuild wheel`
names it from the build tree's unstripped copy; this record keeps its address
range next to the manifest, keyed by the library's SHA-256, so that any later
audit (`cpubuild publish`, a user's `cpubuild audit`) sees the same names -
for those exact bytes only."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path, PurePosixPath

from ..toolchain import wheelzip
from .check import MANIFEST_NAME, RECORD_NAME, AuditResult


def record_guarded(wheel: Path, result: AuditResult, epoch: int) -> bool:
    """Add RECORD_NAME next to the manifest when the audit matched allow entries; True if written."""
    libraries: dict[str, dict[str, object]] = {}
    for lib in result.libraries:
        if lib.scan.guarded_functions:
            ranges = lib.image.function_ranges(lib.scan.guarded_functions)
            libraries[lib.scan.name] = {"functions": {n: list(r) for n, r in sorted(ranges.items())}}
    if not libraries:
        return False
    with zipfile.ZipFile(wheel) as src:
        entries = [(i.filename, (i.external_attr >> 16) & 0o777, src.read(i)) for i in src.infolist() if not i.is_dir()]
    by_name = {name: data for name, _mode, data in entries}
    for name, entry in libraries.items():
        entry["sha256"] = hashlib.sha256(by_name[name]).hexdigest()
    manifest = next(n for n in by_name if PurePosixPath(n).name == MANIFEST_NAME)
    target = str(PurePosixPath(manifest).with_name(RECORD_NAME))
    record = next(n for n in by_name if n.endswith(".dist-info/RECORD"))
    entries = [e for e in entries if e[0] not in (target, record)]
    entries.append((target, 0o644, (json.dumps({"schema": 1, "libraries": libraries}, indent=1, sort_keys=True) + "\n").encode()))
    entries.append((record, 0o644, wheelzip.record_file(((n, d) for n, _m, d in entries), record)))
    wheelzip.write_wheel(wheel, entries, epoch)
    return True
