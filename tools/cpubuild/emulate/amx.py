"""The AMX execution harness: a project's GEMM run bare-metal under Bochs 3.0.

No host, QEMU or Bochs 2.7 executes AMX, and a Linux guest cannot use it in
Bochs 3.0 (Linux enables AMX only with XFD, which Bochs lacks). So the
`amx` variant's GEMM - the project's own sources named in
``[tool.cpubuild.baremetal]``, compiled with the variant's flags from the
matrix (the same sources and flags the wheel compiles, plus freestanding
options) - is linked with a tiny runtime (baremetal/: boot sector, long-mode
entry, COM1, memcpy & co) into a bootable disk image. Bochs 3.0's
`sapphire_rapids` model boots it, the image runs the cases of an input blob
made here (deterministic, seeded) through the GEMM C ABI and writes the raw
results to COM1; this module compares them with a scalar reference computed
on the host (exact Python integers / float64 sums of exact bf16 products).

Bochs 3.0 bugs (found by the known-answer checks that run first in the
image, so an emulator bug is never reported as ours):
  * ``vcvtne2ps2bf16`` writes the lower 16 results into the upper half too.
    The GEMM code does not use it (checked in the object code: the count is
    reported); the bf16-output epilogue uses ``vcvtneps2bf16``.
  * ``tdpbssd`` multiplies the bytes as unsigned (so do ``tdpbsud`` and
    ``tdpbusd``, whichever the checks find). So every int8 shape runs twice:
    with the labelled input set ``int8-nonneg`` (bytes in [0, 127], where
    signed and unsigned products agree), always judged, and with full-range
    ``int8-signed``, judged unless it is wrong while the project's object
    code holds an int8 tile instruction the checks found wrong.

The project's side (docs/amx.md): a C ABI ``<abi-prefix>_packed_bytes``,
``_pack_b``, ``_bf16``, ``_w8a8`` and ``_kernel`` in ``sources`` that build
freestanding (no threads, no OS: a serial stand-in for a thread pool is one
more source).
"""

from __future__ import annotations

import math
import random
import re
import struct
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..contract import ContractError, ProjectConfig
from ..errors import BuildFailedError, ToolMissingError
from ..matrix import Matrix
from ..settings import BaremetalSettings
from ..toolchain.tools import find_tool
from .bochs3 import Bochs3, ensure_bochs3, run_image

Log = Callable[[str], None]

MODEL = "sapphire_rapids"
AMX_FEATURES = frozenset({"amx_tile", "amx_bf16", "amx_int8"})
KIND_BF16, KIND_INT8 = 0, 1
EXPECTED_XCR0 = 0x602E7
FREESTANDING = (
    "-ffreestanding", "-fno-exceptions", "-fno-rtti", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
    "-fno-stack-protector", "-fno-pic", "-fno-pie", "-mno-red-zone", "-fno-threadsafe-statics",
    "-ftls-model=local-exec", "-ffunction-sections", "-fdata-sections", "-fno-tree-loop-distribute-patterns",
)
CORRUPT_DEFINE = "-DCPUBUILD_HARNESS_CORRUPT_PACKING=1"
CORRUPT_ENV = "CPUBUILD_HARNESS_CORRUPT_PACKING"  # =1: `cpubuild test` builds the corrupting image (tests only)
MARK = "@@h"
DISK_UNIT = 16 * 63 * 512  # one cylinder of the flat disk's geometry
INT8_KATS = ("tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud")
DISP8_KAT = "vdpbf16ps-disp8"  # B as a memory operand at a compressed displacement (disp8 x 64)
DISP8_BUG = "Bochs bug: a compressed displacement is scaled by 4, not 64 (B read 4 bytes past its base)"
# an EVEX vdpbf16ps (opcode 52) whose ModRM says disp8: mod 01, in `objdump -d` (raw bytes shown)
_DPBF16_WITH_DISP8 = re.compile(r"^\s*[0-9a-f]+:\s+62(?: [0-9a-f]{2}){3} 52 ([4-7][0-9a-f])\b.*\tvdpbf16ps\b", re.M)
TABLE = "[tool.cpubuild.baremetal]"


