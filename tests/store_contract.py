"""The store contract, as situate ships it (`situate.testing.store`: the capability mixins), and
`MilvusContract`, what a Milvus store does besides (its upkeep, and the extras its own tests and
tools use: dropping a collection, deleting and listing by document)."""

from __future__ import annotations

import pytest

from situate.core.errors import StoreError
from situate.core.protocols import StoreUpkeep
from situate.core.records import chunk_id
from situate.testing.store import (
    CORPUS,
    EMB,
    EMBEDDER,
    ROWS,
    C,
    StoreContract,
    UpkeepContract,
    corpus,
    embedded,
    fingerprints,
    stored,
)

__all__ = ["C", "CORPUS", "EMB", "EMBEDDER", "ROWS", "MilvusContract", "StoreContract", "corpus",
           "embedded", "fingerprints", "stored"]


class MilvusContract(StoreContract, UpkeepContract):
    """What a Milvus store does besides the contract: its upkeep, and the extras its own tests
    and tools call (dropping a collection, deleting and listing by document)."""

    def test_its_upkeep_is_itself(self, store):
        assert store.upkeep is store and isinstance(store, StoreUpkeep)

    def test_drop_removes_the_collection(self, loaded):
        loaded.drop(C)
        assert not loaded.exists(C)
        with pytest.raises(StoreError, match="not found"):
            loaded.require(C)

    def test_fingerprints_are_per_document_and_chunk(self, loaded):
        assert loaded.fingerprints(C) == fingerprints(loaded) == {
            d.doc.id: {s.chunk.id: d.fingerprint for s in d.situated} for d in corpus()}
        assert loaded.fingerprints(C, ["c.rs"]) == {"c.rs": fingerprints(loaded)["c.rs"]}
        assert loaded.document_ids(C) == set(CORPUS)

    def test_delete_by_document_and_by_id(self, loaded):
        assert loaded.delete_documents(C, ["b.md"]) == 2
        assert sorted({r["doc_id"] for r in loaded.rows(C)}) == ["a.py", "c.rs"]
        assert loaded.delete_ids(C, [chunk_id("a.py", 1)]) == 1
        assert loaded.count(C) == 2
        assert loaded.delete_documents(C, []) == loaded.delete_ids(C, []) == 0
        assert set(loaded.fingerprints(C)) == {"a.py", "c.rs"}
