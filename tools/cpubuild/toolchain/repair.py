"""auditwheel, used deliberately.

* The wheel is repaired to the *lowest* manylinux policy its binaries allow
  (``--plat auto``), and that policy must not be above the one the
  matrix aims at: a drifting glibc floor is a build failure that names the
  symbols responsible, not a silently less portable wheel.
* auditwheel's ISA-extension check refuses binaries whose GNU property note
  declares x86-64-v2/v3/v4. Variant libraries may legitimately need more than
  the baseline - the dispatcher loads them only after the probe approved the
  CPU - so when (and only when) the check triggers, cpubuild verifies that the
  flagged files are exactly such guarded variant libraries and repeats the
  repair with ``--disable-isa-ext-check``. A flagged baseline or probe library
  is an error: it would crash lesser CPUs.
* `auditwheel show` on the repaired wheel must agree with its filename tag.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BuildFailedError
from . import glibc
from .tools import find_tool
from .wheelzip import inspect

_POLICY = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
# GNU_PROPERTY_X86_ISA_1_NEEDED bits -> microarchitecture level
X86_LEVELS = ((8, "x86-64-v4"), (4, "x86-64-v3"), (2, "x86-64-v2"))

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Audit:
    overall_tag: str
    sym_tag: str
    unsupported_isa: bool
    versioned_symbols: dict[str, list[str]] = field(hash=False)
    external_libs: tuple[str, ...] = ()  # libraries the wheel needs but does not carry


@dataclass(frozen=True, kw_only=True)
class Repaired:
    wheel: Path
    policy: str  # the platform tag written into the name, e.g. manylinux_2_24_x86_64
    audited: str  # what `auditwheel show` says about the repaired wheel
    isa_ext_check: str  # "passed", or why it was disabled


def policy_glibc(tag: str) -> tuple[int, int] | None:
    """manylinux_2_28_x86_64 -> (2, 28); None for linux_* (no policy)."""
    match = _POLICY.match(tag)
    return (int(match.group(1)), int(match.group(2))) if match else None


def policy_at_most(tag: str, ceiling: str) -> bool:
    mine, limit = policy_glibc(tag), policy_glibc(ceiling)
    return mine is not None and limit is not None and mine <= limit


def auditwheel_command() -> list[str]:
    exe = find_tool("auditwheel")
    return [exe] if exe else [sys.executable, "-m", "auditwheel"]


def _run(cmd: Sequence[str], log: Log, lookup_first: Sequence[Path] = ()) -> subprocess.CompletedProcess[str]:
    env = None
    if lookup_first:  # searched before the system's directories (and before --ldpaths)
        env = {**os.environ, "AUDITWHEEL_LD_LIBRARY_PATH": ":".join(str(p) for p in lookup_first)}
        log(f"$ AUDITWHEEL_LD_LIBRARY_PATH={env['AUDITWHEEL_LD_LIBRARY_PATH']}")
    log("$ " + " ".join(cmd))
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=600, env=env)
    for line in (proc.stdout + proc.stderr).splitlines():
        log(line)
    return proc


def audit(wheel: Path, *, log: Log, ldpaths: str | None = None, disable_isa_check: bool = False,
          lookup_first: Sequence[Path] = ()) -> Audit:
    cmd = [*auditwheel_command(), "show", "--json"]
    if disable_isa_check:
        cmd.append("--disable-isa-ext-check")
    if ldpaths:
        cmd += ["--ldpaths", ldpaths]
    proc = _run([*cmd, str(wheel)], log, lookup_first)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise BuildFailedError(f"auditwheel show failed on {wheel.name}", detail=(proc.stderr or proc.stdout)[-3000:]) from None
    return Audit(
        overall_tag=str(data["overall_tag"]),
        sym_tag=str(data["sym_tag"]),
        unsupported_isa=bool(data.get("unsupported_isa", False)),
        versioned_symbols={str(k): [str(x) for x in v] for k, v in data.get("versioned_symbols", {}).items()},
        external_libs=tuple(sorted(str(k) for k in data.get("external_libs", {}))),
    )


def _elf_members(wheel: Path, tmp: Path) -> dict[str, Path]:
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.filename.endswith((".so", ".dylib")) or ".so." in info.filename:
                target = tmp / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(info))
                out[info.filename] = target
    return out


def x86_isa_level(path: Path) -> str | None:
    """The x86-64 level a library's GNU property note says it needs (None: baseline or no note)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import NoteSection

    with path.open("rb") as f:
        elf = ELFFile(f)
        for section in elf.iter_sections():
            if not isinstance(section, NoteSection):
                continue
            for note in section.iter_notes():
                if note["n_type"] != "NT_GNU_PROPERTY_TYPE_0":
                    continue
                for prop in note["n_desc"]:
                    if prop.pr_type == "GNU_PROPERTY_X86_ISA_1_NEEDED" and prop.pr_datasz == 4:
                        bits = int(prop.pr_data) & ~1
                        for bit, level in X86_LEVELS:
                            if bits & bit:
                                return level
    return None


