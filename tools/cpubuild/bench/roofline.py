"""The roofline of `cpubuild bench`: this host's limits, measured once per run,
and each record's share of the bound that applies to it.

Limits: the peak operation rate of each variant's main instruction per dtype
(which instruction is data: the hardware facts' [[peak.<arch>]] entries; the
loops are cpubuild's probe source, peak.c, compiled with each variant's flags
from the project's matrix and run only where the project's own dispatcher says
the host runs the variant), and the read and copy bandwidth over a ladder of
working-set sizes up to well beyond the last-level cache.

A record that declares its arithmetic (`flops`: operations, a multiply-add
counts 2) and its memory traffic (`bytes`, of which `bytes_written`) gets
the classic roofline bound, the larger of flops / peak and the time to move
its bytes (read-only bytes at the read bandwidth, written bytes with as many
read ones at the copy bandwidth, both measured at the smallest working set
not below `bytes`), and the percentage of it that the kernel reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..hardware import Peak, hardware

PROBE_SOURCE = Path(__file__).with_name("peak.c")
# -O1: GCC 12's -O2 scheduler spills and copies the twelve SSE accumulator
# chains of a loop (16 registers), halving the measured pmaddwd rate; at -O1
# each loop is exactly its instructions plus the counter.
PROBE_CFLAGS = ("-O1", "-pthread", "-ffp-contract=fast")
KIB, MIB = 1024, 1024 * 1024
DEFAULT_LLC = 32 * MIB


@dataclass(frozen=True, kw_only=True)
class VariantInfo:
    """A variant as the installed package's own report and the matrix see it."""

    name: str
    requires: tuple[str, ...]
    runnable: bool
    missing: tuple[str, ...] = ()  # features this host lacks (the dispatcher's words)
    flags: tuple[str, ...] | None = None  # None: no flags for this compiler family


@dataclass(frozen=True, kw_only=True)
class PeakFigure:
    variant: str
    dtype: str
    instruction: str | None
    ops_per_s: float | None
    note: str | None = None  # why there is no figure


@dataclass(frozen=True, kw_only=True)
class Bandwidth:
    bytes: int  # working set
    read_Bps: float  # bytes read per second
    copy_Bps: float  # bytes read + written per second


@dataclass(frozen=True, kw_only=True)
class Limits:
    arch: str
    threads: int
    compiler: str
    llc_bytes: int
    peaks: tuple[PeakFigure, ...]
    bandwidth: tuple[Bandwidth, ...]  # smallest working set first
    notes: tuple[str, ...] = field(default=())

    def peak(self, variant: str, dtype: str) -> PeakFigure | None:
        return next((p for p in self.peaks if p.variant == variant and p.dtype == dtype), None)

    def best_peak(self, dtype: str) -> PeakFigure | None:
        """The highest measured peak of `dtype` over the variants (the machine's)."""
        measured = [p for p in self.peaks if p.dtype == dtype and p.ops_per_s]
        return max(measured, key=lambda p: p.ops_per_s or 0.0) if measured else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ pure functions


def bandwidth_at(ladder: Sequence[Bandwidth], working_set: float) -> Bandwidth | None:
    """The measurement at the smallest working set not below `working_set`
    (the largest one for bigger sets); None without measurements."""
    if not ladder:
        return None
    ordered = sorted(ladder, key=lambda b: b.bytes)
    return next((b for b in ordered if b.bytes >= working_set), ordered[-1])


def memory_seconds(total: float, written: float, bw: Bandwidth) -> float:
    """Time to move `total` bytes of which `written` are stores: each written
    byte travels with one read byte at the copy bandwidth, the rest are reads."""
    written = max(0.0, min(written, total / 2))
    return (total - 2 * written) / bw.read_Bps + 2 * written / bw.copy_Bps


def bound(us: float, *, flops: float | None, nbytes: float | None, written: float | None,
          peak_ops: float | None, ladder: Sequence[Bandwidth]) -> dict[str, Any]:
    """The roofline fields of one timed call: which bound applies (the slower of
    compute and memory), the percentage of it reached, and both components."""
    seconds = us * 1e-6
    t_compute = flops / peak_ops if flops and peak_ops else None
    bw = bandwidth_at(ladder, nbytes) if nbytes else None
    t_memory = memory_seconds(nbytes, written or 0.0, bw) if nbytes and bw else None
    out: dict[str, Any] = {"bound": None, "pct_bound": None, "pct_peak": None, "pct_bandwidth": None}
    if seconds <= 0:
        return out
    if t_compute is not None:
        out["pct_peak"] = _pct(t_compute / seconds)
    if t_memory is not None:
        out["pct_bandwidth"] = _pct(t_memory / seconds)
    candidates = [(t, name) for t, name in ((t_compute, "compute"), (t_memory, "memory")) if t is not None]
    if candidates:
        t, name = max(candidates)
        out["bound"], out["pct_bound"] = name, _pct(t / seconds)
    return out


