"""The chunk store: one Milvus collection with a dense vector and Milvus's own BM25 sparse vector.

Works the same on Milvus Lite (a local path), a Milvus Standalone/Distributed server or Zilliz
Cloud (an http(s) URI and an optional token): every call goes through `MilvusClient`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tasks.errors import StoreError
from tasks.records import Hit, batched

MODES = ("dense", "bm25", "hybrid")
# Per-request cap well under Milvus's 256 MiB gRPC limit; rows carry texts of a few KiB at most.
WRITE_BATCH = 512
MAX_TEXT = 65_535
MAX_CONTEXT = 8_192
# Candidates each leg of a hybrid search contributes before RRF fusion.
FUSION_DEPTH = 100
RRF_K = 60
# A fixed English stop-word list for the BM25 analyzer: function words that carry no topic.
STOP_WORDS = (
    "a an and are as at be but by for from has have how i in is it its of on or that the this to "
    "was what when where which who why will with does do did can could should would there their "
    "these those into than then so if not no".split()
)
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]*)+|"
                         r"[A-Z]{2,}[a-z][A-Za-z0-9]*|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_COLLECTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


def lexical_text(text: str) -> str:
    """Text for the BM25 field: the text plus the parts of its compound identifiers.

    Milvus's standard analyzer keeps `run_target` and `DiffExecutor` as single tokens, so a query
    saying "diff executor" would miss them. Appending the split parts (`run target`, `diff
    executor`) lets both spellings match; the original tokens stay, so exact names still win.
    """
    parts: list[str] = []
    for ident in set(_IDENTIFIER.findall(text)):
        parts.extend(p.lower() for p in _PART.findall(ident) if len(p) > 1)
    if not parts:
        return text
    return text + "\n" + " ".join(parts)


def validate_collection_name(name: str) -> str:
    if not _COLLECTION_NAME.match(name or ""):
        raise StoreError(
            f"invalid collection name {name!r}: use letters, digits and underscores, starting with "
            "a letter or underscore (at most 255 characters)"
        )
    return name


def _translate(e: Exception, what: str, uri: str) -> StoreError:
    message = getattr(e, "message", None) or str(e)
    return StoreError(f"Milvus at {uri}: {what} failed: {message}")


class ChunkStore:
    """Schema, batched upserts, deletes by document and the three search modes over one client."""

    def __init__(self, uri: str, token: str = "", db_name: str = "") -> None:
        from pymilvus import MilvusClient

        self.uri = uri
        if "://" not in uri:
            Path(uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        try:
            kwargs: dict[str, Any] = {"uri": uri}
            if "://" not in uri:
                # Milvus Lite's embedded gRPC server keeps gRPC's default ping policy and answers
                # pymilvus's idle keepalive pings (every 10 s) with GOAWAY "too_many_pings" after a
                # few minutes; ping only while calls are in flight.
                kwargs["grpc_options"] = {"grpc.keepalive_permit_without_calls": False,
                                          "grpc.keepalive_time_ms": 300_000}
            if token:
                kwargs["token"] = token
            if db_name:
                kwargs["db_name"] = db_name
            self.client = MilvusClient(**kwargs)
        except Exception as e:  # pymilvus raises several unrelated types on connect
            hint = (" (Milvus Lite allows one process per file: stop the other process or run "
                    "`milvus-lite server` and use its http:// URI)" if "://" not in uri else
                    " (is the server running and the token right?)")
            raise StoreError(f"cannot open Milvus at {uri}: {getattr(e, 'message', e)}{hint}") from None

    # --- schema ----------------------------------------------------------------------------------

    def exists(self, collection: str) -> bool:
        return bool(self.client.has_collection(validate_collection_name(collection)))

    def ensure_collection(self, collection: str, dim: int, embedder: str) -> None:
        """Create the collection if missing; refuse one built with another embedder or dimension."""
        from pymilvus import DataType, Function, FunctionType

        validate_collection_name(collection)
        if self.exists(collection):
            info = self.describe(collection)
            if info.get("dim") != dim or info.get("embedder") not in ("", embedder):
                raise StoreError(
                    f"collection {collection!r} at {self.uri} holds {info.get('dim')}-d vectors "
                    f"from {info.get('embedder') or 'another embedder'}, not {dim}-d from "
                    f"{embedder}: use another --collection or the same --embedder"
                )
            self.load(collection)
            return
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=1024)
        schema.add_field("chunk_index", DataType.INT64)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT)
        schema.add_field("context", DataType.VARCHAR, max_length=MAX_CONTEXT)
        schema.add_field("doc_hash", DataType.VARCHAR, max_length=64)
        schema.add_field("chunk_hash", DataType.VARCHAR, max_length=64)
        schema.add_field("metadata", DataType.JSON)
        schema.add_field(
            "lexical", DataType.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True,
            analyzer_params={"tokenizer": "standard",
                             "filter": ["lowercase", {"type": "stop", "stop_words": STOP_WORDS}]},
        )
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                     input_field_names=["lexical"], output_field_names=["sparse"]))
        index = self.client.prepare_index_params()
        index.add_index(field_name="dense", index_type="AUTOINDEX", metric_type="COSINE")
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        index.add_index(field_name="doc_id", index_type="INVERTED")
        try:
            self.client.create_collection(collection, schema=schema, consistency_level="Strong",
                                          properties={"situate.embedder": embedder})
            # sync=False: waiting on index builds needs a timestamp service Milvus Lite lacks;
            # load_collection below waits for what a search needs on every deployment.
            self.client.create_index(collection, index, sync=False)
            self.client.load_collection(collection)
        except Exception as e:
            raise _translate(e, f"creating collection {collection!r}", self.uri) from None

    def check_embedder(self, collection: str, embedder: str) -> None:
        """Refuse to add vectors from another embedder to an existing collection."""
        stored = self.describe(collection).get("embedder")
        if stored and stored != embedder:
            raise StoreError(f"collection {collection!r} at {self.uri} holds vectors from {stored}, "
                             f"not {embedder}: use another --collection or --embedder {stored}")
        self.load(collection)

    def describe(self, collection: str) -> dict[str, Any]:
        info = self.client.describe_collection(collection)
        dim = next((f.get("params", {}).get("dim") for f in info.get("fields", [])
                    if f.get("name") == "dense"), None)
        embedder = (info.get("properties") or {}).get("situate.embedder", "")
        return {"dim": int(dim) if dim is not None else None, "embedder": embedder}

    def require(self, collection: str) -> None:
        if not self.exists(collection):
            raise StoreError(f"collection {collection!r} not found at {self.uri}: run "
                             f"`situate ingest CORPUS --collection {collection}` first")
        self.load(collection)

    def drop(self, collection: str) -> None:
        self.client.drop_collection(validate_collection_name(collection))

    # --- writes ----------------------------------------------------------------------------------

    def upsert(self, collection: str, rows: Iterable[dict[str, Any]],
               batch_size: int = WRITE_BATCH) -> int:
        """Upsert rows in batches; each batch is one atomic Milvus call. Returns rows written."""
        written = 0
        for batch in batched(rows, batch_size):
            try:
                self.client.upsert(collection, list(batch))
            except Exception as e:
                raise _translate(e, f"upsert into {collection!r}", self.uri) from None
            written += len(batch)
        return written

    def delete_documents(self, collection: str, doc_ids: Sequence[str]) -> int:
        if not doc_ids:
            return 0
        deleted = 0
        for batch in batched(doc_ids, 256):
            res = self.client.delete(collection, filter=f"doc_id in {json.dumps(list(batch))}")
            deleted += _deleted_count(res)
        return deleted

    def delete_ids(self, collection: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        return _deleted_count(self.client.delete(collection, ids=list(ids)))

    # --- reads -----------------------------------------------------------------------------------

    def count(self, collection: str) -> int:
        self.load(collection)
        res = self.client.query(collection, filter="", output_fields=["count(*)"])
        return int(res[0]["count(*)"]) if res else 0

    @property
    def is_local(self) -> bool:
        """Milvus Lite (a file path) rather than a server URI."""
        return "://" not in self.uri

    def rows(self, collection: str, fields: Sequence[str] = ("id", "doc_id", "chunk_index", "text",
                                                              "context", "doc_hash", "chunk_hash"),
             filter: str = "", page: int = 1000) -> Iterator[dict[str, Any]]:
        """Every row (selected fields), page by page.

        A server gets Milvus's query iterator (no offset cap); Milvus Lite has no timestamp
        service for it, so it is paged by offset, which Lite does not cap.
        """
        self.load(collection)
        if self.is_local:
            offset = 0
            while True:
                batch = self.client.query(collection, filter=filter, output_fields=list(fields),
                                          limit=page, offset=offset)
                yield from batch
                if len(batch) < page:
                    return
                offset += page
        it = self.client.query_iterator(collection, batch_size=page, filter=filter,
                                        output_fields=list(fields))
        try:
            while batch := it.next():
                yield from batch
        finally:
            it.close()

    def load(self, collection: str) -> None:
        """Load the collection for reads (a reopened Milvus Lite file starts released)."""
        try:
            self.client.load_collection(collection)
        except Exception as e:
            raise _translate(e, f"loading collection {collection!r}", self.uri) from None

    def search(self, collection: str, mode: str, query_text: str,
               query_vector: Sequence[float] | None, limit: int) -> list[Hit]:
        """Top `limit` chunks by dense cosine, BM25, or both fused with Milvus's RRFRanker."""
        from pymilvus import AnnSearchRequest, RRFRanker

        fields = ["doc_id", "chunk_index", "text", "context", "metadata"]
        lexical = lexical_text(query_text)
        try:
            if mode == "dense":
                res = self.client.search(collection, data=[list(query_vector)], anns_field="dense",
                                         limit=limit, output_fields=fields,
                                         search_params={"metric_type": "COSINE"})
            elif mode == "bm25":
                res = self.client.search(collection, data=[lexical], anns_field="sparse",
                                         limit=limit, output_fields=fields,
                                         search_params={"metric_type": "BM25"})
            elif mode == "hybrid":
                depth = max(limit, FUSION_DEPTH)
                reqs = [
                    AnnSearchRequest(data=[list(query_vector)], anns_field="dense",
                                     param={"metric_type": "COSINE"}, limit=depth),
                    AnnSearchRequest(data=[lexical], anns_field="sparse",
                                     param={"metric_type": "BM25"}, limit=depth),
                ]
                res = self.client.hybrid_search(collection, reqs, ranker=RRFRanker(RRF_K),
                                                limit=limit, output_fields=fields)
            else:
                raise StoreError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
        except StoreError:
            raise
        except Exception as e:
            raise _translate(e, f"{mode} search in {collection!r}", self.uri) from None
        hits: list[Hit] = []
        for h in res[0] if res else []:
            entity = h.get("entity", h)
            score = float(h.get("distance", h.get("score", 0.0)))
            if mode == "bm25":
                score = abs(score)  # Milvus Lite reports BM25 as negative distances
            hits.append(Hit(id=str(h.get("id", h.get("pk"))), doc_id=entity["doc_id"],
                            index=int(entity["chunk_index"]), text=entity["text"],
                            context=entity["context"], score=score,
                            metadata=entity.get("metadata") or {}))
        return hits

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # closing a dead connection is not worth an error
            pass


