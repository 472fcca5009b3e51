"""Benchmarks of the installed cpukern: shared timing (`timing`), the op and
GEMM cases (`cases`), the measuring process (`worker`, run with tcmalloc
preloaded) and the speedup-ladder plot (`plot`). Used by `cpubuild bench`
and benchmarks/bench_ops.py; numpy, ml_dtypes and torch are imported only by
the measuring process."""
