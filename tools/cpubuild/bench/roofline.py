"""The roofline of `cpubuild bench`: this host's limits, measured once per run,
and each record's share of the bound that applies to it.

Limits: the peak operation rate of each variant's main instruction per dtype
(which instruction is data: the hardware facts' [[peak.<arch>]] entries; the
loops are cpubuild's probe source, peak.c, compiled with each variant's flags
from the project's matrix and run only where the project's own dispatcher says
the host runs the variant), and the read and copy bandwidth over a ladder of
working sets, one per cache level (sysfs: the capacity the benchmark's threads
share of each level) and one in DRAM, plus one at each record's own working
set. The ladder is the best over the probes
of every variant the host runs, one per vector width (each probe reads with
its ISA's widest vector), whatever `--variants` times: it measures the
machine, not the probe.

A record that declares its arithmetic (`flops`: operations, a multiply-add
counts 2) and its memory traffic (`bytes`, of which `bytes_written`; and
`working_set`, its footprint, where that is less: an in-place op) gets
the classic roofline bound, the larger of flops / peak and the time to move
its bytes (read-only bytes at the read bandwidth, written bytes with as many
read ones at the copy bandwidth), and the percentage of it that the kernel
reached. The bandwidth is the one the probe measured at the record's own
working set: a set that a level could hold on paper may not stay there (a
32 MiB set streamed through a 32 MiB victim L3 mostly comes from DRAM, and a
VM's neighbours share that L3); a record measured beside its rounds (its
`bandwidth`, timing.side_bandwidth) is bounded by that figure instead, since
DRAM and a shared L3 swing with the neighbours between one minute and the
next. Without a measurement a working set is
split over the levels optimistically: the first level's capacity at its
bandwidth, the next level's capacity at the next one's and so on, the rest
from DRAM. No kernel can honestly beat its bound (one above 105% is reported
as a broken model, by the benchmark, never by a test).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..hardware import Peak, hardware
from ..toolchain.tools import find_tool
from . import timing

PROBE_SOURCE = Path(__file__).with_name("peak.c")
# -O1: GCC 12's -O2 scheduler spills and copies the twelve SSE accumulator
# chains of a loop (16 registers), halving the measured pmaddwd rate; at -O1
# each loop is exactly its instructions plus the counter.
PROBE_CFLAGS = ("-O1", "-pthread", "-ffp-contract=fast")
KIB, MIB = 1024, 1024 * 1024
DEFAULT_LLC = 32 * MIB
OVER_BOUND_PCT = 105.0  # above this share of its bound, a record shows the model is wrong
DRAM = "DRAM"
SIDE_BY_SIDE = "side by side"  # a record's own bandwidth, measured between its rounds


@dataclass(frozen=True, kw_only=True)
class CacheLevel:
    """A data cache level as the benchmark's threads see it together: `bytes`
    is the sum over the distinct caches of that level their CPUs use."""

    name: str  # "L1d", "L2", "L3"
    bytes: int


@dataclass(frozen=True, kw_only=True)
class VariantInfo:
    """A variant as the installed package's own report and the matrix see it."""

    name: str
    requires: tuple[str, ...]
    runnable: bool
    missing: tuple[str, ...] = ()  # features this host lacks (the dispatcher's words)
    flags: tuple[str, ...] | None = None  # None: no flags for this compiler family
    timed: bool = True  # False: runnable but left out by --variants (its probe still joins the ladder)


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
    update_Bps: float = 0.0  # bytes read + written back in place per second (0: not measured)
    level: str = ""  # the cache level (or DRAM) the working set lives in
    capacity: int = 0  # that level's capacity for these threads (0: DRAM, unbounded)
    exact: bool = False  # measured at a record's own working set, not a rung of the ladder


@dataclass(frozen=True, kw_only=True)
class Limits:
    arch: str
    threads: int
    compiler: str
    llc_bytes: int
    peaks: tuple[PeakFigure, ...]
    bandwidth: tuple[Bandwidth, ...]  # smallest working set first
    notes: tuple[str, ...] = field(default=())
    caches: tuple[CacheLevel, ...] = ()
    ladder_from: tuple[str, ...] = ()  # the variants whose probes the ladder is the best of

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


