"""GEMM benchmark: gemm_bf16 and gemm_w8a8 at [M, 4096, 4096] on every variant
this CPU runs, next to torch eager (torch.matmul in bf16, torch._int_mm) and,
for the memory-bound GEMV, a copy of the weight bytes; then issue 7's targets.

    python benchmarks/bench_gemm.py [--m 1,32,256] [--variants avx2] [--json] [--plot ladder.png]

The same measurement as `cpubuild bench --ops gemm_bf16,gemm_w8a8` (one
process with tcmalloc preloaded, variants forced one by one).
"""

from __future__ import annotations

import sys

from cpubuild.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--ops", "gemm_bf16,gemm_w8a8", *sys.argv[1:]]))
