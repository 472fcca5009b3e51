"""A pytest plugin that runs vLLM's CUDA-written kernel tests on the CPU.

    VLLM_CPU_OPS_ISA=avx2 pytest -p vllm_cpu_testing.plugin --noconftest \\
        --rootdir <vllm sdist> <vllm sdist>/tests/kernels/core/test_layernorm.py

vLLM's files are run unmodified; everything CPU-specific is here:
- vLLM is told it runs on the CPU (VLLM_TARGET_DEVICE=cpu) and its kernel
  modules (vllm._C ...) resolve to the variant cpubuild's dispatcher loaded
  (vllm_cpu_ops.vllm_shim);
- device switching: a test parametrized over ``device`` with CUDA devices runs
  its first one as "cpu"; further CUDA devices would repeat that case on the CPU
  and are skipped, saying so;
- cases the CPU build cannot run are skipped with the reason (SKIPS below): ops
  vLLM builds for CUDA only, or shapes vLLM's CPU kernel itself rejects;
- ``--vllm-cpu-quick`` deselects (never passes) the cases above QUICK_LIMITS:
  vLLM sized them for a GPU, and their eager references take 15-50 s each on
  a 2-core CPU (rotary at 5x8192 tokens); the full run is the command above;
- vLLM's tests/conftest.py imports its whole engine (and model test helpers),
  so it is not loaded (--noconftest); the two fixtures these tests use from
  the conftest files are provided here with the same meaning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


@dataclass(frozen=True, kw_only=True)
class SkipRule:
    test: str  # the test function's name
    reason: str
    applies: Callable[[dict[str, Any]], bool] = lambda params: True


# vLLM's rms_norm walks a row in whole vectors of vec_op::vec_t<scalar_t>
# (FP32Vec8 / FP16Vec8 / BF16Vec8 on x86 and Arm: 8 lanes for every dtype) and
# TORCH_CHECKs hidden_size % VEC_ELEM_NUM == 0.
RMS_NORM_LANES = 8


def _rejected_hidden_size(params: dict[str, Any]) -> bool:
    return int(params["hidden_size"]) % RMS_NORM_LANES != 0


CUDA_ONLY = "CUDA-only op: vLLM's CPU extension does not build {} (csrc/cpu/torch_bindings.cpp has no CPU kernel)"

SKIPS = (
    SkipRule(test="test_fused_rms_norm_quant",
             reason=CUDA_ONLY.format("rms_norm_static_fp8_quant / fused_add_rms_norm_static_fp8_quant")),
    SkipRule(test="test_gemma_rms_norm_mixed_input_weight_dtype",
             reason="CUDA-only case: the test itself requires torch.cuda"),
    SkipRule(test="test_rms_norm", applies=_rejected_hidden_size,
             reason="vLLM's CPU rms_norm kernel rejects a hidden size that is not a whole number of vectors "
                    "(TORCH_CHECK(hidden_size % VEC_ELEM_NUM == 0) in csrc/cpu/layernorm.cpp)"),
    SkipRule(test="test_rms_norm_weightless", applies=_rejected_hidden_size,
             reason="vLLM's CPU rms_norm kernel rejects a hidden size that is not a whole number of vectors "
                    "(TORCH_CHECK(hidden_size % VEC_ELEM_NUM == 0) in csrc/cpu/layernorm.cpp)"),
)


# --vllm-cpu-quick: a case with a parameter above its limit is deselected.
QUICK_LIMITS = {"seq_len": 1024, "num_tokens": 1024}
# The attention tests take a batch of GPU-sized sequences (`seq_lens`, kv
# lengths up to 7812: 10-20 s per case here, thousands of cases): quick keeps
# one case per test and dtype, every other parameter at its first value.
QUICK_BATCH_PARAM, QUICK_SWEPT = "seq_lens", frozenset({"dtype"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--vllm-cpu-quick", action="store_true",
                     help=f"deselect the GPU-sized cases (parameters above {QUICK_LIMITS})")


def _too_large(item: pytest.Item) -> bool:
    params = _params(item)
    if any(isinstance(params.get(name), int) and params[name] > limit for name, limit in QUICK_LIMITS.items()):
        return True
    if QUICK_BATCH_PARAM in params:
        first = _first_values(item)
        return any(params[name] != value for name, value in first.items() if name in params and name not in QUICK_SWEPT)
    return False


def _first_values(item: pytest.Item) -> dict[str, Any]:
    """Each parameter's first value in its @pytest.mark.parametrize list."""
    first: dict[str, Any] = {}
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        values = list(mark.args[1])
        if not values:
            continue
        value = values[0]
        if isinstance(value, _PARAMETER_SET):
            row = tuple(value.values)
        else:
            row = tuple(value) if len(names) > 1 else (value,)
        first.update(zip(names, row))
    return first


_PARAMETER_SET = type(pytest.param(None))


def pytest_configure(config: pytest.Config) -> None:
    import vllm_cpu_ops
    from vllm_cpu_ops import vllm_shim

    vllm_shim.install()  # raises the dispatcher's error when this CPU has no variant
    config.stash[_VARIANT] = vllm_cpu_ops.selected_isa() or "none"


_VARIANT = pytest.StashKey[str]()


def pytest_report_header(config: pytest.Config) -> str:
    return f"vllm_cpu_ops variant: {config.stash[_VARIANT]}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    # also under -q, which drops the header: the variant these results belong to
    terminalreporter.write_line(f"vllm_cpu_ops variant: {config.stash[_VARIANT]}")


def _params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return callspec.params if callspec is not None else {}


def _switch_device(item: pytest.Item, params: dict[str, Any]) -> str | None:
    """Run the first CUDA device's case on the CPU; a skip reason for the others."""
    device = params.get("device")
    if not isinstance(device, str) or not device.startswith("cuda"):
        return None
    if device in ("cuda", "cuda:0"):
        params["device"] = "cpu"
        return None
    return f"{device}: a second CUDA device; on the CPU this case repeats cuda:0's, run as cpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--vllm-cpu-quick"):
        large = [item for item in items if _too_large(item)]
        if large:
            config.hook.pytest_deselected(items=large)
            items[:] = [item for item in items if not _too_large(item)]
    for item in items:
        params = _params(item)
        reason = _switch_device(item, params)
        if reason is None:
            name = getattr(item, "originalname", item.name)
            reason = next((rule.reason for rule in SKIPS if rule.test == name and rule.applies(params)), None)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def default_vllm_config() -> Iterator[Any]:
    """vLLM's tests/conftest.py fixture: a default VllmConfig made current for the test."""
    from vllm.config import VllmConfig, set_current_vllm_config

    config = VllmConfig()
    with set_current_vllm_config(config):
        yield config


@pytest.fixture(autouse=True)
def reset_default_torch_device() -> Iterator[None]:
    """vLLM's tests/kernels/conftest.py fixture: tests set a default device without restoring it."""
    yield
    torch.set_default_device(None)
