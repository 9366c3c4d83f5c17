"""A git repository as a corpus (`git+file://`): synced into its mirror by blob hash, then read as
a folder. The first sync fetches every file, a sync of the same commit fetches none, and one
edit, one add and one delete fetch two and delete one; the ingest on top writes only those and
ends with a fresh ingest's rows."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from situate.core.errors import InputError


class Remote:
    """A working repository whose commits are pushed to a bare one (the remote a URL names)."""

    def __init__(self, root: Path) -> None:
        from dulwich import porcelain
        from dulwich.repo import Repo

        self.work, self.bare = root / "work", root / "remote.git"
        self.work.mkdir(parents=True)
        porcelain.init(str(self.work)).close()
        Repo.init_bare(str(self.bare), mkdir=True).close()
        self.url = f"git+file://{self.bare}@main"

    def commit(self, files: dict[str, str | bytes | None], message: str = "change") -> None:
        from dulwich import porcelain

        for name, text in files.items():
            path = self.work / name
            if text is None:
                path.unlink()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(text, bytes):
                    path.write_bytes(text)
                else:
                    path.write_text(text)
        porcelain.add(str(self.work))
        porcelain.commit(str(self.work), message=message.encode(), author=b"t <t@example.com>",
                         committer=b"t <t@example.com>")
        porcelain.push(str(self.work), str(self.bare), "refs/heads/master:refs/heads/main",
                       outstream=io.BytesIO(), errstream=io.BytesIO())


def page(n: int, words: str = "") -> str:
    return f"# Page {n}\n\nPage {n} explains topic {n} in some detail. {words}\n\n## More\n\nMore on {n}.\n"


@pytest.fixture
def remote(tmp_path):
    r = Remote(tmp_path / "repo")
    r.commit({**{f"docs/p{n}.md": page(n) for n in range(6)}, "src/tool.py": "def run():\n    return 1\n",
              ".gitignore": "build/\n*.log\n", "build/out.md": "# ignored\n", "notes.log": "x\n",
              "image.png": "\x89PNG not text"})
    return r


def test_sync_fetches_only_changed_blobs(remote, tmp_path):
    from situate.tasks.sources.mirror import mirror_root, sync

    cache = tmp_path / "cache"
    first = sync(remote.url, cache, 10**6)
    tree = mirror_root(remote.url, cache) / "tree"
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    # .gitignore'd files are no documents; the hidden .gitignore itself is left out as a folder would
    assert files == [*(f"docs/p{n}.md" for n in range(6)), "image.png", "src/tool.py"]
    assert (first.listed, first.fetched, first.unchanged, first.deleted, first.complete) == (8, 8, 0, 0, True)

    again = sync(remote.url, cache, 10**6)
    assert (again.listed, again.fetched, again.unchanged, again.deleted) == (8, 0, 8, 0)

    remote.commit({"docs/p1.md": page(1, "Edited."), "docs/p9.md": page(9), "docs/p2.md": None})
    third = sync(remote.url, cache, 10**6)
    assert (third.listed, third.fetched, third.unchanged, third.deleted) == (8, 2, 6, 1)
    assert not (tree / "docs" / "p2.md").exists()
    assert "Edited." in (tree / "docs" / "p1.md").read_text()


def test_sync_killed_after_some_writes_fetches_the_rest(remote, tmp_path):
    """A sync stopped mid-way keeps what it wrote, recorded; the next one fetches only the rest."""
    from situate.tasks.sources import mirror

    cache = tmp_path / "cache"
    calls = []
    real = mirror._write

    def dying(tree, doc_id, body):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(doc_id)
        real(tree, doc_id, body)

    mirror._write = dying
    try:
        with pytest.raises(KeyboardInterrupt):
            mirror.sync(remote.url, cache, 10**6)
    finally:
        mirror._write = real
    rest = mirror.sync(remote.url, cache, 10**6)
    assert (rest.fetched, rest.unchanged) == (5, 3)
    assert sorted(os.listdir(mirror.mirror_root(remote.url, cache) / "tree" / "docs")) == [
        f"p{n}.md" for n in range(6)]


def test_bad_git_urls_are_one_line(remote, tmp_path):
    from situate.tasks.sources.mirror import sync

    with pytest.raises(InputError, match=r"no branch or tag 'nope' \(branches: main\)"):
        sync(remote.url.replace("@main", "@nope"), tmp_path / "c", 10**6)
    with pytest.raises(InputError, match="no repository at"):
        sync(f"git+file://{tmp_path}/absent.git", tmp_path / "c", 10**6)
    with pytest.raises(InputError, match="unknown source scheme 'ftp'"):
        sync("ftp://example.com/x", tmp_path / "c", 10**6)


def test_credentials_never_shown(tmp_path):
    """A token in a git URL is masked in the error that names the URL."""
    from situate.tasks.sources.mirror import sync

    with pytest.raises(InputError) as e:
        sync("git+https://user:s3cr3t-t0ken@127.0.0.1:9/org/repo@main", tmp_path / "c", 10**6)
    assert "s3cr3t-t0ken" not in str(e.value) and "***@127.0.0.1" in str(e.value)
    assert "\n" not in str(e.value)


def test_scan_reads_the_mirror_as_a_folder(remote, tmp_path):
    from situate.tasks.corpus.load import scan_corpus, stream_corpus

    scan = scan_corpus(remote.url, cache_dir=str(tmp_path / "cache"))
    assert sorted(scan.ids) == [*(f"docs/p{n}.md" for n in range(6)), "src/tool.py"]
    assert scan.path == remote.url and scan.sync.fetched == 8
    docs = list(stream_corpus(remote.url, wanted={"docs/p3.md"}, cache_dir=str(tmp_path / "cache")))
    assert [d.id for d in docs] == ["docs/p3.md"] and "topic 3" in docs[0].text


def test_each_document_carries_its_blob_hash_as_its_version(remote, tmp_path):
    """A document read from the mirror has `version` in its metadata (its chunks' rows carry it):
    the blob hash of the file it was read from, the same in a fresh ingest and an update."""
    from dulwich.objects import Blob

    from situate.tasks.corpus.load import scan_corpus, stream_corpus

    cache = str(tmp_path / "cache")
    scan_corpus(remote.url, cache_dir=cache)
    remote.commit({"docs/p1.md": page(1, "Edited.")})
    scan = scan_corpus(remote.url, cache_dir=cache)
    for doc in stream_corpus(remote.url, wanted=set(scan.ids), kept=scan.kept, cache_dir=cache):
        blob = Blob.from_string((remote.work / doc.id).read_bytes()).id.decode()
        assert doc.metadata["version"] == blob, doc.id


@pytest.mark.e2e
@pytest.mark.slow
def test_ingest_from_git_is_incremental_and_equals_fresh(prefect_harness, state, remote, counting):
    """First run indexes every file; a re-run of the same commit fetches no blob and writes
    nothing; 1 edit + 1 add + 1 delete touch exactly those and give a fresh ingest's rows."""
    import time

    from tests.fakes.milvus_server import snapshot
    from tests.helpers import ingest, searches_like_fresh

    params = {"corpus": remote.url, "collection": "gitdocs", "context": "structural",
              "embedder": "counting", "prune": True}
    t = time.perf_counter()
    first = ingest(**params)
    first_s = time.perf_counter() - t
    assert (first.new, first.source["fetched"]) == (7, 8)
    before = snapshot(state["milvus_uri"], "gitdocs")

    counting.texts = 0
    t = time.perf_counter()
    again = ingest(**params)
    again_s = time.perf_counter() - t
    assert again.source["fetched"] == 0 and again.source["unchanged (not fetched)"] == 8
    assert (again.unchanged, again.new, again.changed, again.chunks_written) == (7, 0, 0, 0)
    assert counting.texts == 0 and snapshot(state["milvus_uri"], "gitdocs") == before
    print(f"first run {first_s:.2f} s, unchanged re-run {again_s:.2f} s")

    remote.commit({"docs/p1.md": page(1, "Edited."), "docs/p9.md": page(9), "docs/p2.md": None})
    mutated = ingest(**params)
    assert mutated.source["fetched"] == 2 and mutated.source["gone"] == 1
    assert (mutated.new, mutated.changed, mutated.deleted_documents, mutated.unchanged) == (1, 1, 1, 5)
    from dulwich.repo import Repo

    assert mutated.source_revision == Repo(str(remote.work)).head().decode()  # the commit synced

    fresh = ingest(**{**params, "collection": "gitfresh", "cache_dir": str(state["cache_dir"]) + "2"})
    assert fresh.new == 7
    assert snapshot(state["milvus_uri"], "gitdocs") == snapshot(state["milvus_uri"], "gitfresh")
    searches_like_fresh(state["milvus_uri"], "gitdocs", "gitfresh")
    from situate.storage.milvus import MilvusStore

    with MilvusStore(state["milvus_uri"]) as store:  # each row's version (blob hash) as fresh
        versions = [sorted((r["id"], r["metadata"]["version"])
                           for r in store.rows(c, fields=("id", "metadata")))
                    for c in ("gitdocs", "gitfresh")]
    assert versions[0] == versions[1] and all(len(v) == 40 for _, v in versions[0])


@pytest.mark.e2e
@pytest.mark.slow
def test_a_dry_run_of_a_repository_reads_no_blob_and_writes_nothing(prefect_harness, state, remote,
                                                                     counting, monkeypatch):
    """`ingest_flow` with dry_run after 1 edit + 1 add + 1 delete: the listing (the commit's
    shallow fetch into the mirror's own object store: git needs it to know the tree) priced
    against the mirror's blob hashes, sizes unknown (a tree entry has none); no blob read out,
    the mirror's files and markers and the collection as they were, nothing embedded."""
    from situate.tasks.sources import git
    from situate.tasks.sources.mirror import mirror_root
    from tests.fakes.milvus_server import snapshot
    from tests.helpers import ingest

    params = {"corpus": remote.url, "collection": "gitdry", "context": "structural",
              "embedder": "counting", "prune": True}
    ingest(**params)
    remote.commit({"docs/p1.md": page(1, "Edited."), "docs/p9.md": page(9), "docs/p2.md": None})

    def no_blob(*args, **kwargs):
        raise AssertionError("a dry run read a blob out")

    monkeypatch.setattr(git.GitSource, "fetch", no_blob)
    root = mirror_root(remote.url, state["cache_dir"])
    mirrored = {p.relative_to(root): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and "work" not in p.relative_to(root).parts}
    rows = snapshot(state["milvus_uri"], "gitdry")
    counting.texts = 0
    plan = ingest(**params, dry_run=True)
    assert plan.dry_run
    assert {k: plan.source[k] for k in ("listed", "new", "changed", "unchanged (not fetched)",
                                        "gone", "bytes to fetch", "sizes unknown")} == {
        "listed": 8, "new": 1, "changed": 1, "unchanged (not fetched)": 6, "gone": 1,
        "bytes to fetch": 0, "sizes unknown": 2}
    assert {p.relative_to(root): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "work" not in p.relative_to(root).parts} == mirrored
    assert snapshot(state["milvus_uri"], "gitdry") == rows and counting.texts == 0


@pytest.mark.e2e
@pytest.mark.slow
def test_a_zip_bomb_in_a_repository_is_skipped_as_from_a_folder(prefect_harness, state, remote,
                                                                 counting, tmp_path):
    """A .docx whose member inflates past the document limit, committed to the repository: the
    ingest of the source skips it with a folder's reason (the same count by kind, the same
    logged line but for the folder's path) and indexes every other document."""
    import logging

    from tests.fakes.milvus_server import snapshot
    from tests.helpers import ingest, zip_bomb

    folder = tmp_path / "folder"
    files = {**{f"docs/p{n}.md": page(n) for n in range(3)}, "src/tool.py": "x = 1\n"}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    zip_bomb(folder / "docs" / "bomb.docx")
    remote.commit({"docs/p3.md": None, "docs/p4.md": None, "docs/p5.md": None,
                   "docs/bomb.docx": (folder / "docs" / "bomb.docx").read_bytes()})
    said: dict[str, list[str]] = {}
    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("situate.load").addHandler(handler)  # the logger a folder's skips go to
    try:
        for corpus, collection in ((remote.url, "gitbomb"), (str(folder), "folderbomb")):
            lines.clear()
            summary = ingest(corpus=corpus, collection=collection, context="structural",
                             embedder="counting")
            assert summary.skipped == {"zip bomb": 1}, summary.skipped
            said[collection] = [line.split("bomb.docx", 1)[1] for line in lines
                                if "bomb.docx" in line]
            docs = sorted({row[1] for row in snapshot(state["milvus_uri"], collection)})
            assert docs == ["docs/p0.md", "docs/p1.md", "docs/p2.md", "src/tool.py"], docs
    finally:
        logging.getLogger("situate.load").removeHandler(handler)
    assert said["gitbomb"] == said["folderbomb"] and said["gitbomb"], said
    assert "would inflate to" in said["gitbomb"][0] and "zip bomb" in said["gitbomb"][0]


def test_serve_keeps_a_source_url_as_given(tmp_path):
    """`situate serve URL`: the URL is no path to resolve or to find on disk."""
    from situate.flows.deploy import check_serve_options, resolve_paths
    from situate.pipeline.options import ServeOptions

    url = "git+https://example.com/org/handbook@main"
    options = ServeOptions.build(corpus=url, collection="handbook",
                                 milvus_uri=str(tmp_path / "m.db"))
    resolved = resolve_paths(options)
    assert resolved.corpus == url
    check_serve_options(resolved)  # no "corpus not found"


@pytest.fixture
def git_http(remote):
    """The remote served over git's smart HTTP protocol on 127.0.0.1 (dulwich's WSGI server)."""
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from dulwich.repo import Repo
    from dulwich.server import DictBackend
    from dulwich.web import make_wsgi_chain

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    repo = Repo(str(remote.bare))
    git = make_wsgi_chain(DictBackend({"/handbook.git": repo}))

    def app(environ, start_response):  # basic auth: reader / letmein
        import base64

        if environ.get("HTTP_AUTHORIZATION") != "Basic " + base64.b64encode(b"reader:letmein").decode():
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')])
            return [b"unauthorized"]
        return git(environ, start_response)

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"git+http://reader:letmein@127.0.0.1:{server.server_address[1]}/handbook.git@main"
    server.shutdown()
    server.server_close()
    repo.close()


def test_sync_over_git_http(remote, git_http, tmp_path):
    """The same repository over HTTP: the same files, and the same blob hashes as markers (a
    re-run fetches none)."""
    from situate.tasks.sources.mirror import sync

    first = sync(git_http, tmp_path / "cache", 10**6)
    assert (first.listed, first.fetched) == (8, 8)
    remote.commit({"docs/p1.md": page(1, "Edited.")})
    again = sync(git_http, tmp_path / "cache", 10**6)
    assert (again.fetched, again.unchanged) == (1, 7)


def test_wrong_git_password_is_one_line_without_it(git_http, tmp_path):
    from situate.tasks.sources.mirror import sync

    wrong = git_http.replace("reader:letmein", "reader:wr0ng-passw0rd")
    with pytest.raises(InputError) as e:
        sync(wrong, tmp_path / "cache", 10**6)
    said = str(e.value)
    assert "wr0ng-passw0rd" not in said and "\n" not in said
    assert said.startswith("git+http://***@127.0.0.1:") and "cannot be fetched (HTTPUnauthorized" in said
