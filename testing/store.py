"""The `ChunkStore` contract as small capability mixins, for situate's own stores and any
package's (haystack's `haystack/testing/document_store.py` does the same): a store's test module
subclasses the mixins of what it does and gives them a `store` fixture.

    from situate.testing.store import StoreContract, UpkeepContract

    class TestMyStore(StoreContract):            # collections, writes, searches, its spec
        @pytest.fixture
        def store(self):
            s = open_store("mystore://test")     # no collection named contract_* in it yet
            yield s
            s.close()

`CollectionsContract`, `WriteContract`, `SearchContract` and `SpecContract` (opened again from
its `spec`, as a Dask worker opens it) each hold one capability's tests, `StoreContract` all
four; `UpkeepContract` is for a store that needs upkeep (`ChunkStore.upkeep`). Vectors come
from `situate.testing.fakes.HashEmbedding`: no model. pytest collects the subclasses only (these
classes' names do not start with `Test`); the module needs pytest, which situate does not
install.
"""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

from situate.cli.messages import user_message
from situate.core.errors import CollectionNotFound, StoreError
from situate.core.fusion import FUSIONS
from situate.core.protocols import LEGS, ChunkStore, SearchStore, StoreSpec, StoreUpkeep
from situate.core.records import (
    Chunk,
    CollectionInfo,
    Document,
    EmbeddedDocument,
    Hit,
    Situated,
    StoredDocument,
    chunk_id,
    sha256,
)
from situate.storage import reopen, scheme
from situate.tasks.retrieval.search import mode_search
from situate.testing.fakes import HashEmbedding

EMB = HashEmbedding()
EMBEDDER = "hash:bow-64"
C = "contract_chunks"
CORPUS = {
    "a.py": ["def lease(queue): take the oldest visible job and hide it",
             "def ack(job): delete the job for good after success"],
    "b.md": ["Backups: copy the sqlite file with the backup command",
             "Alerts: queue depth above its usual level means stuck workers"],
    "c.rs": ["fn next_delay(attempt) computes DiffExecutor backoff with full jitter"],
}
ROWS = sum(len(t) for t in CORPUS.values())


def embedded(doc_id: str, texts: list[str], context: str = "ctx", pipeline: str = "p1",
             indexes: list[int] | None = None, title: str = "") -> EmbeddedDocument:
    """One document as the ingest flow hands it to a store: chunks, contexts, vectors, fingerprint."""
    chunks = tuple(Chunk(doc_id, i, t) for i, t in zip(indexes or range(len(texts)), texts, strict=True))
    doc = Document(doc_id, "".join(texts), chunks, title, {"k": doc_id})
    situated = tuple(Situated(c, context) for c in chunks)
    return EmbeddedDocument(doc, sha256(f"{pipeline}\x1f{doc.hash}"), situated,
                            [EMB._one(s.indexed_text) for s in situated])


def corpus(**kwargs: Any) -> list[EmbeddedDocument]:
    return [embedded(d, texts, **kwargs) for d, texts in CORPUS.items()]


def stored(store: ChunkStore, collection: str = C) -> dict[str, dict[str, Any]]:
    """id -> row, every field a reader of the collection sees."""
    fields = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash", "chunk_hash", "metadata")
    return {r["id"]: r for r in store.rows(collection, fields=fields)}


def fingerprints(store: ChunkStore, collection: str = C) -> dict[str, dict[str, str]]:
    """doc id -> {chunk id: fingerprint} of the stored rows (as `MilvusStore.fingerprints`)."""
    found: dict[str, dict[str, str]] = {}
    for r in store.rows(collection, fields=("id", "doc_id", "doc_hash")):
        found.setdefault(r["doc_id"], {})[r["id"]] = r["doc_hash"]
    return found


class StoreFixtures:
    """The fixtures every mixin uses; a subclass provides `store`: an open store in which no
    collection named `contract_*` exists yet (the subclass cleans up after itself)."""

    bad_name: str | None = "bad-name!"  # a collection name the store refuses

    @pytest.fixture
    def loaded(self, store: ChunkStore) -> ChunkStore:
        """The store with collection C holding CORPUS."""
        store.ensure_collection(C, EMB.dim, EMBEDDER)
        assert store.write(C, corpus()) == ROWS
        return store


