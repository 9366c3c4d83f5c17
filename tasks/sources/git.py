"""A git repository at a ref: `git+https://host/org/repo@main`, `git+file:///path/repo.git@v1`.

Fetched with dulwich (pure Python, Apache-2.0/GPL-2.0+: no `git` binary needed, the same on every
platform) into an object store of its own in the mirror's working folder, one commit deep
(shallow), and read from the objects without a checkout. The documents are the regular files of
the ref's tree that `.gitignore` files in it do not exclude (links and submodules are not
files); each one's change marker is its blob hash, so a sync fetches (reads out of the object
store) only the files whose blobs changed. The folder reader then keeps the file types a folder
corpus keeps.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterator, Mapping
from pathlib import Path
from stat import S_ISREG
from typing import Any, cast
from urllib.parse import quote, unquote, urlsplit

from situate.core.errors import InputError
from situate.core.secrets import remember
from situate.tasks.sources.base import Entry, FetchFailed, Previous, TooLarge, shown

log = logging.getLogger("situate.sources")


def split_ref(url: str) -> tuple[str, str]:
    """(the transport URL without `git+`, the ref or "" for the remote's HEAD) of a git source
    URL: the ref follows the last "@" of the path."""
    transport = url[len("git+"):]
    scheme, _, rest = transport.partition("://")
    authority, slash, path = rest.partition("/")
    if "@" in path:
        path, _, ref = path.rpartition("@")
    else:
        ref = ""
    return f"{scheme}://{authority}{slash}{path}", ref


def _with_token(transport: str, credentials: Mapping[str, Any], where: str) -> str:
    """The HTTP(S) transport URL with a block's token as its user information (a Secret block's
    value, or a `token` field, with `username` or x-access-token: GitHub's name for a token; any
    name does for GitLab and most servers)."""
    token = str(credentials.get("token") or credentials.get("secret") or "")
    parts = urlsplit(transport)
    if parts.scheme not in ("http", "https") or not token:
        raise InputError(f"{where}: --credentials-block gives a git source a token over "
                         "git+https:// (a Secret block holding it)")
    remember(quote(token, safe=""))
    user = quote(str(credentials.get("username") or "x-access-token"), safe="")
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:{quote(token, safe='')}@{host}").geturl()


class GitSource:
    """A repository's files at a ref (see the module's docstring)."""

    def __init__(self, url: str, workdir: Path,
                 credentials: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.shown = shown(url)
        self.complete = True
        self.transport, self.ref = split_ref(url)
        if not urlsplit(self.transport).path.strip("/"):
            raise InputError(f"{self.shown}: no repository path; give git+https://host/org/repo"
                             "[@ref] or git+file:///path/to/repo[@ref]")
        if credentials:
            self.transport = _with_token(self.transport, credentials, self.shown)
        self.workdir = workdir
        self.repo: Any = None  # dulwich's Repo, opened by the listing
        self.commit = ""

    def _fetch(self) -> tuple[Any, bytes]:
        """The ref's commit fetched one deep into the working folder's object store."""
        from dulwich.client import get_transport_and_path
        from dulwich.repo import Repo

        store = self.workdir / "git"
        try:
            repo = Repo(str(store)) if (store / "objects").is_dir() else Repo.init_bare(
                str(store), mkdir=True)
        except Exception as e:  # noqa: BLE001 - a damaged cache: say where
            raise InputError(f"{self.shown}: the cached repository at {store} cannot be opened "
                             f"({type(e).__name__}); delete it and run again") from None
        self.repo = repo
        location = self.transport
        if location.startswith("file://"):
            location = unquote(urlsplit(location).path)
            if not Path(location).exists():
                raise InputError(f"{self.shown}: no repository at {location}")
        wanted: dict[str, bytes] = {}

        def determine_wants(refs: Any, depth: int | None = None) -> list[bytes]:
            sha = _resolve(refs, self.ref)
            if sha is None:
                names = sorted(r.decode(errors="replace").removeprefix("refs/heads/")
                               for r in refs if r.startswith(b"refs/heads/"))
                raise InputError(f"{self.shown}: no branch or tag {self.ref or 'HEAD'!r} "
                                 f"(branches: {', '.join(names[:10]) or 'none'})")
            wanted["sha"] = sha
            store: Any = repo.object_store
            return [] if store.contains_loose(sha) or store.contains_packed(sha) else [sha]

        try:
            client, path = get_transport_and_path(location)
            client.fetch(path, repo, determine_wants=cast(Any, determine_wants), depth=1)
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001 - dulwich and the network raise many kinds
            detail = " ".join(str(e).split())[:300] or type(e).__name__
            raise InputError(f"{self.shown}: cannot be fetched ({type(e).__name__}: "
                             f"{shown(detail)}); check the URL, the ref and your access") from None
        return repo, wanted["sha"]

    def entries(self, previous: Previous) -> Iterator[Entry]:
        from dulwich.ignore import IgnoreFilter
        from dulwich.object_store import iter_tree_contents

        repo, sha = self._fetch()
        self.commit = sha.decode()
        log.info(f"{self.shown}: commit {self.commit}")
        commit = repo[sha]
        store = repo.object_store
        ignores: dict[str, IgnoreFilter] = {}
        for item in iter_tree_contents(store, commit.tree):
            path = item.path.decode("utf-8", errors="replace")
            if posixpath.basename(path) == ".gitignore" and S_ISREG(item.mode):
                lines = store[item.sha].as_raw_string()[:1 << 20].splitlines()
                ignores[posixpath.dirname(path)] = IgnoreFilter(lines)
        for item in iter_tree_contents(store, commit.tree):
            if not S_ISREG(item.mode):  # a link or a submodule: not a file of the tree
                continue
            path = item.path.decode("utf-8", errors="replace")
            if any(p.startswith(".") for p in path.split("/")) or _ignored(path, ignores):
                continue  # hidden files and folders are left out, as in a folder corpus
            yield Entry(path, item.sha.decode())

    def fetch(self, entry: Entry, limit: int) -> bytes:
        try:
            blob = self.repo.object_store[entry.marker.encode()]
            data: bytes = blob.as_raw_string()
        except Exception as e:  # noqa: BLE001 - a missing or damaged object
            raise FetchFailed(f"blob {entry.marker} cannot be read ({type(e).__name__})") from None
        if len(data) > limit:
            raise TooLarge
        return data

    def close(self) -> None:
        if self.repo is not None:
            self.repo.close()
            self.repo = None


def _resolve(refs: Any, ref: str) -> bytes | None:
    if not ref:
        head = refs.get(b"HEAD")
        return None if head is None else bytes(head)
    for name in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
        sha = refs.get(name.encode())
        if sha is not None:
            peeled = refs.get(name.encode() + b"^{}")
            return bytes(peeled or sha)
    if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref):
        return ref.encode()
    return None


def _ignored(path: str, ignores: dict[str, Any]) -> bool:
    """Whether a `.gitignore` of the tree (its own folder's or any above) excludes `path`."""
    folder = posixpath.dirname(path)
    while True:
        rules = ignores.get(folder)
        if rules is not None:
            relative = path[len(folder) + 1:] if folder else path
            if rules.is_ignored(relative):
                return True
        if not folder:
            return False
        folder = posixpath.dirname(folder)
