"""cpukern's benchmark, declared in pyproject.toml ([tool.cpubuild] benchmark):
`cpubuild bench` runs it with tcmalloc preloaded and the variants this CPU
runs. It times every case on every requested variant (forced in-process with
cpukern's variant API) round robin with the same inputs: the foundation ops
(rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding at
[1, 32, 512, 2048] tokens x 4096 hidden, bf16 and fp32) and the GEMMs
(gemm_bf16, gemm_w8a8 at [M, N, K] = [1|32|256, 4096, 4096], and the GEMV at
N = 32768 with its weights in DRAM), next to torch
eager (torch.matmul in bf16, torch._int_mm + scales; when installed) and a
copy of the same bytes for memory-bound cases; each record declares its
flops and bytes for cpubuild's roofline columns. Prints one JSON object
{"meta": {...}, "records": [...], "targets": [...]} on stdout (the benchmark
protocol of docs/project.md), progress on stderr; bad arguments exit 2.

    python benchmarks/bench_variants.py --variants baseline,avx2 [--ops ...] [--m ...]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cpukern_cases as cases  # next to this script
from cpubuild.bench import timing

ALL_OPS = (*cases.OPS, *cases.GEMM_OPS)
# Targets, checked by `cpubuild bench` (docs/project.md, "benchmark"): issue
# 14's on the 2-core EPYC hosts (GEMM ratios side by side with torch's oneDNN
# and torch._int_mm, gemm_bf16 against the measured vdpbf16ps peak where the
# host has AVX-512 BF16, the norms against a copy of the same bytes), and
# issue 7's GEMV and ladder goals.
TARGETS: tuple[dict[str, Any], ...] = (
    {"op": "gemm_bf16", "shape": [1, 4096], "versus": "torch", "min": 1.5},
    {"op": "gemm_bf16", "shape": [256], "versus": "torch", "min": 1.1},
    {"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 85, "requires": ["avx512_bf16"]},
    {"op": "gemm_w8a8", "shape": [256], "versus": "torch", "min": 1.1},
    {"op": "gemm_bf16", "shape": [256], "versus": "baseline", "min": 4.0},
    {"op": "rms_norm", "dtype": "bf16", "shape": [512], "versus": "copy", "max": 2.0},
    {"op": "fused_add_rms_norm", "dtype": "bf16", "shape": [512], "versus": "copy", "max": 2.0},
    # issue 25: every variant this host times, against the machine's own limits
    *({"op": op, "dtype": dtype, "shape": [512], "versus": "copy", "max": limit, "each_variant": True}
      for op, limit in (("rms_norm", 1.5), ("fused_add_rms_norm", 1.5), ("rotary_embedding", 2.0))
      for dtype in ("bf16", "fp32")),
    {"op": "silu_and_mul", "dtype": "bf16", "shape": [512], "versus": "bound", "min": 80, "each_variant": True},
    *({"op": op, "shape": [1, n], "versus": "bound", "min": 80, "each_variant": True}
      for op in ("gemm_bf16", "gemm_w8a8") for n in cases.GEMV_N),
    {"op": "gemm_bf16", "shape": [256], "versus": "bound", "min": 85, "each_variant": True},
    {"op": "gemm_w8a8", "shape": [256], "versus": "bound", "min": 75, "each_variant": True,
     "variants": ["baseline", "avx2", "avx512"]},
    {"op": "gemm_w8a8", "shape": [256], "versus": "bound", "min": 85, "each_variant": True,
     "variants": ["avxvnni", "avx512vnni", "avx512bf16", "amx"]},
)


@dataclass(frozen=True, kw_only=True)
class Config:
    ops: tuple[str, ...]
    variants: tuple[str, ...]
    dtypes: tuple[str, ...]  # foundation ops: "bf16", "fp32"
    tokens: tuple[int, ...]  # foundation ops
    gemm_m: tuple[int, ...]
    gemv_n: tuple[int, ...]  # N of the M = 1 cases
    rounds: int
    round_ms: float
    torch: bool
    side_bandwidth_from: int  # bytes: records with a working set this large get their bandwidth measured beside them



class ArgumentError(ValueError):
    """A bad command-line value (exit 2, one line)."""


def _split(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ArgumentError(f"--{what}: empty list")
    return items


def _ints(value: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in _split(value, what)]
    except ValueError:
        raise ArgumentError(f"--{what}: expected comma-separated integers, got {value!r}") from None
    if any(v < 1 for v in values):
        raise ArgumentError(f"--{what}: values must be >= 1, got {value!r}")
    return values


def parse_config(argv: Sequence[str]) -> Config:
    parser = argparse.ArgumentParser(prog="cpubuild bench", description=__doc__)
    parser.add_argument("--variants", required=True, help="Variants to time (cpubuild passes the ones this CPU runs).")
    parser.add_argument("--ops", default=",".join(ALL_OPS), help="Ops to time.")
    parser.add_argument("--dtypes", default="bf16,fp32", help="dtypes of the foundation ops.")
    parser.add_argument("--tokens", default="1,32,512,2048", help="Token counts of the foundation ops.")
    parser.add_argument("--m", default=",".join(map(str, cases.GEMM_M)), help=f"GEMM rows M (N = K = {cases.GEMM_NK}).")
    parser.add_argument("--gemv-n", default=",".join(map(str, cases.GEMV_N)),
                        help=f"N of the M = 1 GEMMs (K = {cases.GEMM_NK}); the larger puts the weights in DRAM.")
    parser.add_argument("--rounds", type=int, default=3, help="Round-robin rounds.")
    parser.add_argument("--round-ms", type=float, default=20.0, help="Time per candidate per round.")
    parser.add_argument("--no-torch", action="store_true", help="Skip torch even when installed.")
    parser.add_argument("--side-bandwidth-from", type=float, default=32.0, metavar="MIB",
                        help="Working sets from this many MiB (beyond a 2-vCPU VM's L3, where bandwidth swings with "
                             "the neighbours) get the probe's bandwidth measured between their rounds, as their bound.")
    args = parser.parse_args(list(argv))
    ops = _split(args.ops, "ops")
    unknown = [o for o in ops if o not in ALL_OPS]
    if unknown:
        raise ArgumentError(f"--ops: unknown {', '.join(unknown)} (known: {', '.join(ALL_OPS)})")
    dtypes = _split(args.dtypes, "dtypes")
    bad = [d for d in dtypes if d not in ("bf16", "fp32")]
    if bad:
        raise ArgumentError(f"--dtypes: unknown {', '.join(bad)} (known: bf16, fp32)")
    if not 1 <= args.rounds <= 100 or not 1 <= args.round_ms <= 10000:
        raise ArgumentError("--rounds must be 1-100 and --round-ms 1-10000")
    if not args.side_bandwidth_from > 0:
        raise ArgumentError(f"--side-bandwidth-from: expected a positive number of MiB, got {args.side_bandwidth_from:g}")
    return Config(ops=tuple(ops), variants=tuple(_split(args.variants, "variants")), dtypes=tuple(dtypes),
                  tokens=tuple(_ints(args.tokens, "tokens")), gemm_m=tuple(_ints(args.m, "m")),
                  gemv_n=tuple(_ints(args.gemv_n, "gemv-n")), rounds=args.rounds,
                  round_ms=args.round_ms, torch=not args.no_torch,
                  side_bandwidth_from=int(args.side_bandwidth_from * (1 << 20)))


def _cases(config: Config, has_torch: bool) -> list[Callable[[], cases.Case]]:
    """Deferred constructors, so inputs of one case are freed before the next."""
    def gemm(op: str, m: int, n: int = cases.GEMM_NK) -> Callable[[], cases.Case]:
        return lambda: cases.gemm_case(op, m, n=n, has_torch=has_torch)

    def foundation(op: str, dtype: str, tokens: int) -> Callable[[], cases.Case]:
        return lambda: cases.op_case(op, dtype, tokens, has_torch=has_torch)

    out: list[Callable[[], cases.Case]] = []
    for op in config.ops:
        if op in cases.GEMM_OPS:
            out += [gemm(op, m, n) for m in config.gemm_m for n in (config.gemv_n if m == 1 else (cases.GEMM_NK,))]
        else:
            out += [foundation(op, d, t) for d in config.dtypes for t in config.tokens]
    return out


def _peak_dtype(case: cases.Case, kernels: dict[str, str]) -> dict[str, str]:
    """A bf16 GEMM whose kernel widens to float32 for FMA (the avx512bf16
    variant on Intel from 16 rows on) is bounded by the FMA peak, not vdpbf16ps's."""
    kernel = kernels.get(f"bfloat16 M={case.shape[0]}", "") if case.op == "gemm_bf16" else ""
    return {"peak_dtype": "fp32"} if "fma" in kernel else {}