class CollectionsContract(StoreFixtures):
    """Collections: the protocol's methods with their signatures, a collection created once and
    described, another embedder's vectors refused, the ingest recorded, a missing collection and
    a bad name refused (`bad_name`, None for a store that takes any name)."""

    def test_implements_every_protocol_method_with_its_signature(self, store: ChunkStore) -> None:
        assert isinstance(store, ChunkStore) and isinstance(store.uri, str)
        assert isinstance(store.spec, StoreSpec)
        parts: tuple[type, ...] = (SearchStore, ChunkStore)
        if store.upkeep is not None:  # optional: a store that needs none has None
            assert isinstance(store.upkeep, StoreUpkeep)
            parts += (StoreUpkeep,)
        members = {n: (part, m) for part in parts for n, m in vars(part).items()}
        for name, (part, member) in members.items():
            if name.startswith("_") or not callable(member):
                continue
            want = list(inspect.signature(member).parameters.values())[1:]  # without self
            owner = store.upkeep if part is StoreUpkeep else store
            got = list(inspect.signature(getattr(owner, name)).parameters.values())
            assert [p.name for p in got[:len(want)]] == [p.name for p in want], name
            assert [p.default is p.empty for p in got[:len(want)]] == [
                p.default is p.empty for p in want], name
            assert all(p.default is not p.empty for p in got[len(want):]), name

    def test_ensure_collection_creates_once_and_describes_it(self, store: ChunkStore) -> None:
        assert not store.exists(C)
        store.ensure_collection(C, EMB.dim, EMBEDDER)
        assert store.exists(C)
        assert store.describe(C) == CollectionInfo(EMB.dim, EMBEDDER)
        assert store.count(C) == 0 and fingerprints(store) == {}
        assert store.stored_documents(C) == {}
        store.ensure_collection(C, EMB.dim, EMBEDDER)  # again: a no-op
        store.require_embedder(C, EMBEDDER)
        store.require_embedder(C, "hash")  # by name alone: whichever model it holds
        assert store.count(C) == 0

    def test_a_collection_from_another_embedder_is_refused(self, loaded: ChunkStore) -> None:
        with pytest.raises(StoreError, match="holds 64-d vectors from hash:bow-64"):
            loaded.ensure_collection(C, 384, "minilm:all-MiniLM-L6-v2")
        with pytest.raises(StoreError, match="from hash:bow-64, not 64-d from other:model"):
            loaded.ensure_collection(C, EMB.dim, "other:model")
        with pytest.raises(StoreError, match="holds vectors from hash:bow-64, not other:model"):
            loaded.require_embedder(C, "other:model")
        assert loaded.count(C) == ROWS

    def test_a_collection_records_how_its_embedder_ran_and_its_last_ingest(self, store: ChunkStore) -> None:
        store.ensure_collection(C, EMB.dim, EMBEDDER, backend="onnx", precision="fp32")
        info = store.describe(C)
        assert (info.backend, info.precision) == ("onnx", "fp32")
        # Another backend or precision of the same model is the same vector space: not refused.
        store.ensure_collection(C, EMB.dim, EMBEDDER, backend="torch", precision="fp16")
        assert store.describe(C) == info
        store.record_ingest(C, "structural", "2026-01-02T03:04:05+00:00")
        assert store.describe(C) == CollectionInfo(EMB.dim, EMBEDDER, "structural",
                                                   "2026-01-02T03:04:05+00:00", "onnx", "fp32")

    def test_missing_collection_and_bad_names(self, store: ChunkStore) -> None:
        with pytest.raises(CollectionNotFound, match="'contract_nope' not found") as missing:
            store.require("contract_nope")
        # the store names no flag; the CLI says the command
        assert "--" not in str(missing.value)
        assert user_message(missing.value).endswith(
            "run `situate ingest CORPUS --collection contract_nope` first")
        if self.bad_name is not None:
            with pytest.raises(StoreError, match="invalid collection name"):
                store.exists(self.bad_name)
        assert not store.exists("contract_nope")

