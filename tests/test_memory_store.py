"""The store held in memory (`memory://NAME`): the ChunkStore contract, and what is particular to
it (shared within the process by URI, never sent to another, no upkeep), and the Retriever, the
ingest's plan and the ingest flow over it: none of them needs a store's upkeep."""

from __future__ import annotations

import pickle
import uuid

import pytest

from situate.core.errors import StoreError
from situate.core.protocols import StoreSpec
from situate.storage import open_existing, open_store
from situate.storage.memory import MemoryStore, tokens
from situate.testing.store import EMB, EMBEDDER, ROWS, C, StoreContract, corpus, stored


def _uri() -> str:
    return f"memory://test-{uuid.uuid4().hex}"


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self):
        s = open_store(_uri())
        yield s
        s.close()


@pytest.fixture
def loaded():
    s = open_store(_uri())
    s.ensure_collection(C, EMB.dim, EMBEDDER)
    s.write(C, corpus())
    return s


def test_open_store_names_it_by_its_uri_and_stores_on_one_uri_share_it(loaded):
    assert isinstance(loaded, MemoryStore) and loaded.upkeep is None
    assert loaded.spec == StoreSpec(loaded.uri)  # opened again on it, in this process only
    again = open_existing(loaded.uri, C)
    assert again.count(C) == ROWS and stored(again) == stored(loaded)
    loaded.close()  # nothing is let go: the collection stays for the process
    assert open_store(loaded.uri).count(C) == ROWS
    assert not open_store(_uri()).exists(C)


def test_it_is_never_sent_to_another_process(loaded):
    with pytest.raises(StoreError, match="held in this process's memory"):
        pickle.dumps(loaded)


def test_a_vector_of_another_dimension_is_refused(loaded):
    from situate.testing.store import embedded

    doc = embedded("x.md", ["short"])
    bad = type(doc)(doc.doc, doc.fingerprint, doc.situated, [[1.0, 0.0]])
    with pytest.raises(StoreError, match="holds 64-d vectors, not 2-d"):
        loaded.write(C, [bad])
    assert loaded.count(C) == ROWS


def test_bm25_terms_are_lowercased_words_without_stop_words():
    assert tokens("The DiffExecutor runs run_target, then stops.") == [
        "diffexecutor", "runs", "run_target", "stops"]


def test_bm25_scores_rarer_terms_higher_and_only_chunks_sharing_a_term(loaded):
    ranked = loaded.ranking(C, "bm25", "sqlite jitter", None, 10)
    assert {i for i, _ in ranked} == {r["id"] for r in loaded.rows(C)
                                     if "sqlite" in r["text"] or "jitter" in r["text"]}
    scores = loaded.leg_scores(C, "bm25", "sqlite jitter", None, [i for i, _ in ranked] + ["x"])
    assert scores == {**dict(ranked), "x": 0.0}


def test_the_retriever_searches_it(loaded):
    from situate.api.retriever import Retriever

    with Retriever(C, loaded.uri, embedder="hash") as r:
        assert r.uri == loaded.uri and r.describe().rows == ROWS
        for mode in ("dense", "bm25", "hybrid"):
            assert r.search("how is a job deleted after success", 2, mode)[0].doc_id == "a.py"


def test_an_ingest_plans_from_its_rows_with_no_manifest(loaded, tmp_path):
    from situate.pipeline.plan import read_contents

    held = read_contents(loaded, C, str(tmp_path))
    assert held.source == "store" and held.rows == ROWS
    assert held.documents == loaded.stored_documents(C) and set(held.documents) == {
        d.doc.id for d in corpus()}
    assert not (tmp_path / "manifests").exists()


@pytest.mark.slow
@pytest.mark.e2e
def test_the_ingest_flow_keeps_a_store_without_upkeep_up_to_date(prefect_harness, state, tmp_path,
                                                                   monkeypatch):
    """The ingest flow over a store that has no upkeep (no drift, rebuild, flush or manifest):
    a first run, an unchanged one, then one with a document changed and one deleted, which
    leaves the rows a fresh ingest of the same corpus writes."""
    import shutil

    from tests.conftest import SAMPLE_CORPUS
    from tests.helpers import ingest

    uri = _uri()
    monkeypatch.setattr("situate.pipeline.resources.open_store",
                        lambda _uri, token="", **kw: open_store(uri))
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLE_CORPUS, corpus)
    params = {"corpus": str(corpus), "collection": "mem", "context": "structural",
              "embedder": "hash", "prune": True}
    store = open_store(uri)

    first = ingest(**params)
    assert first.rows == store.count("mem") == first.chunks_written > 0
    assert (first.drift_rows, first.rebuilt) == (0, False)
    assert not (tmp_path / "cache" / "manifests").exists()  # nothing to stamp one with
    again = ingest(**params)
    assert (again.new, again.changed, again.chunks_written) == (0, 0, 0)

    files = sorted(p for p in corpus.rglob("*") if p.is_file())
    files[0].write_text(files[0].read_text() + "\n\nA new closing paragraph about walruses.\n")
    files[1].unlink()
    changed = ingest(**params)
    assert (changed.changed, changed.deleted_documents, changed.rebuilt) == (1, 1, False)
    fields = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash")
    kept = sorted(tuple(r[f] for f in fields) for r in store.rows("mem", fields))
    monkeypatch.setattr("situate.pipeline.resources.open_store",
                        lambda _uri, token="", **kw: open_store(uri + "-fresh"))
    fresh = ingest(**params)
    assert fresh.rows == changed.rows == len(kept)
    assert kept == sorted(tuple(r[f] for f in fields)
                          for r in open_store(uri + "-fresh").rows("mem", fields))
    walruses = store.leg_search("mem", "bm25", "walruses", None, 1)
    assert walruses[0].doc_id == files[0].relative_to(corpus).as_posix()
