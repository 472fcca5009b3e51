"""The audit's feature table against the vendors' manuals, on encodings
assembled by GNU as (x86: Intel SDM vol. 2; Arm ARM; z/Architecture PoP)."""

from __future__ import annotations

import fnmatch

import pytest
from cpubuild.audit.disasm import UNDECODABLE, Disassembler
from cpubuild.audit.features import tables
from cpubuild.hardware import hardware

pytest.importorskip("iced_x86")
pytest.importorskip("capstone")

X86 = [
    ("62f27e4852c1", "vdpbf16ps", {"avx512f", "avx512_bf16"}),  # EVEX.512.F3.0F38 52
    ("62f2754850c2", "vpdpbusd", {"avx512_vnni"}),  # EVEX zmm: AVX512_VNNI
    ("c4e27550c2", "vpdpbusd", {"avx_vnni"}),  # VEX ymm: AVX-VNNI
    ("c4e2725cc2", "tdpbf16ps", {"amx_bf16"}),
    ("c4e27db8c1", "vfmadd231ps %ymm1", {"fma"}),  # VEX.256: FMA
    ("62f27d48b8c1", "vfmadd231ps %zmm1", {"avx512f"}),  # EVEX.512: AVX512F
    ("f30f1efa", "endbr64", set()),  # a hint NOP without CET
    ("f30fbcc0", "tzcnt", set()),  # runs as bsf on CPUs without BMI1
    ("0f01d0", "xgetbv", {"xsave"}),  # not in hardware.toml: no variant provides it
]

AARCH64 = [  # little-endian words
    ("2094824e", "sdot", {"asimddp"}),
    ("20ec426e", "bfmmla", {"bf16"}),
    ("20a4824e", "smmla", {"i8mm"}),
    ("2014424e", "fadd v0.8h", {"asimdhp"}),
    ("20d4224e", "fadd v0.4s", set()),
    ("2000a265", "fmla z0.s", {"sve"}),
    ("3f2303d5", "paciasp", set()),
    ("410020b8", "ldadd", {"atomics"}),
]

S390X = [
    ("e70010000006", "vl", {"vx"}),  # vector facility (z13)
    ("e701200020e3", "vfasb", {"vxe"}),  # vector-enhancements 1 (z14)
    ("e60010002006", "(bad)", {"vxe2"}),  # vlbrf: z15 vector-enhancements 2, newer than capstone 5 decodes
    ("e700d0003006", "(bad)", {"vx"}),  # vl with a z14 alignment hint: a z13 ignores the hint
]


@pytest.mark.parametrize(("code", "text", "features"), X86, ids=[t for _, t, _ in X86])
def test_x86_instruction_features(code: str, text: str, features: set[str]) -> None:
    dis = Disassembler("x86_64")
    data = bytes.fromhex(code)
    [(_addr, size, found)] = list(dis.decode(data, 0x1000))
    assert size == len(data) and set(found) == features
    assert dis.describe(data, 0, 0x1000).startswith(text)


@pytest.mark.parametrize(("code", "text", "features"), AARCH64, ids=[t for _, t, _ in AARCH64])
def test_aarch64_instruction_features(code: str, text: str, features: set[str]) -> None:
    dis = Disassembler("aarch64")
    data = bytes.fromhex(code)
    [(_addr, _size, found)] = list(dis.decode(data, 0))
    assert set(found) == features and dis.describe(data, 0, 0).startswith(text)


@pytest.mark.parametrize(("code", "text", "features"), S390X, ids=[t for _, t, _ in S390X])
def test_s390x_instruction_features(code: str, text: str, features: set[str]) -> None:
    dis = Disassembler("s390x")
    data = bytes.fromhex(code)
    decoded = list(dis.decode(data, 0))
    assert [set(f) for _a, _s, f in decoded] == [features] and decoded[0][1] == 6
    assert dis.describe(data, 0, 0).startswith(text)


def test_undecodable_x86_bytes_are_marked() -> None:
    assert list(Disassembler("x86_64").decode(b"\x0f\xff", 0)) == [(0, 2, frozenset({UNDECODABLE}))]


def test_every_mapped_name_is_a_hardware_feature_or_declared_extra() -> None:
    for arch in ("x86_64", "aarch64", "s390x"):
        t = tables(arch)
        known = set(hardware().features[arch])
        extras = {n for names in t.implied.values() for n in names} | set(t.probe.values())
        mapped = set(t.disassembler.values()) | set(t.exact.values()) | {n for _p, n in t.prefixes} | {n for n, _r in t.operand}
        unknown = {n for n in mapped - {""} if n not in known and n not in extras}
        assert unknown <= {"pac"}, (arch, unknown)  # pac: only hint-space forms are emitted, and those are NOPs
        assert set(t.implied) <= known and t.baseline <= known


def test_toolchain_guarded_helpers_are_data() -> None:
    guarded = tables("aarch64").guarded
    assert any(fnmatch.fnmatchcase("__aarch64_ldadd4_acq_rel", p) for p in guarded)
    assert not tables("x86_64").guarded


def test_allowed_sets() -> None:
    x86 = tables("x86_64")
    assert "avx2" not in x86.allowed(()) and "sse2" in x86.allowed(())
    assert {"avx", "sse4_2", "fma", "avx2"} <= x86.allowed(("avx2", "fma"))
    assert "atomics" in tables("aarch64").allowed(("asimddp",)) and "atomics" not in tables("aarch64").allowed(())
    assert "z14" in tables("s390x").allowed(("vxe",)) and "vx" not in tables("s390x").allowed(())