class WriteContract(StoreFixtures):
    """Writes: whole documents replaced, re-writes idempotent, fields cut to fit, deletes by id."""

    def test_write_builds_every_field_of_the_rows(self, loaded: ChunkStore) -> None:
        rows = stored(loaded)
        assert loaded.count(C) == len(rows) == ROWS
        for doc in corpus():
            for s in doc.situated:
                row = rows[chunk_id(doc.doc.id, s.chunk.index)]
                assert (row["doc_id"], row["chunk_index"], row["text"], row["context"]) == (
                    doc.doc.id, s.chunk.index, s.chunk.text, "ctx")
                assert row["doc_hash"] == doc.fingerprint and row["chunk_hash"] == sha256(s.chunk.text)
                assert row["metadata"] == {"k": doc.doc.id, "title": ""}

    def test_rewriting_the_same_documents_changes_nothing(self, loaded: ChunkStore) -> None:
        before = stored(loaded)
        assert loaded.write(C, corpus()) == ROWS
        after = stored(loaded)
        assert after == before and loaded.count(C) == ROWS
        ids = [r["id"] for r in loaded.rows(C, fields=("id",))]
        assert len(ids) == len(set(ids)) == ROWS

    def test_a_changed_document_replaces_its_rows_and_loses_its_stale_chunks(
            self, loaded: ChunkStore) -> None:
        before = stored(loaded)
        new = embedded("a.py", ["def lease(queue): changed text"], context="new ctx", pipeline="p2")
        assert loaded.write(C, [new]) == 1
        after = stored(loaded)
        assert loaded.count(C) == len(after) == ROWS - 1
        row = after[chunk_id("a.py", 0)]
        assert (row["text"], row["context"], row["doc_hash"]) == (
            "def lease(queue): changed text", "new ctx", new.fingerprint)
        assert chunk_id("a.py", 1) not in after
        # The other documents keep their rows field for field.
        assert {k: v for k, v in after.items() if v["doc_id"] != "a.py"} == {
            k: v for k, v in before.items() if v["doc_id"] != "a.py"}
        # Chunk indexes need not be contiguous (pre-chunked input keeps its original indexes).
        loaded.write(C, [embedded("d.txt", ["one", "two", "three"], indexes=[0, 5, 9])])
        loaded.write(C, [embedded("d.txt", ["one", "seven"], indexes=[0, 7], pipeline="p2")])
        assert set(fingerprints(loaded)["d.txt"]) == {chunk_id("d.txt", 0), chunk_id("d.txt", 7)}

    def test_a_document_larger_than_a_batch_is_written_and_replaced_whole(self, loaded: ChunkStore) -> None:
        big = [f"chunk number {i} of the long document" for i in range(1_100)]
        assert loaded.write(C, [embedded("big.txt", big)], batch_size=256) == 1_100
        ids = [r["id"] for r in loaded.rows(C, fields=("id",))]  # more rows than one page
        assert len(ids) == len(set(ids)) == ROWS + 1_100
        assert loaded.write(C, [*corpus(), embedded("big.txt", big[:600], pipeline="p2")],
                            batch_size=256) == ROWS + 600
        assert loaded.count(C) == ROWS + 600
        fps = fingerprints(loaded)["big.txt"]
        assert set(fps) == {chunk_id("big.txt", i) for i in range(600)}
        assert set(fps.values()) == {embedded("big.txt", big[:600], pipeline="p2").fingerprint}

    def test_over_long_fields_are_cut_to_fit_and_an_over_long_chunk_is_refused(
            self, loaded: ChunkStore) -> None:
        long_text = "zebrafinch opens the chunk " + "filler words " * 1_500 + "quokka closes it"
        long_context = "walrus context " + "x" * 9_000 + " narwhal"
        loaded.write(C, [embedded("long.txt", [long_text], context=long_context)])
        row = stored(loaded)[chunk_id("long.txt", 0)]
        assert row["text"] == long_text  # the chunk itself is never cut
        assert long_context.startswith(row["context"]) and 0 < len(row["context"].encode()) <= 8_192
        assert len(row["context"]) < len(long_context)
        # The BM25 text (chunk, then context) is cut too: its start is indexed, its end is not.
        hits = loaded.leg_search(C, "bm25", "zebrafinch", None, 3)
        assert [h.doc_id for h in hits] == ["long.txt"]
        assert loaded.leg_search(C, "bm25", "narwhal", None, 3) == []

        too_long = embedded("huge.txt", ["short chunk", "é" * 40_000])  # 80,000 bytes
        with pytest.raises(StoreError, match=r"huge.txt', chunk 1 is 80000 bytes.*split it"):
            loaded.write(C, [too_long])
        assert "huge.txt" not in fingerprints(loaded)
        assert loaded.count(C) == ROWS + 1

    def test_a_document_with_more_chunks_than_vectors_is_refused(self, loaded: ChunkStore) -> None:
        doc = embedded("odd.txt", ["one", "two"])
        bad = EmbeddedDocument(doc.doc, doc.fingerprint, doc.situated, doc.vectors[:1])
        with pytest.raises(StoreError, match="2 chunks but 1 vectors"):
            loaded.write(C, [bad])
        assert loaded.count(C) == ROWS

    def test_stored_documents_are_each_documents_fingerprint_and_chunks(self, loaded: ChunkStore) -> None:
        assert fingerprints(loaded) == {
            d.doc.id: {s.chunk.id: d.fingerprint for s in d.situated} for d in corpus()}
        assert loaded.stored_documents(C) == {
            d.doc.id: StoredDocument(d.fingerprint, len(d.situated)) for d in corpus()}

    def test_delete_by_id(self, loaded: ChunkStore) -> None:
        gone = [chunk_id("b.md", 0), chunk_id("b.md", 1), chunk_id("a.py", 1)]
        assert loaded.delete_ids(C, gone) == 3
        loaded.delete_ids(C, gone)  # again: a no-op (Milvus counts the ids asked, not found)
        assert sorted({r["doc_id"] for r in loaded.rows(C)}) == ["a.py", "c.rs"]
        assert loaded.count(C) == 2
        assert loaded.delete_ids(C, []) == 0
        assert set(fingerprints(loaded)) == {"a.py", "c.rs"}

