"""A Milvus server that dies in the middle of a write: a real `milvus-lite server` process, killed
(SIGKILL) and started again on the same data dir and port by the test.

Restarted while the retries last, the write completes with exact rows. Left down, the call fails
with one StoreError line within the retry budget, and the next write (or `situate ingest`) after
a restart finishes the job: exact rows, every chunk id once, nothing paid again.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from situate.core.errors import StoreError
from situate.core.records import chunk_id
from situate.core.retry import RetryPolicy
from situate.storage.milvus import RETRY_ATTEMPTS, RETRY_BASE, RETRY_CAP, MilvusStore
from tests.fakes.milvus_server import MilvusServer, free_port, snapshot
from tests.store_contract import EMB, EMBEDDER, embedded

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

C = "faults"
# A short budget for the tests that leave the server down: 5 attempts, waits of at most
# 0.25 + 0.5 + 1 + 1 s (half of that at least), so the failure comes within a few seconds.
SHORT = {"retry_attempts": 5, "retry_base": 0.25, "retry_cap": 1.0}


def full_budget(store: MilvusStore) -> None:
    """After a restart, the default retry budget again: the short one is for a server left down;
    a restarted one may take seconds to serve on a loaded machine (5 attempts over 2 s failed
    once, in a fresh-clone run at load 10)."""
    store.retry = RetryPolicy(RETRY_ATTEMPTS, RETRY_BASE, RETRY_CAP)


@pytest.fixture
def server(tmp_path):
    s = MilvusServer(tmp_path / "data")
    s.start()
    yield s
    s.stop()


@pytest.fixture
def store_for(server):
    opened: list[MilvusStore] = []

    def make(**retry) -> MilvusStore:
        store = MilvusStore(server.uri, **retry)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def documents(n: int = 6, chunks: int = 100, pipeline: str = "p1"):
    return [embedded(f"doc{d}.txt", [f"document {d} chunk {i} words {d * i}" for i in range(chunks)],
                     pipeline=pipeline) for d in range(n)]


def expected(docs) -> list[tuple]:
    return sorted((s.chunk.id, d.doc.id, s.chunk.index, s.chunk.text, s.context, d.fingerprint,
                   s.chunk.hash) for d in docs for s in d.situated)


def kill_after_upserts(store: MilvusStore, server: MilvusServer, landed: int,
                       restart_after: float | None = None) -> dict[str, object]:
    """SIGKILL the server as soon as `landed` upserts have been acknowledged (between two calls of
    the write), and start it again `restart_after` seconds later from another thread."""
    real = store.client.upsert
    state: dict[str, object] = {"upserts": 0, "restart": None}

    def upsert(*args, **kwargs):
        out = real(*args, **kwargs)
        state["upserts"] = int(state["upserts"]) + 1
        if state["upserts"] == landed:
            server.kill()
            if restart_after is not None:
                state["restart"] = server.restart_later(restart_after)
        return out

    store.client.upsert = upsert
    return state


def test_killed_between_upserts_and_restarted_the_write_completes(server, store_for):
    """The server dies after the second of six upserts; it is back 2 s later, well inside the
    default budget: every later call retries and reconnects, and the rows are exact. The write
    replaces an older version of each document with fewer chunks, so the stale chunks it must
    delete come after the kill too."""
    store = store_for()
    store.ensure_collection(C, EMB.dim, EMBEDDER)
    assert store.write(C, documents(chunks=120, pipeline="old"), batch_size=128) == 720
    new = documents(chunks=100, pipeline="new")
    faults = kill_after_upserts(store, server, landed=2, restart_after=2.0)

    t = time.monotonic()
    assert store.write(C, new, batch_size=128) == 600
    assert time.monotonic() - t >= 2.0 and faults["upserts"] == 6
    faults["restart"].join()
    assert store.count(C) == 600
    rows = snapshot(server.uri, C)
    assert rows == expected(new)
    assert len({r[0] for r in rows}) == len(rows)


def test_killed_while_calls_are_in_flight_and_restarted_the_write_completes(server, store_for):
    """The kill lands wherever the write is (inside an upsert, a read of stored ids, a delete):
    from another thread, right after the first upsert is acknowledged. The rows are exact."""
    store = store_for()
    store.ensure_collection(C, EMB.dim, EMBEDDER)
    docs = documents(n=12, chunks=250)
    first = threading.Event()
    real = store.client.upsert

    def upsert(*args, **kwargs):
        out = real(*args, **kwargs)
        first.set()
        return out

    store.client.upsert = upsert

    def chaos() -> None:
        first.wait(60)
        server.kill()
        time.sleep(1.5)
        server.start()

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    assert store.write(C, docs, batch_size=256) == 3_000
    thread.join()
    assert store.count(C) == 3_000
    rows = snapshot(server.uri, C)
    assert rows == expected(docs) and len({r[0] for r in rows}) == 3_000


def test_a_restart_between_a_load_and_the_read_after_it_loads_again(server, store_for):
    """A restarted server holds every collection released. A restart that lands between a read's
    `load` and the read itself (as the kill above once did, inside a write's read of stored ids)
    is met by loading again and reading, never a "call load() first" StoreError: counting,
    reading rows, and a write (its read of stored ids) each meet one. The restart is a clean
    stop (SIGINT: `milvus-lite server` drains its calls and closes its database; SIGTERM ends it
    at once, as SIGKILL does): killed just after a load, Lite can leave its index file empty
    ("File is too small: 0" at the next load, once in CI), which is Lite's crash safety, not
    this test's subject."""
    store = store_for()
    full_budget(store)
    store.ensure_collection(C, EMB.dim, EMBEDDER)
    docs = documents(n=3, chunks=40)
    assert store.write(C, docs) == 120
    store.flush(C)
    real = store.load
    restarts = []

    def load_then_restart(collection: str) -> None:
        real(collection)
        server.stop(signal.SIGINT)
        server.start()
        restarts.append(collection)

    store.load = load_then_restart  # type: ignore[method-assign]
    assert store.count(C) == 120
    assert sorted(r["id"] for r in store.rows(C, fields=("id",))) == sorted(
        s.chunk.id for d in docs for s in d.situated)
    assert store.write(C, docs) == 120
    assert len(restarts) == 3
    store.load = real  # type: ignore[method-assign]
    assert snapshot(server.uri, C) == expected(docs)


def test_left_down_the_write_fails_with_one_line_and_the_next_write_finishes(server, store_for):
    store = store_for(**SHORT)
    store.ensure_collection(C, EMB.dim, EMBEDDER)
    docs = documents()
    kill_after_upserts(store, server, landed=1)

    t = time.monotonic()
    with pytest.raises(StoreError) as failed:
        store.write(C, docs, batch_size=128)
    elapsed = time.monotonic() - t
    message = str(failed.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"Milvus at {server.uri} did not answer (")
    assert "after 5 attempts over " in message
    assert message.endswith("start it and run the same command again; "
                            "what was written is kept and the rest will be written then")
    from situate.cli.messages import user_message

    assert user_message(failed.value).endswith(
        "start it (or check --milvus-uri) and run the same command again; what was written is "
        "kept and the rest will be written then")
    # At least the short budget's backoff (0.25 + 0.5 + 1 + 1 s, jittered down to half); no
    # upper bound in seconds: the message says the attempts were the budget's five.
    assert elapsed >= 1.0, elapsed

    # Reads fail the same way, and so does opening a store on a server that is not up (a port
    # nobody listens on: a second client of a live address would share the first's connection).
    with pytest.raises(StoreError, match=r"did not answer \(bm25 search in 'faults'\) after 5 .*"
                                          r"run the same command again$"):
        store.leg_search(C, "bm25", "document", None, 3)
    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(StoreError, match=rf"^Milvus at {nobody} did not answer \(connecting\) "
                                         r"after 5 attempts .*run the same command again$"):
        MilvusStore(nobody, **SHORT)

    server.start()
    full_budget(store)
    # What was acknowledged before the kill is kept: the first document, whole.
    assert set(store.fingerprints(C)) == {"doc0.txt"}
    assert store.write(C, docs, batch_size=128) == 600  # the same client, reconnected
    rows = snapshot(server.uri, C)
    assert rows == expected(docs) and len({r[0] for r in rows}) == 600


@pytest.mark.parametrize(("after", "step"), [("create_collection", "creating"),
                                           ("create_alias", "indexing")])
def test_killed_between_creating_the_collection_and_indexing_it(server, store_for, after, step):
    """The server dies right after the collection (generation 1) is created, or after its alias,
    before its indexes: the run fails with the one line; after a restart the next run finishes
    the job: the alias if it is missing (the collection's first write calls ensure_collection), the
    indexes (checking the embedder of a found collection adds them, as the ingest flow does), and
    writes and searches work."""
    store = store_for(**SHORT)
    real = getattr(store.client, after)

    def then_kill(*args, **kwargs):
        out = real(*args, **kwargs)
        server.kill()
        return out

    setattr(store.client, after, then_kill)
    with pytest.raises(StoreError, match=rf"did not answer \({step} collection 'faults'\)"):
        store.ensure_collection(C, EMB.dim, EMBEDDER)
    setattr(store.client, after, real)
    server.start()
    full_budget(store)
    physical = "faults__g1"
    named = store.exists(C)  # (retried while the client reconnects)
    assert store.client.list_collections() == [physical]
    assert store.client.list_indexes(physical) == []
    if after == "create_collection":
        assert not named  # made, not yet under its name: the next write names it
        store.ensure_collection(C, EMB.dim, EMBEDDER)
    else:
        assert named
        store.require_embedder(C, EMBEDDER)
    assert sorted(store.client.list_indexes(physical)) == ["dense", "doc_id", "sparse"]
    assert store.client.list_collections() == [physical]
    store.ensure_collection(C, EMB.dim, EMBEDDER)  # nothing missing: a no-op
    assert store.write(C, documents(n=2, chunks=3)) == 6
    assert store.leg_search(C, "bm25", "document 1 chunk 2", None, 1)[0].id == chunk_id("doc1.txt", 2)


def corpus_file(tmp_path, docs: int = 40) -> str:
    path = tmp_path / "corpus.jsonl"
    with path.open("w") as out:
        for d in range(docs):
            text = "\n\n".join(f"Section {s} of note {d}: the lease queue hides job {d}-{s} "
                               f"until it is acknowledged or its visibility timeout ends." * 3
                               for s in range(6))
            out.write(json.dumps({"id": f"note-{d}", "text": text}) + "\n")
    return str(path)


def test_cli_ingest_with_the_server_down_mid_write_then_resumed(prefect_harness, state, server,
                                                               tmp_path, monkeypatch, capfd):
    """`situate ingest` (in process, hash embedder, structural contexts) whose server dies after
    the first upsert and stays down: exit code 2, the one StoreError line, no traceback. Started
    again, the same command finishes: rows identical to an uninterrupted ingest, each chunk once,
    nothing paid."""
    import situate.storage.client as client
    import situate.storage.milvus as milvus
    from situate.cli.main import main

    corpus = corpus_file(tmp_path)
    common = ["--milvus-uri", server.uri, "--embedder", "hash", "--context", "structural"]
    monkeypatch.setenv("SITUATE_WRITE_BATCH", "16")
    assert main(["ingest", corpus, "--collection", "faults_ref", *common]) == 0
    reference = snapshot(server.uri, "faults_ref")
    assert len(reference) > 100
    capfd.readouterr()

    budget = {name: getattr(client, name) for name in ("RETRY_ATTEMPTS", "RETRY_BASE", "RETRY_CAP")}
    monkeypatch.setattr(client, "RETRY_ATTEMPTS", SHORT["retry_attempts"])
    monkeypatch.setattr(client, "RETRY_BASE", SHORT["retry_base"])
    monkeypatch.setattr(client, "RETRY_CAP", SHORT["retry_cap"])
    # the next run opens its store with the short budget
    real = MilvusStore.upsert
    calls = {"n": 0}

    def upsert(self, collection, rows, batch_size=milvus.WRITE_BATCH):
        out = real(self, collection, rows, batch_size)
        calls["n"] += 1
        if calls["n"] == 1:
            server.kill()
        return out

    monkeypatch.setattr(MilvusStore, "upsert", upsert)
    code = main(["ingest", corpus, "--collection", "faults_cli", *common])
    out, err = capfd.readouterr()
    assert code == 2, err
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert errors == [line for line in errors if line.startswith("situate ingest: error: ")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"situate ingest: error: Milvus at {server.uri} did not answer (")
    assert "run the same command again" in errors[0]
    assert f"after {SHORT['retry_attempts']} attempts" in errors[0]  # the short budget, not the default

    monkeypatch.setattr(MilvusStore, "upsert", real)
    server.start()
    for name, value in budget.items():  # the resumed run with the default budget (see full_budget)
        monkeypatch.setattr(client, name, value)
    assert main(["ingest", corpus, "--collection", "faults_cli", *common]) == 0
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    rows = snapshot(server.uri, "faults_cli")
    assert rows == reference
    assert len({r[0] for r in rows}) == len(rows) == len(reference)
    summary = dict(line.split(None, 1) for line in out.splitlines()[1:] if line.startswith("  "))
    assert int(summary["rows"]) == len(reference)
    assert (summary["requests"], summary["cost_usd"]) == ("0", "0.0")
