"""Bulk files for Milvus's `bulk_import`: the cluster-scale path, instead of row upserts over gRPC.

A Milvus Distributed or Zilliz Cloud collection of many millions of chunks loads faster from files
its data nodes read in parallel than from upserts. `pymilvus.bulk_writer` writes such files
(parquet) for a collection's schema; they are then copied to the cluster's object storage and
imported with `pymilvus.bulk_writer.bulk_import(url, collection_name, files=...)`. Milvus Lite has
no `bulk_import`, so here the files are written and read back, never imported.

The usual use: build and check a collection locally (Milvus Lite or a small server), then
`export_collection` it and import the files into the big cluster: the rows are the same ones,
deterministic ids, contexts and vectors included, and Milvus recomputes the BM25 field itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from situate.core.errors import StoreError
from situate.storage.milvus import MilvusStore

DEFAULT_FILE_BYTES = 128 * 1024 * 1024  # pymilvus's default; each file is one import unit


@dataclass(frozen=True)
class BulkFiles:
    """What was written: one inner list per import unit (a parquet file), and the row count."""

    files: list[list[str]]
    rows: int


def collection_schema(store: MilvusStore, collection: str) -> Any:
    """The collection's own schema as pymilvus reports it: the bulk files match it field for field."""
    from pymilvus import CollectionSchema

    store.require(collection)
    return CollectionSchema.construct_from_dict(store.client.describe_collection(collection))


def input_fields(schema: Any) -> list[str]:
    """Fields a row must carry: all but function outputs (the BM25 sparse vector Milvus computes)."""
    return [f.name for f in schema.fields if not getattr(f, "is_function_output", False)]


def write_rows(schema: Any, rows: Iterable[dict[str, Any]], out_dir: str | Path,
               file_bytes: int = DEFAULT_FILE_BYTES) -> BulkFiles:
    """Write ROWS as parquet bulk files for SCHEMA under OUT_DIR (a new sub-directory per call)."""
    from pymilvus.bulk_writer import BulkFileType, LocalBulkWriter

    logging.getLogger("pymilvus.bulk_writer").setLevel(logging.WARNING)
    fields = input_fields(schema)
    writer = LocalBulkWriter(schema=schema, local_path=str(out_dir), chunk_size=file_bytes,
                             file_type=BulkFileType.PARQUET)
    count = 0
    for row in rows:
        try:
            writer.append_row({f: row[f] for f in fields})
        except KeyError as e:
            raise StoreError(f"bulk row {row.get('id', count)!r} has no field {e.args[0]!r}; the "
                             f"collection needs {', '.join(fields)}") from None
        except Exception as e:  # the writer validates types and lengths against the schema
            raise StoreError(f"bulk row {row.get('id', count)!r} does not fit the schema: {e}") from None
        count += 1
    writer.commit()
    return BulkFiles([list(batch) for batch in writer.batch_files], count)


def export_collection(store: MilvusStore, collection: str, out_dir: str | Path,
                      file_bytes: int = DEFAULT_FILE_BYTES) -> BulkFiles:
    """Every row of COLLECTION (vectors included) as bulk files for another cluster's import."""
    schema = collection_schema(store, collection)
    return write_rows(schema, store.rows(collection, fields=input_fields(schema)), out_dir, file_bytes)


def read_rows(files: list[list[str]]) -> list[dict[str, Any]]:
    """The rows back from bulk parquet files, as Milvus will read them (JSON fields decoded)."""
    import polars as pl

    out: list[dict[str, Any]] = []
    for unit in files:
        for path in unit:
            for row in pl.read_parquet(path).iter_rows(named=True):
                if isinstance(row.get("metadata"), str):
                    row["metadata"] = json.loads(row["metadata"])
                out.append(row)
    return out
