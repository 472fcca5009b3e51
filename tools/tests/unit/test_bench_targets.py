"""`cpubuild bench` targets: the best variant, or every variant with `each_variant`."""

from __future__ import annotations

from typing import Any

from cpubuild.bench import targets
from cpubuild.bench.run import median_records

VARIANTS = ["avx2", "avx512", "avx512bf16"]


def record(variant: str, us: float, **extra: Any) -> dict[str, Any]:
    return {"op": "gemm_bf16", "shape": [256, 4096, 4096], "dtype": "bf16", "variant": variant, "us": us, **extra}


RECORDS = [
    record("avx2", 40.0, pct_bound=78.0, bound="compute", torch_us=60.0),
    record("avx512", 20.0, pct_bound=90.0, bound="compute", torch_us=60.0),
    record("avx512bf16", 10.0, pct_bound=84.0, bound="compute", torch_us=60.0),
]


def test_the_best_variant_answers_by_default() -> None:
    lines = targets.check_all([{"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 85}], RECORDS, VARIANTS, [])
    assert lines == ["target: gemm_bf16 256 avx512bf16 vs its compute bound: 84.0% (>= 85%: MISSED)"]


def test_each_variant_gets_its_own_line() -> None:
    target = {"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 85, "each_variant": True}
    lines = targets.check_all([target], RECORDS, VARIANTS, [])
    assert [line.split(" vs ")[0].split()[-1] for line in lines] == VARIANTS
    assert [line.endswith("met)") for line in lines] == [False, True, False]


def test_variants_limits_a_target_to_those_named() -> None:
    target = {"op": "gemm_bf16", "shape": [256], "versus": "torch", "min": 2.0, "each_variant": True,
              "variants": ["avx2", "avx512"]}
    assert targets.check_all([target], RECORDS, VARIANTS, []) == [
        "target: gemm_bf16 256 avx2 vs torch: 1.50x (>= 2.0x: MISSED)",
        "target: gemm_bf16 256 avx512 vs torch: 3.00x (>= 2.0x: met)",
    ]


def test_requires_and_untimed_cases() -> None:
    lacking = {"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 85, "requires": ["amx_tile"]}
    untimed = {"op": "gemm_bf16", "shape": [1], "versus": "bound", "min": 80, "each_variant": True}
    assert targets.check_all([lacking, untimed, "a note"], RECORDS, VARIANTS, ["avx2"]) == [
        "target: gemm_bf16 256 vs bound (>= 85): n/a, this host lacks amx_tile", "a note"]
    assert targets.check_all([{"op": "x", "versus": "speed"}], RECORDS, VARIANTS, [])[0].endswith(
        "unknown versus (known: torch, baseline, copy, bound)")


def test_three_runs_judge_the_median_and_print_every_figure() -> None:
    runs = [[record("avx2", us, pct_bound=pct)] for us, pct in ((40.0, 70.0), (38.0, 90.0), (45.0, 86.0))]
    median = median_records(runs)
    assert median[0]["us"] == 40.0 and median[0]["torch_us"] is None
    median[0]["pct_bound"] = 86.0  # what roofline.annotate makes of the median time
    target = {"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 85, "each_variant": True}
    assert targets.check_runs([target], median, runs, VARIANTS, []) == [
        "target: gemm_bf16 256 avx2 vs its roofline bound: median 86.0% (>= 85%: met; runs 70.0% / 90.0% / 86.0%)"]
    assert targets.check_runs([target], median, runs[:1], VARIANTS, []) == [
        "target: gemm_bf16 256 avx2 vs its roofline bound: 86.0% (>= 85%: met)"]


def test_the_median_leaves_out_runs_without_the_record() -> None:
    runs = [[record("avx2", 10.0, torch_us=30.0)], [], [record("avx2", 14.0, torch_us=None)]]
    assert median_records(runs)[0] == record("avx2", 12.0, torch_us=30.0, memcpy_us=None)


def test_the_best_variant_may_differ_between_runs() -> None:
    runs = [[record("avx2", 10.0, torch_us=20.0), record("avx512", 12.0, torch_us=20.0)],
            [record("avx2", 13.0, torch_us=20.0), record("avx512", 11.0, torch_us=22.0)]]
    target = {"op": "gemm_bf16", "shape": [256], "versus": "torch", "min": 1.1}
    assert targets.check_runs([target], median_records(runs), runs, VARIANTS, []) == [
        "target: gemm_bf16 256 avx2 vs torch: median 2.00x (>= 1.1x: met; runs 2.00x / 2.00x)"]  # side by side per run


def test_a_figure_that_would_round_onto_the_threshold_gets_a_digit_more() -> None:
    target = {"op": "gemm_bf16", "shape": [256], "versus": "torch", "min": 1.1}
    near = [record("avx2", 10.0, torch_us=10.96)]
    assert targets.check_all([target], near, VARIANTS, []) == [
        "target: gemm_bf16 256 avx2 vs torch: 1.096x (>= 1.1x: MISSED)"]


def test_the_median_takes_the_bandwidth_measured_beside_each_run() -> None:
    runs = [[{**record("avx2", us), "bandwidth": {"read_Bps": r, "copy_Bps": c, "update_Bps": 2 * c}}]
            for us, r, c in ((10.0, 30.0, 20.0), (11.0, 60.0, 50.0), (12.0, 40.0, 25.0))]
    assert median_records(runs)[0]["bandwidth"] == {"read_Bps": 40.0, "copy_Bps": 25.0, "update_Bps": 50.0}
    assert "bandwidth" not in median_records([[record("avx2", 10.0)]])[0]


def test_a_run_bounded_by_memory_still_counts_for_the_median_of_a_compute_bound_line() -> None:
    """The bandwidth measured beside a record differs per run: one run's GEMV may be memory-bound where the
    median's is compute-bound. Its figure is that variant's for the run, not a missing one."""
    runs = [[record("avx2", 10.0, pct_bound=pct, bound=kind)]
            for pct, kind in ((46.7, "compute"), (37.8, "memory"), (38.5, "compute"))]
    median = [record("avx2", 10.0, pct_bound=42.6, bound="compute")]
    target = {"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 80, "each_variant": True}
    assert targets.check_runs([target], median, runs, VARIANTS, []) == [
        "target: gemm_bf16 256 avx2 vs its compute bound: median 38.5% (>= 80%: MISSED; runs 46.7% / 37.8% / 38.5%)"]