class SearchContract(StoreFixtures):
    """Reads and searches: rows, each leg and hybrid over them, rankings, ties broken by id."""

    def test_rows_yields_the_fields_asked_for(self, loaded: ChunkStore) -> None:
        rows = list(loaded.rows(C, fields=("id", "doc_id")))
        assert len(rows) == ROWS and all({"id", "doc_id"} <= set(r) for r in rows)
        assert {r["doc_id"] for r in rows} == set(CORPUS)

    @pytest.mark.parametrize("mode", [*LEGS, "hybrid"])
    def test_each_mode_finds_the_chunk_sharing_the_query_words(self, loaded: ChunkStore, mode: str) -> None:
        query = "how is a job deleted after success"
        hits = mode_search(loaded, C, mode, query, EMB._one(query), 3)
        assert all(isinstance(h, Hit) for h in hits)
        top = hits[0]
        assert (top.id, top.doc_id, top.index) == (chunk_id("a.py", 1), "a.py", 1)
        assert top.text == CORPUS["a.py"][1] and top.context == "ctx"
        assert top.metadata == {"k": "a.py", "title": ""} and top.score > 0
        # BM25 returns only chunks sharing a term ("job"); the others rank every chunk.
        assert len(hits) == (2 if mode == "bm25" else 3)

    @pytest.mark.parametrize("leg", LEGS)
    def test_a_ranking_is_the_leg_searchs_ids_and_scores_and_hits_fill_it_in(
            self, loaded: ChunkStore, leg: str) -> None:
        query = "how is a job deleted after success"
        vector = EMB._one(query)
        hits = loaded.leg_search(C, leg, query, vector, 4)
        ranked = loaded.ranking(C, leg, query, vector, 4)
        assert ranked == [(h.id, h.score) for h in hits] and ranked
        # In the order given, with the scores given; an id not stored is left out.
        given = [(i, float(n)) for n, (i, _) in enumerate(reversed(ranked))]
        filled = loaded.hits(C, given[:1] + [("no-such-chunk", 9.0)] + given[1:])
        assert [(h.id, h.score) for h in filled] == given
        assert filled[-1] == hits[0].__class__(**{**vars(hits[0]), "score": given[-1][1]})
        assert loaded.hits(C, []) == []

    def test_bm25_matches_the_parts_of_compound_identifiers_and_the_context(self, loaded: ChunkStore) -> None:
        assert loaded.leg_search(C, "bm25", "diff executor", None, 1)[0].doc_id == "c.rs"
        assert loaded.leg_search(C, "bm25", "next delay", None, 1)[0].doc_id == "c.rs"
        loaded.write(C, [embedded("e.md", ["plain words only"], context="about the walrus")])
        assert [h.doc_id for h in loaded.leg_search(C, "bm25", "walrus", None, 3)] == ["e.md"]

    @pytest.mark.parametrize("fusion", FUSIONS)
    def test_hybrid_returns_each_chunk_once_under_every_fusion(self, loaded: ChunkStore, fusion: str) -> None:
        query = "how is a job deleted after success"
        hits = mode_search(loaded, C, "hybrid", query, EMB._one(query), 10, fusion=fusion)
        assert len(hits) == ROWS == len({h.id for h in hits})
        assert hits[0].id == chunk_id("a.py", 1)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    @pytest.mark.parametrize("mode", [*LEGS, "hybrid"])
    def test_equal_scores_rank_by_id_and_are_cut_by_id(self, store: ChunkStore, mode: str) -> None:
        """Chunks that score the same (here twelve copies of one chunk, in twelve documents)
        rank by id, and the cut at the limit keeps the lowest ids, whatever order they were
        written and the store returns them in: the same search ranks the same way every time."""
        store.ensure_collection(C, EMB.dim, EMBEDDER)
        docs = [embedded(f"copy{n:02}.md", ["the walrus sings of cabbages"]) for n in range(12)]
        ids = sorted(d.situated[0].chunk.id for d in docs)
        # Written from the highest id down, in two writes (two segments where the store has them).
        docs.sort(key=lambda d: d.situated[0].chunk.id, reverse=True)
        store.write(C, docs[:6])
        store.write(C, docs[6:])
        query = "walrus cabbages"
        hits = mode_search(store, C, mode, query, EMB._one(query), 5)
        assert [h.id for h in hits] == ids[:5]
        assert len({h.score for h in hits}) == 1

    def test_an_unknown_leg_is_refused(self, loaded: ChunkStore) -> None:
        """Modes and fusions are checked where a search is asked for (the Retriever, the
        options); below them a store still refuses a leg it does not have."""
        with pytest.raises(StoreError, match="unknown search leg 'fuzzy'"):
            loaded.leg_search(C, "fuzzy", "job", None, 3)
        with pytest.raises(StoreError, match="unknown search leg 'fuzzy'"):
            mode_search(loaded, C, "fuzzy", "job", None, 3)


