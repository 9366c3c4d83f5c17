"""A collection kept up to date searches like a fresh one, on Milvus Lite and on a
Milvus server (`milvus-lite server`).

Milvus Lite's BM25 statistics count the rows deleted or overwritten in a stored segment, and a
later run's rows sit in a segment of their own; a rebuild from the collection's own rows, in
corpus order, gives statistics (and tie order) identical to a fresh ingest's. Each store-level
test first shows the difference exists (so it can fail), then that the rebuild removes it, that
it keeps every row and field, and that a rebuild stopped at any step loses nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from benchmarks.drift import drifted
from situate.core.errors import CollectionNotFound
from situate.storage.generations import DRIFT, generation_name
from situate.storage.milvus import MilvusStore
from situate.storage.rows import INPUT_FIELDS, collection_schema
from tests.conftest import CODEBASE
from tests.fakes.milvus_server import milvus_server
from tests.store_contract import EMB, EMBEDDER, embedded

QUERIES = [json.loads(line)["query"]
           for line in (CODEBASE / "evaluation_set.jsonl").read_text().splitlines()[:60]
           ]


@pytest.fixture(scope="module")
def server_uri(tmp_path_factory) -> Iterator[str]:
    with milvus_server(tmp_path_factory.mktemp("rebuild-server") / "data") as uri:
        yield uri


@pytest.fixture(params=["lite", pytest.param("server", marks=pytest.mark.slow)])
def store(request, tmp_path) -> Iterator[MilvusStore]:
    uri = str(tmp_path / "m.db") if request.param == "lite" else request.getfixturevalue("server_uri")
    s = MilvusStore(uri)
    yield s
    for name in s.client.list_collections():
        s.client.drop_collection(name)
    s.close()


def documents(corpus: list[dict]) -> list:
    return [embedded(d["doc_id"], [c["content"] for c in d["chunks"]],
                     indexes=[c["original_index"] for c in d["chunks"]], context="")
            for d in corpus]


def true_corpus() -> list[dict]:
    return json.loads((CODEBASE / "codebase_chunks.json").read_text())


def build(store: MilvusStore, name: str, corpus: list[dict]) -> None:
    """`name` holding `corpus` written in one go and flushed: one stored segment."""
    store.ensure_collection(name, EMB.dim, EMBEDDER)
    store.write(name, documents(corpus))
    store.client.flush(name)


def update(store: MilvusStore, name: str, corpus: list[dict], old: list[dict]) -> int:
    """What an incremental ingest with --prune does: the documents new or changed since `old`
    rewritten, those gone deleted; the drift it records. Returns the rows written or deleted."""
    ids = {d["doc_id"] for d in corpus}
    gone = sorted(store.document_ids(name) - ids)
    before = {d["doc_id"]: d["chunks"] for d in old}
    written = store.write(name, documents([d for d in corpus
                                           if before.get(d["doc_id"]) != d["chunks"]]))
    deleted = store.delete_documents(name, gone)
    store.add_drift(name, written + deleted)
    return written + deleted


def bm25(store: MilvusStore, name: str) -> list[list[tuple[str, float]]]:
    return [[(h.id, round(h.score, 5)) for h in store.leg_search(name, "bm25", q, None, 20)]
            for q in QUERIES]


def every_row(store: MilvusStore, name: str) -> dict[str, dict]:
    rows = {r["id"]: r for r in store.rows(name, fields=INPUT_FIELDS)}
    for r in rows.values():
        r["dense"] = [round(float(x), 6) for x in r["dense"]]
    return rows


def test_a_rebuild_makes_bm25_score_as_a_fresh_collection_and_keeps_every_row(store):
    true = true_corpus()
    old, _ = drifted(true)
    build(store, "fresh", true)
    build(store, "kept", old)
    assert store.drift("kept") == 0  # built in one go
    changed = update(store, "kept", true, old)
    store.client.flush("kept")  # what the end of the run's process (or a server restart) does
    assert store.drift("kept") == changed > 0
    rows = every_row(store, "kept")
    assert rows == every_row(store, "fresh")  # the same rows...
    # situate's BM25 on Lite (the lexical index: whole-collection statistics) needs no rebuild
    assert bm25(store, "kept") == bm25(store, "fresh")
    store.native_bm25 = True  # Milvus's own BM25, as a server computes it, per segment here
    assert bm25(store, "kept") != bm25(store, "fresh")  # ...scored on other statistics

    assert store.rebuild("kept", [d["doc_id"] for d in true]) == len(rows)
    assert bm25(store, "kept") == bm25(store, "fresh")  # ids, order and scores
    assert every_row(store, "kept") == rows
    assert store.drift("kept") == 0
    assert store.generations.physical("kept") == generation_name("kept", 2)
    assert sorted(store.client.list_collections()) == ["fresh__g1", "kept__g2"]
    assert store.describe("kept").embedder == EMBEDDER


def legacy(store: MilvusStore, corpus: list[dict]) -> dict[str, dict]:
    """A collection `legacy` as situate made them before aliases: a physical collection under the
    user's name, holding `corpus`; returns its rows."""
    store.client.create_collection("legacy", schema=collection_schema(store.client, EMB.dim),
                                   consistency_level="Strong",
                                   properties={"situate.embedder": EMBEDDER})
    store.index_and_load("legacy")
    store.write("legacy", documents(corpus))
    return every_row(store, "legacy")


