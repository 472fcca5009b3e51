"""What a compiler is, and whether it accepts each variant's flags (cached probes)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import cache
from ..errors import CompilerFlagsError, ToolMissingError
from ..matrix import Variant
from .tools import find_tool

CACHE_FILE = "compiler-probes.json"
# A tiny translation unit: enough for the driver and the assembler to see the
# flags (target attributes, -march values) without depending on project headers.
PROBE_SOURCE = "int cpubuild_probe(int x) { return x * 2 + 1; }\n"


@dataclass(frozen=True, kw_only=True)
class Compiler:
    command: tuple[str, ...]  # e.g. ("/usr/bin/g++",) or ("ccache-free", "clang++", "--target=...")
    family: str  # matrix compiler family: gcc, clang, apple-clang
    version: str
    target: str  # -dumpmachine, e.g. x86_64-linux-gnu

    @property
    def display(self) -> str:
        return f"{' '.join(self.command)} ({self.family} {self.version}, {self.target})"


@dataclass(frozen=True, kw_only=True)
class FlagProbe:
    variant: str
    ok: bool
    log: str  # compiler output when it failed


def identify(command: Sequence[str]) -> Compiler:
    """Runs the compiler to learn its family, version and target triple."""
    exe = find_tool(command[0])
    if exe is None:
        raise ToolMissingError(f"compiler {command[0]!r} not found on PATH", detail="fix: apt-get install -y g++ (or set CC/CXX)")
    full = (exe, *command[1:])
    try:
        text = subprocess.run([*full, "--version"], capture_output=True, text=True, timeout=60).stdout
        target = subprocess.run([*full, "-dumpmachine"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolMissingError(f"compiler {exe} does not run: {exc}") from None
    first = text.splitlines()[0] if text else ""
    if "Apple clang" in text:
        family = "apple-clang"
    elif "clang" in first.lower():
        family = "clang"
    elif "Free Software Foundation" in text or re.search(r"\b(gcc|g\+\+|GCC)\b", first):
        family = "gcc"
    else:
        raise ToolMissingError(f"unsupported compiler {exe}: {first or 'no --version output'}", detail="isa_matrix.toml gives flags for gcc, clang and apple-clang")
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", first)
    return Compiler(command=full, family=family, version=match.group(1) if match else "?", target=target or "?")


def _probe_key(compiler: Compiler, flags: Sequence[str]) -> str:
    return cache.digest(cache.file_key(Path(compiler.command[0])), *compiler.command[1:], "--", *flags, PROBE_SOURCE)


def _compile(compiler: Compiler, flags: Sequence[str]) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="cpubuild-probe-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text(PROBE_SOURCE)
        cmd = [*compiler.command, *flags, "-c", str(src), "-o", str(Path(tmp) / "probe.o")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "LC_ALL": "C"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, str(exc)
        return proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}".strip()


def probe_variants(compiler: Compiler, variants: Iterable[Variant], *, jobs: int = 2) -> list[FlagProbe]:
    """Whether `compiler` accepts each variant's flags; results cached per compiler binary."""
    todo = list(variants)
    known = cache.load(CACHE_FILE)
    results: dict[str, FlagProbe] = {}
    pending: list[tuple[Variant, tuple[str, ...], str]] = []
    for v in todo:
        if compiler.family not in v.flags:
            results[v.name] = FlagProbe(variant=v.name, ok=False, log=f"isa_matrix.toml has no {compiler.family} flags for {v.name}")
            continue
        flags = v.flags[compiler.family]
        key = _probe_key(compiler, flags)
        hit = known.get(key)
        if isinstance(hit, dict) and isinstance(hit.get("ok"), bool):
            results[v.name] = FlagProbe(variant=v.name, ok=hit["ok"], log=str(hit.get("log", "")))
        else:
            pending.append((v, flags, key))
    if pending:
        # one compile per distinct flag set: a large matrix repeats the same flags many times
        unique = {key: flags for _v, flags, key in pending}
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            outcomes = dict(zip(unique, pool.map(lambda flags: _compile(compiler, flags), unique.values()), strict=True))
        for v, _flags, key in pending:
            ok, log = outcomes[key]
            results[v.name] = FlagProbe(variant=v.name, ok=ok, log="" if ok else log)
            known.setdefault(key, {"ok": ok, "log": "" if ok else log, "variant": v.name})
        cache.store(CACHE_FILE, known)
    return [results[v.name] for v in todo]


def require_variants(compiler: Compiler, variants: Sequence[Variant], *, jobs: int = 2) -> None:
    """Raises CompilerFlagsError naming the first variant the compiler cannot build."""
    for probe in probe_variants(compiler, variants, jobs=jobs):
        if not probe.ok:
            arch = next(v.arch for v in variants if v.name == probe.variant)
            tail = "\n".join(probe.log.splitlines()[-12:])
            raise CompilerFlagsError(
                f"{compiler.display} cannot build variant {probe.variant!r} ({arch}): it rejects the variant's flags",
                detail=tail,
            )
