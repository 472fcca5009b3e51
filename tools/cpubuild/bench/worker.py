"""The measuring process of `cpubuild bench`: started with tcmalloc preloaded,
it times every case on every requested variant (forced in-process with
cpukern's variant API), torch eager and a copy, and prints one JSON object
{"meta": {...}, "records": [...]} on stdout (progress on stderr).

    python -m cpubuild.bench.worker '{"ops": [...], "variants": [...], ...}'
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import cases, timing


@dataclass(frozen=True, kw_only=True)
class Config:
    ops: tuple[str, ...]
    variants: tuple[str, ...]
    dtypes: tuple[str, ...]  # foundation ops: "bf16", "fp32"
    tokens: tuple[int, ...]  # foundation ops
    gemm_m: tuple[int, ...]
    rounds: int
    round_ms: float
    torch: bool

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        return cls(
            ops=tuple(data["ops"]), variants=tuple(data["variants"]), dtypes=tuple(data["dtypes"]),
            tokens=tuple(int(t) for t in data["tokens"]), gemm_m=tuple(int(m) for m in data["gemm_m"]),
            rounds=int(data["rounds"]), round_ms=float(data["round_ms"]), torch=bool(data["torch"]),
        )


def _cases(config: Config, has_torch: bool) -> list[Callable[[], cases.Case]]:
    """Deferred constructors, so inputs of one case are freed before the next."""
    def gemm(op: str, m: int) -> Callable[[], cases.Case]:
        return lambda: cases.gemm_case(op, m, has_torch=has_torch)

    def foundation(op: str, dtype: str, tokens: int) -> Callable[[], cases.Case]:
        return lambda: cases.op_case(op, dtype, tokens, has_torch=has_torch)

    out: list[Callable[[], cases.Case]] = []
    for op in config.ops:
        if op in cases.GEMM_OPS:
            out += [gemm(op, m) for m in config.gemm_m]
        else:
            out += [foundation(op, d, t) for d in config.dtypes for t in config.tokens]
    return out


def run(config: Config) -> dict[str, Any]:
    import cpukern
    from cpukern import _dispatch, gemm, ops

    has_torch = False
    torch_note = "torch: not used"
    if config.torch:
        try:
            import torch

            has_torch = True
            torch_note = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
        except ImportError:
            torch_note = "torch: not installed"
    selected = _dispatch.selected_isa()
    meta: dict[str, Any] = {
        "cpukern": cpukern.__version__,
        "selected": selected,
        "variants": list(config.variants),
        "allocator": timing.allocator(),
        "torch": torch_note,
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
        us = timing.measure(candidates, config.rounds, config.round_ms / 1000)
        for v in config.variants:
            records.append({
                "op": case.op, "dtype": case.dtype, "shape": case.shape, "variant": v, "us": round(us[v], 2),
                "torch_us": round(us["torch"], 2) if "torch" in us else None,
                "memcpy_us": round(us["memcpy"], 2) if "memcpy" in us else None,
            })
        shown = "  ".join(f"{name} {t:.1f} us" for name, t in us.items())
        print(f"{case.op} {case.dtype} {'x'.join(map(str, case.shape))}: {shown}", file=sys.stderr, flush=True)
        del case, candidates
    return {"meta": meta, "records": records}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config = Config.from_json(json.loads(args[0]))
    print(json.dumps(run(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