def undefined_versions(path: Path) -> list[tuple[str, str]]:
    """(symbol, version) of every versioned symbol a library imports."""
    from elftools.elf.elffile import ELFFile

    found: list[tuple[str, str]] = []
    with path.open("rb") as f:
        elf = ELFFile(f)
        dynsym: Any = elf.get_section_by_name(".dynsym")
        versym: Any = elf.get_section_by_name(".gnu.version")
        verneed: Any = elf.get_section_by_name(".gnu.version_r")
        if dynsym is None or versym is None or verneed is None:
            return found
        names = {}
        for _vn, auxes in verneed.iter_versions():
            for aux in auxes:
                names[int(aux["vna_other"])] = aux.name
        for index, sym in enumerate(dynsym.iter_symbols()):
            if sym["st_shndx"] != "SHN_UNDEF" or not sym.name:
                continue
            ndx = versym.get_symbol(index).entry["ndx"]
            if isinstance(ndx, int) and (ndx & 0x7FFF) in names:
                found.append((sym.name, names[ndx & 0x7FFF]))
    return found


def symbols_above(wheel: Path, ceiling: str) -> list[str]:
    """'lib: symbol@VERSION' for every import newer than the ceiling policy allows."""
    limits = glibc.policy_ceilings(ceiling)
    lines = []
    with tempfile.TemporaryDirectory(prefix="cpubuild-audit-") as tmp:
        for member, path in sorted(_elf_members(wheel, Path(tmp)).items()):
            for symbol, version in undefined_versions(path):
                parsed = glibc.split_version(version)
                if parsed and parsed[0] in limits and parsed[1] > limits[parsed[0]]:
                    lines.append(f"{member}: {symbol}@{version}")
    return lines


def grafted_above(repaired: Path, ceiling: str) -> list[str]:
    """symbols_above for the libraries auditwheel grafted into a repaired wheel (its `<pkg>.libs/`)."""
    return [line for line in symbols_above(repaired, ceiling) if ".libs/" in line.split(":", 1)[0]]


def flagged_libraries(wheel: Path) -> dict[str, str]:
    """Libraries inside the wheel that declare an x86-64 level above the baseline."""
    with tempfile.TemporaryDirectory(prefix="cpubuild-isa-") as tmp:
        levels = {m: x86_isa_level(p) for m, p in _elf_members(wheel, Path(tmp)).items()}
    return {m: lvl for m, lvl in levels.items() if lvl}


def isa_check_decision(flagged: dict[str, str], guarded: Collection[str]) -> str:
    """Pure: how to treat the ISA-extension check. Raises if an unguarded library is flagged."""
    unguarded = {m: lvl for m, lvl in flagged.items() if m not in guarded}
    if unguarded:
        listing = ", ".join(f"{m} ({lvl})" for m, lvl in sorted(unguarded.items()))
        raise BuildFailedError(
            f"auditwheel's ISA-extension check: {listing} must run on every CPU of the arch but declares a higher ISA level",
            detail="Only variant libraries, which the dispatcher loads after the CPU probe approved them, may need more than the baseline.",
        )
    listing = ", ".join(f"{Path(m).name} ({lvl})" for m, lvl in sorted(flagged.items()))
    return f"disabled: it flagged only guarded variant libraries ({listing})"


def excluded_sonames(project: Path, torch_libraries: Sequence[str] = ()) -> tuple[str, ...]:
    """What the repair leaves out: torch's libraries and the project's `repair-exclude`."""
    from ..contract import load_config

    return tuple(dict.fromkeys((*torch_libraries, *(e.library for e in load_config(project).repair_exclude))))


