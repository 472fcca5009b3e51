"""The roofline of `cpubuild bench` as pure functions: which peak bounds a
variant (hardware data, first match), the bandwidth a working set gets, the
bound that applies to a record and its percentage, the annotation of records
(torch against the host's best peak), the size ladder, and the targets a
benchmark declares (met, missed, n/a on a host without the feature). The
hardware data names only probe loops that cpubuild's probe source has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cpubuild.bench import roofline, targets
from cpubuild.bench.roofline import Bandwidth, Limits, PeakFigure
from cpubuild.hardware import hardware, parse_hardware

GB = 1e9
LADDER = (
    Bandwidth(bytes=64 << 10, read_Bps=200 * GB, copy_Bps=250 * GB),
    Bandwidth(bytes=24 << 20, read_Bps=100 * GB, copy_Bps=100 * GB),
    Bandwidth(bytes=128 << 20, read_Bps=40 * GB, copy_Bps=40 * GB),
)


def limits(**peaks: float | None) -> Limits:
    figures = tuple(PeakFigure(variant=v, dtype="bf16", instruction=f"insn-{v}", ops_per_s=ops,
                               note=None if ops else "not on this host (lacks amx_bf16)") for v, ops in peaks.items())
    return Limits(arch="x86_64", threads=2, compiler="cc (gcc)", llc_bytes=32 << 20, peaks=figures, bandwidth=LADDER)


@pytest.mark.parametrize(
    ("requires", "dtype", "instruction"),
    [
        (["avx512_bf16"], "bf16", "vdpbf16ps zmm"),
        (["amx_tile", "amx_bf16", "amx_int8", "avx512_bf16"], "bf16", "tdpbf16ps"),
        (["avx512f", "avx512bw"], "bf16", "vfmadd231ps zmm (bf16 widened)"),
        (["avx2", "fma", "f16c"], "bf16", "vfmadd231ps ymm (bf16 widened)"),
        ([], "bf16", "mulps + addps (bf16 widened)"),
        (["avx512_vnni"], "int8", "vpdpbusd zmm"),
        (["avx512_bf16"], "int8", "vpmaddwd zmm"),  # implies avx512bw, not VNNI
        (["avx2"], "int8", "vpmaddwd ymm"),
        (["avx2", "fma"], "fp32", "vfmadd231ps ymm"),
    ],
)
def test_peak_selection_is_the_first_matching_entry(requires: list[str], dtype: str, instruction: str) -> None:
    peak = hardware().peak_for("x86_64", dtype, requires)
    assert peak is not None and peak.instruction == instruction


def test_peak_selection_other_arches_and_gaps() -> None:
    hw = hardware()
    assert hw.peak_for("aarch64", "int8", ["asimd", "asimddp"]).instruction == "sdot .4s"  # type: ignore[union-attr]
    assert hw.peak_for("aarch64", "bf16", ["bf16", "i8mm"]).instruction == "bfmmla"  # type: ignore[union-attr]
    assert hw.peak_for("s390x", "fp32", ["vxe"]).instruction == "vfmasb"  # type: ignore[union-attr]
    assert hw.peak_for("s390x", "int8", ["vxe"]) is None  # no data: no compute bound, said so
    assert hw.peak_for("x86_64", "fp64", []) is None


def test_every_probe_named_in_the_data_is_in_the_probe_source() -> None:
    source = roofline.PROBE_SOURCE.read_text()
    compiled = set(re.findall(r'\{"(\w+)", \w+\}', source))
    named = {p.probe for entries in hardware().peaks.values() for p in entries}
    assert named and named <= compiled, named - compiled


def test_peak_entries_are_checked() -> None:
    data = {"schema": 1, "arch": {}, "features": {}}
    with pytest.raises(ValueError, match="undeclared arch"):
        parse_hardware({**data, "peak": {"x86_64": []}})


def test_bandwidth_at_picks_the_smallest_working_set_not_below() -> None:
    assert roofline.bandwidth_at(LADDER, 1000) is LADDER[0]
    assert roofline.bandwidth_at(LADDER, 16 << 20) is LADDER[1]
    assert roofline.bandwidth_at(LADDER, 30 << 20) is LADDER[2]
    assert roofline.bandwidth_at(LADDER, 1 << 40) is LADDER[2]  # beyond the ladder: its largest
    assert roofline.bandwidth_at((), 1000) is None


def test_memory_time_reads_at_read_bandwidth_writes_with_a_read_at_copy_bandwidth() -> None:
    bw = Bandwidth(bytes=1, read_Bps=100.0, copy_Bps=50.0)
    assert roofline.memory_seconds(1000, 0, bw) == pytest.approx(10.0)
    assert roofline.memory_seconds(1000, 500, bw) == pytest.approx(20.0)  # a copy: all at copy bandwidth
    assert roofline.memory_seconds(1000, 200, bw) == pytest.approx(600 / 100 + 400 / 50)
    assert roofline.memory_seconds(1000, 900, bw) == pytest.approx(20.0)  # writes beyond half: a copy


def test_bound_is_the_slower_of_compute_and_memory() -> None:
    # a GEMM: 2 GFLOP at 400 GFLOP/s = 5 ms; 40 MB at 40 GB/s = 1 ms -> compute
    out = roofline.bound(10_000.0, flops=2e9, nbytes=40e6, written=0, peak_ops=400 * GB, ladder=LADDER)
    assert out == {"bound": "compute", "pct_bound": 50.0, "pct_peak": 50.0, "pct_bandwidth": 10.0, "level": "128 MiB"}
    # a GEMV: 32 MFLOP (0.08 ms) and 32 MB from DRAM (0.8 ms) -> memory
    out = roofline.bound(1000.0, flops=32e6, nbytes=32 << 20, written=0, peak_ops=400 * GB, ladder=LADDER)
    assert out["bound"] == "memory" and out["pct_bound"] == pytest.approx(100 * (32 << 20) / 40e9 / 1e-3, abs=0.1)
    # no peak (the host lacks the ISA): memory only; nothing declared: no bound
    assert roofline.bound(1000.0, flops=2e9, nbytes=1 << 20, written=0, peak_ops=None, ladder=LADDER)["bound"] == "memory"
    assert roofline.bound(1000.0, flops=None, nbytes=None, written=None, peak_ops=None, ladder=LADDER) == {
        "bound": None, "pct_bound": None, "pct_peak": None, "pct_bandwidth": None, "level": None}


def test_annotate_uses_the_variants_peak_and_the_hosts_best_for_torch() -> None:
    lim = limits(baseline=50 * GB, avx512bf16=400 * GB, amx=None)
    rec = {"op": "gemm_bf16", "dtype": "bf16", "shape": [256, 4096, 4096], "torch_us": 25_000.0, "memcpy_us": None,
           "flops": 2 * 256 * 4096 * 4096, "bytes": 40 << 20, "bytes_written": 4 << 20}
    base, best = roofline.annotate([{**rec, "variant": "baseline", "us": 200_000.0},
                                    {**rec, "variant": "avx512bf16", "us": 25_000.0}], lim)
    assert base["bound"] == best["bound"] == "compute"
    assert base["pct_bound"] == pytest.approx(100 * rec["flops"] / 50e9 / 0.2, abs=0.1)  # type: ignore[operator]
    assert best["pct_bound"] == pytest.approx(100 * rec["flops"] / 400e9 / 0.025, abs=0.1)  # type: ignore[operator]
    assert best["torch_pct_bound"] == best["pct_bound"]  # same time, the host's best peak
    bare = roofline.annotate([{"op": "x", "dtype": "bf16", "shape": [1], "variant": "amx", "us": 1.0,
                               "torch_us": None, "memcpy_us": None}], lim)[0]
    assert bare["pct_bound"] is None and "declares no flops or bytes" in bare["peak_note"]


def test_describe_says_when_the_host_lacks_the_isa() -> None:
    text = "\n".join(roofline.describe(limits(avx512bf16=410 * GB, amx=None), ["bf16"]))
    assert "avx512bf16 410.0 GFLOP/s (insn-avx512bf16)" in text
    assert "amx not on this host (lacks amx_bf16)" in text
    assert "128 MiB 40/40" in text
    assert "model:" not in text  # the verdicts are the records', not the limits'


# A ladder as the probe measures it: one point per cache level, named, with the level's capacity.
LEVELS = (
    Bandwidth(bytes=32 << 10, read_Bps=300 * GB, copy_Bps=250 * GB, level="L1d", capacity=64 << 10),
    Bandwidth(bytes=512 << 10, read_Bps=150 * GB, copy_Bps=120 * GB, level="L2", capacity=1 << 20),
    Bandwidth(bytes=16 << 20, read_Bps=100 * GB, copy_Bps=90 * GB, level="L3", capacity=32 << 20),
    Bandwidth(bytes=128 << 20, read_Bps=30 * GB, copy_Bps=20 * GB, level="DRAM", capacity=0),
)


def test_a_working_set_inside_a_level_is_bound_by_it() -> None:
    assert roofline.level_shares(LEVELS, 48 << 10) == [(LEVELS[0], 48 << 10)]
    out = roofline.bound(1.0, flops=None, nbytes=48 << 10, written=0, peak_ops=None, ladder=LEVELS)
    assert out["level"] == "L1d" and out["pct_bound"] == pytest.approx(100 * (48 << 10) / 300e9 / 1e-6, rel=1e-2)


def test_a_working_set_between_levels_is_bound_by_both() -> None:
    """dotlib's 128 KiB record (issue 18's 198%): half from L1, half from L2, at both bandwidths."""
    shares = roofline.level_shares(LEVELS, 128 << 10)
    assert shares == [(LEVELS[0], 64 << 10), (LEVELS[1], 64 << 10)]
    out = roofline.bound(1.0, flops=None, nbytes=128 << 10, written=0, peak_ops=None, ladder=LEVELS)
    assert out["level"] == "L1d+L2"
    expected = (64 << 10) / 300e9 + (64 << 10) / 150e9
    assert out["pct_bound"] == pytest.approx(100 * expected / 1e-6, rel=1e-2)
    # GEMV weights the size of the L3: served by L1, L2 and L3 first, the rest from DRAM
    big = roofline.level_shares(LEVELS, 34 << 20)
    assert [b.level for b, _ in big] == ["L1d", "L2", "L3", "DRAM"]
    assert sum(n for _, n in big) == 34 << 20 and big[-1][1] == (34 << 20) - (64 << 10) - (1 << 20) - (32 << 20)
    assert roofline.level_label(big) == "L3"  # the others serve under 5% each


def test_an_in_place_record_is_bound_at_its_footprint_not_its_traffic() -> None:
    """An in-place op (fused_add_rms_norm, issue 25) touching 24 MiB moves 48 (read and written
    back): the levels are those of 24 MiB (L3 here), each serving its share of the traffic."""
    footprint, traffic = 24 << 20, 48 << 20
    shares = roofline.level_shares(LEVELS, footprint)
    expected = sum(roofline.memory_seconds(2 * n, n, b) for b, n in shares)
    out = roofline.bound(1000.0, flops=None, nbytes=traffic, written=footprint, peak_ops=None, ladder=LEVELS,
                         working_set=footprint)
    assert out["level"] == roofline.level_label(shares) == "L3"
    assert out["pct_bound"] == pytest.approx(100 * expected / 1e-3, rel=1e-2)
    by_traffic = roofline.bound(1000.0, flops=None, nbytes=traffic, written=footprint, peak_ops=None, ladder=LEVELS)
    assert by_traffic["level"] == "L3+DRAM" and by_traffic["pct_bound"] > out["pct_bound"]
    same = roofline.bound(1000.0, flops=None, nbytes=traffic, written=footprint, peak_ops=None, ladder=LEVELS,
                          working_set=traffic)
    assert same == by_traffic


def test_annotate_passes_a_records_working_set() -> None:
    limits = roofline.Limits(arch="x86_64", threads=2, compiler="gcc", llc_bytes=32 << 20, peaks=(), bandwidth=LEVELS)
    rec = {"op": "fused_add_rms_norm", "dtype": "fp32", "shape": [512], "variant": "avx2", "us": 1000.0,
           "bytes": 48 << 20, "bytes_written": 24 << 20}
    plain, in_place = roofline.annotate([rec, {**rec, "working_set": 24 << 20}], limits)
    assert plain["level"] == "L3+DRAM" and in_place["level"] == "L3"


def test_the_split_bound_is_never_tighter_than_the_slower_level() -> None:
    for size in (1 << 10, 100 << 10, 700 << 10, 3 << 20, 40 << 20, 1 << 30):
        mixed = roofline.bound(1000.0, flops=None, nbytes=size, written=size // 4, peak_ops=None, ladder=LEVELS)
        slowest = roofline.bound(1000.0, flops=None, nbytes=size, written=size // 4, peak_ops=None, ladder=LEVELS[-1:])
        assert 0 < mixed["pct_bound"] <= slowest["pct_bound"], size  # optimistic: never above the all-DRAM share


def test_model_verdicts_flag_records_above_105_percent() -> None:
    rec = {"op": "dot_f32", "dtype": "fp32", "shape": [32768], "variant": "avx2", "bound": "memory", "level": "L1d+L2"}
    assert roofline.model_verdicts([{**rec, "pct_bound": 104.0}]) == ["model: every record within 105% of its bound"]
    lines = roofline.model_verdicts([{**rec, "pct_bound": 104.0}, {**rec, "pct_bound": 198.0}])
    assert lines == ["model: BROKEN for dot_f32 fp32 32768 avx2: 198% of its memory bound (L1d+L2), above 105%"]
    assert roofline.model_verdicts([{**rec, "pct_bound": None}]) == []


def _cache(root: Path, cpu: int, index: int, level: int, kind: str, size: str, shared: str) -> None:
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, value in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
        (d / name).write_text(value + "\n")


def test_cache_levels_sum_private_caches_and_count_shared_ones_once(tmp_path: Path) -> None:
    for cpu in (0, 1):  # Zen 3 class as sysfs shows it: private L1d/L1i/L2, one shared L3
        _cache(tmp_path, cpu, 0, 1, "Data", "32K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "512K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "32768K", "0-1")
    two = roofline.cache_levels([0, 1], root=tmp_path)
    assert [(c.name, c.bytes) for c in two] == [("L1d", 64 << 10), ("L2", 1 << 20), ("L3", 32 << 20)]
    one = roofline.cache_levels([0], root=tmp_path)
    assert [(c.name, c.bytes) for c in one] == [("L1d", 32 << 10), ("L2", 512 << 10), ("L3", 32 << 20)]
    assert roofline.cache_levels([0], root=tmp_path / "absent") == ()


def test_ladder_has_one_point_per_level_and_dram_in_growing_sizes() -> None:
    levels = (roofline.CacheLevel(name="L1d", bytes=64 << 10), roofline.CacheLevel(name="L2", bytes=1 << 20),
              roofline.CacheLevel(name="L3", bytes=32 << 20))
    points = roofline.ladder_points(levels)
    assert [p[0] for p in points] == ["L1d", "L2", "L3", "DRAM"]
    sizes = [p[1] for p in points]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert all(size <= capacity // 2 or capacity == 0 for _, size, capacity in points)
    assert points[-1][1] == 128 << 20 and points[-1][2] == 0
    assert roofline.ladder_points(())[-1][0] == "DRAM"  # no cache facts: one assumed LLC, then DRAM


def test_best_ladder_takes_each_figure_from_the_fastest_probe() -> None:
    narrow = [Bandwidth(bytes=1, read_Bps=100.0, copy_Bps=250.0, level="L1d", capacity=2)]
    wide = [Bandwidth(bytes=1, read_Bps=300.0, copy_Bps=200.0, level="L1d", capacity=2)]
    (point,) = roofline.best_ladder([narrow, wide])
    assert (point.read_Bps, point.copy_Bps, point.level) == (300.0, 250.0, "L1d")


def test_ladder_reaches_beyond_the_last_level_cache() -> None:
    sizes = roofline.ladder_sizes(32 << 20)
    assert sizes == sorted(sizes)
    assert sizes[-2] == 16 << 20 and sizes[-1] == 128 << 20
    assert roofline.ladder_sizes(1 << 30)[-1] == 1 << 30  # capped
    assert roofline.format_rate(4.1e11, "FLOP/s") == "410.0 GFLOP/s"


def test_targets_met_missed_and_not_applicable() -> None:
    rec = {"op": "gemm_bf16", "dtype": "bf16", "shape": [256, 4096, 4096], "memcpy_us": None}
    records = [{**rec, "variant": "baseline", "us": 100.0, "torch_us": 30.0, "pct_bound": 10.0, "bound": "compute"},
               {**rec, "variant": "avx512bf16", "us": 25.0, "torch_us": 30.0, "pct_bound": 80.0, "bound": "compute"},
               {"op": "rms_norm", "dtype": "bf16", "shape": [512, 4096], "variant": "avx512bf16", "us": 150.0,
                "torch_us": None, "memcpy_us": 100.0}]
    decl = [
        {"op": "gemm_bf16", "shape": [256], "versus": "torch", "min": 1.1},
        {"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 85, "requires": ["avx512_bf16"]},
        {"op": "gemm_bf16", "shape": [256], "versus": "baseline", "min": 4.0},
        {"op": "rms_norm", "dtype": "bf16", "shape": [512], "versus": "copy", "max": 2.0},
        {"op": "gemm_w8a8", "shape": [256], "versus": "torch", "min": 1.1},  # not timed: no line
        "a plain line",
    ]
    lines = targets.check_all(decl, records, ["baseline", "avx512bf16"], ["avx2", "avx512_bf16"])
    assert lines == [
        "target: gemm_bf16 256 avx512bf16 vs torch: 1.20x (>= 1.1x: met)",
        "target: gemm_bf16 256 avx512bf16 vs its compute bound: 80.0% (>= 85%: MISSED)",
        "target: gemm_bf16 256 avx512bf16 vs baseline: 4.00x (>= 4.0x: met)",
        "target: rms_norm bf16 512 avx512bf16 vs copy: 1.50x (<= 2.0x: met)",
        "a plain line",
    ]
    lines = targets.check_all(decl[1:2], records, ["baseline"], ["avx2"])
    assert lines == ["target: gemm_bf16 256 vs bound (>= 85): n/a, this host lacks avx512_bf16"]
    # --variants without the baseline: the ladder target does not apply (no figure against another variant)
    assert targets.check_all(decl[2:3], records, ["baseline", "avx512bf16"], [], baseline="baseline") == [
        "target: gemm_bf16 256 avx512bf16 vs baseline: 4.00x (>= 4.0x: met)"]
    assert targets.check_all(decl[2:3], records, ["avx512bf16"], [], baseline="baseline") == [
        "target: gemm_bf16 256 vs baseline (>= 4.0x): n/a, baseline was not timed (--variants)"]


def test_a_measurement_at_the_working_set_replaces_the_split() -> None:
    """Issue 25: a 32 MiB GEMV weight set 'fits' a 32 MiB L3 on paper and the
    split called it L3-bound (27% of it); streamed, it mostly comes from DRAM.
    The probe's figure at exactly that working set is the bound."""
    at_set = Bandwidth(bytes=32 << 20, read_Bps=60 * GB, copy_Bps=40 * GB, exact=True)
    ladder = (*LEVELS, at_set)
    assert roofline.level_shares(ladder, 32 << 20) == [(at_set, float(32 << 20))]
    out = roofline.bound(1000.0, flops=None, nbytes=32 << 20, written=0, peak_ops=None, ladder=ladder)
    assert out["level"] == "32 MiB measured"
    assert out["pct_bound"] == pytest.approx(100 * (32 << 20) / 60e9 / 1e-3, rel=1e-2)
    # other working sets keep the split over the ladder, which the exact point does not join
    assert roofline.level_shares(ladder, 34 << 20) == roofline.level_shares(LEVELS, 34 << 20)