def memory_seconds(total: float, written: float, bw: Bandwidth, *, in_place: bool = False) -> float:
    """Time to move `total` bytes of which `written` are stores: each written
    byte travels with one read byte at the copy bandwidth - or, `in_place`,
    written back where it was read, at the update bandwidth (no line fetched
    for ownership alone: 1.7-2x the copy figure on the Zen 4 class host) -
    the rest are reads."""
    written = max(0.0, min(written, total / 2))
    write_Bps = bw.update_Bps if in_place and bw.update_Bps > 0 else bw.copy_Bps
    return (total - 2 * written) / bw.read_Bps + 2 * written / write_Bps


def level_shares(ladder: Sequence[Bandwidth], working_set: float) -> list[tuple[Bandwidth, float]]:
    """How many of `working_set`'s bytes each ladder point serves: all of them
    by a measurement at exactly that working set, where there is one; else at
    best every level its capacity (cumulative: a victim cache adds to the one above), in
    order, the rest from the largest point (DRAM). A ladder without capacities
    (measured elsewhere) serves everything from the first point not below."""
    exact = next((b for b in ladder if b.bytes == int(working_set)), None)  # a rung of that size counts too
    if exact is not None:
        return [(exact, float(working_set))]
    ordered = sorted((b for b in ladder if not b.exact), key=lambda b: b.bytes)
    if not ordered:
        return []
    if not any(b.capacity for b in ordered):
        point = bandwidth_at(ordered, working_set)
        return [(point, float(working_set))] if point else []
    shares, held, left = [], 0.0, float(working_set)
    for b in ordered:
        last = b is ordered[-1]
        take = left if last or not b.capacity else min(left, float(b.capacity))
        if take > 0:
            shares.append((b, take))
        held += take
        left -= take
        if left <= 0:
            break
    return shares


def level_label(shares: Sequence[tuple[Bandwidth, float]]) -> str:
    """The levels that serve at least 5% of the bytes, fastest first ('L2+L3')."""
    total = sum(n for _, n in shares) or 1.0
    names = [_label(b) for b, n in shares if n / total >= 0.05]
    return "+".join(names) if names else (shares[-1][0].level if shares else "")


def _label(b: Bandwidth) -> str:
    if b.level == SIDE_BY_SIDE:
        return f"{_size(b.bytes)} {SIDE_BY_SIDE}"
    return f"{_size(b.bytes)} measured" if b.exact else b.level or _size(b.bytes)


def bound(us: float, *, flops: float | None, nbytes: float | None, written: float | None,
          peak_ops: float | None, ladder: Sequence[Bandwidth], working_set: float | None = None) -> dict[str, Any]:
    """The roofline fields of one timed call: which bound applies (the slower of
    compute and memory), the percentage of it reached, both components, and
    the cache level(s) the memory bound assumes. The levels are those of the
    call's footprint (`working_set`, default `nbytes`): an in-place op moves
    each byte twice but holds it once."""
    seconds = us * 1e-6
    t_compute = flops / peak_ops if flops and peak_ops else None
    shares: list[tuple[Bandwidth, float]] = []
    t_memory = None
    if nbytes:
        footprint = working_set or nbytes
        shares = level_shares(ladder, footprint)
        in_place = footprint < nbytes  # its writes go back to lines it read
        # each level serves its share of the footprint, and that share of the traffic
        if shares:
            t_memory = sum(memory_seconds(nbytes * n / footprint, (written or 0.0) * n / footprint, b, in_place=in_place)
                           for b, n in shares)
    out: dict[str, Any] = {"bound": None, "pct_bound": None, "pct_peak": None, "pct_bandwidth": None, "level": None}
    if t_memory is not None:
        out["level"] = level_label(shares)
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


