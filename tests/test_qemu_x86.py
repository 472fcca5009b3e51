"""The installed cpukern under emulated x86 CPUs (qemu-user): the interpreter
itself runs under `qemu-x86_64-static -cpu MODEL`, so CPUID, XGETBV and every
kernel instruction are the model's, not this host's.

Each model's feature set is a fact of that CPU (Intel's documented features,
as QEMU 7.2 defines the model); the expected variant follows from the matrix.
/proc/cpuinfo is the host's under qemu-user, so it is never consulted here.
Under Nehalem (no XSAVE) XGETBV itself is an illegal instruction - a control
test proves that - so a clean report there shows the probe never executes it.

Lean on purpose: QEMU runs Python ~10x slower; ml_dtypes alone takes ~13 s to
import there, so the emulated op checks use float32 and float16 (bfloat16 is
checked natively for every variant by the op tests). NumPy 2.4 imports under
Nehalem on this machine (its baseline is x86-64-v2), so the ops run there too.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cpubuild.hardware import hardware
from cpubuild.matrix import load_matrix
from testsupport import CPUKERN_MATRIX, assert_not_killed, require, require_host, require_tool, skip_host_fact

pytestmark = pytest.mark.qemu

QEMU = "qemu-x86_64-static"
MATRIX = load_matrix(CPUKERN_MATRIX)
# The features each QEMU CPU model has, as cpubuild's hardware data lists them
# (Intel: Nehalem SSE4.2 + POPCNT, no XSAVE; Sandy Bridge + XSAVE/AVX; Haswell +
# AVX2/FMA/F16C/BMI, no AVX-512): the probe must find exactly these, which
# checks the data `cpubuild ci` and `cpubuild test --expect auto` rely on.
MODELS = {m.cpu: set(m.features) for m in hardware().qemu["x86_64"]}
assert set(MODELS) == {"Nehalem", "SandyBridge", "Haswell"}


def best_variant(features: set[str]) -> str:
    return next(v.name for v in reversed(MATRIX.variants_for("x86_64")) if set(v.requires) <= features)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_host(platform.machine() == "x86_64", "x86_64 host only")
    require_tool(QEMU)
    return tmp_path_factory.mktemp("qemu")


def emulated(model: str, args: list[str], *, work: Path, program: str | None = None, allow_signal: bool = False,
             **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CPUKERN_") and k != "PYTHONPATH"}
    clean.update(env)
    proc = subprocess.run([QEMU, "-cpu", model, program or sys.executable, *args], cwd=work, env=clean,
                          capture_output=True, text=True, timeout=300, check=False)
    if not allow_signal:
        assert_not_killed(proc, f"{QEMU} -cpu {model} {' '.join(args)[:80]}")
    return proc


def errors_only(stderr: str) -> str:
    """stderr without QEMU's notes about model features TCG does not emulate."""
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("qemu-x86_64-static: warning:"))


