"""elfdynamic.py (standard library only: what a torch project's isolated build
runs) reads the same DT_NEEDED sonames and dynamic symbol names as pyelftools,
on this machine's libraries (little-endian ELF64), on a library built here by
the s390x cross compiler (big-endian) and on torch's own libraries; anything
else is one ElfFormatError."""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from pathlib import Path

import pytest
from cpubuild import elfdynamic
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from testsupport import require, require_tool, run

SOURCE = '#include <string>\nstd::string greet(const std::string& who) { return "hi " + who; }\n'


def pyelftools_view(path: Path) -> tuple[list[str], list[str]]:
    with path.open("rb") as f:
        elf = ELFFile(f)
        dynamic = elf.get_section_by_name(".dynamic")
        dynsym = elf.get_section_by_name(".dynsym")
        needed = [str(t.needed) for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"] \
            if isinstance(dynamic, DynamicSection) else []
        names = [s.name for s in dynsym.iter_symbols()] if isinstance(dynsym, SymbolTableSection) else []
    return needed, names


def assert_same(path: Path) -> list[str]:
    needed, names = pyelftools_view(path)
    assert elfdynamic.needed(path) == needed
    assert elfdynamic.dynamic_symbols(path) == names
    return names


def test_this_pythons_libraries_read_as_pyelftools_reads_them() -> None:
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/usr/lib")
    candidates = [Path(sys.executable).resolve(), *sorted(libdir.glob("libpython3*.so*"))[:1],
                  *sorted(Path("/usr/lib").glob("*-linux-gnu/libstdc++.so.6"))]
    found = [p for p in candidates if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    require(bool(found), "no ELF library of this Python or libstdc++ found")
    for path in found:
        assert_same(path)


def test_a_big_endian_s390x_library(tmp_path: Path) -> None:
    require_tool("s390x-linux-gnu-g++")
    (tmp_path / "greet.cpp").write_text(SOURCE)
    lib = tmp_path / "libgreet.so"
    run(["s390x-linux-gnu-g++", "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "greet.cpp")])
    assert lib.read_bytes()[5] == 2  # EI_DATA: big-endian
    names = assert_same(lib)
    assert "libstdc++.so.6" in elfdynamic.needed(lib)
    assert any("__cxx11" in n for n in names)  # std::string's C++11 ABI, as torchdist.cxx11_abi looks for it


def test_torchs_libraries() -> None:
    spec = importlib.util.find_spec("torch")
    require(spec is not None and spec.origin is not None, "torch is not installed (run scripts/setup.sh)")
    assert spec is not None and spec.origin is not None
    lib = Path(spec.origin).parent / "lib"
    for name in ("libc10.so", "libtorch_cpu.so"):
        assert_same(lib / name)


def test_extended_section_numbering(tmp_path: Path) -> None:
    """A file with 0xff00 sections or more keeps e_shnum 0 and the count in section 0's
    sh_size (the ELF gABI): the same library rewritten that way reads the same."""
    require_tool("g++")
    (tmp_path / "greet.cpp").write_text(SOURCE)
    lib = tmp_path / "libgreet.so"
    run(["g++", "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "greet.cpp")])
    before = (elfdynamic.needed(lib), elfdynamic.dynamic_symbols(lib))
    data = bytearray(lib.read_bytes())
    assert data[4] == 2 and data[5] == 1  # ELF64, little-endian, as this host builds
    shoff, shnum = int.from_bytes(data[0x28:0x30], "little"), int.from_bytes(data[0x3C:0x3E], "little")
    data[0x3C:0x3E] = (0).to_bytes(2, "little")  # e_shnum
    data[shoff + 0x20:shoff + 0x28] = shnum.to_bytes(8, "little")  # section 0's sh_size
    assert "libstdc++.so.6" in before[0]
    lib.write_bytes(bytes(data))
    assert (elfdynamic.needed(lib), elfdynamic.dynamic_symbols(lib)) == before
    assert_same(lib)  # pyelftools reads the extended count too


@pytest.mark.parametrize("content", [b"", b"\x7fELF", b"not an ELF file at all, just text\n" * 4,
                                     b"\x7fELF\x02\x01\x01" + b"\0" * 9 + b"\x03\x00\x3e\x00" + b"\xff" * 44])
def test_anything_else_is_one_format_error(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "lib.so"
    path.write_bytes(content)
    for read in (elfdynamic.needed, elfdynamic.dynamic_symbols):
        with pytest.raises(elfdynamic.ElfFormatError):
            read(path)