def test_exact_sets_are_distinct_probe_sized_and_not_ladder_rungs() -> None:
    sets = [8 << 20, 8 << 20, 16 << 20, 1 << 10, 2 << 30, 33 << 20]
    assert roofline.exact_sets(sets, 2, [16 << 20, 128 << 20]) == [8 << 20, 33 << 20]


def test_best_ladder_keeps_the_exact_points() -> None:
    a = [Bandwidth(bytes=5, read_Bps=1.0, copy_Bps=2.0, exact=True)]
    b = [Bandwidth(bytes=5, read_Bps=3.0, copy_Bps=1.0, exact=True)]
    (point,) = roofline.best_ladder([a, b])
    assert point.exact and (point.read_Bps, point.copy_Bps) == (3.0, 2.0)


def test_describe_lists_the_exact_points_apart_from_the_ladder() -> None:
    limits = roofline.Limits(arch="x86_64", threads=2, compiler="cc (gcc)", llc_bytes=32 << 20, peaks=(),
                             bandwidth=(*LEVELS, Bandwidth(bytes=8 << 20, read_Bps=190 * GB, copy_Bps=180 * GB,
                                                           exact=True)))
    ladder_line, exact_line = roofline.describe(limits, [])[1:3]
    assert " 8 MiB" not in ladder_line and "DRAM 128 MiB 30/20" in ladder_line
    assert exact_line == "  at the records' own working sets: 8 MiB 190/180"


