"""The AVX-512 variants' kernel code executed on a host without AVX-512.

Each x86 variant whose extra ISA SIMD Everywhere (libsimde-dev) implements -
AVX-512 F/BW/DQ/VL, VNNI, BF16 - is compiled from the unchanged kernel
sources with the host's own flags, the variant's feature macros (taken from
the compiler: what its flags define beyond the host variant's) and
CPUKERN_SIMDE, which makes csrc/include/cpukern/intrin.h take the intrinsics
from SIMDe's portable code (tests/simde/cpukern_simde.h). So the AVX-512
branches of simd.h, gemm_generic.h and gemm_x86.h - index math, packed
layouts, tails, epilogues, vdpbf16ps / vpdpbusd micro-kernels - run here, on
SIMDe's model of each instruction, through the ordinary Python API, and are
checked against the scalar reference kernels and float64 numpy. AMX has no
SIMDe model: the amx variant is not emulated. A few intrinsics SIMDe 0.7.4
lacks are filled in by the emulation header (see there and docs/gemm.md).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cpubuild.matrix import load_matrix
from testsupport import CPUKERN_MATRIX, REPO, require, require_host, require_tool, run

np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cpukern  # noqa: E402
from cpukern import _dispatch, _threads, gemm, ops  # noqa: E402
from test_ops import ULP, assert_close, f64, np_rms_norm, np_rotary, np_silu_and_mul, rand  # noqa: E402

pytestmark = [
    pytest.mark.slow,  # compiles three libraries (about 40 s cold, cached afterwards)
    pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 intrinsics"),
]

CXX = "g++"
CACHE = Path(os.environ.get("CPUBUILD_CACHE", "/var/cache/cpubuild")) / "simde-avx512"
EMULATION_HEADER_DIR = REPO / "tests" / "simde"
# The ISA extensions SIMDe models (x86/avx512/*.h) among those cpukern's
# kernels branch on: a variant needing any other macro (AMX) is not emulated.
SIMDE_MACROS = frozenset(
    {"__AVX512F__", "__AVX512BW__", "__AVX512DQ__", "__AVX512VL__", "__AVX512VNNI__", "__AVX512BF16__"}
)
SIMDE_DEFINES = ("-DCPUKERN_SIMDE", "-DSIMDE_NO_NATIVE", "-DSIMDE_ENABLE_NATIVE_ALIASES")
# as CMakeLists.txt compiles the kernels through cpubuild_add_variants, minus warnings
# about the 64-byte vector ABI of SIMDe's portable types on a non-AVX-512 target
COMMON_FLAGS = ("-std=gnu++17", "-O3", "-ffp-contract=fast", "-fno-math-errno", "-fPIC", "-shared", "-pthread",
                "-Wall", "-Wno-psabi")


@dataclass(frozen=True, kw_only=True)
class Emulated:
    variant: str  # the matrix variant whose code paths are compiled
    host_flags: tuple[str, ...]  # flags of the variant below it this CPU runs natively
    macros: tuple[str, ...]  # feature macros the variant's flags define beyond the host's

    @property
    def library_name(self) -> str:
        """What the library reports (cpukern_variant_name): plainly not the real one."""
        return f"{self.variant}+simde"


def feature_macros(flags: tuple[str, ...]) -> frozenset[str]:
    """Macros defined to 1 by these compiler flags, without -mtune's."""
    out = subprocess.run([CXX, "-E", "-dM", "-x", "c++", "/dev/null", *flags],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "1" and not parts[1].startswith("__tune"):
            names.add(parts[1])
    return frozenset(names)


def plan() -> list[Emulated]:
    """The emulated variants, derived from isa_matrix.toml and this CPU."""
    if platform.machine() != "x86_64" or shutil.which(CXX) is None:
        return []
    matrix = load_matrix(CPUKERN_MATRIX)
    flags = {v.name: tuple(v.flags_for("gcc")) for v in matrix.variants_for("x86_64")}
    macros = {name: feature_macros(f) for name, f in flags.items()}
    native = [n for n in cpukern.supported_variants() if not macros[n] & SIMDE_MACROS]
    plans = []
    for name in flags:
        # the highest-priority variant without AVX-512 whose features this one has (avx2, not a
        # sibling such as avxvnni): its code runs here, SIMDe adds the rest
        hosts = [n for n in native if macros[n] <= macros[name]]
        if not hosts:
            continue
        host = hosts[-1]
        extra = macros[name] - macros[host]
        if extra and extra <= SIMDE_MACROS:
            plans.append(Emulated(variant=name, host_flags=flags[host], macros=tuple(sorted(extra))))
    return plans


PLANS = {p.variant: p for p in plan()}


def sources() -> list[Path]:
    """A variant library's sources, as CMake lays them out (no references)."""
    return sorted((REPO / "csrc/kernels").glob("*.cpp")) + sorted((REPO / "csrc/runtime").glob("*.cpp"))


def compile_command(p: Emulated, unity: Path, output: Path) -> list[str]:
    return [CXX, *COMMON_FLAGS, f"-I{REPO / 'csrc/include'}", f"-I{EMULATION_HEADER_DIR}", *SIMDE_DEFINES,
            *(f"-D{m}" for m in p.macros), f'-DCPUKERN_VARIANT_NAME="{p.library_name}"', *p.host_flags,
            str(unity), *(str(s) for s in sources() if s.parent.name == "runtime"), "-o", str(output)]


def unity_source() -> str:
    """All kernels in one translation unit, like the CMake unity build."""
    return "".join(f'#include "{s}"\n' for s in sources() if s.parent.name == "kernels")


def digest(p: Emulated, unity: Path) -> str:
    """Hash of the command and of every file the compiler reads (SIMDe's and
    the system's headers included, listed by the preprocessor's -M)."""
    probe = compile_command(p, unity, Path("/dev/null"))
    probe = [a for a in probe if a not in ("-shared", "-o", "/dev/null")]
    deps = run([*probe[:1], "-M", *probe[1:]], timeout=300).stdout
    files = sorted({f for f in deps.replace("\\\n", " ").split() if not f.endswith(":")} - {str(unity)})
    h = hashlib.sha256(" ".join(compile_command(p, Path("unity.cpp"), Path("out.so"))).encode())
    h.update(unity_source().encode())
    for name in files:
        h.update(name.encode() + b"\0" + Path(name).read_bytes())
    return h.hexdigest()[:16]


def build_all() -> dict[str, Path]:
    """The emulated libraries, cached under CACHE by digest; two compiles at a
    time, one builder at a time (pytest-xdist workers, parallel CI runs)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build_unlocked()


def build_unlocked() -> dict[str, Path]:
    unity = CACHE / f"unity-{os.getpid()}.cpp"
    unity.write_text(unity_source())
    try:
        wanted = {p.variant: CACHE / f"{p.variant}-{digest(p, unity)}.so" for p in PLANS.values()}
        todo = [name for name, lib in wanted.items() if not lib.exists()]
        for start in range(0, len(todo), 2):
            jobs = []
            for name in todo[start : start + 2]:
                tmp = wanted[name].with_suffix(f".{os.getpid()}.tmp")
                cmd = compile_command(PLANS[name], unity, tmp)
                if shutil.which("ccache"):
                    cmd.insert(0, "ccache")
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                jobs.append((name, tmp, cmd, proc))
            for name, tmp, cmd, proc in jobs:
                log, _ = proc.communicate(timeout=900)
                assert proc.returncode == 0, f"{' '.join(cmd)}\n{log[-6000:]}"
                os.replace(tmp, wanted[name])  # atomic: a concurrent run sees all or nothing
        for name, lib in wanted.items():  # libraries of older sources
            for old in CACHE.glob(f"{name}-*.so"):
                if old != lib:
                    old.unlink(missing_ok=True)
        return wanted
    finally:
        unity.unlink(missing_ok=True)


def simde_installed() -> bool:
    proc = subprocess.run([CXX, "-E", "-x", "c++", "-", "-o", "/dev/null"], input="#include <simde/x86/avx512.h>\n",
                          capture_output=True, text=True, timeout=60)
    return proc.returncode == 0


@pytest.fixture(scope="module")
def emulated() -> Iterator[dict[str, str]]:
    """Builds (or reuses) the libraries and lets ops.use_variant(name) run on
    them: each is loaded with ctypes and served by the dispatcher's test seam
    (substitute) under the name it reports (`avx512+simde`, ...), a name no
    build and no CPU check knows - the dispatcher itself is unchanged."""
    require_tool(CXX)
    require(simde_installed(), "SIMDe headers missing: apt-get install libsimde-dev (scripts/setup.sh)")
    libs = build_all()
    names = {}
    loaded = {}
    for variant, path in libs.items():
        lib = ctypes.CDLL(str(path))
        lib.cpukern_variant_name.restype = ctypes.c_char_p
        names[variant] = lib.cpukern_variant_name().decode()
        assert names[variant] == PLANS[variant].library_name
        _threads.configure(lib)
        loaded[names[variant]] = lib
    with _dispatch.DISPATCHER.substitute(loaded):
        yield names


VARIANTS = sorted(PLANS, key=lambda name: PLANS[name].macros)
BF16 = ml_dtypes.bfloat16
DTYPES = {"float32": np.float32, "bfloat16": BF16}


def test_plan_covers_the_avx512_variants_and_leaves_amx_out() -> None:
    require_tool(CXX)
    require_host(platform.machine() == "x86_64", "x86-64 host")
    matrix = load_matrix(CPUKERN_MATRIX)
    for v in matrix.variants_for("x86_64"):
        uses_avx512 = any(f.startswith("-mavx512") for f in v.flags_for("gcc"))
        uses_amx = any(f.startswith("-mamx") for f in v.flags_for("gcc"))
        assert (v.name in PLANS) == (uses_avx512 and not uses_amx), v.name


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_avx512_branches_are_compiled_in(emulated: dict[str, str], variant: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulated library took the AVX-512 branches: 64-byte vectors and,
    where the variant has them, the vdpbf16ps / vpdpbusd micro-kernels."""
    monkeypatch.setenv(gemm.BF16_KERNEL_ENV, "vdpbf16ps")  # not the vendor rule's pick for larger M
    lib = _dispatch.DISPATCHER.load_variant(emulated[variant])
    lib.cpukern_vector_bytes.restype = ctypes.c_int32
    assert lib.cpukern_vector_bytes() == 64
    macros = set(PLANS[variant].macros)
    with ops.use_variant(emulated[variant]):
        for m in (1, 35):
            bf16_kernel, int8_kernel = gemm.kernel_name("bfloat16", m), gemm.kernel_name("int8", m)
            assert (bf16_kernel == "vdpbf16ps") == ("__AVX512BF16__" in macros), bf16_kernel
            assert (int8_kernel == "vpdpbusd") == ("__AVX512VNNI__" in macros), int8_kernel


# ---------------------------------------------------------------- GEMM
# M: one row, a partial 8-row panel, more than the 32-row switch; K off every
# k block (2, 4, 256, 512); N odd, past the 32-column panel.
GEMM_SHAPES = [(1, 37, 530), (5, 37, 530), (35, 65, 530)]


@pytest.mark.parametrize("kernel", gemm.BF16_KERNELS)
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", VARIANTS)
def test_gemm_bf16(emulated: dict[str, str], variant: str, shape: tuple[int, int, int], kernel: str,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """avx512bf16: both of its larger-M kernels (vdpbf16ps, widened panels + FMA) on one packed B."""
    monkeypatch.setenv(gemm.BF16_KERNEL_ENV, kernel)
    m, n, k = shape
    rng = np.random.default_rng(m * 7 + k)
    a, b = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16)
    want = f64(a) @ f64(b)
    bound = (np.abs(f64(a)) @ np.abs(f64(b))) * (k + 4) * 2.0**-23 + 1e-30  # float32 accumulation
    with ops.use_variant(emulated[variant]):
        packed = cpukern.pack_b(b)
        assert packed.variant == emulated[variant]
        for out_dtype, rounding in (("float32", 0.0), ("bfloat16", 2.0**-8)):
            got = f64(cpukern.gemm_bf16(a, packed, out_dtype=out_dtype))
            err = np.abs(got - want) - bound - rounding * np.abs(want)
            assert not (err > 0).any(), f"{variant} {shape} -> {out_dtype}: {int((err > 0).sum())} off"


@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", VARIANTS)
def test_gemm_w8a8(emulated: dict[str, str], variant: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    rng = np.random.default_rng(m + n + k)
    a, b = rng.integers(-128, 128, (m, k), dtype=np.int8), rng.integers(-128, 128, (k, n), dtype=np.int8)
    sa = (rng.random(m) * 0.02 + 0.001).astype(np.float32)
    sb = (rng.random(n) * 0.02 + 0.001).astype(np.float32)
    want = (f64(a) @ f64(b)) * f64(sa)[:, None] * f64(sb)[None, :]  # int32 sums are exact
    with ops.use_variant(emulated[variant]):
        packed = cpukern.pack_b_int8(b)
        for out_dtype, rel in (("float32", 4 * 2.0**-24), ("bfloat16", 2.0**-8)):
            got = f64(cpukern.gemm_w8a8(a, sa, packed, sb, out_dtype=out_dtype))
            bad = np.abs(got - want) > np.abs(want) * rel + 1e-30
            assert not bad.any(), f"{variant} {shape} -> {out_dtype}: {int(bad.sum())} off"
        # -128 x -128 everywhere: exact, so the +128 offset of A and its
        # column-sum correction (vpdpbusd is unsigned x signed) must cancel
        a_min = np.full((m, k), -128, np.int8)
        b_ext = np.full((k, n), -128, np.int8)
        b_ext[:, 1::2] = 127
        ones_m, ones_n = np.ones(m, np.float32), np.ones(n, np.float32)
        got = cpukern.gemm_w8a8(a_min, ones_m, cpukern.pack_b_int8(b_ext), ones_n)
        exact = a_min.astype(np.int64) @ b_ext.astype(np.int64)  # |values| < 2^24: exact in float32
        assert np.array_equal(got, exact.astype(np.float32)), f"{variant} {shape}: extremes"


# ---------------------------------------------------------------- elementwise ops
HIDDEN = [1, 7, 4097]
ROWS = 3


def on(target: str, fn: Any) -> Any:
    with ops.use_reference() if target == "reference" else ops.use_variant(target):
        return fn()


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_norms_and_silu(
    emulated: dict[str, str], variant: str, dtype: str, hidden: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = emulated[variant]
    x, w = rand((ROWS, hidden), dtype, 1), rand((hidden,), dtype, 2)
    got, ref = on(name, lambda: cpukern.rms_norm(x, w, 1e-5)), on("reference", lambda: cpukern.rms_norm(x, w, 1e-5))
    assert_close(got, ref, dtype, what=f"{name} rms_norm vs scalar reference")
    assert_close(got, np_rms_norm(x, w, 1e-5), dtype, what=f"{name} rms_norm vs numpy float64")

    x0, r0 = rand((ROWS, hidden), dtype, 5), rand((ROWS, hidden), dtype, 6)
    fused = {}
    for target in (name, "reference"):
        xs, rs = x0.copy(), r0.copy()
        on(target, lambda xs=xs, rs=rs: cpukern.fused_add_rms_norm(xs, rs, w, 1e-6))
        fused[target] = (xs, rs)
    want_r = (x0.astype(np.float32) + r0.astype(np.float32)).astype(DTYPES[dtype])
    np.testing.assert_array_equal(f64(fused[name][1]), f64(want_r), err_msg=f"{name} fused residual")
    assert_close(fused[name][0], fused["reference"][0], dtype, what=f"{name} fused_add_rms_norm vs scalar reference")
    assert_close(fused[name][0], np_rms_norm(want_r, w, 1e-6), dtype, what=f"{name} fused_add_rms_norm vs numpy")

    g = rand((ROWS, 2 * hidden), dtype, 11, scale=4.0)
    for silu_table in ("1", "0"):  # 16-bit inputs: the gathered table, then the polynomial
        monkeypatch.setenv(ops.SILU_TABLE_ENV, silu_table)
        got, ref = on(name, lambda: cpukern.silu_and_mul(g)), on("reference", lambda: cpukern.silu_and_mul(g))
        what = f"{name} silu_and_mul ({ops.SILU_TABLE_ENV}={silu_table})"
        assert_close(got, ref, dtype, what=f"{what} vs scalar reference", ulps=2)
        assert_close(got, np_silu_and_mul(g), dtype, what=f"{what} vs numpy float64", ulps=2)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_silu_special_values(
    emulated: dict[str, str], variant: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NaN, the infinities and both ends of the exp's range through the
    emulated intrinsics: the 16-bit polynomial leans on vreduceps taking an
    infinity to 0 and on vscalefps overflowing to inf."""
    name = emulated[variant]
    gate = [np.nan, np.inf, -np.inf, -1e4, -88.0, -20.0, -0.0, 0.5, 20.0, 88.0, 1e4]
    x = np.array([gate + [2.0] * len(gate)], np.float32).astype(DTYPES[dtype])
    with np.errstate(over="ignore", invalid="ignore"):
        want = np_silu_and_mul(x)
    for silu_table in ("1", "0"):
        monkeypatch.setenv(ops.SILU_TABLE_ENV, silu_table)
        got = f64(on(name, lambda: cpukern.silu_and_mul(x)))
        what = f"{name} silu_and_mul ({ops.SILU_TABLE_ENV}={silu_table}): {got} vs {want}"
        nan, inf = np.isnan(want), np.isinf(want)
        assert np.array_equal(np.isnan(got), nan) and np.array_equal(got[inf], want[inf]), what
        finite = ~(nan | inf)
        assert_close(got[finite], want[finite], dtype, what=what, ulps=2, atol=2.0**-118)


# (tokens, query heads, key heads, head_size, rotary dims): a full 128-wide
# head, a partial rotation, an odd half (7 pairs: a vector tail)
ROTARY = [(3, 4, 2, 128, 128), (2, 3, 1, 80, 32), (5, 2, 2, 18, 14)]


@pytest.mark.parametrize("case", ROTARY, ids=lambda c: f"hs{c[3]}rot{c[4]}")
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_rotary_embedding(
    emulated: dict[str, str], variant: str, dtype: str, neox: bool, case: tuple[int, int, int, int, int]
) -> None:
    name = emulated[variant]
    tokens, heads, kv_heads, head_size, rot = case
    rng = np.random.default_rng(13)
    positions = rng.integers(0, 50, tokens).astype(np.int64)
    q0, k0 = rand((tokens, heads * head_size), dtype, 14), rand((tokens, kv_heads * head_size), dtype, 15)
    angles = rng.uniform(-np.pi, np.pi, (50, rot // 2))
    cache = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    results = {}
    for target in (name, "reference"):
        q, k = q0.copy(), k0.copy()
        on(target, lambda q=q, k=k: cpukern.rotary_embedding(positions, q, k, head_size, cache, neox))
        results[target] = (q, k)
    atol = 4 * ULP[dtype]  # a*cos - b*sin cancels: error relative to |a| + |b|
    for index, x0 in enumerate((q0, k0)):
        got, ref = results[name][index], results["reference"][index]
        assert_close(got, ref, dtype, what=f"{name} rotary vs scalar reference", atol=atol)
        assert_close(got, np_rotary(positions, x0, head_size, cache, neox), dtype, what=f"{name} vs numpy", atol=atol)
