"""Documents where they live: one small interface for every source, looked up by URL scheme.

A `Source` lists its documents as a stream of `Entry`s (a stable id, a cheap change marker: a git
blob hash, an HTTP ETag or Last-Modified, an object's ETag; a size when the listing knows it) and
fetches one document's bytes, bounded. Nothing else: what happens to a document after it is
fetched (readers, contexts, embedding, writes, prune, the manifest) is the pipeline a folder goes
through, because a source is synced into a local mirror folder (`situate.tasks.sources.mirror`)
that the ingest then reads as a directory corpus.

Sources are registered in `SOURCES` by URL scheme ("git+file", "https", ...), as embedders and
context providers are by name; a package adds one the same way.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from situate.core.errors import InputError
from situate.core.registry import Registry
from situate.core.secrets import redact


@dataclass(frozen=True)
class Entry:
    """One document a listing found. `id` is its path in the mirror (and its document id):
    "/"-separated, relative, with a suffix that says its file type. `marker` changes whenever
    its bytes do (and costs nothing to read from the listing). `body`: the bytes, when listing
    them already fetched them (a crawl reads a page to find its links); else `Source.fetch`.
    `failed`: why the listing could not get it (the run then deletes nothing); `too_large`: the
    listing stopped reading it at the byte limit."""

    id: str
    marker: str
    size: int | None = None
    body: bytes | None = None
    failed: str = ""
    too_large: bool = False


class Previous(Protocol):
    """What the mirror holds from the last sync, for a source whose listing needs it (a crawl
    asks with the last ETag, and on a 304 reads the links of the copy it already has)."""

    def marker(self, doc_id: str) -> str | None: ...

    def body(self, doc_id: str, limit: int) -> bytes | None: ...


class Source(Protocol):
    """A place documents live. `shown`: its URL as messages may show it (no credentials).
    `complete` is read after the listing: False when the listing stopped early or missed
    part of the source (a limit, a failed page), so that nothing is deleted on its word."""

    shown: str
    complete: bool

    def entries(self, previous: Previous) -> Iterator[Entry]: ...

    def fetch(self, entry: Entry, limit: int) -> bytes:
        """The entry's bytes; `TooLarge` past `limit` bytes (read no further), `FetchFailed`
        when the source refused or failed (one line, no credentials)."""
        ...

    def close(self) -> None: ...


class FetchFailed(Exception):
    """One document could not be fetched: the reason, in one line a log may show."""


class TooLarge(Exception):
    """A document over the byte limit: left unread past it."""


# scheme -> a function of the URL and a private working folder (the source's own cache: a git
# object store) giving its Source ("module:attr", imported on first use). Another package's
# sources are the `situate.sources` entry points (situate.core.plugins), by scheme.
SOURCES: Registry[Callable[..., Source]] = Registry(
    "source", " (a URL: git+https://host/org/repo@main, git+file:///path/to/repo.git, "
              "https://docs.example.com/, s3://bucket/prefix/, gs://bucket/prefix/, "
              "az://container/prefix/)", group="situate.sources")
SOURCES.register("git+file", "situate.tasks.sources.git:GitSource")
SOURCES.register("git+https", "situate.tasks.sources.git:GitSource")
SOURCES.register("git+http", "situate.tasks.sources.git:GitSource")
SOURCES.register("http", "situate.tasks.sources.web:WebSource")
SOURCES.register("https", "situate.tasks.sources.web:WebSource")
SOURCES.register("s3", "situate.tasks.sources.objects:S3Source")
SOURCES.register("gs", "situate.tasks.sources.objects:GCSSource")
SOURCES.register("az", "situate.tasks.sources.objects:AzureSource")

# A Prefect block's name as `--credentials-block` takes it: TYPE/NAME as Prefect shows it
# (`prefect block ls`: aws-credentials/prod), or NAME alone for a Secret block (secret/NAME).
# Prefect's own rule for both parts: lowercase letters, digits and dashes.
BLOCK_NAME = re.compile(r"(?:[a-z0-9][a-z0-9-]{0,62}/)?[a-z0-9][a-z0-9-]{0,99}")


def scheme_of(corpus: str) -> str | None:
    """The URL scheme of `corpus` when it is a URL (`scheme://...`), else None: a local path
    (a Windows drive letter is no scheme)."""
    if "://" not in corpus:
        return None
    scheme = corpus.split("://", 1)[0].lower()
    if len(scheme) < 2 or not all(c.isalnum() or c in "+.-" for c in scheme):
        return None
    return scheme


def is_source(corpus: str) -> bool:
    """Whether `corpus` names a source (a URL) rather than a local file or folder."""
    return scheme_of(corpus) is not None


def shown(url: str) -> str:
    """`url` as messages, logs and summaries show it: credentials masked."""
    return redact(url)


def without_credentials(url: str) -> str:
    """`url` without its user information (`git+https://user:TOKEN@host/...` ->
    `git+https://host/...`): the same mirror (`situate.tasks.sources.mirror.mirror_key`), for
    whatever reads a source after its sync."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{tail}"


def block_name(name: str) -> str:
    """`name` when it is a Prefect block's name (`BLOCK_NAME`), else ValueError: the one check of
    `--credentials-block` for the CLI, the Python API and a deployment's parameters."""
    if BLOCK_NAME.fullmatch(name):
        return name
    raise ValueError("not a Prefect block name: give TYPE/NAME as `prefect block ls` shows it "
                     "(aws-credentials/prod), or the NAME of a Secret block; lowercase letters, "
                     "digits and dashes")


def open_source(url: str, workdir: Path, credentials: Mapping[str, Any] | None = None) -> Source:
    """The source `url` names, by its scheme, working in `workdir`; InputError (one line) for an
    unknown scheme or a URL the source refuses. `credentials`: the fields of a Prefect block
    (`--credentials-block`) for a source that takes them (a `credentials` parameter)."""
    scheme = scheme_of(url)
    if scheme is None:
        raise InputError(f"{shown(url)}: not a URL")
    if scheme not in SOURCES:
        raise InputError(f"{shown(url)}: unknown source scheme {scheme!r}: use one of "
                         f"{', '.join(SOURCES.names())}")
    factory = SOURCES.get(scheme)
    if credentials is None:
        return factory(url, workdir)
    if "credentials" not in inspect.signature(factory).parameters:
        raise InputError(f"{shown(url)}: a {scheme}:// source takes no --credentials-block")
    return factory(url, workdir, credentials=credentials)


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()
