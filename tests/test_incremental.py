"""Scheduled re-ingest of the codebase dataset: an unchanged corpus costs nothing, and after
3 changed / 2 deleted / 1 added documents exactly those are processed and the rows are exact."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_reingest import expected_rows, mutate, processed_documents, stored_rows
from tests.conftest import CODEBASE
from tests.fakes.milvus_server import snapshot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_reingest_does_only_what_changed(prefect_harness, state, tmp_path, counting):
    from tests.helpers import ingest

    original = json.loads((CODEBASE / "codebase_chunks.json").read_text())
    corpus = tmp_path / "codebase_chunks.json"
    corpus.write_text(json.dumps(original))
    params = {"corpus": str(corpus), "collection": "incremental", "context": "structural",
              "embedder": "counting", "prune": True}
    total_chunks = sum(len(d["chunks"]) for d in original)

    first = ingest(**params)
    assert (first.new, first.rows, first.chunks_written) == (90, total_chunks, total_chunks)
    assert counting.texts == total_chunks
    before = snapshot(state["milvus_uri"], "incremental")

    counting.texts = 0
    with processed_documents() as situated:
        again = ingest(**params)
    assert situated == []  # nothing situated at all
    assert counting.texts == 0
    assert (again.unchanged, again.new, again.changed, again.deleted_documents) == (90, 0, 0, 0)
    assert (again.chunks_written, again.chunks_deleted) == (0, 0)
    assert again.contexts_generated == again.contexts_from_cache == again.requests == 0
    assert snapshot(state["milvus_uri"], "incremental") == before

    mutated, what = mutate(original)
    corpus.write_text(json.dumps(mutated))
    with processed_documents() as situated:
        summary = ingest(**params)
    touched = sorted(what["changed"] + what["added"])
    assert situated == touched
    new_chunks = sum(len(d["chunks"]) for d in mutated if d["doc_id"] in touched)
    assert counting.texts == summary.chunks_written == new_chunks
    assert (summary.new, summary.changed, summary.unchanged, summary.deleted_documents) == (
        1, 3, 85, 2)
    expected = expected_rows(corpus)
    assert summary.rows == sum(len(v) for v in expected.values()) == total_chunks - sum(
        len(d["chunks"]) for d in original if d["doc_id"] in what["deleted"]) + 2
    stored = stored_rows(state["milvus_uri"], "incremental", sorted(expected) + what["deleted"])
    for doc_id in what["deleted"]:
        assert stored[doc_id] == []
    for doc_id, rows in expected.items():
        assert stored[doc_id] == rows, doc_id
    # Untouched documents kept their rows byte for byte (context and fingerprint included).
    after = snapshot(state["milvus_uri"], "incremental")
    untouched = set(expected) - set(touched)
    assert [r for r in after if r[1] in untouched] == [r for r in before if r[1] in untouched]
