"""Sources of the bare-metal x86_64 image (boot sector, long-mode entry, a tiny runtime, the GEMM driver)."""
