"""Publishing wheels into an index keyed by commit.

Layout below the root (every wheel stored once):
    <commit>/<wheel>                 the file, and <wheel>.metadata (PEP 658)
    <commit>/<variant>/              project list (index.html + index.json)
    <commit>/<variant>/<project>/    project page
    nightly/<variant>/...            the newest commit's pages (--channel nightly)
    <version>/<variant>/...          a release's pages (--channel release)

Order of writes, so that a publish killed at any point leaves a valid index:
all files first (create-only, then read back and hash-checked), then each
project page, then its project list. A page only ever names files that are
already stored with the hash it lists.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar
from urllib.parse import unquote

from ..errors import PublishError
from ..variantsjson import VariantsJsonConflict, dump, index_file_name, merge_variant_documents
from .names import NIGHTLY, IndexInputError, check_variant, href, project_dir
from .pages import (
    HTML_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    FileEntry,
    NameClash,
    PageStateError,
    ProjectList,
    ProjectPage,
    html_serial,
    list_html,
    list_json,
    merge_files,
    parse_list_json,
    parse_project_json,
    project_html,
    project_json,
    with_project,
)
from .storage import Storage
from .wheelfile import WheelInfo, sha256_hex

Channel = Literal["nightly", "release"]
WHEEL_CONTENT_TYPE = "application/octet-stream"
VARIANTS_CONTENT_TYPE = "application/json"
VARIANTS_DIR = "variants"  # <commit>/variants/<hash>/{name}-{version}-variants.json, one per content
METADATA_CONTENT_TYPE = "text/plain; charset=utf-8"
MAX_ATTEMPTS = 60
State = TypeVar("State", ProjectPage, ProjectList)


class NameClashError(PublishError):
    """A wheel name already published with different bytes."""

    exit_code = 2


class VariantsMismatchError(PublishError):
    """A variant wheel whose variant.json contradicts the index's variants.json."""

    exit_code = 2


