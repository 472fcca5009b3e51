"""Checks an index tree the way a client sees it: both page forms parse and
follow PEP 503 / 691 / 700, and every listed file exists with the listed
size and sha256, its .metadata file with the listed hash (PEP 658 / 714).
Used after a publish in tests and benchmarks, and handy after an incident.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from packaging.utils import canonicalize_name

from .client import _Links
from .names import IndexInputError, parse_wheel_name
from .pages import API_VERSION, PageStateError, parse_list_json, parse_project_json
from .storage import TEMP_PREFIX, IndexBoundaryError, LocalStorage, Storage
from .wheelfile import metadata_fields, read_wheel_bytes, sha256_hex

UPLOAD_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(kw_only=True)
class TreeReport:
    tree: str
    files: dict[str, str] = field(default_factory=dict)  # filename -> sha256, from the JSON pages
    html_files: dict[str, str] = field(default_factory=dict)  # filename -> sha256, from the HTML pages
    problems: list[str] = field(default_factory=list)
    checked_wheels: set[str] = field(default_factory=set)  # keys whose whole archive was verified


def pep691_project_problems(doc: Any) -> list[str]:
    """Structure checks of a PEP 691 (v1.1, PEP 700) project page."""
    problems = []
    if not isinstance(doc, dict):
        return ["page is not a JSON object"]
    meta = doc.get("meta")
    if not isinstance(meta, dict) or meta.get("api-version") != API_VERSION:
        problems.append(f"meta.api-version must be {API_VERSION!r}")
    if not isinstance(doc.get("name"), str) or canonicalize_name(doc["name"]) != doc["name"]:
        problems.append("name must be the normalised project name")
    if not isinstance(doc.get("versions"), list) or not all(isinstance(v, str) for v in doc["versions"]):
        problems.append("versions must be a list of strings (PEP 700)")
    files = doc.get("files")
    if not isinstance(files, list):
        return [*problems, "files must be a list"]
    for f in files:
        where = f"file {f.get('filename') if isinstance(f, dict) else f!r}"
        if not isinstance(f, dict):
            problems.append(f"{where}: not an object")
            continue
        for key, kind in (("filename", str), ("url", str), ("hashes", dict), ("size", int), ("upload-time", str)):
            if not isinstance(f.get(key), kind):
                problems.append(f"{where}: {key} must be {kind.__name__}")
        if isinstance(f.get("hashes"), dict) and not all(isinstance(v, str) for v in f["hashes"].values()):
            problems.append(f"{where}: hash values must be strings")
        for key in ("core-metadata", "dist-info-metadata"):
            if key in f and not isinstance(f[key], (bool, dict)):
                problems.append(f"{where}: {key} must be a boolean or a hash object")
        if "requires-python" in f and not isinstance(f["requires-python"], str):
            problems.append(f"{where}: requires-python must be a string")
        if "yanked" in f and not isinstance(f["yanked"], (bool, str)):
            problems.append(f"{where}: yanked must be a boolean or a string")
        if isinstance(f.get("upload-time"), str) and not UPLOAD_TIME.match(f["upload-time"]):
            problems.append(f"{where}: upload-time {f['upload-time']!r} is not ISO 8601 UTC with a Z")
    return problems


def pep691_list_problems(doc: Any) -> list[str]:
    if not isinstance(doc, dict) or not isinstance(doc.get("meta"), dict) or doc["meta"].get("api-version") != API_VERSION:
        return [f"project list: meta.api-version must be {API_VERSION!r}"]
    projects = doc.get("projects")
    if not isinstance(projects, list) or not all(isinstance(p, dict) and isinstance(p.get("name"), str) for p in projects):
        return ["project list: projects must be a list of {name: str}"]
    return []


def _file_key(page_dir: str, url: str) -> str | None:
    """The storage key a page's relative link points at (None: outside the root)."""
    if "://" in url or url.startswith("/"):
        return None
    path = posixpath.normpath(posixpath.join(page_dir, unquote(url.split("#", 1)[0])))
    return None if path.startswith("..") else path


