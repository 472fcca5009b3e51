"""Index pages: PEP 503 HTML and its PEP 691 JSON twin, rendered from a small
per-page state (the JSON page itself). Pure functions only.

The JSON page doubles as the page's state file: adding a wheel reads one
small document, changes it and renders both forms, so the cost never depends
on how many other pages or files the index holds.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .names import href, project_dir

API_VERSION = "1.1"  # PEP 700: size, upload-time, versions
JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_CONTENT_TYPE = "text/html; charset=utf-8"
SERIAL_COMMENT = re.compile(rb"<!-- cpubuild-serial: (\d+) -->")


class PageStateError(ValueError):
    """A page's JSON state that cannot be read (not written by cpubuild?)."""


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    filename: str
    url: str  # relative to the page
    sha256: str
    size: int
    upload_time: str  # ISO 8601, UTC, with a Z
    requires_python: str | None
    metadata_sha256: str | None

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "filename": self.filename,
            "url": self.url,
            "hashes": {"sha256": self.sha256},
        }
        if self.requires_python:
            entry["requires-python"] = self.requires_python
        if self.metadata_sha256:
            entry["core-metadata"] = {"sha256": self.metadata_sha256}
            entry["dist-info-metadata"] = {"sha256": self.metadata_sha256}  # PEP 658 name, for older clients
        entry["size"] = self.size
        entry["upload-time"] = self.upload_time
        entry["yanked"] = False
        return entry

    @property
    def version(self) -> Version | None:
        parts = self.filename.split("-")
        try:
            return Version(parts[1]) if len(parts) >= 5 else None
        except InvalidVersion:
            return None


@dataclass(frozen=True, kw_only=True)
class ProjectPage:
    name: str  # display name
    files: tuple[FileEntry, ...]
    serial: int = 0
    commit: str | None = None  # every file on a page comes from this commit

    def file(self, filename: str) -> FileEntry | None:
        return next((f for f in self.files if f.filename == filename), None)

    def newest_version(self) -> Version | None:
        versions = [Version(v.public) for v in (f.version for f in self.files) if v is not None]
        return max(versions, default=None)


@dataclass(frozen=True, kw_only=True)
class ProjectList:
    projects: tuple[str, ...]  # display names
    serial: int = 0


# ------------------------------------------------------------------ state <-> JSON


def project_json(page: ProjectPage) -> bytes:
    versions = sorted({str(v) for v in (f.version for f in page.files) if v is not None}, key=Version)
    meta: dict[str, Any] = {"api-version": API_VERSION, "_last-serial": page.serial}
    if page.commit:
        meta["_cpubuild-commit"] = page.commit
    doc = {"meta": meta, "name": canonicalize_name(page.name), "versions": versions, "files": [f.to_json() for f in page.files]}
    if page.name != doc["name"]:
        meta["_cpubuild-display-name"] = page.name
    return (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()


def parse_project_json(data: bytes) -> ProjectPage:
    try:
        doc = json.loads(data)
        meta = doc["meta"]
        files = tuple(
            FileEntry(
                filename=str(f["filename"]),
                url=str(f["url"]),
                sha256=str(f["hashes"]["sha256"]),
                size=int(f["size"]),
                upload_time=str(f["upload-time"]),
                requires_python=f.get("requires-python"),
                metadata_sha256=(f.get("core-metadata") or {}).get("sha256"),
            )
            for f in doc["files"]
        )
        return ProjectPage(
            name=str(meta.get("_cpubuild-display-name", doc["name"])),
            files=files,
            serial=int(meta.get("_last-serial", 0)),
            commit=meta.get("_cpubuild-commit"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PageStateError(f"not a cpubuild project page: {exc}") from None


def list_json(page: ProjectList) -> bytes:
    doc = {
        "meta": {"api-version": API_VERSION, "_last-serial": page.serial},
        "projects": [{"name": n} for n in page.projects],
    }
    return (json.dumps(doc, indent=1) + "\n").encode()


def parse_list_json(data: bytes) -> ProjectList:
    try:
        doc = json.loads(data)
        return ProjectList(
            projects=tuple(str(p["name"]) for p in doc["projects"]),
            serial=int(doc["meta"].get("_last-serial", 0)),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PageStateError(f"not a cpubuild project list: {exc}") from None


# ------------------------------------------------------------------ HTML


def _html_page(title: str, links: Iterable[str], serial: int) -> bytes:
    body = "\n".join(f"    {link}<br/>" for link in links)
    text = (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        f'    <meta name="pypi:repository-version" content="{API_VERSION}">\n'
        f"    <title>{html.escape(title)}</title>\n"
        f"    <!-- cpubuild-serial: {serial} -->\n"
        "  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n"
        f"{body}\n"
        "  </body>\n</html>\n"
    )
    return text.encode()


def project_html(page: ProjectPage) -> bytes:
    links = []
    for f in page.files:
        attrs = [f'href="{html.escape(f.url)}#sha256={f.sha256}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
        if f.metadata_sha256:
            attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
            attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
        links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a>")
    return _html_page(f"Links for {page.name}", links, page.serial)


def list_html(page: ProjectList) -> bytes:
    links = [f'<a href="{html.escape(href(project_dir(n)))}/">{html.escape(n)}</a>' for n in page.projects]
    return _html_page("Simple index", links, page.serial)


def html_serial(data: bytes) -> int:
    """The state serial an HTML page was rendered from (-1: unknown)."""
    match = SERIAL_COMMENT.search(data)
    return int(match.group(1)) if match else -1


# ------------------------------------------------------------------ changes


class NameClash(Exception):
    """A file name already listed with other content."""

    def __init__(self, filename: str, listed: str, offered: str) -> None:
        super().__init__(filename)
        self.filename, self.listed, self.offered = filename, listed, offered


def merge_files(page: ProjectPage, new: Iterable[FileEntry]) -> ProjectPage:
    """Adds files; an identical file already listed is kept as it is
    (its upload time included). Raises NameClash for different content."""
    files = {f.filename: f for f in page.files}
    changed = False
    for entry in new:
        old = files.get(entry.filename)
        if old is None:
            files[entry.filename] = entry
            changed = True
        elif old.sha256 != entry.sha256:
            raise NameClash(entry.filename, old.sha256, entry.sha256)
    if not changed:
        return page
    return replace(page, files=tuple(sorted(files.values(), key=lambda f: f.filename)))


def with_project(page: ProjectList, name: str) -> ProjectList:
    if any(canonicalize_name(p) == canonicalize_name(name) for p in page.projects):
        return page
    return replace(page, projects=tuple(sorted((*page.projects, name), key=canonicalize_name)))
