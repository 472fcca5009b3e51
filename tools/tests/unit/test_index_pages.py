"""Pure parts of the index: names, page rendering, merging, negotiation."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
from cpubuild.index.names import IndexInputError, check_variant, href, parse_wheel_name
from cpubuild.index.pages import (
    FileEntry,
    NameClash,
    ProjectList,
    ProjectPage,
    html_serial,
    list_html,
    merge_files,
    parse_project_json,
    project_html,
    project_json,
    with_project,
)
from cpubuild.index.server import _parse_range, negotiate
from cpubuild.index.verify import pep691_project_problems

SHA_A = "a" * 64
SHA_B = "b" * 64


def entry(filename: str, sha: str = SHA_A, requires: str | None = ">=3.10") -> FileEntry:
    return FileEntry(
        filename=filename,
        url=href(f"../../../{'c' * 40}/{filename}"),
        sha256=sha,
        size=123,
        upload_time="2026-01-02T03:04:05.000006Z",
        requires_python=requires,
        metadata_sha256=SHA_B,
    )


class Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


@pytest.mark.parametrize(
    "name",
    ["../../etc/passwd.whl", "a/b-1.0-py3-none-any.whl", "cpukern-1.0.tar.gz", "cpukern-1.0-py3-none-any.zip",
     "cpukern.whl", "cpu kern-1.0-py3-none-any.whl", "cpukern-1.0-py3-none-any%2F.whl", "..", ".hidden-1.0-py3-none-any.whl"],
)
def test_bad_wheel_names_are_refused(name: str) -> None:
    with pytest.raises(IndexInputError):
        parse_wheel_name(name)


def test_wheel_name_parsed_with_packaging() -> None:
    wheel = parse_wheel_name("cpukern-0.1.0.dev12+g1a2b3c4.cpu-py3-none-manylinux_2_28_x86_64.whl")
    assert wheel.project == "cpukern"
    assert str(wheel.version) == "0.1.0.dev12+g1a2b3c4.cpu"
    assert str(wheel.public_version) == "0.1.0.dev12"


@pytest.mark.parametrize("variant", ["", "..", ".", "nightly", "CPU", "a/b", "-x"])
def test_bad_variants_are_refused(variant: str) -> None:
    with pytest.raises(IndexInputError):
        check_variant(variant)


def test_project_html_follows_pep503() -> None:
    page = ProjectPage(name="CpuKern", files=(entry("cpukern-0.1.0+cpu-py3-none-any.whl", requires='>=3.10,<"4"'),), serial=7)
    text = project_html(page).decode()
    anchors = Anchors()
    anchors.feed(text)
    (a,) = anchors.anchors
    # + escaped in the link, link relative, hash fragment, metadata hashes
    assert a["href"] == f"../../../{'c' * 40}/cpukern-0.1.0%2Bcpu-py3-none-any.whl#sha256={SHA_A}"
    assert a["data-requires-python"] == '>=3.10,<"4"'
    assert 'data-requires-python="&gt;=3.10,&lt;&quot;4&quot;"' in text  # escaped in the source
    assert a["data-core-metadata"] == a["data-dist-info-metadata"] == f"sha256={SHA_B}"
    assert ">cpukern-0.1.0+cpu-py3-none-any.whl</a>" in text  # link text is the file name
    assert '<meta name="pypi:repository-version" content="1.1">' in text
    assert html_serial(text.encode()) == 7


def test_project_list_links_normalised_names_with_trailing_slash() -> None:
    text = list_html(ProjectList(projects=("Foo.Bar_baz",))).decode()
    anchors = Anchors()
    anchors.feed(text)
    assert [a["href"] for a in anchors.anchors] == ["foo-bar-baz/"]


def test_json_twin_is_pep691_and_round_trips() -> None:
    page = ProjectPage(
        name="cpukern", files=(entry("cpukern-0.1.0-py3-none-any.whl"), entry("cpukern-0.2.0-py3-none-any.whl")), serial=3, commit="c" * 40
    )
    doc = json.loads(project_json(page))
    assert pep691_project_problems(doc) == []
    assert doc["versions"] == ["0.1.0", "0.2.0"]
    assert doc["files"][0]["core-metadata"] == {"sha256": SHA_B}
    assert doc["files"][0]["size"] == 123
    assert parse_project_json(project_json(page)) == page


def test_merge_is_idempotent_and_refuses_clashes() -> None:
    page = ProjectPage(name="cpukern", files=(entry("cpukern-0.1.0-py3-none-any.whl"),))
    same = merge_files(page, [entry("cpukern-0.1.0-py3-none-any.whl")])
    assert same is page
    with pytest.raises(NameClash):
        merge_files(page, [entry("cpukern-0.1.0-py3-none-any.whl", sha=SHA_B)])
    grown = merge_files(page, [entry("cpukern-0.0.9-py3-none-any.whl")])
    assert [f.filename for f in grown.files] == ["cpukern-0.0.9-py3-none-any.whl", "cpukern-0.1.0-py3-none-any.whl"]
    listing = with_project(ProjectList(projects=("cpukern",)), "CPUKern")
    assert listing.projects == ("cpukern",)


UV_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
BOTH = {"index.json", "index.html"}


@pytest.mark.parametrize(
    ("accept", "available", "expected"),
    [
        (None, BOTH, "text/html"),
        ("*/*", BOTH, "text/html"),
        (UV_ACCEPT, BOTH, "application/vnd.pypi.simple.v1+json"),
        ("text/html", BOTH, "text/html"),
        ("application/vnd.pypi.simple.v1+html", BOTH, "application/vnd.pypi.simple.v1+html"),
        ("application/vnd.pypi.simple.v1+json;q=0.1, text/html", BOTH, "text/html"),
        (UV_ACCEPT, {"index.html"}, "application/vnd.pypi.simple.v1+html"),
        ("application/vnd.pypi.simple.v1+json", {"index.html"}, None),
        # PEP 691's `latest` meta-version is the newest the server speaks: v1
        ("application/vnd.pypi.simple.latest+json", BOTH, "application/vnd.pypi.simple.v1+json"),
        ("application/vnd.pypi.simple.latest+html", BOTH, "application/vnd.pypi.simple.v1+html"),
        ("application/vnd.pypi.simple.latest+json, application/vnd.pypi.simple.latest+html;q=0.2", {"index.html"},
         "application/vnd.pypi.simple.v1+html"),
        ("application/vnd.pypi.simple.v2+json", BOTH, None),
    ],
)
def test_content_negotiation(accept: str | None, available: set[str], expected: str | None) -> None:
    assert negotiate(accept, available) == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [("bytes=0-3", (0, 3)), ("bytes=5-", (5, 9)), ("bytes=-4", (6, 9)), ("bytes=8-100", (8, 9)),
     ("bytes=10-", None), ("bytes=4-2", None), ("bytes=-0", None), ("items=0-1", None), ("bytes=1-2,4-5", (1, 2))],
)
def test_range_parsing(header: str, expected: tuple[int, int] | None) -> None:
    assert _parse_range(header, 10) == expected
