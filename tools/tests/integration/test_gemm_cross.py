"""The aarch64 and s390x GEMM micro-kernels (sdot, bfmmla, smmla, the generic
NEON / z vector paths, big-endian packing) executed under QEMU CPU models:
the kernel sources, cross-compiled with each variant's flags from
isa_matrix.toml, linked into a small C++ driver that compares both GEMMs with
a double-precision reference over tail-heavy shapes and prints one line per
check. (The x86 AVX-512 / AMX kernels cannot run here: QEMU 7.2 has no
AVX-512; they are compiled by every x86 build.)"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cpubuild.matrix import load_matrix
from testsupport import CPUKERN_MATRIX, REPO, assert_not_killed, require_tool

pytestmark = [pytest.mark.cross, pytest.mark.qemu, pytest.mark.slow]

CACHE = Path(os.environ.get("CPUBUILD_CACHE", "/var/cache/cpubuild")) / "gemm-cross"
SOURCES = ["csrc/kernels/gemm.cpp", "csrc/runtime/parallel.cpp", "csrc/runtime/affinity.cpp"]

DRIVER = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
extern "C" {
const char* cpukern_gemm_kernel(int32_t kind, int64_t M);
const char* cpukern_gemm_layout(int32_t kind);
int64_t cpukern_gemm_packed_bytes(int32_t kind, int64_t K, int64_t N);
int32_t cpukern_gemm_pack_b(int32_t kind, const void* b, int64_t K, int64_t N, int64_t sk, int64_t sn, void* dst);
int32_t cpukern_gemm_bf16(const void* a, int64_t lda, const void* packed, int64_t M, int64_t N, int64_t K, void* out,
                          int64_t ldo, int32_t out_dtype);
int32_t cpukern_gemm_w8a8(const void* a, int64_t lda, const float* a_scale, const void* packed, const float* b_scale,
                          int64_t M, int64_t N, int64_t K, void* out, int64_t ldo, int32_t out_dtype);
}
static uint64_t state = 88172645463325252ull;
static uint32_t next() { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return uint32_t(state >> 11); }
static uint16_t bf16(float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
static double unbf16(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; }
int main() {
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 33, 1025}, {2, 7, 5}, {5, 17, 67}, {15, 40, 300}, {16, 9, 129},
                                 {33, 65, 530}, {130, 37, 1030}};
    int failures = 0;
    std::printf("layouts %s %s\n", cpukern_gemm_layout(0), cpukern_gemm_layout(1));
    for (auto& s : shapes) {
        const int64_t M = s[0], N = s[1], K = s[2];
        // bf16: b is stored transposed ([N][K]) half the time: strided packing
        std::vector<uint16_t> a(M * K), b(K * N);
        for (auto& x : a) x = bf16(float(int32_t(next() % 2001) - 1000) / 500.0f);
        for (auto& x : b) x = bf16(float(int32_t(next() % 2001) - 1000) / 500.0f);
        const bool trans = (M % 2) == 1;
        std::vector<uint8_t> pb(cpukern_gemm_packed_bytes(0, K, N));
        cpukern_gemm_pack_b(0, b.data(), K, N, trans ? 1 : N, trans ? K : 1, pb.data());
        std::vector<float> out(M * N);
        std::vector<uint16_t> out16(M * N);
        cpukern_gemm_bf16(a.data(), K, pb.data(), M, N, K, out.data(), N, 0);
        cpukern_gemm_bf16(a.data(), K, pb.data(), M, N, K, out16.data(), N, 1);
        double worst = 0;
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const double bv = unbf16(trans ? b[n * K + k] : b[k * N + n]);
                    ref += unbf16(a[m * K + k]) * bv;
                    mag += std::fabs(unbf16(a[m * K + k]) * bv);
                }
                const double bound = mag * (K + 4) * std::ldexp(1.0, -23) + 1e-30;
                const double e32 = std::fabs(out[m * N + n] - ref), e16 = std::fabs(unbf16(out16[m * N + n]) - ref);
                if (e32 > bound || e16 > bound + std::fabs(ref) * std::ldexp(1.0, -8)) ++failures;
                if (e32 / bound > worst) worst = e32 / bound;
            }
        std::printf("bf16 %ldx%ldx%ld %s worst %.3f of bound\n", long(M), long(N), long(K), cpukern_gemm_kernel(0, M), worst);
        // int8, full range, with scales
        std::vector<int8_t> ai(M * K), bi(K * N);
        for (auto& x : ai) x = int8_t(next() & 0xff);
        for (auto& x : bi) x = int8_t(next() & 0xff);
        std::vector<float> sa(M), sb(N);
        for (auto& x : sa) x = float(next() % 1000 + 1) / 4096.0f;
        for (auto& x : sb) x = float(next() % 1000 + 1) / 4096.0f;
        std::vector<uint8_t> pq(cpukern_gemm_packed_bytes(1, K, N));
        cpukern_gemm_pack_b(1, bi.data(), K, N, N, 1, pq.data());
        cpukern_gemm_w8a8(ai.data(), K, sa.data(), pq.data(), sb.data(), M, N, K, out.data(), N, 0);
        int bad = 0;
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; ++k) acc += int64_t(ai[m * K + k]) * bi[k * N + n];
                const double ref = double(acc) * sa[m] * sb[n];
                if (std::fabs(out[m * N + n] - ref) > std::fabs(ref) * 4 * std::ldexp(1.0, -24) + 1e-30) ++bad;
            }
        failures += bad;
        std::printf("int8 %ldx%ldx%ld %s bad %d\n", long(M), long(N), long(K), cpukern_gemm_kernel(1, M), bad);
    }
    std::printf("failures %d\n", failures);
    return failures ? 1 : 0;
}
"""

