"""An index under an S3 prefix (boto3). Page updates are compare-and-swap
writes (PutObject with If-Match / If-None-Match: '*'), retried by the caller;
wheels are created with If-None-Match so an existing name is never replaced.

The endpoint comes from boto3's usual configuration (AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL for S3-compatible servers, credentials from the environment).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from ..errors import PublishError
from .storage import Blob

# 412: the condition failed; 409: S3's ConditionalRequestConflict (a
# concurrent conditional write to the same key is in flight).
CONFLICT_STATUS = (409, 412)


class S3Storage:
    def __init__(self, bucket: str, prefix: str, client: Any) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        self.url = f"s3://{bucket}/{self.prefix}"

    @classmethod
    def from_url(cls, url: str) -> S3Storage:
        parsed = urlparse(url)
        if not parsed.netloc:
            raise PublishError(f"{url!r}: expected s3://bucket/prefix")
        try:
            import boto3
        except ImportError:
            raise PublishError("s3:// destinations need boto3: pip install 'cpubuild[s3]'") from None
        return cls(parsed.netloc, parsed.path, boto3.client("s3"))

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @staticmethod
    def _status(exc: Exception) -> int:
        response = getattr(exc, "response", None) or {}
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kwargs)
        except ClientError:
            raise
        except BotoCoreError as exc:
            raise PublishError(f"{self.url}: {what} failed: {exc}") from None

    def read(self, key: str) -> Blob | None:
        from botocore.exceptions import ClientError

        try:
            obj = self._call("read", self.client.get_object, Key=self._key(key))
        except ClientError as exc:
            if self._status(exc) == 404:
                return None
            raise PublishError(f"{self.url}: reading {key} failed: {exc}") from None
        return Blob(data=obj["Body"].read(), token=str(obj["ETag"]))

    def _put(self, key: str, data: bytes, content_type: str, **condition: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._call(
                "write", self.client.put_object, Key=self._key(key), Body=data, ContentType=content_type, **condition
            )
        except ClientError as exc:
            if self._status(exc) in CONFLICT_STATUS:
                return False
            raise PublishError(f"{self.url}: writing {key} failed: {exc}") from None
        return True

    def create(self, key: str, data: bytes, content_type: str) -> bool:
        return self._put(key, data, content_type, IfNoneMatch="*")

    def replace(self, key: str, data: bytes, content_type: str, token: str | None) -> bool:
        if token is None:
            return self._put(key, data, content_type, IfNoneMatch="*")
        return self._put(key, data, content_type, IfMatch=token)

    def sweep(self, directory: str) -> list[str]:
        return []  # S3 writes are whole objects: an interrupted put leaves nothing behind

    @contextlib.contextmanager
    def page_lock(self, directory: str) -> Iterator[None]:
        yield  # compare-and-swap does the work; no lock object to leak