def model_verdicts(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per record above OVER_BOUND_PCT of its bound (a kernel cannot
    beat a true bound: the model or a measurement is wrong), else one line
    saying every record is within it."""
    over = [r for r in records if (r.get("pct_bound") or 0) > OVER_BOUND_PCT]
    if not any(r.get("pct_bound") for r in records):
        return []
    if not over:
        return [f"model: every record within {OVER_BOUND_PCT:g}% of its bound"]
    return [f"model: BROKEN for {r['op']} {r['dtype']} {'x'.join(map(str, r['shape']))} {r['variant']}: "
            f"{r['pct_bound']:g}% of its {r['bound']} bound" + (f" ({r['level']})" if r.get("level") else "")
            + f", above {OVER_BOUND_PCT:g}%" for r in over]


def _pct(fraction: float) -> float:
    """A percentage to three significant digits (tiny ones stay above zero)."""
    return float(f"{100 * fraction:.3g}")


def record_ladder(record: dict[str, Any], ladder: Sequence[Bandwidth]) -> Sequence[Bandwidth]:
    """The bandwidth a record is bounded by: what the probe measured beside it
    (the record's `bandwidth`, timing.side_bandwidth), else the ladder."""
    side, nbytes = record.get("bandwidth"), record.get("working_set") or record.get("bytes")
    if not side or not nbytes:
        return ladder
    return (Bandwidth(bytes=int(nbytes), read_Bps=float(side["read_Bps"]), copy_Bps=float(side["copy_Bps"]),
                      update_Bps=float(side.get("update_Bps") or 0.0), level=SIDE_BY_SIDE, exact=True),)


def annotate(records: Sequence[dict[str, Any]], limits: Limits) -> list[dict[str, Any]]:
    """The records with their roofline fields: the variant's own peak for its
    dtype; torch's against the best peak this host measured for that dtype."""
    out = []
    for r in records:
        flops, nbytes, written, footprint = r.get("flops"), r.get("bytes"), r.get("bytes_written"), r.get("working_set")
        peak = limits.peak(r["variant"], r.get("peak_dtype") or r["dtype"])
        ladder = record_ladder(r, limits.bandwidth)
        fields = bound(r["us"], flops=flops, nbytes=nbytes, written=written,
                       peak_ops=peak.ops_per_s if peak else None, ladder=ladder, working_set=footprint)
        if flops and (peak is None or not peak.ops_per_s):
            fields["peak_note"] = peak.note if peak and peak.note else f"no {r['dtype']} peak for {r['variant']}"
        if not flops and not nbytes:
            fields["peak_note"] = "the benchmark declares no flops or bytes for this record"
        best = limits.best_peak(r["dtype"])
        torch_us = r.get("torch_us")
        fields["torch_pct_bound"] = bound(torch_us, flops=flops, nbytes=nbytes, written=written,
                                          peak_ops=best.ops_per_s if best else None, ladder=ladder,
                                          working_set=footprint)["pct_bound"] if torch_us else None
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
    def figures(points: Iterable[Bandwidth]) -> str:
        return ", ".join(f"{b.level + ' ' if b.level else ''}{_size(b.bytes)} {b.read_Bps / 1e9:.0f}/{b.copy_Bps / 1e9:.0f}"
                         + (f"/{b.update_Bps / 1e9:.0f}" if b.update_Bps else "") for b in points)

    if limits.bandwidth:
        source = f"; best of the {', '.join(limits.ladder_from)} probes" if limits.ladder_from else ""
        kinds = "read/copy/update" if any(b.update_Bps for b in limits.bandwidth) else "read/copy"
        lines.append(f"  bandwidth GB/s {kinds} by working set (LLC {_size(limits.llc_bytes)}{source}): "
                     + figures(b for b in limits.bandwidth if not b.exact))
        if any(b.exact for b in limits.bandwidth):
            lines.append("  at the records' own working sets: " + figures(b for b in limits.bandwidth if b.exact))
    lines += [f"  {n}" for n in limits.notes]
    return lines


def _size(n: int) -> str:
    if n >= MIB:
        return f"{n // MIB} MiB" if n % MIB == 0 or n >= 100 * MIB else f"{n / MIB:.1f} MiB"
    return f"{n // KIB} KiB"


# ------------------------------------------------------------------ measuring


SYSFS_CPU = Path("/sys/devices/system/cpu")


def _parse_size(text: str) -> int:
    mult = {"K": KIB, "M": MIB, "G": 1024 * MIB}.get(text[-1:].upper(), 1)
    digits = text.rstrip("KkMmGg")
    return int(digits) * mult if digits.isdigit() else 0


def cache_levels(cpus: Sequence[int], root: Path = SYSFS_CPU) -> tuple[CacheLevel, ...]:
    """The data and unified cache levels of `cpus` (Linux sysfs), smallest
    level first: each level's capacity summed over the distinct caches these
    CPUs use (private L1/L2 once per CPU, a shared L3 once per group). Empty
    where sysfs says nothing (then the ladder assumes one 32 MiB cache)."""
    found: dict[tuple[int, str], dict[str, int]] = {}  # (level, name) -> sharing group -> size
    for cpu in cpus:
        for index in sorted((root / f"cpu{cpu}" / "cache").glob("index*")):
            try:
                kind = (index / "type").read_text().strip()
                level = int((index / "level").read_text().strip())
                size = _parse_size((index / "size").read_text().strip())
                group = (index / "shared_cpu_list").read_text().strip()
            except (OSError, ValueError):
                continue
            if kind not in ("Data", "Unified") or size <= 0:
                continue
            name = f"L{level}d" if kind == "Data" else f"L{level}"
            found.setdefault((level, name), {})[group or str(cpu)] = size
    return tuple(CacheLevel(name=name, bytes=sum(groups.values())) for (_, name), groups in sorted(found.items()))


def ladder_points(levels: Sequence[CacheLevel]) -> list[tuple[str, int, int]]:
    """(level, working set, capacity) for the ladder: half of each level's
    capacity (well inside it, beyond the level above: sizes grow), then DRAM
    at 4x the last level (at least 64 MiB, at most 1 GiB; capacity 0)."""
    levels = levels or (CacheLevel(name="LLC", bytes=DEFAULT_LLC),)
    points: list[tuple[str, int, int]] = []
    for level in levels:
        size = max(level.bytes // 2, 16 * KIB)
        if not points or size > points[-1][1]:
            points.append((level.name, size, level.bytes))
    dram = min(max(4 * levels[-1].bytes, 64 * MIB), 1024 * MIB)
    return [*points, (DRAM, max(dram, 2 * points[-1][1]), 0)]


def last_level_cache(levels: Sequence[CacheLevel] = ()) -> int:
    """The largest level's capacity for these threads, else 32 MiB."""
    return max((lvl.bytes for lvl in levels), default=0) or DEFAULT_LLC


def ladder_sizes(llc: int) -> list[int]:
    """Working sets of a ladder without cache facts: the assumed LLC's half, then DRAM."""
    return [size for _, size, _ in ladder_points((CacheLevel(name="LLC", bytes=llc),))]


def best_ladder(runs: Sequence[Sequence[Bandwidth]]) -> tuple[Bandwidth, ...]:
    """Point by point, the best read and the best copy figure over several probes' ladders."""
    if not runs:
        return ()
    out = []
    for points in zip(*runs, strict=True):
        first = points[0]
        out.append(Bandwidth(bytes=first.bytes, level=first.level, capacity=first.capacity, exact=first.exact,
                             read_Bps=max(p.read_Bps for p in points), copy_Bps=max(p.copy_Bps for p in points),
                             update_Bps=max(p.update_Bps for p in points)))
    return tuple(out)


def _affinity(threads: int) -> list[int]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return cpus[:threads]


def compiler_family(cc: str) -> str:
    try:
        text = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "gcc"
    if "Apple" in text and "clang" in text:
        return "apple-clang"
    return "clang" if "clang" in text else "gcc"


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
                rows = timing.probe_rows([str(exe), probe, str(threads), str(ms)], timeout=120)
                rate = float(rows[-1]["ops_per_s"])
            except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as exc:
                best[probe] = f"probe failed: {exc}"
                continue
            previous = best.get(probe)
            best[probe] = max(rate, previous) if isinstance(previous, float) else rate
    return best


@dataclass(frozen=True, kw_only=True)
class ProbeBuilds:
    """The probe compiled once per runnable variant (in a temporary directory
    that lives as long as the `probe_builds` context): the roofline's loops,
    and the bandwidth probe a benchmark runs side by side with its records."""

    cc: str
    family: str
    binaries: dict[str, Path]  # variant -> probe executable
    failed: dict[str, str]  # variant -> why it has none
    notes: tuple[str, ...] = ()

    @property
    def bandwidth_probe(self) -> Path | None:
        """The build that reads with the widest vectors (the lowest priority variant of that width)."""
        widths: dict[int, Path] = {}
        for exe in self.binaries.values():
            widths.setdefault(_vector_bytes(exe), exe)
        return widths[max(widths)] if widths else None


@contextlib.contextmanager
def probe_builds(variants: Sequence[VariantInfo], cc: str | None = None) -> Iterator[ProbeBuilds]:
    """Compiles the probe for every runnable variant with its matrix flags."""
    cc = cc or os.environ.get("CC") or "cc"
    family = compiler_family(cc)
    binaries: dict[str, Path] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="cpubuild-peak-") as tmp:
        if find_tool(cc) is None:
            yield ProbeBuilds(cc=cc, family=family, binaries={}, failed={},
                              notes=(f"no C compiler ({cc}): the probe was not built, no peaks measured",))
            return
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
        yield ProbeBuilds(cc=cc, family=family, binaries=binaries, failed=failed)


def measure(*, arch: str, variants: Sequence[VariantInfo], dtypes: Sequence[str], threads: int,
            cc: str | None = None, ms: float = 50.0, bandwidth_ms: float = 30.0,
            working_sets: Iterable[int] = (), progress: Callable[[str], None] | None = None,
            builds: ProbeBuilds | None = None) -> Limits:
    """Measures each timed variant's peak per dtype (each probe loop once) and
    the bandwidth ladder (the best over every runnable variant's build, one per
    vector width), with a point at each of `working_sets` (the records' own),
    with `builds` (else the probe is compiled here)."""
    if builds is None:
        with probe_builds(variants, cc) as made:
            return measure(arch=arch, variants=variants, dtypes=dtypes, threads=threads, ms=ms,
                           bandwidth_ms=bandwidth_ms, working_sets=working_sets, progress=progress, builds=made)
    say = progress or (lambda _msg: None)
    hw = hardware()
    notes = list(builds.notes)
    binaries, failed = builds.binaries, builds.failed
    peaks: list[PeakFigure] = []
    # which probe loop bounds each (variant, dtype), and which binary runs it
    plan: list[tuple[VariantInfo, str, Peak | None]] = []
    probes: dict[str, Path] = {}
    instructions: dict[str, str] = {}
    for dtype in dtypes:
        for v in (v for v in variants if v.timed or not v.runnable):
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
    caches = cache_levels(_affinity(threads))
    llc = last_level_cache(caches)
    ladder, ladder_from = _measure_ladder(binaries, caches, threads, bandwidth_ms, say, notes, working_sets)
    return Limits(arch=arch, threads=threads, compiler=f"{builds.cc} ({builds.family})", llc_bytes=llc,
                  peaks=tuple(peaks), bandwidth=tuple(ladder), notes=tuple(notes), caches=caches,
                  ladder_from=ladder_from)


def _vector_bytes(exe: Path) -> int:
    try:
        proc = subprocess.run([str(exe), "--vector-bytes"], capture_output=True, text=True, timeout=30)
        return int(proc.stdout.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def exact_sets(working_sets: Iterable[int], threads: int, ladder: Sequence[int]) -> list[int]:
    """The records' working sets worth a probe point of their own: distinct,
    not a ladder rung, large enough for the probe (4 KiB a thread), at most 1 GiB."""
    return sorted({int(n) for n in working_sets if 4 * KIB * threads <= int(n) <= 1024 * MIB} - set(ladder))


def _measure_ladder(binaries: dict[str, Path], caches: Sequence[CacheLevel], threads: int, ms: float,
                    say: Callable[[str], None], notes: list[str],
                    working_sets: Iterable[int] = ()) -> tuple[tuple[Bandwidth, ...], tuple[str, ...]]:
    """The best ladder over one probe per vector width among the runnable
    variants' builds, then the points at the records' own working sets."""
    by_width: dict[int, str] = {}
    for name, exe in binaries.items():  # lowest priority first: the first build of each width stands for it
        by_width.setdefault(_vector_bytes(exe), name)
    if not by_width:
        return (), ()
    points = ladder_points(caches)
    extra = exact_sets(working_sets, threads, [size for _, size, _ in points])
    levels = ", ".join(f"{level} {_size(size)}" for level, size, _ in points)
    also = f"; and at {len(extra)} working sets of the records" if extra else ""
    say(f"# bandwidth: {levels} ({threads} threads; probes of {', '.join(by_width.values())}{also})")
    runs = []
    for name in by_width.values():
        try:
            rows = timing.bandwidth_rows(str(binaries[name]), threads, ms,
                                         [size for _, size, _ in points] + list(extra), timeout=600)
            runs.append([Bandwidth(bytes=int(r["bytes"]), read_Bps=r["read_Bps"], copy_Bps=r["copy_Bps"],
                                   update_Bps=r["update_Bps"], level=level, capacity=capacity)
                         for r, (level, _, capacity) in zip(rows, points, strict=False)]
                        # keyed by the size asked for: the probe rounds it to whole KiB per thread
                        + [Bandwidth(bytes=size, read_Bps=r["read_Bps"], copy_Bps=r["copy_Bps"],
                                     update_Bps=r["update_Bps"], exact=True)
                           for r, size in zip(rows[len(points):], extra, strict=True)])
        except (OSError, RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
            notes.append(f"bandwidth probe ({name}) failed: {exc}")
    return best_ladder(runs), tuple(by_width.values()) if runs else ()
