"""Make vLLM's ``import vllm._C`` resolve to the variant cpubuild's dispatcher loaded.

vLLM's ``CpuPlatform.import_kernels`` imports ``vllm._C`` (AMX build),
``vllm._C_AVX512`` or ``vllm._C_AVX2``, chosen by two torch probes; each is a
Python extension whose only job is to register ``torch.ops._C.*``. Here the
dispatcher has already registered them from the variant this CPU runs, so the
three module names are bound to one small module standing for it:

    import vllm_cpu_ops.vllm_shim
    vllm_cpu_ops.vllm_shim.install()   # before vLLM's platform imports its kernels

A CPU (or a forced variant) without a kernel makes install() raise the
dispatcher's error, naming the missing features, instead of vLLM's logged
warning and a later missing-op failure.
"""

from __future__ import annotations

import sys
import types

from . import ops, selected_isa

# The module names vLLM's CPU platform imports its kernels from (vLLM 0.33).
VLLM_KERNEL_MODULES = ("vllm._C", "vllm._C_AVX512", "vllm._C_AVX2")


def install() -> types.ModuleType:
    """Bind vLLM's kernel module names to the loaded variant; returns the module."""
    ops()  # raises the dispatcher's error when no variant is loaded
    module = types.ModuleType("vllm._C", "vLLM's CPU ops, registered by vllm_cpu_ops (cpubuild's dispatcher)")
    module.__dict__["variant"] = selected_isa()
    for name in VLLM_KERNEL_MODULES:
        sys.modules[name] = module
        parent = sys.modules.get(name.rpartition(".")[0])
        if parent is not None:  # vllm imported already: `vllm._C` as an attribute too, as an import would set it
            setattr(parent, name.rpartition(".")[2], module)
    return module
