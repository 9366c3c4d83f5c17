"""Milvus round trips on Milvus Lite: schema, idempotent upserts, deletes, the three search modes."""

from __future__ import annotations

import pytest

from storage.milvus import ChunkStore, lexical_text
from tasks.errors import StoreError
from tests.conftest import HashEmbedding

EMB = HashEmbedding()
TEXTS = {
    ("a.py", 0): "def lease(queue): take the oldest visible job and hide it",
    ("a.py", 1): "def ack(job): delete the job for good after success",
    ("b.md", 0): "Backups: copy the sqlite file with the backup command",
    ("b.md", 1): "Alerts: queue depth above its usual level means stuck workers",
    ("c.rs", 0): "fn next_delay(attempt) computes DiffExecutor backoff with full jitter",
}


def row(doc_id: str, index: int, text: str, context: str = "ctx") -> dict:
    from tasks.records import chunk_id

    return {"id": chunk_id(doc_id, index), "doc_id": doc_id, "chunk_index": index, "text": text,
            "context": context, "doc_hash": "h", "chunk_hash": "c", "metadata": {"k": doc_id},
            "lexical": lexical_text(f"{context}\n\n{text}"), "dense": EMB._one(text)}


@pytest.fixture
def store(tmp_path):
    s = ChunkStore(str(tmp_path / "m.db"))
    s.ensure_collection("chunks", EMB.dim, "hash:bow-64")
    s.upsert("chunks", [row(d, i, t) for (d, i), t in TEXTS.items()])
    yield s
    s.close()


def test_upsert_twice_keeps_one_row_per_chunk(store):
    store.upsert("chunks", [row(d, i, t) for (d, i), t in TEXTS.items()])
    assert store.count("chunks") == len(TEXTS)
    store.upsert("chunks", [row("a.py", 0, "changed text", "new ctx")])
    got = {r["id"]: r for r in store.rows("chunks")}
    assert len(got) == len(TEXTS)
    from tasks.records import chunk_id

    assert got[chunk_id("a.py", 0)]["text"] == "changed text"
    assert got[chunk_id("a.py", 0)]["context"] == "new ctx"


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_each_mode_finds_the_chunk_sharing_the_query_words(store, mode):
    query = "how is a job deleted after success"
    hits = store.search("chunks", mode, query, EMB._one(query), 3)
    assert hits[0].doc_id == "a.py" and hits[0].index == 1
    assert hits[0].context == "ctx" and hits[0].metadata == {"k": "a.py"}
    # BM25 returns only chunks sharing a term ("job"); the others rank every chunk.
    assert len(hits) == (2 if mode == "bm25" else 3)


def test_bm25_matches_the_parts_of_compound_identifiers(store):
    hits = store.search("chunks", "bm25", "diff executor", None, 1)
    assert hits[0].doc_id == "c.rs"
    assert "diff executor" in lexical_text("DiffExecutor")
    assert "run target" in lexical_text("run_target")


def test_delete_by_document_and_by_id(store):
    store.delete_documents("chunks", ["b.md"])
    assert sorted({r["doc_id"] for r in store.rows("chunks")}) == ["a.py", "c.rs"]
    from tasks.records import chunk_id

    store.delete_ids("chunks", [chunk_id("a.py", 1)])
    assert store.count("chunks") == 2


def test_a_collection_from_another_embedder_is_refused(store):
    with pytest.raises(StoreError, match="holds 64-d vectors from hash:bow-64"):
        store.ensure_collection("chunks", 384, "minilm:all-MiniLM-L6-v2")


def test_reopening_the_file_reads_the_same_rows(tmp_path):
    s = ChunkStore(str(tmp_path / "m.db"))
    s.ensure_collection("chunks", EMB.dim, "hash:bow-64")
    s.upsert("chunks", [row(d, i, t) for (d, i), t in TEXTS.items()])
    s.close()
    again = ChunkStore(str(tmp_path / "m.db"))
    assert again.count("chunks") == len(TEXTS)
    assert again.search("chunks", "bm25", "jitter", None, 1)[0].doc_id == "c.rs"
    again.close()


def test_missing_collection_and_bad_names(tmp_path):
    s = ChunkStore(str(tmp_path / "m.db"))
    with pytest.raises(StoreError, match="run `situate ingest CORPUS --collection nope` first"):
        s.require("nope")
    with pytest.raises(StoreError, match="invalid collection name"):
        s.exists("bad-name!")
    s.close()
