"""`cpubuild develop --precompiled`: which published wheel it takes, and which
wheel members it lets into the package's source directory (build products only)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from cpubuild.index.client import RemoteFile
from cpubuild.index.develop import Checkout, PrecompiledNotFoundError, built_members, choose_wheel, extract_binaries
from packaging import tags

LINUX_X86 = [
    *tags.cpython_tags((3, 11), platforms=["manylinux_2_28_x86_64", "linux_x86_64"]),
    *tags.compatible_tags((3, 11), platforms=["manylinux_2_28_x86_64", "linux_x86_64"]),
]


def remote(name: str) -> RemoteFile:
    return RemoteFile(filename=name, url=f"http://x/{name}", sha256=None, requires_python=None)


def test_prefers_installable_all_variant_newest() -> None:
    files = [
        remote("cpukern-0.1.0.dev3+gabc.cpu-py3-none-manylinux_2_28_aarch64.whl"),  # other arch
        remote("cpukern-0.1.0.dev3+gabc.cpu.avx512-py3-none-manylinux_2_28_x86_64.whl"),  # a subset
        remote("cpukern-0.1.0.dev2+gabc.cpu-py3-none-manylinux_2_28_x86_64.whl"),
        remote("cpukern-0.1.0.dev3+gabc.cpu-py3-none-manylinux_2_28_x86_64.whl"),
        remote("other-9.0-py3-none-any.whl"),
        remote("cpukern-0.1.0.tar.gz"),
    ]
    chosen = choose_wheel(files, LINUX_X86, "cpukern")
    assert chosen is not None
    assert chosen.filename == "cpukern-0.1.0.dev3+gabc.cpu-py3-none-manylinux_2_28_x86_64.whl"


def test_nothing_installable_is_none() -> None:
    assert choose_wheel([remote("cpukern-0.1.0-py3-none-manylinux_2_28_s390x.whl")], LINUX_X86, "cpukern") is None
    assert choose_wheel([], LINUX_X86, "cpukern") is None
    assert choose_wheel([remote("other-9.0-py3-none-any.whl")], LINUX_X86, "cpukern") is None


@pytest.mark.parametrize(
    ("member", "allowed"),
    [("cpukern/_cpukern_avx2.so", True), ("cpukern/_cpukern_probe.so", True), ("cpukern/_manifest.json", True),
     ("cpukern/_cpubuild/dispatch.py", True), ("cpukern.libs/libgomp-a34b3233.so.1.0.0", True),
     ("cpukern/_version.py", True),  # generated at build time: not in the sources
     ("cpukern/__init__.py", False), ("cpukern/../x.so", False), ("/cpukern/x.so", False),
     ("cpukern-0.1.0.dist-info/RECORD", False), ("evil.so", False), ("cpukernx/x.so", False)],
)
def test_only_build_products_are_extracted(tmp_path: Path, member: str, allowed: bool) -> None:
    (tmp_path / "__init__.py").write_text("")
    assert (built_members([member], "cpukern", tmp_path) == [member]) is allowed


def test_extract_replaces_stale_variants_and_requires_a_manifest(tmp_path: Path) -> None:
    pkg = tmp_path / "python" / "cpukern"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_cpukern_old.so").write_bytes(b"old")

    def wheel(members: dict[str, bytes]) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
        return buf.getvalue()

    checkout = Checkout(root=tmp_path, name="cpukern", package="cpukern", source=pkg)
    with pytest.raises(PrecompiledNotFoundError):
        extract_binaries(wheel({"cpukern/_cpukern_avx2.so": b"x"}), checkout)
    assert (pkg / "_cpukern_old.so").exists()  # nothing touched
    got = extract_binaries(wheel({"cpukern/_cpukern_avx2.so": b"new", "cpukern/_manifest.json": b"{}", "cpukern/__init__.py": b"no"}), checkout)
    assert got == ["cpukern/_cpukern_avx2.so", "cpukern/_manifest.json"]
    # a library it did not put there stays (issue 21: develop never removes a file it did not extract)
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", "_cpukern_avx2.so", "_cpukern_old.so", "_manifest.json"]
    assert (pkg / "__init__.py").read_text() == ""  # sources never come from the wheel
