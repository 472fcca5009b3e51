"""A PEP 503 / 658 / 691 / 700 package index keyed by commit: publishing
(publish.py), storage backends (storage.py, s3.py; `open_storage` below picks
one, so neither imports the other's module for it), page rendering (pages.py),
reading an index (client.py) and serving one (server.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .storage import Storage


def open_storage(dest: str) -> Storage:
    """A directory path, file:// URL or s3://bucket/prefix (the backends load on use: boto3 only for s3)."""
    from pathlib import Path

    from ..errors import PublishError

    if dest.startswith("s3://"):
        from .s3 import S3Storage

        return S3Storage.from_url(dest)
    if dest.startswith("file://"):
        from urllib.parse import unquote, urlparse

        dest = unquote(urlparse(dest).path)
    elif "://" in dest:
        raise PublishError(f"unsupported index destination {dest!r}: use a directory or s3://bucket/prefix")
    root = Path(dest)
    if root.exists() and not root.is_dir():
        raise PublishError(f"{root} exists and is not a directory")
    from .storage import LocalStorage

    return LocalStorage(root)