# variant -> (QEMU CPU model that runs it, micro-kernels it must report for
# (bf16, int8) at M=1 and M=130)
CASES = {
    ("aarch64", "neon"): ("cortex-a53", {"widen+fma", "widened panel+fma", "int16 madd", "int16 panel madd"}),
    ("aarch64", "neon_dotprod"): ("neoverse-n1", {"widen+fma", "widened panel+fma", "sdot"}),
    ("aarch64", "neon_bf16"): ("max", {"bfmmla", "smmla"}),
    ("aarch64", "sve"): ("max", {"bfmmla", "smmla"}),
    ("s390x", "baseline"): ("max", {"widen+fma", "widened panel+fma", "int16 madd", "int16 panel madd"}),
    ("s390x", "vxe"): ("max", {"widen+fma", "widened panel+fma", "int16 madd", "int16 panel madd"}),
}


def build(arch: str, variant: str) -> Path:
    """The driver for one variant, cached by the hash of everything it is built from."""
    matrix = load_matrix(CPUKERN_MATRIX)
    triplet = matrix.arches[arch].triplet
    cxx = f"{triplet}-g++"
    require_tool(cxx)
    flags = list(matrix.variant(arch, variant).flags_for("gcc"))
    digest = hashlib.sha256(DRIVER.encode() + " ".join(flags).encode())
    for path in sorted((REPO / "csrc").rglob("*")):
        if path.is_file():
            digest.update(path.read_bytes())
    exe = CACHE / f"{arch}-{variant}-{digest.hexdigest()[:16]}"
    if exe.exists():
        return exe
    CACHE.mkdir(parents=True, exist_ok=True)
    work = CACHE / f"{exe.name}.build"
    work.mkdir(exist_ok=True)
    (work / "driver.cpp").write_text(DRIVER)
    cmd = [cxx, "-std=gnu++17", "-O2", "-ffp-contract=fast", "-fno-math-errno", "-pthread", "-static",
           f"-I{REPO / 'csrc/include'}", f'-DCPUKERN_VARIANT_NAME="{variant}"', *flags,
           str(work / "driver.cpp"), *(str(REPO / s) for s in SOURCES), "-o", str(work / "driver")]
    if shutil.which("ccache"):
        cmd.insert(0, "ccache")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-4000:]}"
    os.replace(work / "driver", exe)  # atomic: a concurrent run sees all or nothing
    shutil.rmtree(work, ignore_errors=True)
    for old in CACHE.glob(f"{arch}-{variant}-*"):  # drivers of older sources
        if old != exe and old.is_file():
            old.unlink(missing_ok=True)
    return exe


@pytest.mark.parametrize(("arch", "variant"), list(CASES), ids=lambda x: str(x))
def test_gemm_kernels_under_qemu(arch: str, variant: str) -> None:
    model, kernels = CASES[(arch, variant)]
    qemu = f"qemu-{arch}-static"
    require_tool(qemu)
    exe = build(arch, variant)
    proc = subprocess.run([qemu, "-cpu", model, str(exe)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CPUKERN_NUM_THREADS": "2"})
    assert_not_killed(proc, f"{qemu} -cpu {model} {exe.name}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "failures 0" in proc.stdout
    missing = [k for k in kernels if f" {k} " not in proc.stdout]
    assert not missing, f"kernels {missing} did not run:\n{proc.stdout}"
    if arch == "s390x":
        assert ":be" in proc.stdout.splitlines()[0], "s390x packs big-endian lanes"