class Stop(BaseException):
    """A kill, as far as the code under it can tell: nothing after it runs."""


@pytest.mark.parametrize("at", ["copying", "flushing", "switching", "dropping"])
def test_a_rebuild_stopped_at_any_step_loses_nothing(store, monkeypatch, at):
    true = true_corpus()
    old = drifted(true)[0]
    build(store, "kept", old)
    update(store, "kept", true, old)
    rows = every_row(store, "kept")
    client = type(store.client)
    steps = {"copying": "upsert", "flushing": "flush", "switching": "alter_alias",
             "dropping": "drop_collection"}
    real = getattr(client, steps[at])
    calls = []

    def stop(self, name, *args, **kwargs):
        calls.append(name)
        # copying: the second upsert of the copy (one is in); dropping: the old generation's drop,
        # after the switch
        if name.startswith("kept__g") and len(calls) >= (2 if at == "copying" else 1):
            raise Stop()
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(client, steps[at], stop)
    with pytest.raises(Stop):
        store.rebuild("kept", [d["doc_id"] for d in true])
    monkeypatch.undo()
    # Stopped: the name still stands for a whole collection, the same rows.
    assert store.count("kept") == len(rows) and every_row(store, "kept") == rows
    assert len(store.leg_search("kept", "bm25", QUERIES[0], None, 5)) == 5
    # The same command again: tidied, rebuilt, exact.
    store.tidy("kept")
    physical = store.generations.physical("kept")
    assert store.client.list_collections() == [physical]
    if at == "dropping":
        assert store.drift("kept") == 0  # switched before the stop: it is the rebuilt one
    else:
        assert store.drift("kept") > 0
        store.rebuild("kept", [d["doc_id"] for d in true])
    assert every_row(store, "kept") == rows
    assert len(store.client.list_collections()) == 1


def test_a_collection_from_before_aliases_is_rebuilt_into_generations(store):
    """Collections situate made before generations existed are physical collections under the
    user's name."""
    corpus = true_corpus()[:10]
    rows = legacy(store, corpus)
    assert store.drift("legacy") == 0 and store.generations.physical("legacy") == "legacy"
    store.rebuild("legacy", [d["doc_id"] for d in corpus])
    assert store.generations.physical("legacy") == "legacy__g1"
    assert store.client.list_collections() == ["legacy__g1"]
    assert every_row(store, "legacy") == rows


def test_a_stop_between_the_rename_and_the_alias_of_a_collection_from_before_aliases(store):
    corpus = true_corpus()[:10]
    rows = legacy(store, corpus)
    store.client.rename_collection("legacy", "legacy__g0")  # as the first rebuild's switch does
    assert not store.exists("legacy")
    store.tidy("legacy")  # what the next ingest does first
    assert store.generations.physical("legacy") == "legacy__g0"
    assert every_row(store, "legacy") == rows


def test_drift_adds_up_and_lives_with_the_collection(store):
    store.ensure_collection("c", EMB.dim, EMBEDDER)
    assert store.drift("c") == 0
    assert store.add_drift("c", 5) == 5 and store.add_drift("c", 0) == 5
    assert store.add_drift("c", 7) == 12
    info = store.client.describe_collection(generation_name("c", 1))
    assert info["properties"][DRIFT] == "12"
    with pytest.raises(CollectionNotFound):
        store.rebuild("missing", [])


def test_drop_removes_the_alias_and_every_generation(store):
    build(store, "c", true_corpus()[:5])
    store.add_drift("c", 3)
    store.rebuild("c", [])
    store.client.create_collection(generation_name("c", 7), dimension=4)  # a leftover
    store.drop("c")
    assert store.client.list_collections() == [] and not store.exists("c")
