"""pytest support for running vLLM's own (CUDA-written) kernel tests on the CPU against vllm_cpu_ops."""