def test_a_ladder_rung_at_the_working_set_is_its_measurement() -> None:
    """A record whose working set is a rung's size (dotlib's 128 MiB dot and the DRAM rung) is bounded by
    that rung alone: no exact point is probed for it (exact_sets leaves rungs out)."""
    assert roofline.level_shares(LEVELS, 128 << 20) == [(LEVELS[-1], float(128 << 20))]
    assert roofline.bound(1.0, flops=None, nbytes=128 << 20, written=0, peak_ops=None, ladder=LEVELS)["level"] == "DRAM"


def test_a_record_measured_beside_its_rounds_is_bound_by_that_figure() -> None:
    """A DRAM-sized record carries the probe's bandwidth measured between its rounds (timing.side_bandwidth):
    the memory it got then, not the ladder's, measured minutes apart (a 2-vCPU VM's DRAM swings 2x)."""
    limits = roofline.Limits(arch="x86_64", threads=2, compiler="gcc", llc_bytes=32 << 20, peaks=(), bandwidth=LEVELS)
    rec = {"op": "gemm_bf16", "dtype": "bf16", "shape": [1, 32768, 4096], "variant": "avx2", "us": 8000.0,
           "bytes": 256 << 20, "bytes_written": 0}
    beside = {**rec, "bandwidth": {"read_Bps": 35 * GB, "copy_Bps": 30 * GB}}
    plain, side = roofline.annotate([rec, beside], limits)
    assert plain["level"] == "L3+DRAM" and side["level"] == "256 MiB side by side"
    assert side["pct_bound"] == pytest.approx(100 * (256 << 20) / 35e9 / 8e-3, rel=1e-2)
    assert plain["pct_bound"] == roofline.bound(8000.0, flops=None, nbytes=256 << 20, written=0, peak_ops=None,
                                                ladder=LEVELS)["pct_bound"]
    # an in-place record's figure is at its footprint, its writes at the update figure (copy without one)
    fused = {**beside, "bytes": 128 << 20, "bytes_written": 64 << 20, "working_set": 64 << 20}
    (out,) = roofline.annotate([fused], limits)
    assert out["level"] == "64 MiB side by side"
    assert out["pct_bound"] == pytest.approx(100 * (128 << 20) / 30e9 / 8e-3, rel=1e-2)
    (updated,) = roofline.annotate([{**fused, "bandwidth": {**fused["bandwidth"], "update_Bps": 50 * GB}}], limits)
    assert updated["pct_bound"] == pytest.approx(100 * (128 << 20) / 50e9 / 8e-3, rel=1e-2)
    assert roofline.record_ladder(rec, LEVELS) == LEVELS