def run(config: Config) -> dict[str, Any]:
    import cpukern
    from cpukern import _dispatch, _threads, gemm, ops

    has_torch = False
    torch_note = "torch: not used"
    if config.torch:
        try:
            import torch

            has_torch = True
            torch_note = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
        except ImportError:
            torch_note = "torch: not installed"
    selected = _dispatch.DISPATCHER.selected_isa()
    meta: dict[str, Any] = {
        "title": f"cpukern {cpukern.__version__}",
        "cpukern": cpukern.__version__,
        "selected": selected,
        "variants": list(config.variants),
        "allocator": timing.allocator(),
        "torch": torch_note,
        "threads": int(_threads.report().get("threads") or 1),
        "kernels": {},
    }
    for v in config.variants:
        with ops.use_variant(v):
            meta["kernels"][v] = {
                f"{dtype} M={m}": gemm.kernel_name(dtype, m) for dtype in ("bfloat16", "int8") for m in config.gemm_m
            }
    print(f"# cpukern {cpukern.__version__}, selected {selected}; allocator: {meta['allocator']}; {torch_note}",
          file=sys.stderr, flush=True)
    records: list[dict[str, Any]] = []
    for make in _cases(config, has_torch):
        case = make()
        candidates: dict[str, Callable[[], Any]] = {
            v: case.cpukern if v == selected else case.for_variant(v) for v in config.variants
        }
        if case.torch is not None:
            candidates["torch"] = case.torch
        if case.memcpy is not None:
            candidates["memcpy"] = case.memcpy
        footprint = case.working_set or case.bytes or 0
        us, bandwidth = timing.measure_beside_bandwidth(
            candidates, config.rounds, config.round_ms / 1000, meta["threads"],
            working_set=footprint if footprint >= config.side_bandwidth_from else None)
        for v in config.variants:
            records.append({
                "op": case.op, "dtype": case.dtype, "shape": case.shape, "variant": v, "us": round(us[v], 2),
                "torch_us": round(us["torch"], 2) if "torch" in us else None,
                "memcpy_us": round(us["memcpy"], 2) if "memcpy" in us else None,
                "flops": case.flops, "bytes": case.bytes, "bytes_written": case.bytes_written,
                "working_set": case.working_set,
                **({"bandwidth": bandwidth} if bandwidth else {}),
                **_peak_dtype(case, meta["kernels"][v]),
            })
        shown = "  ".join(f"{name} {t:.1f} us" for name, t in us.items())
        print(f"{case.op} {case.dtype} {'x'.join(map(str, case.shape))}: {shown}", file=sys.stderr, flush=True)
        del case, candidates
    return {"meta": meta, "records": records, "targets": list(TARGETS)}


def main(argv: list[str] | None = None) -> int:
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
    except ArgumentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = []
    for module in ("numpy", "ml_dtypes"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        print(f"error: cpukern's benchmark needs {' and '.join(missing)}: pip install 'cpubuild[bench]' (or numpy ml_dtypes)",
              file=sys.stderr)
        return 2
    print(json.dumps(run(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
