"""Reading a simple index (PEP 503 HTML or PEP 691 JSON) over HTTP(S), file://
or from a local directory: what `cpubuild develop --precompiled` needs."""

from __future__ import annotations

import base64
import json
import netrc
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from ..errors import CpubuildError
from .names import project_dir
from .pages import JSON_CONTENT_TYPE

ACCEPT = f"{JSON_CONTENT_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
TIMEOUT_S = 60


class IndexReadError(CpubuildError):
    """An index that cannot be reached or read."""


@dataclass(frozen=True, kw_only=True)
class RemoteFile:
    filename: str
    url: str  # absolute
    sha256: str | None
    requires_python: str | None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), ""

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.links.append((self._open, self._text.strip()))
            self._open = None


USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*)(?::[^/@\s]*)?@")


def redact(text: str) -> str:
    """Every URL's credentials in text shown as user:***@ (a token alone as ***@)."""
    return USERINFO.sub(lambda m: f"{m['scheme']}{m['user'] + ':' if m['user'] and ':' in m[0][len(m['scheme']):] else ''}***@", text)


# pip's and uv's index settings: credentials in them are used for every URL on the
# same host and port (as pip does for its index URLs), so one secret serves both.
INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _from_index_env(host: str, port: int | None) -> str | None:
    for name in INDEX_ENV:
        for item in os.environ.get(name, "").split():
            try:
                parts = urlsplit(item.partition("=")[2] if "=" in item.split("://", 1)[0] else item)  # UV_INDEX: name=url
                same = parts.hostname == host and parts.port == port
            except ValueError:
                continue
            if same and (parts.username or parts.password):
                return _basic(unquote(parts.username or ""), unquote(parts.password or ""))
    return None


def _credentials(url: str) -> tuple[str, str | None]:
    """The URL without its user:password@ part, and a Basic Authorization value
    for it: from the URL, else from a PIP_INDEX_URL-style setting for the same
    host and port, else from ~/.netrc (or $NETRC) for its host."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc += f":{parts.port}"
        bare = urlunsplit(parts._replace(netloc=netloc))
        return bare, _basic(unquote(parts.username or ""), unquote(parts.password or ""))
    from_env = _from_index_env(parts.hostname or "", parts.port)
    if from_env is not None:
        return url, from_env
    try:
        auth = netrc.netrc(os.environ.get("NETRC")).authenticators(parts.hostname or "")
    except (OSError, netrc.NetrcParseError):
        auth = None
    if auth is None:
        return url, None
    return url, _basic(auth[0] or "", auth[2] or "")


def as_url(location: str) -> str:
    """An index location as a URL ending in '/': http(s)://, file:// or a path."""
    if "://" not in location:
        location = Path(location).resolve().as_uri()
    return location if location.endswith("/") else location + "/"


def fetch(url: str, accept: str | None = None) -> tuple[bytes, str] | None:
    """The body and content type at url; None for 404 / a missing file."""
    if url.startswith("file://"):
        path = Path(unquote(urlsplit(url).path))
        if path.is_dir():
            for name, ctype in (("index.json", JSON_CONTENT_TYPE), ("index.html", "text/html")):
                if (path / name).is_file():
                    return (path / name).read_bytes(), ctype
            return None
        return (path.read_bytes(), "application/octet-stream") if path.is_file() else None
    bare, authorization = _credentials(url)
    request = urllib.request.Request(bare, headers={"Accept": accept} if accept else {})
    if authorization:
        request.add_unredirected_header("Authorization", authorization)  # never sent on to a redirect's host
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise IndexReadError(f"{redact(url)}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise IndexReadError(redact(f"{url}: {getattr(exc, 'reason', exc)}")) from None


def project_files(index_url: str, project: str) -> list[RemoteFile] | None:
    """The files on a project's page in the index at index_url (None: no page)."""
    page_url = urljoin(as_url(index_url), project_dir(project) + "/")
    got = fetch(page_url, ACCEPT)
    if got is None:
        return None
    body, ctype = got
    try:
        if ctype.split(";")[0].strip() == JSON_CONTENT_TYPE:
            return [
                RemoteFile(
                    filename=str(f["filename"]),
                    url=urljoin(page_url, str(f["url"])),
                    sha256=f.get("hashes", {}).get("sha256"),
                    requires_python=f.get("requires-python"),
                )
                for f in json.loads(body)["files"]
            ]
        parser = _Links()
        parser.feed(body.decode("utf-8"))
    except (ValueError, KeyError, TypeError) as exc:
        raise IndexReadError(redact(f"{page_url}: not a simple index page ({exc})")) from None
    files = []
    for attrs, text in parser.links:
        link = attrs.get("href") or ""
        base, _, fragment = link.partition("#")
        algo, _, digest = fragment.partition("=")
        files.append(
            RemoteFile(
                filename=text or unquote(base.rsplit("/", 1)[-1]),
                url=urljoin(page_url, base),
                sha256=digest if algo == "sha256" and digest else None,
                requires_python=attrs.get("data-requires-python"),
            )
        )
    return files
