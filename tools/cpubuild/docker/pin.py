"""Base images pinned by digest.

A base is given as ``NAME[:TAG][@sha256:<64 hex>]`` or as a local image ID
``sha256:<64 hex>``; anything else is a one-line usage error. Local builds
(the classic builder) pin the base to its image ID: the one form the daemon
resolves for images that never came from a registry. Bake files (BuildKit,
registries) can only use a registry's repo digest (``NAME@sha256:...``).

What each base resolved to is recorded as data in ``<cache>/base-digests.json``
(the cache of the base trees, CPUBUILD_CACHE): `cpubuild base-image` writes the
image ID of what it built or reused, `cpubuild image` what it built on (and the
repo digest of a pulled base). A bake file pins a tagged base to the repo
digest recorded for it, when one is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..emulate.rootfs import cache_dir
from ..errors import UsageError

RECORD = "base-digests.json"
SCHEMA = 1
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>\w[\w.-]{{0,127}}))?(?:@(?P<digest>sha256:[0-9a-f]{{64}}))?")
IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
FORMS = "NAME[:TAG][@sha256:<64 lowercase hex digits>] or an image ID sha256:<64 lowercase hex digits>"


class BaseReferenceError(UsageError):
    """A base image reference that is not well formed."""


@dataclass(frozen=True, kw_only=True)
class BaseRef:
    name: str | None  # None: a bare image ID (then digest is that ID)
    tag: str | None
    digest: str | None  # sha256:<hex>: a repo digest after a name, or an image ID

    @property
    def text(self) -> str:
        if self.name is None:
            return str(self.digest)
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    @property
    def tagged(self) -> str:
        """The reference without its digest (NAME:TAG, `latest` when no tag is given)."""
        return f"{self.name}:{self.tag or 'latest'}"


def parse(text: str, *, where: str = "--base") -> BaseRef:
    """A base reference, or BaseReferenceError naming it (one line)."""
    if IMAGE_ID.fullmatch(text):
        return BaseRef(name=None, tag=None, digest=text)
    match = REFERENCE.fullmatch(text) if len(text) <= 512 else None
    if match is None:
        shown = text if len(text) <= 80 and text.isprintable() else repr(text[:80]) + "..."
        hint = ""
        if "@" in text and not re.search(r"@sha256:[0-9a-f]{64}$", text):
            hint = "; the digest must be sha256: and 64 lowercase hex digits"
        raise BaseReferenceError(f"{where} {shown}: not an image reference ({FORMS}){hint}")
    return BaseRef(name=match["name"], tag=match["tag"], digest=match["digest"])


# ------------------------------------------------------------------ resolving against the local daemon


def repo_digest(ref: BaseRef, image: Mapping[str, Any]) -> str | None:
    """NAME@sha256:... of a pulled image for ref's repository (None: never came from a registry)."""
    if ref.name is None:
        return None
    digests = [str(d) for d in image.get("RepoDigests") or []]
    for candidate in digests:
        repo, _, digest = candidate.partition("@")
        if repo == ref.name or repo.endswith("/" + ref.name):  # docker.io/library/debian for `debian`
            return f"{ref.name}@{digest}"
    return None


def local_image(engine: Any, ref: BaseRef) -> dict[str, Any] | None:
    """`docker image inspect` of the base; a NAME@<image ID> is found by its ID, and only if
    NAME is one of that image's tags' repositories."""
    data: dict[str, Any] | None = engine.image(ref.text)
    if data is not None or ref.name is None or ref.digest is None:
        return data
    by_id: dict[str, Any] | None = engine.image(ref.digest)
    if by_id is None or by_id.get("Id") != ref.digest:
        return None
    repos = {str(t).rpartition(":")[0] for t in by_id.get("RepoTags") or []}
    return by_id if ref.name in repos else None


# ------------------------------------------------------------------ the record


@dataclass(frozen=True, kw_only=True)
class Pin:
    image_id: str  # sha256:<hex>: what local builds use
    repo_digest: str | None  # NAME@sha256:<hex>: what registry builders (bake) can use


def record_path() -> Path:
    return cache_dir() / RECORD


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def read_record() -> dict[str, dict[str, dict[str, Any]]]:
    """{tagged reference: {platform: {"id", "repo_digest", "recorded"}}}; empty when none or unreadable."""
    try:
        data = json.loads(record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    bases = data.get("bases") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    return bases if isinstance(bases, dict) else {}


def record(ref: BaseRef, platform: str, pin: Pin) -> Path | None:
    """Notes what a tagged base resolved to; the file written, or None when it cannot be."""
    if ref.name is None:
        return None  # an image ID names nothing to look up later
    path = record_path()
    try:
        with _locked(path):
            bases = read_record()
            bases.setdefault(ref.tagged, {})[platform] = {"id": pin.image_id, "repo_digest": pin.repo_digest,
                                                          "recorded": int(time.time())}
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"schema": SCHEMA, "bases": bases}, out, indent=1, sort_keys=True)
                out.write("\n")
            os.replace(tmp, path)
    except OSError:
        return None
    return path


def recorded(ref: BaseRef, platform: str) -> Pin | None:
    entry = read_record().get(ref.tagged, {}).get(platform) if ref.name is not None else None
    if not isinstance(entry, dict) or not IMAGE_ID.fullmatch(str(entry.get("id"))):
        return None
    digest = entry.get("repo_digest")
    return Pin(image_id=str(entry["id"]), repo_digest=str(digest) if digest else None)


def pin_local(engine: Any, ref: BaseRef, platform: str) -> Pin | None:
    """The base's local image ID (and repo digest), recorded; None when it is not a local image."""
    data = local_image(engine, ref)
    if data is None or not IMAGE_ID.fullmatch(str(data.get("Id"))):
        return None
    pin = Pin(image_id=str(data["Id"]), repo_digest=ref.text if ref.name and ref.digest and ref.digest != data["Id"]
              else repo_digest(ref, data))
    record(ref, platform, pin)
    return pin


def for_bake(ref: BaseRef, platform: str) -> str:
    """What a bake target's CPUBUILD_BASE is: a given repo digest as is, a tag pinned to the
    repo digest recorded for it, else the tag (nothing is known)."""
    if ref.name is None:
        raise BaseReferenceError(f"--base {ref.text}: an image ID pins local builds only; a bake file needs "
                                 "NAME@sha256:... (a registry's digest)")
    if ref.digest is not None:
        return ref.text
    known = recorded(ref, platform)
    if known is not None and known.repo_digest:
        return known.repo_digest if ref.tag is None else f"{ref.name}:{ref.tag}@{known.repo_digest.partition('@')[2]}"
    return ref.text
