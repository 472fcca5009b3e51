"""What the bare-metal AMX harness reads back from its guest and from the
project's object code, without Bochs: the COM1 report's cache descriptors,
the known-answer check of a compressed displacement, and the scan for
vdpbf16ps operands at one."""

from __future__ import annotations

import struct

from cpubuild.emulate import amx


def _bits(values: list[float]) -> list[int]:
    return [int(struct.unpack("<I", struct.pack("<f", v))[0]) for v in values]


def _leaf4(kind: int, level: int, ways: int, line: int, sets: int) -> list[int]:
    """One cache's CPUID leaf 4 words (EAX EBX ECX EDX), one partition."""
    return [level << 5 | kind, (ways - 1) << 22 | (line - 1), sets - 1, 0]


def test_the_report_gives_each_level_its_data_or_unified_cache() -> None:
    words = [*_leaf4(1, 1, 12, 64, 64), *_leaf4(2, 1, 8, 64, 64), *_leaf4(3, 2, 16, 64, 2048),
             *_leaf4(3, 3, 15, 64, 90112)]
    com1 = "@@h xcr0 00000000000602e7\n@@h cpuid4\n" + "\n".join(
        " ".join(f"{w:08x}" for w in words[i:i + 4]) for i in range(0, len(words), 4)) + "\n@@h end\n"
    out = amx.parse_com1(com1)
    assert out.cpuid4 == words
    assert amx.cache_sizes(out.cpuid4) == {1: 48 * 1024, 2: 2 << 20, 3: 15 * 64 * 90112}  # the instruction cache left out


def test_no_descriptors_no_sizes() -> None:
    assert amx.cache_sizes(amx.parse_com1("@@h xcr0 00000000000602e7\n@@h end\n").cpuid4) == {}


def _disp8_kat(shift: int) -> list[amx.KatResult]:
    lanes = [i + (1 + i / 8) * 3 + 2 * (-1 - ((i + shift) % 16) / 4) for i in range(16)]
    return [k for k in amx.judge_kats({amx.DISP8_KAT: _bits(lanes)}) if k.name == amx.DISP8_KAT]


def test_a_compressed_displacement_read_right_is_correct() -> None:
    assert _disp8_kat(0) == [amx.KatResult(name=amx.DISP8_KAT, ok=True, finding="correct")]


def test_bochs_reading_four_bytes_past_the_base_is_named() -> None:
    assert _disp8_kat(1) == [amx.KatResult(name=amx.DISP8_KAT, ok=False, finding=amx.DISP8_BUG)]


def test_any_other_answer_is_wrong() -> None:
    (kat,) = _disp8_kat(2)
    assert not kat.ok and kat.finding.startswith("wrong")


# objdump -d lines: EVEX vdpbf16ps with ModRM mod 01 (disp8, compressed), 10 (disp32), 00 (none), 11 (register)
OBJDUMP = """
   21d86:\t62 f2 56 48 52 8a 00 \tvdpbf16ps 0x0(%rdx),%zmm5,%zmm1
   21d90:\t62 f2 56 48 52 42 01 \tvdpbf16ps 0x40(%rdx),%zmm5,%zmm0
   21d97:\t62 f2 56 48 52 44 24 \tvdpbf16ps 0x80(%rsp),%zmm5,%zmm0
   21d9e:\t02
   21da0:\t62 f2 56 48 52 02    \tvdpbf16ps (%rdx),%zmm5,%zmm0
   21da6:\t62 f2 56 48 52 c1    \tvdpbf16ps %zmm1,%zmm5,%zmm0
   21dac:\t62 f1 7c 48 58 42 01 \tvaddps 0x40(%rdx),%zmm0,%zmm0
"""


def test_the_scan_counts_only_compressed_displacements() -> None:
    assert amx.dpbf16_disp8_count(OBJDUMP) == 2