@dataclass(frozen=True, kw_only=True)
class PageChange:
    tree: str
    page: str  # key of the page directory
    changed: bool
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class PublishReport:
    commit: str
    variant: str
    stored: tuple[str, ...] = ()  # newly stored wheels
    present: tuple[str, ...] = ()  # identical wheels already stored
    pages: tuple[PageChange, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return bool(self.stored) or any(p.changed for p in self.pages)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _entry(wheel: WheelInfo, commit: str, upload_time: str) -> FileEntry:
    return FileEntry(
        filename=wheel.filename,
        # page dirs are <tree>/<variant>/<project>/: three levels below the root
        url=href(f"../../../{commit}/{wheel.filename}"),
        sha256=wheel.sha256,
        size=wheel.size,
        upload_time=upload_time,
        requires_python=wheel.requires_python,
        metadata_sha256=wheel.metadata_sha256,
    )


def _trees(commit: str, channel: Channel | None, wheels: Sequence[WheelInfo]) -> list[str]:
    trees = [commit]
    if channel == NIGHTLY:
        trees.append(NIGHTLY)
    elif channel == "release":
        versions = {w.name.public_version for w in wheels}
        if len(versions) != 1:
            raise IndexInputError(f"a release publishes one version, got {', '.join(sorted(map(str, versions)))}")
        version = versions.pop()
        if version.is_devrelease:
            raise IndexInputError(f"--channel release needs a release version, got {version} (tag the commit first)")
        trees.append(str(version))
    return trees


def _variants_key(entry: FileEntry) -> str:
    """The storage key of a page's variants.json entry (its URL is relative to the page)."""
    return unquote(entry.url).removeprefix("../../../")


def _with_variants(storage: Storage, tree: str, commit: str, page: ProjectPage, offered: dict[str, dict[str, Any]],
                   upload_time: str, *, store: bool) -> ProjectPage:
    """The page with each offered {name}-{version}-variants.json merged into the one it lists
    (PEP 825: the file grows as labels are published). Every content is stored once under
    <commit>/variants/<hash>/, so a page never names a file that changes; a label the page's
    file describes otherwise refuses the publish."""
    files = {f.filename: f for f in page.files}
    for name, doc in offered.items():
        listed = files.get(name)
        old = None
        if listed is not None:
            blob = storage.read(_variants_key(listed))
            if blob is None:
                raise PublishError(f"{tree}/ lists {name} at {listed.url}, which is missing; refusing to guess its labels")
            old = json.loads(blob.data)
        try:
            merged = merge_variant_documents(old, doc, where=f"{tree}/ {name}")
        except VariantsJsonConflict as exc:
            raise VariantsMismatchError(f"{exc.message}; publish it under a new version") from None
        if merged == old:
            continue
        data = dump(merged)
        digest = sha256_hex(data)
        key = f"{commit}/{VARIANTS_DIR}/{digest[:16]}/{name}"
        if store:
            _store(storage, key, data, VARIANTS_CONTENT_TYPE)
        files[name] = FileEntry(filename=name, url=href(f"../../../{key}"), sha256=digest, size=len(data),
                                upload_time=upload_time, requires_python=None, metadata_sha256=None)
    return replace(page, files=tuple(sorted(files.values(), key=lambda f: f.filename)))


def _mutation(
    tree: str, commit: str, entries: list[FileEntry], display: str, notes: list[str] | None = None,
    variants: Callable[[ProjectPage], ProjectPage] | None = None,
) -> Callable[[ProjectPage | None], ProjectPage]:
    """How one publish changes one project page of `tree` (`variants`: then its variants.json)."""
    grown = variants or (lambda page: page)

    def mutate(page: ProjectPage | None) -> ProjectPage:
        if page is None:
            page = ProjectPage(name=display, files=(), commit=commit)
        if tree == NIGHTLY and page.commit != commit:
            # nightly points at one commit: the newest version wins, a tie goes to the later publish
            current = page.newest_version()
            offered = ProjectPage(name=display, files=tuple(entries)).newest_version()
            if current is not None and offered is not None and offered < current:
                if notes is not None:
                    notes.append(f"nightly stays at commit {page.commit} (version {current} is newer than {offered})")
                return page
            return grown(replace(page, files=tuple(sorted(entries, key=lambda e: e.filename)), commit=commit))
        if page.commit not in (None, commit):
            raise PublishError(
                f"{tree}/ was published from commit {page.commit}; refusing files of commit {commit} (releases are immutable)"
            )
        try:
            return grown(merge_files(page, entries))
        except NameClash as clash:
            raise NameClashError(
                f"{clash.filename} is already in {tree}/ with different content "
                f"(listed sha256 {clash.listed}, this file {clash.offered}); publish it under a new version"
            ) from None

    return mutate


def _parse_state(kind: type[State], data: bytes, key: str) -> State:
    try:
        if kind is ProjectPage:
            return parse_project_json(data)  # type: ignore[return-value]
        return parse_list_json(data)  # type: ignore[return-value]
    except PageStateError as exc:
        raise PublishError(f"{key}: {exc}; refusing to overwrite it") from None


def _backoff(attempt: int) -> None:
    time.sleep(min(0.5, 0.005 * 2 ** min(attempt, 7)) * random.uniform(0.5, 1.5))


def update_page(
    storage: Storage,
    directory: str,
    kind: type[State],
    mutate: Callable[[State | None], State],
) -> bool:
    """Applies `mutate` to the page state in `directory` (compare-and-swap,
    retried), then brings index.html up to at least that state. Returns
    whether the state changed."""
    json_key, html_key = f"{directory}/index.json", f"{directory}/index.html"
    to_json = project_json if kind is ProjectPage else list_json
    to_html = project_html if kind is ProjectPage else list_html
    # Nothing to change (re-publishing identical files): no lock, no write, so a
    # reader of the index who cannot write it can still run the same publish.
    seen, seen_html = storage.read(json_key), storage.read(html_key)
    if seen is not None and seen_html is not None:
        state = _parse_state(kind, seen.data, json_key)
        if mutate(state) == state and html_serial(seen_html.data) >= state.serial:
            return False
    with storage.page_lock(directory):
        for attempt in range(MAX_ATTEMPTS):
            blob = storage.read(json_key)
            old = _parse_state(kind, blob.data, json_key) if blob else None
            new = mutate(old)
            if new == old:
                changed, target = False, new
                break
            new = replace(new, serial=(old.serial if old else 0) + 1)
            if storage.replace(json_key, to_json(new), JSON_CONTENT_TYPE, blob.token if blob else None):  # type: ignore[arg-type]
                changed, target = True, new
                break
            _backoff(attempt)
        else:
            raise PublishError(f"{storage.url}/{json_key}: too many concurrent writers, gave up after {MAX_ATTEMPTS} tries")
        # The HTML twin only moves forward: a slower writer never puts back an older page.
        for attempt in range(MAX_ATTEMPTS):
            current = storage.read(html_key)
            if current is not None and html_serial(current.data) >= target.serial:
                break
            if storage.replace(html_key, to_html(target), HTML_CONTENT_TYPE, current.token if current else None):  # type: ignore[arg-type]
                break
            _backoff(attempt)
        else:
            raise PublishError(f"{storage.url}/{html_key}: too many concurrent writers, gave up after {MAX_ATTEMPTS} tries")
    return changed


def _store(storage: Storage, key: str, data: bytes, content_type: str) -> bool:
    """Stores a file once; True if this call stored it. An existing file
    with other content raises NameClashError."""
    digest = sha256_hex(data)
    for attempt in range(MAX_ATTEMPTS):
        created = storage.create(key, data, content_type)
        stored = storage.read(key)
        if stored is None:  # a concurrent conditional write lost, or the store is slow: try again
            _backoff(attempt)
            continue
        stored_digest = sha256_hex(stored.data)
        if stored_digest == digest:
            return created
        if created:
            raise PublishError(f"{storage.url}/{key}: stored bytes do not match (sha256 {stored_digest} != {digest})")
        raise NameClashError(
            f"{key} is already published with different content (stored sha256 {stored_digest}, this file {digest}); "
            "publish it under a new version"
        )
    raise PublishError(f"{storage.url}/{key}: could not store the file")


def _precheck(storage: Storage, commit: str, wheels: Sequence[WheelInfo], trees: list[str], variant: str,
              times: dict[str, str]) -> None:
    """Finds clashes before anything is written (the index stays untouched)."""
    for wheel in wheels:
        for key, data in ((f"{commit}/{wheel.filename}", wheel.data), (f"{commit}/{wheel.filename}.metadata", wheel.metadata)):
            stored = storage.read(key)
            if stored is not None and sha256_hex(stored.data) != sha256_hex(data):
                raise NameClashError(
                    f"{key} is already published with different content (stored sha256 {sha256_hex(stored.data)}, "
                    f"this file {sha256_hex(data)}); publish it under a new version"
                )
    for tree in trees:
        for project, group in _by_project(wheels).items():
            key = f"{tree}/{variant}/{project}/index.json"
            blob = storage.read(key)
            offered = offered_variants(group)
            page = _parse_state(ProjectPage, blob.data, key) if blob is not None else None
            if blob is not None or offered:
                _mutation(tree, commit, [_entry(w, commit, times[w.filename]) for w in group], group[0].display_name,
                          variants=lambda p, tree=tree, offered=offered: _with_variants(  # type: ignore[misc]
                              storage, tree, commit, p, offered, "", store=False))(page)


def _upload_times(storage: Storage, commit: str, variant: str, wheels: Sequence[WheelInfo], now: str) -> dict[str, str]:
    """Each wheel's upload time: when its commit page already lists the same file, the
    time recorded there (one file, one upload time, on every page naming it), else now."""
    times = {w.filename: now for w in wheels}
    for project, group in _by_project(wheels).items():
        key = f"{commit}/{variant}/{project}/index.json"
        blob = storage.read(key)
        if blob is None:
            continue
        page = _parse_state(ProjectPage, blob.data, key)
        for wheel in group:
            listed = page.file(wheel.filename)
            if listed is not None and listed.sha256 == wheel.sha256:
                times[wheel.filename] = listed.upload_time
    return times


def offered_variants(wheels: Sequence[WheelInfo]) -> dict[str, dict[str, Any]]:
    """{name}-{version}-variants.json -> the labels the given variant wheels describe (merged)."""
    offered: dict[str, dict[str, Any]] = {}
    for wheel in wheels:
        if wheel.variant is not None:
            name = index_file_name(wheel.filename)
            try:
                offered[name] = merge_variant_documents(offered.get(name), wheel.variant, where=f"the wheels given ({wheel.filename})")
            except VariantsJsonConflict as exc:
                raise IndexInputError(exc.message) from None
    return offered


def _by_project(wheels: Sequence[WheelInfo]) -> dict[str, list[WheelInfo]]:
    groups: dict[str, list[WheelInfo]] = {}
    for w in wheels:
        groups.setdefault(project_dir(w.name.project), []).append(w)
    return groups


def publish(
    storage: Storage,
    wheels: Sequence[WheelInfo],
    *,
    commit: str,
    variant: str = "cpu",
    channel: Channel | None = None,
    upload_time: str | None = None,
) -> PublishReport:
    """Publishes already-validated wheels (see wheelfile.read_wheel)."""
    check_variant(variant)
    if not wheels:
        raise IndexInputError("no wheels to publish")
    names = [w.filename for w in wheels]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise IndexInputError(f"the same wheel name is given twice: {', '.join(duplicates)}")
    now = upload_time or utc_now()
    times = _upload_times(storage, commit, variant, wheels, now)
    trees = _trees(commit, channel, wheels)
    _precheck(storage, commit, wheels, trees, variant, times)
    for tree in dict.fromkeys([commit, *(f"{t}/{variant}" for t in trees)]):
        storage.sweep(tree)  # leftovers of an interrupted publish (their writers are gone)

    stored: list[str] = []
    present: list[str] = []
    for wheel in wheels:  # 1. files, each verified by hash after writing
        new = _store(storage, f"{commit}/{wheel.filename}", wheel.data, WHEEL_CONTENT_TYPE)
        _store(storage, f"{commit}/{wheel.filename}.metadata", wheel.metadata, METADATA_CONTENT_TYPE)
        (stored if new else present).append(wheel.filename)

    changes = []
    for tree in trees:  # 2. pages: project pages, then the project lists naming them
        for project, group in _by_project(wheels).items():
            directory = f"{tree}/{variant}/{project}"
            entries = [_entry(w, commit, times[w.filename]) for w in group]
            notes: list[str] = []
            offered = offered_variants(group)
            mutate = _mutation(tree, commit, entries, group[0].display_name, notes,
                               variants=lambda p, tree=tree, offered=offered: _with_variants(  # type: ignore[misc]
                                   storage, tree, commit, p, offered, now, store=True))
            changed = update_page(storage, directory, ProjectPage, mutate)
            changes.append(PageChange(tree=tree, page=directory, changed=changed, note=notes[-1] if notes else ""))
            display = group[0].display_name
            listed = update_page(
                storage,
                f"{tree}/{variant}",
                ProjectList,
                lambda page, display=display: with_project(page or ProjectList(projects=()), display),  # type: ignore[misc]
            )
            changes.append(PageChange(tree=tree, page=f"{tree}/{variant}", changed=listed))
    return PublishReport(commit=commit, variant=variant, stored=tuple(stored), present=tuple(present), pages=tuple(changes))
