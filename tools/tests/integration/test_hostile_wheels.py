"""Hostile wheels against `cpubuild publish` and the index verifier: a corpus
of damaged archives generated here (bad CRC, RECORD lies, metadata bombs,
size lies, unnormalised names, contradicting tags, encrypted and deflate64
members, absurd Requires-Python). Each is refused with exit 2 and one line
naming the wheel and the member or field, and the index stays byte-identical;
`verify_tree` finds the same damage in an index that holds it."""

from __future__ import annotations

import base64
import hashlib
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from cpubuild.index.publish import publish
from cpubuild.index.storage import LocalStorage
from cpubuild.index.verify import verify_tree
from cpubuild.index.wheelfile import WheelInfo, sha256_hex
from hostile import assert_one_line, cli, tree_hash

COMMIT = "4" * 40
X86_ELF = b"\x7fELF\x02\x01\x01" + b"\0" * 9 + struct.pack("<HH", 3, 62) + b"\0" * 40
ARM_ELF = b"\x7fELF\x02\x01\x01" + b"\0" * 9 + struct.pack("<HH", 3, 183) + b"\0" * 40
PLATFORM = "cp311-cp311-manylinux_2_28_x86_64"


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata(name: str = "relp", version: str = "1.0", extra: str = "") -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.10\n{extra}".encode()