@pytest.fixture(scope="module")
def package(work: Path) -> str:
    """Where the installed package lives, seen natively (the emulated runs must see the same)."""
    proc = subprocess.run([sys.executable, "-c", "import cpukern; print(cpukern.__file__)"],
                          cwd=work, capture_output=True, text=True, check=False,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    require(proc.returncode == 0, f"cpukern is not installed for {sys.executable}: pip install . first")
    pkg = Path(proc.stdout.strip()).parent
    require((pkg / "_manifest.json").is_file(), f"{pkg}: not a built cpukern")
    return str(pkg)


def test_xgetbv_is_illegal_under_nehalem(work: Path) -> None:
    """Control: the Nehalem model really faults on XGETBV (what the probe must avoid)."""
    require_tool("gcc")
    src = work / "xgetbv.c"
    src.write_text('int main(void){unsigned lo,hi;__asm__ volatile("xgetbv":"=a"(lo),"=d"(hi):"c"(0));return (int)(lo&1);}\n')
    subprocess.run(["gcc", "-O1", "-o", str(work / "xgetbv"), str(src)], check=True)
    assert emulated("SandyBridge", [], work=work, program=str(work / "xgetbv")).returncode == 1  # x87 state bit
    proc = emulated("Nehalem", [], work=work, program=str(work / "xgetbv"), allow_signal=True)
    assert proc.returncode == -4, f"expected SIGILL, got {proc.returncode}"


@pytest.mark.parametrize("model", list(MODELS))
def test_report_under_model(model: str, work: Path, package: str) -> None:
    """`python -m cpukern --json` (no numpy needed) picks the best variant the model runs."""
    proc = emulated(model, ["-m", "cpukern", "--json"], work=work)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["package"] == package, "the emulated interpreter sees another install"
    assert set(data["host_features"]) == MODELS[model]
    assert data["selected"] == best_variant(MODELS[model])
    assert data["selected"] == {"Nehalem": "baseline", "SandyBridge": "baseline", "Haswell": "avx2"}[model]
    if model == "Nehalem":
        assert data["missing_features"]["avx"] == "CPUID does not report it"


def test_forced_avx2_under_sandybridge_fails_cleanly(work: Path) -> None:
    proc = emulated("SandyBridge", ["-m", "cpukern"], work=work, CPUKERN_ISA="avx2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = errors_only(proc.stderr)
    assert "Traceback" not in err
    lacking = [f for f in MATRIX.variant("x86_64", "avx2").requires if f not in MODELS["SandyBridge"]]
    assert lacking == ["fma", "f16c", "avx2"]
    assert f"CPUKERN_ISA=avx2: this CPU cannot run variant 'avx2'; missing features: {', '.join(lacking)}" in err


# Runs inside the emulated interpreter: every op on the selected variant against
# float64 numpy references (vLLM semantics), odd sizes to hit vector tails.
OPS_CHECK = r"""
import json, os, sys
import numpy as np
print("numpy imported", flush=True)
import cpukern

rng = np.random.default_rng(7)
TOL = {"float32": 2e-5, "float16": 2e-3}


def close(name, got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    err = float(np.max(np.abs(got - want) / (np.abs(want) + 1.0))) if want.size else 0.0
    assert err <= TOL[dtype], f"{name} {dtype}: max error {err:.3g} > {TOL[dtype]}"


def rms(v, w, eps):
    return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * w


def rotate(x, cos, sin, rot, neox):
    x = x.copy()
    if neox:
        a, b = x[..., : rot // 2].copy(), x[..., rot // 2 : rot].copy()
        x[..., : rot // 2], x[..., rot // 2 : rot] = a * cos - b * sin, b * cos + a * sin
    else:
        a, b = x[..., 0:rot:2].copy(), x[..., 1:rot:2].copy()
        x[..., 0:rot:2], x[..., 1:rot:2] = a * cos - b * sin, b * cos + a * sin
    return x


checked = []
for dtype in ("float32", "float16"):
    dt = np.dtype(dtype)
    try:
        cpukern.rms_norm(np.ones((1, 8), dt), np.ones(8, dt))
    except TypeError as exc:
        if dtype == "float16" and "not supported" in str(exc):
            continue
        raise
    for tokens, hidden in ((1, 64), (3, 7), (3, 4097)):
        x = rng.standard_normal((tokens, hidden)).astype(dt)
        w = rng.standard_normal(hidden).astype(dt)
        r = rng.standard_normal((tokens, hidden)).astype(dt)
        x64, w64, r64 = (a.astype(np.float64) for a in (x, w, r))
        close("rms_norm", cpukern.rms_norm(x, w, 1e-6), rms(x64, w64, 1e-6), dtype)
        xx, rr = x.copy(), r.copy()
        cpukern.fused_add_rms_norm(xx, rr, w, 1e-6)
        close("fused_add_rms_norm.residual", rr, x64 + r64, dtype)
        close("fused_add_rms_norm.x", xx, rms(rr.astype(np.float64), w64, 1e-6), dtype)
        g = rng.standard_normal((tokens, 2 * hidden)).astype(dt)
        g64 = g.astype(np.float64)
        half = g64[:, :hidden]
        for table in ("1", "0"):  # 16-bit on x86: the table, then the polynomial
            os.environ["CPUKERN_SILU_LUT"] = table
            close(f"silu_and_mul/{table}", cpukern.silu_and_mul(g), half / (1 + np.exp(-half)) * g64[:, hidden:], dtype)
    for neox in (True, False):
        tokens, heads, kv_heads, head_size, rot = 5, 3, 1, 80, 48
        pos = rng.integers(0, 32, tokens).astype(np.int64)
        cache = rng.standard_normal((32, rot)).astype(np.float32)
        q = rng.standard_normal((tokens, heads * head_size)).astype(dt)
        k = rng.standard_normal((tokens, kv_heads * head_size)).astype(dt)
        cos, sin = cache[pos, : rot // 2][:, None, :].astype(np.float64), cache[pos, rot // 2 :][:, None, :].astype(np.float64)
        want_q = rotate(q.astype(np.float64).reshape(tokens, heads, head_size), cos, sin, rot, neox)
        want_k = rotate(k.astype(np.float64).reshape(tokens, kv_heads, head_size), cos, sin, rot, neox)
        cpukern.rotary_embedding(pos, q, k, head_size, cache, neox)
        close("rotary_embedding.query", q.reshape(tokens, heads, head_size), want_q, dtype)
        close("rotary_embedding.key", k.reshape(tokens, kv_heads, head_size), want_k, dtype)
    checked.append(dtype)
print(json.dumps({"selected": cpukern.selected_isa(), "checked": checked}))
"""


def test_selftest_passes_under_haswell(work: Path, package: str) -> None:
    """Every variant Haswell runs (baseline, avx2) through cpukern's selftest:
    each op and both GEMMs, few-rows and many-rows kernels, against float64."""
    proc = emulated("Haswell", ["-m", "cpukern.selftest", "--json", "--raw-bf16"], work=work)
    assert proc.returncode == 0, errors_only(proc.stderr)[-3000:] + proc.stdout[-3000:]
    data = json.loads(proc.stdout)
    assert data["failures"] == [] and data["passed"] > 0, data["failures"]
    assert set(data["variants"]) == {"baseline", "avx2"}
    assert data["variant"] == "avx2"


@pytest.mark.parametrize("model", list(MODELS))
def test_ops_correct_under_model(model: str, work: Path, package: str) -> None:
    """Nehalem runs the baseline library on a CPU without AVX: proof that it holds
    no AVX instruction (SandyBridge could not tell, it has AVX)."""
    # NumPy's own import may die under a model (Nehalem has no XGETBV): a fact of the
    # model and this NumPy build, found by importing NumPy alone; any signal after it fails.
    probe = emulated(model, ["-c", "import numpy"], work=work, allow_signal=True)
    if probe.returncode == -signal.SIGILL:
        skip_host_fact(f"this numpy cannot import under {model} (its bare import is killed by SIGILL)")
    assert probe.returncode == 0, probe.stderr[-2000:]
    proc = emulated(model, ["-c", OPS_CHECK], work=work)
    assert proc.returncode == 0, errors_only(proc.stderr)[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["selected"] == best_variant(MODELS[model])
    assert "float32" in data["checked"]

