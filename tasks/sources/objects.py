"""An object-store prefix: `s3://bucket/prefix/`, through fsspec's s3fs (`pip install
'situate[s3]'`).

Credentials are the provider's usual ones, read by botocore: the environment
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE`), the shared
files (`~/.aws/credentials`, `~/.aws/config`), an instance role; `AWS_ENDPOINT_URL` points it at
another S3 (MinIO, a test server). The listing is read a page (1,000 keys) at a time and streamed
into the mirror's SQLite, so a prefix of a million keys is never held in memory. Each object's
change marker is its ETag; an object whose ETag is the one recorded is not downloaded again. An
object is read with a ranged GET up to the byte limit and no further.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from situate.core.errors import InputError
from situate.core.secrets import remember
from situate.tasks.sources.base import Entry, FetchFailed, Previous, TooLarge, shown

# The variables whose values are credentials: masked in every message from now on.
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class S3Source:
    """The objects under an S3 prefix (see the module's docstring)."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url, self.shown, self.complete = url, shown(url), True
        parts = urlsplit(url)
        self.bucket = parts.netloc.rpartition("@")[2]
        if not self.bucket:
            raise InputError(f"{self.shown}: no bucket; give s3://bucket/prefix/")
        prefix = parts.path.lstrip("/")
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        remember(*(os.environ.get(v, "") for v in CREDENTIAL_VARIABLES))
        try:
            import s3fs
        except ImportError:
            raise InputError(f"{self.shown}: s3:// needs s3fs: pip install 'situate[s3]'") from None
        self.fs: Any = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)

    def _error(self, e: BaseException) -> InputError:
        """What went wrong with the bucket as one line, with no credential in it."""
        text = " ".join(str(e).split())[:300]
        if isinstance(e, FileNotFoundError):
            return InputError(f"{self.shown}: bucket {self.bucket!r} not found (or not visible "
                              "to these credentials)")
        if isinstance(e, PermissionError):
            return InputError(f"{self.shown}: access refused ({shown(text)}); check "
                              "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE")
        return InputError(f"{self.shown}: cannot be listed ({type(e).__name__}: {shown(text)})")

    def entries(self, previous: Previous) -> Iterator[Entry]:
        from fsspec.asyn import sync

        pages = self.fs._iterdir(self.bucket, delimiter="", prefix=self.prefix)
        while True:
            try:
                info = sync(self.fs.loop, pages.__anext__)
            except StopAsyncIteration:
                return
            except Exception as e:  # noqa: BLE001 - botocore and s3fs raise many kinds
                raise self._error(e) from None
            key = str(info.get("name", "")).removeprefix(f"{self.bucket}/")  # bucket/key
            if info.get("type") != "file" or key.endswith("/"):
                continue
            etag = str(info.get("ETag", "")).strip('"')
            yield Entry(key[len(self.prefix):], f"etag:{etag}", int(info.get("size", 0)))

    def fetch(self, entry: Entry, limit: int) -> bytes:
        if entry.size is not None and entry.size > limit:
            raise TooLarge
        path = f"{self.bucket}/{self.prefix}{entry.id}"
        try:
            data: bytes = self.fs.cat_file(path, start=0, end=limit + 1)
        except Exception as e:  # noqa: BLE001 - one object's failure is that object's
            raise FetchFailed(f"{type(e).__name__}: {shown(' '.join(str(e).split())[:200])}") from None
        if len(data) > limit:
            raise TooLarge
        return data

    def close(self) -> None:
        pass