def _check_file(storage: Storage, page_dir: str, filename: str, url: str, sha: str, size: int | None, meta_sha: str | None, report: TreeReport) -> None:
    key = _file_key(page_dir, url)
    if key is None or posixpath.basename(key) != filename:
        report.problems.append(f"{page_dir}: link {url!r} does not point at {filename} inside the index")
        return
    blob = storage.read(key)
    if blob is None:
        report.problems.append(f"{page_dir}: {filename} is listed but {key} does not exist")
        return
    if sha256_hex(blob.data) != sha:
        report.problems.append(f"{page_dir}: {key} has sha256 {sha256_hex(blob.data)}, the page says {sha}")
    if size is not None and len(blob.data) != size:
        report.problems.append(f"{page_dir}: {key} has {len(blob.data)} bytes, the page says {size}")
    if filename.endswith(".whl") and key not in report.checked_wheels:
        report.checked_wheels.add(key)
        try:
            read_wheel_bytes(filename, blob.data)
        except IndexInputError as exc:
            report.problems.append(f"{page_dir}: {key} does not verify: {exc.message}")
    if meta_sha is not None:
        meta = storage.read(key + ".metadata")
        if meta is None:
            report.problems.append(f"{page_dir}: {key}.metadata is advertised but missing")
        elif sha256_hex(meta.data) != meta_sha:
            report.problems.append(f"{page_dir}: {key}.metadata has sha256 {sha256_hex(meta.data)}, the page says {meta_sha}")
        else:
            fields = metadata_fields(meta.data)
            wheel = parse_wheel_name(filename)
            if canonicalize_name(str(fields.get("Name", ""))) != wheel.project or str(fields.get("Version", "")) != str(wheel.version):
                report.problems.append(f"{page_dir}: {key}.metadata describes {fields.get('Name')} {fields.get('Version')}")


def verify_tree(storage: Storage, tree: str) -> TreeReport:
    """Checks `<tree>/` (e.g. '<commit>/cpu' or 'nightly/cpu') and every page below it."""
    import json

    report = TreeReport(tree=tree)
    listing = storage.read(f"{tree}/index.json")
    if listing is None:
        report.problems.append(f"{tree}/index.json is missing")
        return report
    try:
        doc = json.loads(listing.data)
        report.problems += pep691_list_problems(doc)
        projects = parse_list_json(listing.data).projects
    except (ValueError, PageStateError) as exc:
        report.problems.append(f"{tree}/index.json: {exc}")
        return report
    html_list = storage.read(f"{tree}/index.html")
    if html_list is None:
        report.problems.append(f"{tree}/index.html is missing")
    for name in projects:
        page_dir = f"{tree}/{canonicalize_name(name)}"
        blob = storage.read(f"{page_dir}/index.json")
        if blob is None:
            report.problems.append(f"{tree}: project {name} is listed but {page_dir}/index.json is missing")
            continue
        try:
            report.problems += [f"{page_dir}: {p}" for p in pep691_project_problems(json.loads(blob.data))]
            page = parse_project_json(blob.data)
        except (ValueError, PageStateError) as exc:
            report.problems.append(f"{page_dir}/index.json: {exc}")
            continue
        for f in page.files:
            report.files[f.filename] = f.sha256
            _check_file(storage, page_dir, f.filename, f.url, f.sha256, f.size, f.metadata_sha256, report)
        html_blob = storage.read(f"{page_dir}/index.html")
        if html_blob is None:
            report.problems.append(f"{page_dir}/index.html is missing")
            continue
        parser = _Links()
        parser.feed(html_blob.data.decode("utf-8"))
        for attrs, text in parser.links:
            link = attrs.get("href") or ""
            base, _, fragment = link.partition("#")
            sha = fragment.partition("=")[2]
            core = (attrs.get("data-core-metadata") or "").partition("=")[2] or None
            if not SHA256.match(sha):
                report.problems.append(f"{page_dir}/index.html: link {link!r} has no #sha256= fragment")
                continue
            if attrs.get("data-dist-info-metadata") != attrs.get("data-core-metadata"):
                report.problems.append(f"{page_dir}/index.html: {text}: data-dist-info-metadata differs from data-core-metadata")
            report.html_files[text] = sha
            _check_file(storage, page_dir, text, base, sha, None, core, report)
    return report


def root_leftovers(storage: LocalStorage, *, repair: bool = False) -> list[str]:
    """What does not belong below a local index root: temp files of an
    interrupted publish (removed with `repair` once their writer is gone) and
    symbolic links (reported only: publish and serve refuse to cross them)."""
    if repair:
        with contextlib.suppress(IndexBoundaryError):  # links are reported below, never removed
            storage.sweep("")
    problems: list[str] = []
    for top, dirs, files in os.walk(storage.root, followlinks=False):
        for name in sorted(dirs + files):
            path = os.path.join(top, name)
            key = os.path.relpath(path, storage.root)
            if os.path.islink(path):
                problems.append(f"{key}: a symbolic link below the index root")
            elif name.startswith(TEMP_PREFIX):
                problems.append(f"{key}: a temp file left by an interrupted publish")
    return problems
