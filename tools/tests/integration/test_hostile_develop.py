"""`cpubuild develop --precompiled` in a git checkout with committed shared
libraries: it never removes or overwrites a file it did not extract; a
tracked or foreign file in the way is one error naming it; --force overwrites."""

from __future__ import annotations

import io
import subprocess
import zipfile
from pathlib import Path

import pytest
from cpubuild.index.develop import Checkout, extract_binaries
from cpubuild.index.precompiled import MANIFEST, FileInTheWayError
from hostile import tree_hash


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                          capture_output=True, text=True, check=True, timeout=60).stdout


def wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def checkout(tmp_path: Path) -> Checkout:
    """A git checkout whose package holds committed libraries of its own."""
    pkg = tmp_path / "src" / "relp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "libvendored.so").write_bytes(b"vendored")
    (pkg / "_relp_mine.so.1").write_bytes(b"mine")
    (tmp_path / ".gitignore").write_text("build/\nsrc/relp/_relp_avx*.so\nsrc/relp/_manifest.json\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "sources")
    return Checkout(root=tmp_path, name="relp", package="relp", source=pkg.resolve())


def products(tag: bytes) -> dict[str, bytes]:
    return {"relp/__init__.py": b"not ours", "relp/_relp_avx2.so": b"avx2" + tag, "relp/_manifest.json": b"{}" + tag}


def test_tracked_libraries_survive_repeated_installs(checkout: Checkout) -> None:
    first = extract_binaries(wheel({**products(b"1"), "relp/_relp_avx512.so": b"x"}), checkout)
    assert first == ["relp/_manifest.json", "relp/_relp_avx2.so", "relp/_relp_avx512.so"]
    assert (checkout.root / MANIFEST).is_file()
    # a newer wheel without the avx512 library: ours goes, the committed ones stay
    extract_binaries(wheel(products(b"2")), checkout)
    assert git(checkout.root, "status", "--porcelain") == ""
    assert not (checkout.source / "_relp_avx512.so").exists()
    assert (checkout.source / "_relp_avx2.so").read_bytes() == b"avx22"
    assert (checkout.source / "libvendored.so").read_bytes() == b"vendored"
    assert (checkout.source / "_relp_mine.so.1").read_bytes() == b"mine"


CASES = {  # a file in the way of a wheel member -> what the one line says
    "tracked-library": ("relp/libvendored.so", "src/relp/libvendored.so: is tracked by git"),
    "tracked-versioned": ("relp/_relp_mine.so.1", "src/relp/_relp_mine.so.1: is tracked by git"),
    "foreign-untracked": ("relp/_relp_avx2.so", "src/relp/_relp_avx2.so: was not put there by cpubuild develop"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_in_the_way_is_one_error_and_force_overwrites(case: str, checkout: Checkout) -> None:
    member, message = CASES[case]
    if case == "foreign-untracked":
        (checkout.source / "_relp_avx2.so").write_bytes(b"a local build")
    before = tree_hash(checkout.root)
    with pytest.raises(FileInTheWayError) as caught:
        extract_binaries(wheel({**products(b"1"), member: b"from the wheel"}), checkout)
    assert message in caught.value.message and "--force" in caught.value.message
    assert "\n" not in caught.value.message
    assert tree_hash(checkout.root) == before
    extract_binaries(wheel({**products(b"1"), member: b"from the wheel"}), checkout, force=True)
    assert (checkout.root / "src" / member).read_bytes() == b"from the wheel"


def test_an_edited_product_is_not_ours_any_more(checkout: Checkout) -> None:
    extract_binaries(wheel(products(b"1")), checkout)
    (checkout.source / "_relp_avx2.so").write_bytes(b"hand-patched")
    before = tree_hash(checkout.root)
    with pytest.raises(FileInTheWayError, match=r"_relp_avx2\.so"):
        extract_binaries(wheel(products(b"2")), checkout)
    assert tree_hash(checkout.root) == before


def test_a_link_in_the_way_is_never_written_through(checkout: Checkout, tmp_path: Path) -> None:
    outside = tmp_path / "outside.so"
    outside.write_bytes(b"outside")
    (checkout.source / "_relp_avx2.so").symlink_to(outside)
    with pytest.raises(FileInTheWayError, match=r"_relp_avx2\.so"):
        extract_binaries(wheel(products(b"1")), checkout)
    extract_binaries(wheel(products(b"1")), checkout, force=True)
    assert outside.read_bytes() == b"outside"
    assert not (checkout.source / "_relp_avx2.so").is_symlink()