class SpecContract(StoreFixtures):
    """Opened again from its spec: what a Dask worker gets of the store instead of the store
    (which need not pickle), reopened through `open_store` by its URI's scheme, this package's
    kind. In this process, so a store held in memory passes too; that another process shares
    the store is the kind's `shared_problem` to say."""

    def test_the_spec_is_small_and_pickles(self, store: ChunkStore) -> None:
        spec = store.spec
        sent = pickle.dumps(spec)
        assert len(sent) < 1024 and pickle.loads(sent) == spec
        assert scheme(spec.uri) == scheme(store.uri)

    def test_a_store_opened_from_its_spec_is_the_same_store(self, loaded: ChunkStore) -> None:
        spec = pickle.loads(pickle.dumps(loaded.spec))
        again = reopen(spec)
        try:
            assert again.spec == spec
            assert again.count(C) == ROWS and stored(again) == stored(loaded)
            assert again.describe(C) == loaded.describe(C)
            query = "how is a job deleted after success"
            assert mode_search(again, C, "hybrid", query, EMB._one(query), 3)[0].id == chunk_id("a.py", 1)
            # What one writes, the other reads: one store, not a copy of it.
            again.write(C, [embedded("z.md", ["written through the store opened again"])])
            assert loaded.count(C) == ROWS + 1
            assert loaded.delete_ids(C, [chunk_id("z.md", 0)]) == 1
            assert again.count(C) == ROWS
        finally:
            again.close()
        assert loaded.count(C) == ROWS  # closing the one opened again leaves this one open


class UpkeepContract(StoreFixtures):
    """A store that drifts from a fresh collection (`ChunkStore.upkeep` not None): its upkeep
    meets `StoreUpkeep`."""

    def test_its_upkeep_meets_the_protocol(self, store: ChunkStore) -> None:
        assert store.upkeep is not None and isinstance(store.upkeep, StoreUpkeep)


class StoreContract(CollectionsContract, WriteContract, SearchContract, SpecContract):
    """Every test a `ChunkStore` passes: collections, writes, searches, reopening from a spec."""
