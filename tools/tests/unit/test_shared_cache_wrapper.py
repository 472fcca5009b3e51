"""The shared-cache compiler wrapper (toolchain/sharedcache.py), run by the real /bin/sh with
/bin/echo as the 'compiler': path tokens in prefix-map flags become the build's directories,
every other argument passes through untouched (spaces, quotes and all)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cpubuild.errors import UsageError
from cpubuild.toolchain.sharedcache import TOKENS, parse_url, wrapper_text


def test_the_wrapper_puts_the_directories_back(tmp_path: Path) -> None:
    wrapper = tmp_path / "cc"
    wrapper.write_text(wrapper_text("/bin/echo"))
    wrapper.chmod(0o755)
    env = {TOKENS["project"]: "/src/my proj", TOKENS["build"]: "/b", TOKENS["cache"]: "/c"}
    args = ["-ffile-prefix-map={project}=.", "-fdebug-prefix-map={build}/x=build", "-ffile-prefix-map={cache}/s=src",
            "-I{project}/inc", "it's", "a  b", "-DX={build}"]
    out = subprocess.run([str(wrapper), *args], capture_output=True, text=True, env=env, check=True).stdout
    assert out.rstrip("\n") == " ".join(["-ffile-prefix-map=/src/my proj=.", "-fdebug-prefix-map=/b/x=build",
                                         "-ffile-prefix-map=/c/s=src", "-I{project}/inc", "it's", "a  b", "-DX={build}"])
    assert str(Path("/bin/echo").resolve()) in wrapper.read_text()  # the real compiler (and its sha256) key the cache


@pytest.mark.parametrize("url, expected", [("s3://bucket-1/ci/x/", ("bucket-1", "ci/x")), ("s3://my.bucket", ("my.bucket", ""))])
def test_parse_url(url: str, expected: tuple[str, str]) -> None:
    assert parse_url(url) == expected


@pytest.mark.parametrize("url", ["gs://b/x", "s3://B/x", "s3://a..b/x", "s3://bucket/a//b", "s3://bucket/../x"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(UsageError, match="--cache"):
        parse_url(url)