def _deleted_count(res: Any) -> int:
    if isinstance(res, dict):
        return int(res.get("delete_count", len(res.get("ids", []) or [])))
    return len(res or [])


_OPEN: dict[tuple[str, str], ChunkStore] = {}
_OPEN_LOCK = threading.Lock()


def is_missing_lite_file(uri: str) -> bool:
    """A Milvus Lite file that does not exist yet: it holds no collection, and opening it would
    create it."""
    return "://" not in uri and not Path(uri).exists()


def open_existing_store(uri: str, collection: str, token: str = "") -> ChunkStore:
    """The store holding `collection`, for reading: a Milvus Lite file that does not exist is not
    created (opening one creates it), the user is told to ingest first."""
    if is_missing_lite_file(uri):
        raise StoreError(f"collection {collection!r} not found at {uri} (no Milvus Lite file "
                         f"there): run `situate ingest CORPUS --collection {collection}` first")
    store = open_store(uri, token)
    store.require(collection)
    return store


def open_store(uri: str, token: str = "") -> ChunkStore:
    """One ChunkStore per (URI, token) per process.

    Milvus Lite lets a single process hold its file, so every task in a process must share one
    client; against a server this just saves reconnecting.
    """
    key = (uri, token)
    with _OPEN_LOCK:
        if key not in _OPEN:
            _OPEN[key] = ChunkStore(uri, token)
        return _OPEN[key]


def close_stores() -> None:
    """Close every client `open_store` handed out (tests, and long-lived processes between runs)."""
    while _OPEN:
        _, store = _OPEN.popitem()
        store.close()
