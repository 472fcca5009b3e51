"""Base references and what pins them (cpubuild.docker.pin), as pure functions."""

from __future__ import annotations

import pytest
from cpubuild.docker import dockerfile, pin

DIGEST = "sha256:" + "12" * 32
IMAGE_ID = "sha256:" + "34" * 32


@pytest.mark.parametrize(("text", "parts"), [
    ("debian", ("debian", None, None)),
    ("debian:bookworm-slim", ("debian", "bookworm-slim", None)),
    (f"debian@{DIGEST}", ("debian", None, DIGEST)),
    (f"localhost:5000/a/b_c:v1.2@{DIGEST}", ("localhost:5000/a/b_c", "v1.2", DIGEST)),
    (IMAGE_ID, (None, None, IMAGE_ID)),
])
def test_parse(text: str, parts: tuple[str | None, str | None, str | None]) -> None:
    ref = pin.parse(text)
    assert (ref.name, ref.tag, ref.digest) == parts and ref.text == text


@pytest.mark.parametrize("text", ["", "UPPER", "a b", "debian@sha256:12", "debian@", ":tag", "a//b", f"debian@{DIGEST}x"])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(pin.BaseReferenceError, match="not an image reference"):
        pin.parse(text)


def test_repo_digest_of_a_pulled_image() -> None:
    data = {"Id": IMAGE_ID, "RepoDigests": [f"docker.io/library/debian@{DIGEST}"]}
    assert pin.repo_digest(pin.parse("debian:bookworm-slim"), data) == f"debian@{DIGEST}"
    assert pin.repo_digest(pin.parse("ubuntu"), data) is None
    assert pin.repo_digest(pin.parse("debian"), {"Id": IMAGE_ID, "RepoDigests": []}) is None


def test_with_base_sets_the_default_only() -> None:
    text = "ARG CPUBUILD_BASE=debian:bookworm-slim\nFROM ${CPUBUILD_BASE} AS base\n"
    assert dockerfile.with_base(text, IMAGE_ID) == f"ARG CPUBUILD_BASE={IMAGE_ID}\nFROM ${{CPUBUILD_BASE}} AS base\n"