def _pct(fraction: float) -> float:
    """A percentage to three significant digits (tiny ones stay above zero)."""
    return float(f"{100 * fraction:.3g}")


def annotate(records: Sequence[dict[str, Any]], limits: Limits) -> list[dict[str, Any]]:
    """The records with their roofline fields: the variant's own peak for its
    dtype; torch's against the best peak this host measured for that dtype."""
    out = []
    for r in records:
        flops, nbytes, written = r.get("flops"), r.get("bytes"), r.get("bytes_written")
        peak = limits.peak(r["variant"], r["dtype"])
        fields = bound(r["us"], flops=flops, nbytes=nbytes, written=written,
                       peak_ops=peak.ops_per_s if peak else None, ladder=limits.bandwidth)
        if flops and (peak is None or not peak.ops_per_s):
            fields["peak_note"] = peak.note if peak and peak.note else f"no {r['dtype']} peak for {r['variant']}"
        if not flops and not nbytes:
            fields["peak_note"] = "the benchmark declares no flops or bytes for this record"
        best = limits.best_peak(r["dtype"])
        torch_us = r.get("torch_us")
        fields["torch_pct_bound"] = bound(torch_us, flops=flops, nbytes=nbytes, written=written,
                                          peak_ops=best.ops_per_s if best else None,
                                          ladder=limits.bandwidth)["pct_bound"] if torch_us else None
        out.append({**r, **fields})
    return out


def format_rate(ops_per_s: float, unit: str) -> str:
    """1.2e11, 'FLOP/s' -> '120.0 GFLOP/s'."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if ops_per_s >= scale:
            return f"{ops_per_s / scale:.1f} {prefix}{unit}"
    return f"{ops_per_s:.0f} {unit}"


def op_unit(dtype: str) -> str:
    return "OP/s" if dtype.startswith(("int", "uint")) else "FLOP/s"


def describe(limits: Limits, dtypes: Iterable[str]) -> list[str]:
    """Lines for the table's footer: every variant's peak per dtype (or why
    there is none), and the bandwidth ladder."""
    lines = [f"roofline ({limits.arch}, {limits.threads} threads, probe built with {limits.compiler}):"]
    for dtype in dtypes:
        cells = []
        for p in (p for p in limits.peaks if p.dtype == dtype):
            figure = format_rate(p.ops_per_s, op_unit(dtype)) if p.ops_per_s else p.note
            cells.append(f"{p.variant} {figure}" + (f" ({p.instruction})" if p.instruction and p.ops_per_s else ""))
        lines.append(f"  {dtype} peak: " + "; ".join(cells))
    if limits.bandwidth:
        ladder = ", ".join(f"{_size(b.bytes)} {b.read_Bps / 1e9:.0f}/{b.copy_Bps / 1e9:.0f}" for b in limits.bandwidth)
        lines.append(f"  bandwidth GB/s read/copy by working set (LLC {_size(limits.llc_bytes)}): {ladder}")
    lines += [f"  {n}" for n in limits.notes]
    return lines


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


# ------------------------------------------------------------------ measuring


def last_level_cache() -> int:
    """The largest cache of cpu0 (Linux sysfs), else 32 MiB."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": KIB, "M": MIB, "G": 1024 * MIB}.get(text[-1:].upper(), 1)
        digits = text.rstrip("KkMmGg")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or DEFAULT_LLC


