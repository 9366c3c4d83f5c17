"""The bulk path: an ingested collection written as parquet bulk files (pymilvus.bulk_writer) holds
exactly the collection's rows, and those rows, loaded into a new collection, search the same."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLE_CORPUS
from tests.fakes.hash_embedding import HashEmbedding

pytestmark = pytest.mark.e2e


def test_exported_bulk_files_read_back_to_the_same_rows(prefect_harness, state, tmp_path):
    from situate.storage.bulk import collection_schema, export_collection, input_fields, read_rows
    from situate.tasks.retrieval.search import mode_search
    from tests.helpers import ingest, open_store

    ingest(corpus=str(SAMPLE_CORPUS), collection="bulk_src", embedder="hash", context="structural")
    store = open_store(state["milvus_uri"])
    fields = input_fields(collection_schema(store, "bulk_src"))
    assert "sparse" not in fields and {"id", "text", "context", "lexical", "dense", "metadata"} <= set(fields)

    # Small files, so the rows are spread over several import units.
    bulk = export_collection(store, "bulk_src", tmp_path / "bulk", file_bytes=16 * 1024)
    stored = {r["id"]: r for r in store.rows("bulk_src", fields=fields)}
    assert bulk.rows == len(stored) == store.count("bulk_src") > 0
    assert len(bulk.files) > 1 and all(p.endswith(".parquet") for unit in bulk.files for p in unit)

    back = read_rows(bulk.files)
    assert len(back) == len({r["id"] for r in back}) == len(stored)
    for row in back:
        want = stored[row["id"]]
        assert set(row) == set(fields)
        for f in fields:
            if f == "dense":
                assert row[f] == pytest.approx(want[f], abs=1e-7)
            else:
                assert row[f] == want[f], (row["id"], f)

    # What bulk_import would do on a cluster, done by upsert here (Milvus Lite has no bulk_import).
    store.ensure_collection("bulk_dst", HashEmbedding.dim, store.describe("bulk_src").embedder)
    store.upsert("bulk_dst", back)
    emb = HashEmbedding()
    for query in ("How does Harbor make sure two workers never lease the same job?",
                  "How is the retry delay computed?"):
        for mode in ("dense", "bm25", "hybrid"):
            vec = emb.encode_queries([query])[0]
            src = [h.id for h in mode_search(store, "bulk_src", mode, query, vec, 5)]
            dst = [h.id for h in mode_search(store, "bulk_dst", mode, query, vec, 5)]
            assert src == dst and src, (mode, query)


def test_a_row_missing_a_field_is_refused(state, tmp_path):
    from situate.core.errors import StoreError
    from situate.storage.bulk import collection_schema, write_rows
    from tests.helpers import open_store

    store = open_store(state["milvus_uri"])
    store.ensure_collection("bulk_bad", HashEmbedding.dim, "hash:bow-64")
    with pytest.raises(StoreError, match="has no field 'dense'"):
        write_rows(collection_schema(store, "bulk_bad"), [{"id": "x", "doc_id": "d", "chunk_index": 0,
                   "text": "t", "context": "", "doc_hash": "h", "chunk_hash": "c", "metadata": {},
                   "lexical": "t"}], tmp_path / "bulk")