def repair_linux(
    wheel: Path,
    dest: Path,
    *,
    ceiling: str,
    guarded: Collection[str],
    log: Log,
    ldpaths: str | None = None,
    exclude: Collection[str] = (),
    lookup_first: Sequence[Path] = (),
) -> Repaired:
    """auditwheel repair to the lowest policy the binaries allow, at most `ceiling`.

    `guarded`: wheel paths of the variant libraries above the baseline (the
    only files allowed to declare a higher x86-64 level). `exclude`: sonames the
    wheel must never carry (a torch project's libtorch: `import torch` loads it).
    `lookup_first`: where auditwheel resolves libraries before the system's (a
    torch project: torch's lib/, so its own libgomp is audited, not the host's)."""
    dest.mkdir(parents=True, exist_ok=True)

    def run_repair(disable_isa_check: bool) -> subprocess.CompletedProcess[str]:
        # --plat auto: the most compatible policy the binaries allow
        cmd = [*auditwheel_command(), "repair", "--plat", "auto", "-w", str(dest)]
        if disable_isa_check:
            cmd.append("--disable-isa-ext-check")
        if ldpaths:
            cmd += ["--ldpaths", ldpaths]
        for soname in exclude:
            cmd += ["--exclude", soname]
        return _run([*cmd, str(wheel)], log, lookup_first)

    isa_note = "passed"
    disable = False
    proc = run_repair(False)
    if proc.returncode != 0 and "unsupported ISA extension" in proc.stdout + proc.stderr:
        isa_note = isa_check_decision(flagged_libraries(wheel), guarded)
        disable = True
        proc = run_repair(True)
    produced = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(produced) != 1:
        offenders = symbols_above(wheel, ceiling)
        detail = (proc.stderr or proc.stdout)[-2000:]
        if offenders:
            detail = "symbol versions above " + ceiling + ":\n  " + "\n  ".join(offenders[:40]) + "\n" + detail
        raise BuildFailedError("auditwheel repair failed", detail=detail)
    repaired = produced[0]
    after = audit(repaired, log=log, ldpaths=ldpaths, disable_isa_check=disable, lookup_first=lookup_first)
    platforms = inspect(repaired).platforms
    # `auditwheel show` knows no --exclude: libraries left out on purpose make its
    # overall tag linux_*; then the symbol tag is the wheel's, and nothing else may be external.
    outside = set(after.external_libs) - set(exclude)
    if outside:
        raise BuildFailedError(f"{repaired.name} needs {', '.join(sorted(outside))}, which it does not carry")
    if exclude and after.external_libs:
        # auditwheel show resolves the excluded libraries on this host and counts their needs (the host's
        # libgomp: GLIBC_2.34); the wheel does not carry them, so its tag is what repair --exclude computed
        tag = next((p for p in platforms if re.match(r"manylinux_\d+_\d+_", p)), after.sym_tag)
    else:
        tag = after.overall_tag
        if tag not in platforms:
            raise BuildFailedError(f"auditwheel show says {tag} for {repaired.name}, which is not its tag {'.'.join(platforms)}")
    if not policy_at_most(tag, ceiling):
        offenders = symbols_above(wheel, ceiling)
        grafted = grafted_above(repaired, ceiling)
        if grafted and not offenders:
            # the project's code fits; a library auditwheel copied from this host does not (the host's libgomp)
            names = ", ".join(sorted({g.split(":", 1)[0].rsplit("/", 1)[-1] for g in grafted}))
            raise BuildFailedError(
                f"{names}, which auditwheel bundles from this build host, needs {tag}, above {ceiling}, the policy "
                f"the project aims at: build where that library fits the policy (a manylinux image: cpubuild image), "
                f"raise [arch] manylinux in isa_matrix.toml, or do not link it",
                detail="symbol versions above the policy:\n  " + "\n  ".join(grafted[:40]))
        raise BuildFailedError(
            f"the binaries need {tag}, above {ceiling}, the policy the project aims at",
            detail="symbol versions above the policy:\n  " + "\n  ".join(offenders[:40] or ["(none found: see the auditwheel output in the build log)"]),
        )
    audited = tag if not after.external_libs else f"{tag}, without {', '.join(after.external_libs)} (excluded: torch's or repair-exclude)"
    return Repaired(wheel=repaired, policy=tag, audited=audited, isa_ext_check=isa_note)
