"""A scheduled run pays for what changed: the plan is made from the corpus's scan and
what the collection holds per document, read once (the local manifest when the store agrees with
it, else one pass over the collection); only the documents it processes are read again; their
rows are written and the stale or pruned ones deleted by primary key; the rows stay exact."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from situate.core.records import StoredDocument, chunk_id, index_key
from situate.storage.manifest import Manifest, from_rows


def _scan(tmp_path: Path, docs: dict[str, str]):
    from situate.tasks.corpus.load import scan_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
    return corpus, scan_corpus(corpus, chunk_size=100, chunk_overlap=0)


def test_index_key_and_stored_documents_address_rows_by_primary_key():
    assert index_key([2, 0, 1]) == 3 and index_key([]) == 0
    assert index_key([0, 2, 5]) == (0, 2, 5)
    doc = StoredDocument("fp", 3, ((1, "odd"),))
    assert doc.rows == 4
    assert doc.ids("d") == [chunk_id("d", 0), chunk_id("d", 1), "odd", chunk_id("d", 2)]
    rows = [{"id": chunk_id("a", i), "doc_id": "a", "chunk_index": i, "doc_hash": "x"}
            for i in (1, 0)]
    rows += [{"id": "legacy-id", "doc_id": "b", "chunk_index": 0, "doc_hash": "y"},
             {"id": chunk_id("b", 1), "doc_id": "b", "chunk_index": 1, "doc_hash": "z"}]
    held = from_rows(rows)
    assert held["a"] == StoredDocument("x", 2)
    # an id that is not the derived one is kept, and rows of two fingerprints are no fingerprint
    assert held["b"] == StoredDocument(None, (1,), ((0, "legacy-id"),))
    assert held["b"].ids("b") == ["legacy-id", chunk_id("b", 1)]


def test_the_plan_compares_per_document_from_the_scan(tmp_path):
    from situate.pipeline.plan import fingerprint_of, plan_corpus

    text = {k: f"{k} " + "word " * 60 for k in ("same", "edited", "shrunk", "new")}
    _, before = _scan(tmp_path, {**text, "gone": "gone " * 30})
    pipeline = "p"
    held = {d: StoredDocument(fingerprint_of(s.hash, s.cut, pipeline), s.indexes)
            for d, s in before.scanned.items() if d != "new"}
    _, after = _scan(tmp_path, {**text, "edited": text["edited"] + "more words here",
                                "shrunk": "shrunk short"})
    plan = plan_corpus(after, held, pipeline, force=False)
    assert (plan.new, plan.changed, plan.unchanged) == (1, 2, 1)
    assert list(plan.documents) == ["edited", "shrunk", "new"]  # corpus order
    assert plan.chunks == sum(after.scanned[d].indexes for d in plan.documents)
    assert plan.stale_rows == held["shrunk"].rows - after.scanned["shrunk"].indexes > 0
    assert plan.gone == ["gone"] and plan.gone_rows == held["gone"].rows
    assert plan_corpus(after, held, "another pipeline", force=False).unchanged == 0
    assert plan_corpus(after, held, pipeline, force=True).unchanged == 0


def test_the_manifest_is_trusted_only_under_its_token_and_row_count(tmp_path):
    held = {"a": StoredDocument("fa", 2), "b": StoredDocument("fb", (0, 3), ((1, "x"),))}
    manifest = Manifest(tmp_path, "data/milvus.db", "c")
    token = manifest.save(held)
    assert manifest.path.stat().st_mode & 0o777 == 0o600
    assert manifest.path.parent.stat().st_mode & 0o777 == 0o700
    assert manifest.load(token, 5) == held
    assert manifest.load(token, 4) is None  # the store holds other rows
    assert manifest.load("another", 5) is None and manifest.load("", 5) is None
    # a delta: only the documents a run changed are rewritten, under a new token
    held["a"] = StoredDocument("fa2", 3)
    del held["b"]
    held["c"] = StoredDocument("fc", 1)
    token2 = manifest.save(held, changed=["a", "b", "c"])
    assert token2 != token and manifest.load(token, 4) is None
    assert manifest.load(token2, 4) == held
    # the same file by another name of the same Lite path, not another store's
    assert Manifest(tmp_path, str(Path("data/milvus.db").resolve()), "c").path == manifest.path
    assert Manifest(tmp_path, "http://127.0.0.1:19530", "c").path != manifest.path
    with sqlite3.connect(manifest.path) as db:
        db.execute("UPDATE documents SET indexes = 'not json'")
    assert manifest.load(token2, 4) is None  # damaged: the store is read instead


def test_the_stream_cuts_only_the_wanted_documents(tmp_path, monkeypatch):
    import situate.tasks.corpus.forms as forms
    import situate.tasks.corpus.load as load

    corpus, scan = _scan(tmp_path, {f"d{i}": f"text of {i} " * 20 for i in range(6)})
    cut: list[str] = []
    real = forms._document

    def counting(tally, where, doc_id, *args, **kwargs):
        cut.append(doc_id)
        return real(tally, where, doc_id, *args, **kwargs)

    monkeypatch.setattr(forms, "_document", counting)
    docs = list(load.stream_corpus(corpus, 100, 0, wanted={"d1", "d4"}))
    assert [d.id for d in docs] == ["d1", "d4"] and cut == ["d1", "d4"]
    assert scan.order == tuple(f"d{i}" for i in range(6))


def test_a_slow_document_is_read_once(tmp_path, monkeypatch):
    """A document whose read was slow is kept by the scan and handed to the run, in its place in
    corpus order, rather than read a second time; ordinary ones are read again."""
    import situate.tasks.corpus.forms as forms
    import situate.tasks.corpus.load as load

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": f"text of {i} " * 20}) + "\n"
                              for i in range(6)))
    real = forms._document
    cut: list[str] = []

    def slow_for_some(tally, where, doc_id, *args, **kwargs):
        cut.append(doc_id)
        if doc_id in ("d1", "d4") and not tally.options.quiet:  # the scan's read of them is slow
            load.time.sleep(0.05)
        return real(tally, where, doc_id, *args, **kwargs)

    monkeypatch.setattr(forms, "_document", slow_for_some)
    monkeypatch.setattr(load, "KEEP_SLOWER_THAN", 0.04)
    scan = load.scan_corpus(corpus, 100, 0)
    assert sorted(scan.kept) == ["d1", "d4"]
    cut.clear()
    docs = list(load.stream_corpus(corpus, 100, 0, wanted=scan.order, kept=scan.kept))
    assert [d.id for d in docs] == [f"d{i}" for i in range(6)]
    assert cut == ["d0", "d2", "d3", "d5"]  # the slow ones were not read again
    cut.clear()
    docs = list(load.stream_corpus(corpus, 100, 0, wanted={"d4": 1, "d5": 1}, kept=scan.kept))
    assert [d.id for d in docs] == ["d4", "d5"] and cut == ["d5"]
    monkeypatch.setattr(load, "KEEP_BYTES", 10)  # over the budget: nothing kept
    assert load.scan_corpus(corpus, 100, 0).kept == {}


def test_writes_and_deletes_go_by_primary_key(tmp_path):
    """Given what each document holds, a write reads nothing back and deletes the stale rows by
    primary key; no read pages by offset (on Milvus Lite it goes by slices of the primary keys)."""
    from situate.core.records import Chunk, Document, EmbeddedDocument, Situated
    from situate.storage.milvus import MilvusStore

    def doc(doc_id: str, n: int) -> EmbeddedDocument:
        chunks = tuple(Chunk(doc_id, i, f"{doc_id} chunk {i}") for i in range(n))
        return EmbeddedDocument(Document(doc_id, "t", chunks), f"fp{n}",
                                tuple(Situated(c, "", "none") for c in chunks),
                                [[1.0, float(i), 0.0, 0.0] for i in range(n)])

    with MilvusStore(str(tmp_path / "m.db")) as store:
        store.ensure_collection("c", 4, "test")
        store.write("c", [doc("a", 5), doc("b", 2)], absent={"a", "b"})
        held = store.stored_documents("c")
        assert held == {"a": StoredDocument("fp5", 5), "b": StoredDocument("fp2", 2)}
        calls: list[str] = []
        client = store.client
        for name in ("query", "query_iterator"):
            real = getattr(client, name)

            def spy(*a, _real=real, _name=name, **k):
                calls.append(_name if "offset" not in k else "offset")
                return _real(*a, **k)

            setattr(client, name, spy)
        store.write("c", [doc("a", 3)], stored={"a": held["a"].ids("a")})
        assert calls == []  # nothing read back
        assert store.stored_documents("c") == {"a": StoredDocument("fp3", 3),
                                               "b": StoredDocument("fp2", 2)}
        assert store.delete_ids("c", iter(held["b"].ids("b"))) == 2
        assert store.count("c") == 3
        assert calls and "offset" not in calls  # slices of the primary keys and a count


@pytest.mark.slow
@pytest.mark.e2e
def test_scheduled_runs_plan_from_the_manifest_and_read_only_what_changed(
        prefect_harness, state, tmp_path, counting, monkeypatch):
    """Fresh, a no-op, an update (a rewritten, a removed, an added document) and a collection
    changed behind situate's back: each run exact; a run after a situate run plans from the
    manifest (no pass over the collection) and reads again only what it processes; the tampered
    collection is read from the store, and its lost document ingested again."""
    import situate.flows.ingest as flow
    from benchmarks.bench_scale import write_corpus
    from situate.storage.milvus import MilvusStore
    from tests.helpers import ingest, open_store

    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 320)  # 40 documents of 8 chunks
    params = {"corpus": str(corpus), "collection": "sched", "context": "structural",
              "embedder": "counting", "prune": True}
    passes: list[str] = []
    real_pass = MilvusStore.stored_documents
    monkeypatch.setattr(MilvusStore, "stored_documents",
                        lambda self, c: passes.append(c) or real_pass(self, c))
    streamed: list[str] = []
    real_stream = flow.stream_corpus

    def stream(*args, **kwargs):
        for doc in real_stream(*args, **kwargs):
            streamed.append(doc.id)
            yield doc

    monkeypatch.setattr(flow, "stream_corpus", stream)

    def expected() -> dict[str, str]:
        from situate.tasks.corpus.load import load_corpus

        return {c.id: c.hash for d in load_corpus(corpus).documents for c in d.chunks}

    def stored() -> dict[str, str]:
        return {r["id"]: r["chunk_hash"] for r in open_store(state["milvus_uri"]).rows(
            "sched", fields=("id", "chunk_hash"))}

    first = ingest(**params)
    assert (first.new, first.rows) == (40, 320) and len(streamed) == 40 and passes == []
    assert set(first.seconds) >= {"scan", "plan", "read", "situate", "embed", "write", "prune",
                                  "rebuild"}
    streamed.clear()
    counting.texts = 0
    again = ingest(**params)
    assert (again.unchanged, again.chunks_written, counting.texts) == (40, 0, 0)
    assert passes == [] and streamed == []  # planned from the manifest, nothing read again

    lines = corpus.read_text().splitlines()
    rewritten = json.loads(lines[3])
    rewritten["text"] = rewritten["text"].replace("a", "e")
    added = {"id": "doc-added", "text": "an added document " * 40}
    corpus.write_text("\n".join([*lines[:3], json.dumps(rewritten), *lines[5:],
                                 json.dumps(added)]) + "\n")
    update = ingest(**params)
    assert (update.new, update.changed, update.unchanged, update.deleted_documents) == (
        1, 1, 38, 1)
    assert sorted(streamed) == sorted([rewritten["id"], "doc-added"]) and passes == []
    assert update.chunks_written == counting.texts
    assert stored() == expected() and update.rows == len(expected())

    streamed.clear()
    with MilvusStore(state["milvus_uri"]) as other:  # another tool deletes a document's rows
        lost = other.stored_documents("sched")["doc-0000007"]
        other.delete_ids("sched", lost.ids("doc-0000007"))
        other.flush("sched")
    passes.clear()
    repaired = ingest(**params)
    assert passes == ["sched"]  # the manifest no longer agrees with the store: read it
    assert (repaired.new, repaired.unchanged) == (1, 39) and streamed == ["doc-0000007"]
    assert stored() == expected()
    passes.clear()
    assert ingest(**params).unchanged == 40 and passes == []  # the manifest written anew

    # A run that fails after writing its first window (as a killed one would) leaves the
    # manifest untrusted: the corpus put back as it was is then planned from the store, and the
    # document the failed run rewrote is written back.
    before = corpus.read_text()
    docs = [json.loads(line) for line in before.splitlines()]
    for doc in docs[:3]:
        doc["text"] = doc["text"].upper()
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    real_encode = counting.encode_documents
    calls = []

    def failing(texts):
        calls.append(len(texts))
        if len(calls) > 1:
            raise RuntimeError("stopped half-way")
        return real_encode(texts)

    monkeypatch.setattr(counting, "encode_documents", failing)
    monkeypatch.setenv("SITUATE_WINDOW", "8")  # a window a document
    monkeypatch.setenv("SITUATE_EMBED_BATCH", "8")
    from situate.core.settings import get_settings

    get_settings.cache_clear()
    with pytest.raises(Exception, match="stopped half-way"):
        ingest(**params)
    monkeypatch.setattr(counting, "encode_documents", real_encode)
    upper, now = expected(), stored()
    first = [chunk_id(docs[0]["id"], n) for n in range(8)]
    assert [now[i] for i in first] == [upper[i] for i in first]  # its first window written
    corpus.write_text(before)
    passes.clear()
    restored = ingest(**params)
    assert passes == ["sched"] and restored.changed >= 1
    assert stored() == expected()


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_an_update_killed_then_run_again_ends_exact_paying_no_context_twice(
        prefect_harness, state, tmp_path, monkeypatch):
    """`situate ingest` of an updated corpus (documents rewritten, removed, added; Claude
    contexts) into a Milvus server, killed (SIGKILL to its process group) once some of its
    windows are written, then the same command: the rows equal a fresh ingest's of the updated
    corpus (ids, texts, contexts, fingerprints), and over both runs no context was paid twice
    (at most the requests in flight at the kill)."""
    import os
    import random
    import signal

    from benchmarks.bench_scale import write_corpus
    from situate.core.settings import get_settings
    from situate.storage.milvus import MilvusStore
    from tests.fakes.anthropic_server import FakeAnthropic
    from tests.fakes.milvus_server import MilvusServer
    from tests.fakes.openai_server import FakeOpenAI
    from tests.fakes.prefect_server import wait_until
    from tests.helpers import ingest
    from tests.test_stop import _env, _start

    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 240)  # 30 documents of 8 chunks
    lines = corpus.read_text().splitlines()
    rewritten = sorted(random.Random(35).sample(range(2, 30), 12))
    updated = []
    for i, line in enumerate(lines[2:], start=2):  # the first two removed
        doc = json.loads(line)
        if i in rewritten:
            doc["text"] = " ".join(reversed(doc["text"].split(" ")))
        updated.append(json.dumps(doc))
    updated.append(json.dumps({"id": "added", "text": "a document added later " * 60}))
    (tmp_path / "updated.jsonl").write_text("\n".join(updated) + "\n")
    changed_chunks = 12 * 8 + 2  # the added document is two chunks
    key, concurrency = "sk-ant-update", 4
    server = MilvusServer(tmp_path / "milvus")
    server.start()
    try:
        with (FakeAnthropic(api_key=key, latency=0.05) as claude, FakeOpenAI() as embeddings,
              MilvusStore(server.uri) as watcher):
            fakes = {"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": claude.base_url,
                     "OPENAI_API_KEY": embeddings.api_key,
                     "OPENAI_BASE_URL": embeddings.base_url + "/v1"}
            for name, value in fakes.items():
                monkeypatch.setenv(name, value)
            get_settings.cache_clear()
            env = _env(tmp_path, tmp_path / "prefect", SITUATE_MILVUS_URI=server.uri, **fakes)
            common = {"embedder": "openai", "context": "anthropic", "prune": True,
                      "concurrency": concurrency, "milvus_uri": server.uri}
            ingest(corpus=str(corpus), collection="kept", **common)  # in this process
            before = claude.messages_ok
            first = json.loads(updated[rewritten[0] - 2])["id"]
            old_fp = watcher.fingerprints("kept", [first])[first]
            command = ["ingest", str(tmp_path / "updated.jsonl"), "--collection", "kept",
                       "--embedder", "openai", "--context", "anthropic", "--prune",
                       "--concurrency", str(concurrency)]
            small = {**env, "SITUATE_WINDOW": "24", "SITUATE_WRITE_BATCH": "8"}
            proc = _start(command, tmp_path, small)
            wait_until(lambda: watcher.client.get("kept", ids=list(old_fp), output_fields=[
                "doc_hash"])[0]["doc_hash"] != next(iter(old_fp.values())), 300,
                "the update's first rewritten document written")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
            killed_at = claude.messages_ok - before
            assert killed_at < changed_chunks, "the update finished before it was killed"
            again = _start(command, tmp_path, small)  # the same command again
            out, err = again.communicate(timeout=600)
            assert again.returncode == 0 and "Traceback" not in out + err, err[-3000:]
            paid = claude.messages_ok - before
            assert changed_chunks <= paid <= changed_chunks + concurrency, (killed_at, paid)
            ingest(corpus=str(tmp_path / "updated.jsonl"), collection="fresh", **common)
            assert claude.messages_ok - before == paid  # the reference's contexts all cached
            fields = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash", "chunk_hash")
            kept = sorted(tuple(r[f] for f in fields) for r in watcher.rows("kept", fields))
            fresh = sorted(tuple(r[f] for f in fields) for r in watcher.rows("fresh", fields))
            assert kept == fresh and len(kept) == 28 * 8 + 2
    finally:
        server.stop()
