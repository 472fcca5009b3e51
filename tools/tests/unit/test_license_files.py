"""`[project] license-files` patterns are checked before a build (PEP 639: each must match a file)."""

from __future__ import annotations

from pathlib import Path

from cpubuild.licenses import unmatched_license_files


def test_unmatched_license_files(tmp_path: Path) -> None:
    (tmp_path / "LICENSE").write_text("x")
    (tmp_path / "third_party" / "lib").mkdir(parents=True)
    pyproject = {"project": {"license-files": ["LICENSE", "third_party/*/COPYING*", "third_party/lib"]}}
    assert unmatched_license_files(tmp_path, pyproject) == ["third_party/*/COPYING*", "third_party/lib"]
    (tmp_path / "third_party" / "lib" / "COPYING.txt").write_text("y")
    assert unmatched_license_files(tmp_path, pyproject) == ["third_party/lib"]  # a directory is not a licence file
    assert unmatched_license_files(tmp_path, {"project": {"license": "MIT"}}) == []