# ------------------------------------------------------------------ the project's side


@dataclass(frozen=True, kw_only=True)
class HarnessConfig:
    """[tool.cpubuild.baremetal]: what the harness compiles of the project."""

    abi_prefix: str  # the GEMM C ABI: <prefix>_packed_bytes, _pack_b, _bf16, _w8a8, _kernel
    sources: tuple[Path, ...]  # absolute
    include_dirs: tuple[Path, ...]
    compile_options: tuple[str, ...]  # the project's own (its CMake COMPILE_OPTIONS, warnings aside)
    variants: tuple[str, ...]  # run by default, in this order


def _is_within(path: Path, root: Path) -> str:
    """The path as the user wrote it, for messages (relative when under the project)."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def harness_config(config: ProjectConfig, matrix: Matrix) -> HarnessConfig:
    """The project's [tool.cpubuild.baremetal] (types and keys checked by the settings
    model when the project was read) against its files and matrix."""
    table = config.settings.baremetal
    if table == BaremetalSettings():
        raise ContractError(config.pyproject, TABLE, "missing: the bare-metal harness runs the GEMM C ABI the project "
                            "names there (abi-prefix, sources), see docs/amx.md")
    if table.abi_prefix is None:
        raise ContractError(config.pyproject, f"{TABLE} abi-prefix", "must be a C identifier (the GEMM C ABI's "
                            "prefix: <prefix>_pack_b, _bf16, _w8a8, _packed_bytes, _kernel)")
    if not table.sources:
        raise ContractError(config.pyproject, f"{TABLE} sources", "must be a non-empty list of strings")
    root = config.root
    sources = tuple(root / s for s in table.sources)
    for src in sources:
        if not src.is_file():
            raise ContractError(config.pyproject, f"{TABLE} sources", f"{_is_within(src, root)} does not exist")
    includes = tuple(root / d for d in table.include_dirs)
    for inc in includes:
        if not inc.is_dir():
            raise ContractError(config.pyproject, f"{TABLE} include-dirs", f"{_is_within(inc, root)} is not a directory")
    x86 = [v.name for v in reversed(matrix.variants_for("x86_64"))]  # highest priority first
    amx = [v.name for v in reversed(matrix.variants_for("x86_64")) if AMX_FEATURES & set(v.requires)]
    variants = table.variants or tuple(amx)
    matrix_name = Path(matrix.path).name
    for name in variants:
        if name not in x86:
            raise ContractError(config.pyproject, f"{TABLE} variants", f"{name!r} is no x86_64 variant of "
                                f"{matrix_name} (x86_64: {', '.join(x86) or 'none'})")
    if not variants:
        raise ContractError(config.pyproject, f"{TABLE} variants", f"{matrix_name} has no x86_64 variant that "
                            "requires AMX: name the variants to run")
    return HarnessConfig(abi_prefix=table.abi_prefix, sources=sources, include_dirs=includes,
                         compile_options=table.compile_options, variants=variants)


# ------------------------------------------------------------------ cases


@dataclass(frozen=True, kw_only=True)
class Case:
    kind: int  # KIND_BF16 / KIND_INT8
    m: int
    n: int
    k: int
    inputs: str  # the labelled input set: bf16, int8-signed, int8-nonneg
    a: tuple[int, ...]  # bf16 bits or int8 values, row-major M x K
    b: tuple[int, ...]  # K x N row-major (as a k-major matrix, whatever the memory order)
    a_scale: tuple[float, ...] = ()
    b_scale: tuple[float, ...] = ()
    bf16_out: bool = False
    transposed_b: bool = False

    @property
    def name(self) -> str:
        kind = "bf16" if self.kind == KIND_BF16 else "int8"
        extra = "".join([" bf16-out" if self.bf16_out else "", " B^T" if self.transposed_b else ""])
        return f"{kind} M={self.m} N={self.n} K={self.k} [{self.inputs}]{extra}"


# (M, N, K): M below and above kLargeM, K not a multiple of the tile depth
# (32 bf16 / 64 int8), odd N; K=1100 crosses the K blocking (C tiles reloaded).
SHAPES = ((1, 33, 37), (7, 47, 100), (31, 33, 130), (32, 33, 70), (45, 47, 200), (33, 17, 1100))


def _bf16_value(rng: random.Random) -> int:
    """A normal bf16 in +-[2^-7, 4): sign, exponent 120..128, 7 random mantissa bits."""
    return rng.randrange(2) << 15 | rng.randrange(120, 129) << 7 | rng.randrange(128)


def make_cases(seed: int = 14) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []
    for i, (m, n, k) in enumerate(SHAPES):
        cases.append(Case(kind=KIND_BF16, m=m, n=n, k=k, inputs="bf16",
                          a=tuple(_bf16_value(rng) for _ in range(m * k)),
                          b=tuple(_bf16_value(rng) for _ in range(k * n)),
                          bf16_out=i == 4, transposed_b=i == 2))
    for i, (m, n, k) in enumerate(SHAPES):
        for inputs in ("int8-nonneg", "int8-signed"):  # see the module's docstring
            lo = 0 if inputs == "int8-nonneg" else -128
            cases.append(Case(kind=KIND_INT8, m=m, n=n, k=k, inputs=inputs,
                              a=tuple(rng.randrange(lo, 128) for _ in range(m * k)),
                              b=tuple(rng.randrange(lo, 128) for _ in range(k * n)),
                              a_scale=tuple(2.0 ** rng.randrange(-3, 2) for _ in range(m)),
                              b_scale=tuple(2.0 ** rng.randrange(-3, 2) for _ in range(n)),
                              transposed_b=i == 1))
    return cases


def case_blob(cases: Sequence[Case]) -> bytes:
    """The cases as the driver reads them (gemm_driver.cpp: 64-byte header, 64-byte case headers, data)."""
    data = bytearray(64 + 64 * len(cases))
    struct.pack_into("<4sI", data, 0, b"CBH1", len(cases))

    def put(raw: bytes) -> int:
        data.extend(b"\0" * (-len(data) % 64))
        off = len(data)
        data.extend(raw)
        return off

    for i, c in enumerate(cases):
        fmt = "H" if c.kind == KIND_BF16 else "b"
        b = c.b
        if c.transposed_b:  # stored N x K: b[k, n] at n * K + k
            b = tuple(c.b[kk * c.n + nn] for nn in range(c.n) for kk in range(c.k))
        a_off = put(struct.pack(f"<{len(c.a)}{fmt}", *c.a))
        b_off = put(struct.pack(f"<{len(b)}{fmt}", *b))
        as_off = put(struct.pack(f"<{len(c.a_scale)}f", *c.a_scale)) if c.a_scale else 0
        bs_off = put(struct.pack(f"<{len(c.b_scale)}f", *c.b_scale)) if c.b_scale else 0
        flags = (1 if c.bf16_out else 0) | (2 if c.transposed_b else 0)
        struct.pack_into("<9I", data, 64 + 64 * i, c.kind, c.m, c.n, c.k, flags, a_off, b_off, as_off, bs_off)
    return bytes(data)


# ------------------------------------------------------------------ reference


def bf16_float(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])


def f32(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def bf16_rne(x: float) -> int:
    u = int(struct.unpack("<I", struct.pack("<f", x))[0])
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    case: str
    kernel: str
    inputs: str
    judged: bool  # False: an emulator bug makes this case's answer meaningless (label says which)
    ok: bool
    mismatches: int
    worst: str  # the worst element, for the report
    worst_ratio: float  # its error over the allowed bound (int8: 0 or inf)
    note: str = ""


def judge_case(c: Case, values: Sequence[int], kernel: str, *, int8_tile_bugs: Sequence[str] = ()) -> CaseResult:
    """Compares the guest's raw output words with the host reference.

    `int8_tile_bugs`: int8 tile instructions in the project's object code that
    the known-answer checks found wrong; a wrong ``int8-signed`` answer is then
    not judged (its ``int8-nonneg`` twin is)."""
    bad, worst, worst_ratio = 0, "", -1.0
    for m in range(c.m):
        arow = c.a[m * c.k:(m + 1) * c.k]
        for n in range(c.n):
            col = c.b[n::c.n]
            got_bits = values[m * c.n + n]
            got = bf16_float(got_bits) if c.bf16_out else f32(got_bits)
            if c.kind == KIND_INT8:
                acc = sum(x * y for x, y in zip(arow, col, strict=True))
                want = float(struct.unpack("<f", struct.pack("<f", acc * c.a_scale[m] * c.b_scale[n]))[0])
                if c.bf16_out:
                    want = bf16_float(bf16_rne(want))
                ok, ratio = got == want, 0.0 if got == want else math.inf
            else:
                prods = [bf16_float(x) * bf16_float(y) for x, y in zip(arow, col, strict=True)]
                want = math.fsum(prods)
                bound = c.k * 2.0 ** -23 * math.fsum(abs(p) for p in prods)
                if c.bf16_out:
                    bound += abs(want) * 2.0 ** -8
                err = abs(got - want)
                ratio = err / bound if bound else (0.0 if err == 0 else math.inf)
                ok = err <= bound
            if not ok:
                bad += 1
            if ratio > worst_ratio:
                worst_ratio, worst = ratio, f"[{m},{n}] got {got!r} want {want!r}"
    judged, note = True, ""
    if bad and c.inputs == "int8-signed" and int8_tile_bugs:
        judged, note = False, (f"not judged: the code uses {', '.join(int8_tile_bugs)}, which Bochs 3.0 gets wrong "
                               "(known-answer check); the int8-nonneg case of this shape is judged")
    return CaseResult(case=c.name, kernel=kernel, inputs=c.inputs, judged=judged, ok=bad == 0 or not judged,
                      mismatches=bad, worst=worst, worst_ratio=worst_ratio, note=note)


# ------------------------------------------------------------------ known answers


@dataclass(frozen=True, kw_only=True)
class KatResult:
    name: str
    ok: bool
    finding: str  # what the instruction did


def _kat_int8_inputs() -> tuple[list[int], list[int]]:
    a = [(i * 37 + 11) % 251 - 125 for i in range(16 * 64)]
    b = [(i * 53 + 7) % 241 - 120 for i in range(16 * 64)]
    return a, b


def _tile_dot(a: Sequence[int], b: Sequence[int], sa: bool, sb: bool) -> list[int]:
    """C[16x16] of an int8 tile product: A 16 x 64 bytes, B 16 rows x 16 quads."""
    def val(x: int, signed: bool) -> int:
        return x if signed else x & 0xFF

    out = []
    for m in range(16):
        for n in range(16):
            s = 0
            for kq in range(16):
                for i in range(4):
                    s += val(a[m * 64 + kq * 4 + i], sa) * val(b[kq * 64 + n * 4 + i], sb)
            out.append(((s + 2**31) % 2**32) - 2**31)
    return out


def judge_kats(kats: dict[str, list[int]]) -> list[KatResult]:
    out: list[KatResult] = []

    def signed32(v: int) -> int:
        return v - 2**32 if v >= 2**31 else v

    if "vcvtne2ps2bf16" in kats:
        fa = [1000.0 + i * 3.25 for i in range(16)]
        fb = [-i * 0.75 - 0.125 for i in range(16)]
        want = [bf16_rne(x) for x in (*fb, *fa)]  # lower half from the second source
        got = kats["vcvtne2ps2bf16"]
        if got == want:
            out.append(KatResult(name="vcvtne2ps2bf16", ok=True, finding="correct"))
        elif got[:16] == want[:16] and got[16:] == want[:16]:
            out.append(KatResult(name="vcvtne2ps2bf16", ok=False,
                                 finding="Bochs bug: upper 16 lanes repeat the lower 16 (the first source is lost)"))
        else:
            out.append(KatResult(name="vcvtne2ps2bf16", ok=False, finding=f"wrong: {got} want {want}"))
    if "vcvtneps2bf16" in kats:
        want = [bf16_rne(1000.0 + i * 3.25) for i in range(16)]
        ok = kats["vcvtneps2bf16"] == want
        out.append(KatResult(name="vcvtneps2bf16", ok=ok, finding="correct" if ok else f"wrong: {kats['vcvtneps2bf16']}"))

    def dpbf16_lanes(shift: int) -> list[float]:  # lane i takes B's pair from lane i + shift
        return [i + (1 + i / 8) * 3 + 2 * (-1 - ((i + shift) % 16) / 4) for i in range(16)]

    if "vdpbf16ps" in kats:
        want_f = dpbf16_lanes(0)
        got_f = [f32(v) for v in kats["vdpbf16ps"]]
        ok = got_f == want_f
        out.append(KatResult(name="vdpbf16ps", ok=ok, finding="correct" if ok else f"wrong: {got_f} want {want_f}"))
    if DISP8_KAT in kats:
        got_f = [f32(v) for v in kats[DISP8_KAT]]
        if got_f == dpbf16_lanes(0):
            out.append(KatResult(name=DISP8_KAT, ok=True, finding="correct"))
        elif got_f == dpbf16_lanes(1):  # read 4 bytes past the base, not 64
            out.append(KatResult(name=DISP8_KAT, ok=False, finding=DISP8_BUG))
        else:
            out.append(KatResult(name=DISP8_KAT, ok=False, finding=f"wrong: {got_f}"))
    if all(k in kats for k in INT8_KATS):
        a, b = _kat_int8_inputs()
        forms = {(sa, sb): _tile_dot(a, b, sa, sb) for sa in (True, False) for sb in (True, False)}
        names = {True: "signed", False: "unsigned"}
        for kat, (sa, sb) in zip(INT8_KATS, ((True, True), (True, False), (False, True), (False, False)), strict=True):
            got = [signed32(v) for v in kats[kat]]
            if got == forms[(sa, sb)]:
                out.append(KatResult(name=kat, ok=True, finding="correct"))
                continue
            seen = [f"{names[x]} x {names[y]}" for (x, y), v in forms.items() if v == got]
            finding = (f"Bochs bug: bytes multiplied as {seen[0]} (should be {names[sa]} x {names[sb]})" if seen
                       else "wrong, matching no signedness")
            out.append(KatResult(name=kat, ok=False, finding=finding))
    if "tdpbf16ps" in kats:
        xa = [float((i * 7) % 9 - 4) for i in range(16 * 32)]
        yb = [float((i * 5) % 7 - 3) for i in range(16 * 32)]
        want_f = [float(sum(xa[m * 32 + kk] * yb[(kk // 2) * 32 + n * 2 + kk % 2] for kk in range(32)))
                  for m in range(16) for n in range(16)]
        got_f = [f32(v) for v in kats["tdpbf16ps"]]
        ok = got_f == want_f
        out.append(KatResult(name="tdpbf16ps", ok=ok, finding="correct" if ok else "wrong"))
    return out


# ------------------------------------------------------------------ build


def _source_dir() -> Path:
    return Path(str(resources.files("cpubuild.emulate.baremetal")))


def _tool(name: str) -> str:
    path = find_tool(name)
    if path is None:
        raise ToolMissingError(f"{name} is not installed (the bare-metal AMX harness needs it)",
                               detail="fix: apt-get install g++ binutils")
    return path


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildFailedError(f"{what} failed (exit {proc.returncode})",
                               detail=f"$ {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout


def dpbf16_disp8_count(objdump_text: str) -> int:
    """vdpbf16ps instructions reading memory at a compressed (disp8 x N) displacement."""
    return len(_DPBF16_WITH_DISP8.findall(objdump_text))


@dataclass(frozen=True, kw_only=True)
class Image:
    variant: str
    disk: Path
    flags: tuple[str, ...]
    cvtne2_in_gemm: int  # vcvtne2ps2bf16 instructions in the project's object code
    amx_in_gemm: int  # tile products (tdp*) in it
    dpbf16_disp8_in_gemm: int  # vdpbf16ps reading B at a compressed displacement
    int8_tiles_in_gemm: tuple[str, ...]  # which int8 tile products it holds


def build_image(harness: HarnessConfig, matrix: Matrix, variant: str, cases: Sequence[Case], work: Path, *,
                corrupt_packing: bool = False) -> Image:
    """Compiles the project's sources with `variant`'s matrix flags and links the bootable image."""
    cxx, objcopy, objdump = _tool("g++"), _tool("objcopy"), _tool("objdump")
    flags = matrix.variant("x86_64", variant).flags_for("gcc")
    common = [*flags, *harness.compile_options, *FREESTANDING, *([CORRUPT_DEFINE] if corrupt_packing else [])]
    includes = [f"-I{d}" for d in harness.include_dirs]
    src = _source_dir()
    work.mkdir(parents=True, exist_ok=True)
    (work / "cases.bin").write_bytes(case_blob(cases))
    (work / "cases.S").write_text('.section .rodata\n.balign 64\n.globl harness_cases\nharness_cases:\n'
                                  f'.incbin "{work / "cases.bin"}"\n.section .note.GNU-stack, "", @progbits\n')
    project = {f"project{i}.o": [str(path), *includes] for i, path in enumerate(harness.sources)}
    objs = {**project, "driver.o": [str(src / "gemm_driver.cpp"), f"-I{src}", f"-DCPUBUILD_GEMM_PREFIX={harness.abi_prefix}"],
            "rt.o": [str(src / "rt.cpp"), f"-I{src}"]}
    for obj, args in objs.items():
        _run([cxx, *common, "-c", *args, "-o", str(work / obj)], f"compiling {Path(args[0]).name} for {variant}")
    for asm in ("boot.S", "cases.S"):
        path = src / asm if asm == "boot.S" else work / asm
        _run([cxx, "-c", str(path), "-o", str(work / asm.replace(".S", ".o"))], f"assembling {asm}")
    elf = work / "image.elf"
    _run([cxx, "-nostdlib", "-static", "-no-pie", f"-Wl,-T,{src / 'link.ld'}", "-Wl,--gc-sections",
          "-Wl,--build-id=none", "-Wl,-z,noexecstack",
          *(str(work / o) for o in ("boot.o", "rt.o", "driver.o", *project, "cases.o")), "-lgcc", "-o", str(elf)],
         f"linking the {variant} image")
    disk = work / "disk.img"
    _run([objcopy, "-O", "binary", str(elf), str(disk)], "objcopy")
    size = disk.stat().st_size
    with open(disk, "ab") as handle:
        handle.write(b"\0" * (-size % DISK_UNIT))
    asm_text = _run([objdump, "-d", *(str(work / o) for o in project)], "objdump")
    return Image(variant=variant, disk=disk, flags=tuple(flags),
                 cvtne2_in_gemm=len(re.findall(r"\bvcvtne2ps2bf16\b", asm_text)),
                 amx_in_gemm=len(re.findall(r"\btdp\w+\b", asm_text)),
                 dpbf16_disp8_in_gemm=dpbf16_disp8_count(asm_text),
                 int8_tiles_in_gemm=tuple(k for k in INT8_KATS if re.search(rf"\b{k}\b", asm_text)))


# ------------------------------------------------------------------ run


@dataclass(frozen=True, kw_only=True)
class GuestOutput:
    xcr0: int | None
    cpuid4: list[int]  # CPUID leaf 4's EAX EBX ECX EDX, cache by cache
    kats: dict[str, list[int]]
    cases: list[tuple[int, str, list[int]]]  # (status, kernel, raw words)
    fault: str | None
    finished: bool


def parse_com1(text: str) -> GuestOutput:
    xcr0: int | None = None
    cpuid4: list[int] = []
    kats: dict[str, list[int]] = {}
    cases: list[tuple[int, str, list[int]]] = []
    fault: str | None = None
    finished = False
    target: list[int] | None = None
    for line in text.replace("\r", "").split("\n"):
        if line.startswith(MARK + " "):
            words = line.split()
            target = None
            if words[1] == "xcr0":
                xcr0 = int(words[2], 16)
            elif words[1] == "cpuid4":
                target = cpuid4
            elif words[1] == "kat":
                target = kats.setdefault(words[2], [])
            elif words[1] == "case":
                fields = dict(w.split("=", 1) for w in words[3:] if "=" in w)
                cases.append((int(fields.get("status", "ffffffff"), 16), fields.get("kernel", "?"), []))
                target = cases[-1][2]
            elif words[1] == "fault":
                fault = " ".join(words[2:])
            elif words[1] == "end":
                finished = True
        elif target is not None and line.strip():
            target.extend(int(w, 16) for w in line.split())
    return GuestOutput(xcr0=xcr0, cpuid4=cpuid4, kats=kats, cases=cases, fault=fault, finished=finished)


def cache_sizes(cpuid4: Sequence[int]) -> dict[int, int]:
    """Bytes of the data or unified cache of each level, from CPUID leaf 4's words."""
    sizes: dict[int, int] = {}
    for i in range(0, len(cpuid4) - 3, 4):
        eax, ebx, ecx = cpuid4[i:i + 3]
        if eax & 31 in (1, 3):  # data, unified
            ways, partitions, line = (ebx >> 22) + 1, ((ebx >> 12) & 0x3FF) + 1, (ebx & 0xFFF) + 1
            sizes[(eax >> 5) & 7] = ways * partitions * line * (ecx + 1)
    return sizes


