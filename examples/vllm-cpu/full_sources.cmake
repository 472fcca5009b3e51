# VLLM_CPU_OPS_FULL=ON: the rest of vLLM's torch-only CPU sources (included
# from CMakeLists.txt, which sets vllm_cpu, vllm_sources, vllm_registrations).
# Added later in this file: see README.md "What is built".