def test_an_in_place_record_writes_back_at_the_update_bandwidth() -> None:
    """fused_add_rms_norm reads x and the residual and writes both back where it read them: no line is fetched
    for ownership alone, as a copy's destination is (the probe's in-place increment ran 1.7x its copy figure
    from DRAM on the Zen 4 class host, and the op 128-134 % of a copy-based bound). A record that is not in
    place, or a ladder without the figure, keeps the copy bandwidth."""
    point = Bandwidth(bytes=64 << 20, read_Bps=60 * GB, copy_Bps=45 * GB, update_Bps=80 * GB, exact=True)
    assert roofline.memory_seconds(128 << 20, 64 << 20, point, in_place=True) == pytest.approx((128 << 20) / 80e9)
    assert roofline.memory_seconds(128 << 20, 64 << 20, point) == pytest.approx((128 << 20) / 45e9)
    no_update = Bandwidth(bytes=64 << 20, read_Bps=60 * GB, copy_Bps=45 * GB, exact=True)
    assert roofline.memory_seconds(128 << 20, 64 << 20, no_update, in_place=True) == pytest.approx((128 << 20) / 45e9)
    in_place = roofline.bound(2000.0, flops=None, nbytes=128 << 20, written=64 << 20, peak_ops=None, ladder=(point,),
                              working_set=64 << 20)
    assert in_place["pct_bound"] == pytest.approx(100 * (128 << 20) / 80e9 / 2e-3, rel=1e-2)
    (merged,) = roofline.best_ladder([[point], [Bandwidth(bytes=64 << 20, read_Bps=1.0, copy_Bps=1.0, update_Bps=90 * GB,
                                                          exact=True)]])
    assert merged.update_Bps == 90 * GB