@dataclass(kw_only=True)
class VariantRun:
    variant: str
    xcr0: int | None
    kats: list[KatResult]
    results: list[CaseResult]
    problems: list[str]
    seconds: float
    cvtne2_in_gemm: int
    amx_in_gemm: int
    dpbf16_disp8_in_gemm: int
    caches: dict[int, int]  # level -> bytes, as the model's CPUID reports them
    flags: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "xcr0": hex(self.xcr0) if self.xcr0 is not None else None,
            "kats": [vars(k) for k in self.kats], "cases": [vars(r) for r in self.results],
            "problems": self.problems, "ok": self.ok, "seconds": round(self.seconds, 2),
            "vcvtne2ps2bf16_in_gemm": self.cvtne2_in_gemm, "amx_instructions_in_gemm": self.amx_in_gemm,
            "vdpbf16ps_disp8_in_gemm": self.dpbf16_disp8_in_gemm, "caches": self.caches,
            "flags": list(self.flags),
        }


@dataclass(kw_only=True)
class HarnessRun:
    model: str
    bochs_version: str
    runs: list[VariantRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "bochs": self.bochs_version, "ok": self.ok,
                "variants": [r.to_json() for r in self.runs]}


def run_variant(bochs: Bochs3, harness: HarnessConfig, matrix: Matrix, variant: str, cases: Sequence[Case], *,
                corrupt_packing: bool = False, timeout: float = 300) -> VariantRun:
    with tempfile.TemporaryDirectory(prefix=f"cpubuild-amx-{variant}-") as tmp:
        image = build_image(harness, matrix, variant, cases, Path(tmp), corrupt_packing=corrupt_packing)
        run = run_image(bochs, image.disk, model=MODEL, end_marker=f"{MARK} end", timeout=timeout)
    out = parse_com1(run.serial)
    problems: list[str] = []
    if out.fault:
        problems.append(f"the {variant} image faulted: {out.fault}")
    if out.xcr0 != EXPECTED_XCR0:
        problems.append(f"XCR0 in the guest is {out.xcr0:#x}, not {EXPECTED_XCR0:#x}" if out.xcr0 is not None
                        else "the guest reported no XCR0")
    kats = judge_kats(out.kats)
    wrong = {k.name for k in kats if not k.ok}
    int8_tile_bugs = [name for name in image.int8_tiles_in_gemm if name in wrong]
    for k in kats:  # bugs of Bochs are findings, not failures - except in what the GEMM relies on
        if not k.ok and k.name in ("vcvtneps2bf16", "vdpbf16ps", "tdpbf16ps"):
            problems.append(f"known-answer check {k.name}: {k.finding}")
    results: list[CaseResult] = []
    if len(out.cases) != len(cases) and not out.fault:
        problems.append(f"the guest reported {len(out.cases)} of {len(cases)} cases")
    for c, (status, kernel, words) in zip(cases, out.cases, strict=False):  # a short report is a problem above
        if status != 0 or len(words) != c.m * c.n:
            problems.append(f"{c.name}: status {status}, {len(words)} of {c.m * c.n} values")
            continue
        res = judge_case(c, words, kernel, int8_tile_bugs=int8_tile_bugs)
        if c.bf16_out and image.cvtne2_in_gemm and not any(k.name == "vcvtne2ps2bf16" and k.ok for k in kats):
            res = CaseResult(**{**vars(res), "judged": False, "ok": True,
                                "note": "not judged: the GEMM code uses vcvtne2ps2bf16 (Bochs bug)"})
        elif c.kind == KIND_BF16 and image.dpbf16_disp8_in_gemm and DISP8_KAT in wrong:
            res = CaseResult(**{**vars(res), "judged": False, "ok": True,
                                "note": "not judged: the GEMM code reads vdpbf16ps operands at compressed "
                                        "displacements (Bochs bug)"})
        results.append(res)
        if not res.ok:
            problems.append(f"{c.name} ({kernel}): {res.mismatches} of {c.m * c.n} wrong, worst {res.worst}")
    return VariantRun(variant=variant, xcr0=out.xcr0, kats=kats, results=results, problems=problems,
                      seconds=run.seconds, cvtne2_in_gemm=image.cvtne2_in_gemm, amx_in_gemm=image.amx_in_gemm,
                      dpbf16_disp8_in_gemm=image.dpbf16_disp8_in_gemm, caches=cache_sizes(out.cpuid4),
                      flags=image.flags)


def run_harness(harness: HarnessConfig, matrix: Matrix, *, variants: Sequence[str] | None = None,
                corrupt_packing: bool = False, cache: Path | None = None, log: Log = print) -> HarnessRun:
    """Builds and runs each variant's GEMM image under Bochs 3.0 `sapphire_rapids`
    (default: the variants the project names)."""
    variants = harness.variants if variants is None else variants
    bochs = ensure_bochs3(cache, log)
    cases = make_cases()
    run = HarnessRun(model=MODEL, bochs_version=bochs.version)
    for variant in variants:
        log(f"amx harness: {variant} GEMM, {len(cases)} cases, bare metal under Bochs {bochs.version} {MODEL}"
            + (" (packing deliberately corrupted)" if corrupt_packing else ""))
        run.runs.append(run_variant(bochs, harness, matrix, variant, cases, corrupt_packing=corrupt_packing))
    return run