def ladder_sizes(llc: int) -> list[int]:
    """Working sets from 16 KiB by 4x below the LLC, three quarters of the LLC
    (still in cache), then 4x the LLC (at least 64 MiB, at most 1 GiB): the
    cache levels and DRAM."""
    sizes, size = [], 16 * KIB
    while size < llc:
        sizes.append(size)
        size *= 4
    return [*sizes, llc * 3 // 4, min(max(4 * llc, 64 * MIB), 1024 * MIB)]


def compiler_family(cc: str) -> str:
    try:
        text = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "gcc"
    if "Apple" in text and "clang" in text:
        return "apple-clang"
    return "clang" if "clang" in text else "gcc"


def _run_json(cmd: Sequence[str], timeout: float) -> list[dict[str, Any]]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise RuntimeError(tail)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


# A shared (virtual) machine loses whole seconds to its neighbours: each peak
# is the best of several probe runs spread over a few seconds, so that one
# slow stretch cannot lower the bound (and push kernels past 100%).
PEAK_ROUNDS = 3
PEAK_SPACING_S = 1.0


def _measure_peaks(probes: dict[str, Path], threads: int, ms: float) -> dict[str, float | str]:
    """Probe loop -> its best ops/s over PEAK_ROUNDS runs, or why there is none."""
    best: dict[str, float | str] = {}
    for round_ in range(PEAK_ROUNDS):
        if round_:
            time.sleep(PEAK_SPACING_S)
        for probe, exe in probes.items():
            if isinstance(best.get(probe), str):
                continue
            try:
                rows = _run_json([str(exe), probe, str(threads), str(ms)], timeout=120)
                rate = float(rows[-1]["ops_per_s"])
            except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as exc:
                best[probe] = f"probe failed: {exc}"
                continue
            previous = best.get(probe)
            best[probe] = max(rate, previous) if isinstance(previous, float) else rate
    return best


def measure(*, arch: str, variants: Sequence[VariantInfo], dtypes: Sequence[str], threads: int,
            cc: str | None = None, ms: float = 50.0, bandwidth_ms: float = 30.0,
            progress: Callable[[str], None] | None = None) -> Limits:
    """Compiles the probe per runnable variant, measures each variant's peak
    per dtype (each probe loop once) and the bandwidth ladder (with the
    highest runnable variant's build)."""
    say = progress or (lambda _msg: None)
    cc = cc or os.environ.get("CC") or "cc"
    family = compiler_family(cc)
    hw = hardware()
    llc = last_level_cache()
    notes: list[str] = []
    binaries: dict[str, Path] = {}
    failed: dict[str, str] = {}
    peaks: list[PeakFigure] = []
    ladder: list[Bandwidth] = []
    with tempfile.TemporaryDirectory(prefix="cpubuild-peak-") as tmp:
        if shutil.which(cc) is None:
            notes.append(f"no C compiler ({cc}): the probe was not built, no peaks measured")
        else:
            for v in variants:
                if not v.runnable:
                    continue
                if v.flags is None:
                    failed[v.name] = f"the matrix has no {family} flags for {v.name}"
                    continue
                exe = Path(tmp) / f"peak_{v.name}"
                proc = subprocess.run([cc, *PROBE_CFLAGS, *v.flags, str(PROBE_SOURCE), "-o", str(exe)],
                                      capture_output=True, text=True, timeout=300)
                if proc.returncode != 0:
                    failed[v.name] = "probe did not compile: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
                else:
                    binaries[v.name] = exe
        # which probe loop bounds each (variant, dtype), and which binary runs it
        plan: list[tuple[VariantInfo, str, Peak | None]] = []
        probes: dict[str, Path] = {}
        instructions: dict[str, str] = {}
        for dtype in dtypes:
            for v in variants:
                entry = hw.peak_for(arch, dtype, v.requires)
                plan.append((v, dtype, entry))
                if v.runnable and entry is not None and v.name in binaries:
                    probes.setdefault(entry.probe, binaries[v.name])
                    instructions.setdefault(entry.probe, entry.instruction)
        for probe in probes:
            say(f"# peak: {instructions[probe]} ({threads} threads, best of {PEAK_ROUNDS} runs {PEAK_SPACING_S:g} s apart)")
        measured = _measure_peaks(probes, threads, ms)
        for v, dtype, entry in plan:
            instruction = entry.instruction if entry else None
            if not v.runnable:
                lacks = ", ".join(v.missing) or "its features"
                peaks.append(PeakFigure(variant=v.name, dtype=dtype, instruction=instruction, ops_per_s=None,
                                        note=f"not on this host (lacks {lacks})"))
            elif entry is None:
                peaks.append(PeakFigure(variant=v.name, dtype=dtype, instruction=None, ops_per_s=None,
                                        note=f"no {dtype} peak in the hardware data for {arch}"))
            elif v.name not in binaries:
                peaks.append(PeakFigure(variant=v.name, dtype=dtype, instruction=instruction, ops_per_s=None,
                                        note=failed.get(v.name, notes[0] if notes else "probe not built")))
            else:
                value = measured[entry.probe]
                peaks.append(PeakFigure(variant=v.name, dtype=dtype, instruction=instruction,
                                        ops_per_s=value if isinstance(value, float) else None,
                                        note=value if isinstance(value, str) else None))
        runnable = [v for v in variants if v.name in binaries]
        if runnable:
            sizes = ladder_sizes(llc)
            say(f"# bandwidth: {len(sizes)} working sets up to {_size(sizes[-1])} ({threads} threads)")
            try:
                rows = _run_json([str(binaries[runnable[-1].name]), "bandwidth", str(threads), str(bandwidth_ms),
                                  *map(str, sizes)], timeout=600)
                ladder = [Bandwidth(bytes=int(r["bytes"]), read_Bps=float(r["read_Bps"]),
                                    copy_Bps=float(r["copy_Bps"])) for r in rows]
            except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
                notes.append(f"bandwidth probe failed: {exc}")
    return Limits(arch=arch, threads=threads, compiler=f"{cc} ({family})", llc_bytes=llc, peaks=tuple(peaks),
                  bandwidth=tuple(ladder), notes=tuple(notes))