def build(dest: Path, *, filename: str | None = None, tag: str = PLATFORM, files: dict[str, bytes] | None = None,
          meta: bytes | None = None, wheel_tag: str | None = None, record: Callable[[list[str]], list[str]] | None = None,
          compress: int = zipfile.ZIP_DEFLATED, extra_members: list[tuple[str, bytes]] | None = None) -> Path:
    """A wheel of project relp 1.0, right unless a keyword says otherwise."""
    dist = "relp-1.0.dist-info"
    members = dict(files if files is not None else {"relp/__init__.py": b"", "relp/_core.so": X86_ELF})
    members[f"{dist}/METADATA"] = meta if meta is not None else metadata()
    members[f"{dist}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {wheel_tag or tag}\n".encode()
    rows = [f"{n},{_hash(d)},{len(d)}" for n, d in members.items()]
    rows = record(rows) if record else rows
    members[f"{dist}/RECORD"] = ("\n".join([*rows, f"{dist}/RECORD,,"]) + "\n").encode()
    path = dest / (filename or f"relp-1.0-{tag}.whl")
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in [*members.items(), *(extra_members or [])]:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compress
            archive.writestr(info, data)
    return path


def patch_member(path: Path, member: str, *, flag: int | None = None, method: int | None = None,
                 size: int | None = None, flip_data: bool = False) -> Path:
    """Edits one member's local and central headers (or a byte of its data) in place."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    local = info.header_offset
    name_len, extra_len = struct.unpack_from("<HH", data, local + 26)
    central = data.find(b"PK\x01\x02")
    while True:
        assert central >= 0, member
        cname_len = struct.unpack_from("<H", data, central + 28)[0]
        if bytes(data[central + 46:central + 46 + cname_len]) == member.encode():
            break
        central = data.find(b"PK\x01\x02", central + 4)
    if flag is not None:
        struct.pack_into("<H", data, local + 6, flag)
        struct.pack_into("<H", data, central + 8, flag)
    if method is not None:
        struct.pack_into("<H", data, local + 8, method)
        struct.pack_into("<H", data, central + 10, method)
    if size is not None:
        struct.pack_into("<I", data, local + 22, size)
        struct.pack_into("<I", data, central + 24, size)
    if flip_data:
        data[local + 30 + name_len + extra_len + 1] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def _bad_record_hash(rows: list[str]) -> list[str]:
    return [r.replace(r.split(",")[1], _hash(b"other")) if r.startswith("relp/_core.so") else r for r in rows]


def _bad_record_size(rows: list[str]) -> list[str]:
    return [r.rsplit(",", 1)[0] + ",9999" if r.startswith("relp/_core.so") else r for r in rows]


BOMB = b"Metadata-Version: 2.1\nName: relp\nVersion: 1.0\nSummary: " + b"A" * (8 << 20) + b"\n"

# case id -> (make the wheel in a folder, text the one line must hold besides the wheel's name)
CORPUS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "bad-crc-so": (lambda d: patch_member(build(d, compress=zipfile.ZIP_STORED), "relp/_core.so", flip_data=True),
                   "relp/_core.so: does not read back"),
    "bad-crc-metadata": (lambda d: patch_member(build(d, compress=zipfile.ZIP_STORED), "relp-1.0.dist-info/METADATA", flip_data=True),
                         "relp-1.0.dist-info/METADATA: does not read back"),
    "corrupt-deflate-metadata": (lambda d: patch_member(build(d), "relp-1.0.dist-info/METADATA", flip_data=True),
                                 "relp-1.0.dist-info/METADATA"),
    "record-hash": (lambda d: build(d, record=_bad_record_hash), "relp/_core.so: hash"),
    "record-size": (lambda d: build(d, record=_bad_record_size), "relp/_core.so: is 60 bytes"),
    "record-missing-row": (lambda d: build(d, record=lambda rows: [r for r in rows if not r.startswith("relp/__init__")]),
                           "relp/__init__.py: is not listed"),
    "record-ghost-row": (lambda d: build(d, record=lambda rows: [*rows, f"relp/ghost.py,{_hash(b'')},0"]),
                         "lists 'relp/ghost.py'"),
    "metadata-bomb": (lambda d: build(d, meta=BOMB), "METADATA: claims"),
    "size-lie-4gb": (lambda d: patch_member(build(d, compress=zipfile.ZIP_STORED), "relp/_core.so", size=4_000_000_000),
                     "relp/_core.so: claims 4000000000 bytes"),
    "size-lie-small": (lambda d: patch_member(build(d), "relp/__init__.py", size=1000), "relp/__init__.py"),
    "unnormalised-name": (lambda d: build(d, filename=f"Relp-1.0-{PLATFORM}.whl"), "file name: project part 'Relp'"),
    "unnormalised-version": (lambda d: build(d, filename=f"relp-1.00-{PLATFORM}.whl"), "version part '1.00'"),
    "any-with-so": (lambda d: build(d, tag="py3-none-any"), "relp/_core.so: is a native library"),
    "wheel-tag-contradicts-name": (lambda d: build(d, wheel_tag="py3-none-any"), "WHEEL Tag"),
    "elf-machine-contradicts-tag": (lambda d: build(d, files={"relp/_core.so": ARM_ELF}), "relp/_core.so: is an ELF file for machine 183"),
    "encrypted-member": (lambda d: patch_member(build(d), "relp/_core.so", flag=1), "relp/_core.so: is encrypted"),
    "deflate64-member": (lambda d: patch_member(build(d), "relp/_core.so", method=9), "relp/_core.so: uses compression method 9"),
    "deflate64-metadata": (lambda d: patch_member(build(d), "relp-1.0.dist-info/METADATA", method=9), "METADATA: uses compression method 9"),
    "huge-requires-python": (lambda d: build(d, meta=metadata().replace(b">=3.10", b">=3.10," * 700_000)), "METADATA: claims"),
    "long-requires-python": (lambda d: build(d, meta=metadata().replace(b">=3.10", b">=3.10," * 100 + b">=3.10")), "Requires-Python: is 706 characters"),
    "bad-requires-python": (lambda d: build(d, meta=metadata().replace(b">=3.10", b"banana")), "Requires-Python"),
    "bad-version-field": (lambda d: build(d, meta=metadata(version="1.0-what?")), "Version"),
    "no-name-field": (lambda d: build(d, meta=b"Metadata-Version: 2.1\nVersion: 1.0\n"), "Name: is missing"),
    "duplicate-member": (lambda d: build(d, extra_members=[("relp/__init__.py", b"evil")]), "relp/__init__.py: appears twice"),
    "truncated-archive": (lambda d: _truncate(build(d)), "not a wheel"),
}


def _truncate(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[:-40])
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index that already holds one good wheel."""
    base = tmp_path_factory.mktemp("hostile-wheels")
    good = build(base)
    root = base / "index"
    out = cli("publish", str(good), "--to", str(root), "--commit", COMMIT, "--channel", "nightly")
    assert out.returncode == 0, out.stderr
    return root


def test_the_corpus_builder_makes_a_good_wheel_by_default(tmp_path: Path) -> None:
    root = tmp_path / "index"
    out = cli("publish", str(build(tmp_path)), "--to", str(root), "--commit", COMMIT)
    assert out.returncode == 0, out.stderr
    assert verify_tree(LocalStorage(root), f"{COMMIT}/cpu").problems == []


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_publish_refuses_a_damaged_wheel(case: str, index: Path, tmp_path: Path) -> None:
    make, culprit = CORPUS[case]
    path = make(tmp_path)
    before = tree_hash(index)
    out = cli("publish", str(path), "--to", str(index), "--commit", "5" * 40, "--channel", "nightly")
    line = assert_one_line(out, 2, culprit)
    assert path.name in line
    assert tree_hash(index) == before


def test_size_caps_are_configurable(index: Path, tmp_path: Path) -> None:
    path = build(tmp_path)
    before = tree_hash(index)
    for option, culprit in (("--max-wheel-size", "archive: is"), ("--max-member-size", "relp/_core.so: claims 60 bytes"),
                            ("--max-metadata-size", "METADATA: claims")):
        out = cli("publish", str(path), "--to", str(index), "--commit", "5" * 40, option, "20")
        assert_one_line(out, 2, path.name, culprit)
    out = cli("publish", str(path), "--to", str(index), "--commit", "5" * 40, "--max-wheel-size", "lots")
    assert_one_line(out, 2, "--max-wheel-size 'lots' is not a size")
    assert tree_hash(index) == before


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("case", ["bad-crc-so", "record-hash", "any-with-so", "encrypted-member", "metadata-bomb", "unnormalised-name"])
def test_verify_tree_finds_a_damaged_wheel_already_in_an_index(case: str, tmp_path: Path) -> None:
    """An index written before these checks existed (or by hand): the verifier says which wheel is bad."""
    path = CORPUS[case][0](tmp_path)
    data = path.read_bytes()
    meta = metadata()
    from cpubuild.index.names import parse_wheel_name

    info = WheelInfo(name=parse_wheel_name(path.name), display_name="relp", data=data, sha256=sha256_hex(data),
                     metadata=meta, metadata_sha256=sha256_hex(meta), requires_python=None)
    storage = LocalStorage(tmp_path / "index")
    publish(storage, [info], commit=COMMIT)
    problems = verify_tree(storage, f"{COMMIT}/cpu").problems
    assert any(path.name in p and "does not verify" in p for p in problems), problems
