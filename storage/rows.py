"""The rows of a chunk collection: the schema's field limits, the BM25 text with split
identifiers, and one row per situated, embedded chunk, so that every backend writes the same rows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from situate.core.errors import StoreError
from situate.core.records import EmbeddedDocument, grouped
from situate.core.settings import default

# Rows per write call when the caller does not say (the ingest flow passes SITUATE_WRITE_BATCH):
# the setting's own default, well under Milvus's 256 MiB gRPC limit for rows of a few KiB.
WRITE_BATCH: int = default("write_batch")

# VARCHAR limits of the schema, in bytes (a UTF-8 character takes up to 4).
MAX_TEXT = 65_535
MAX_CONTEXT = 8_192
MAX_DOC_ID = 1_024
MAX_HASH = 64
# A fixed English stop-word list for the BM25 analyzer: function words that carry no topic.
STOP_WORDS = (
    "a an and are as at be but by for from has have how i in is it its of on or that the this to "
    "was what when where which who why will with does do did can could should would there their "
    "these those into than then so if not no".split()
)
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]*)+|"
                         r"[A-Z]{2,}[a-z][A-Za-z0-9]*|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Every _IDENTIFIER match is made of these characters alone, so it lies within one run of them.
_RUN = re.compile(r"[A-Za-z0-9_]+")
_COLLECTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


def lexical_text(text: str) -> str:
    """Text for the BM25 field: the text plus the parts of its compound identifiers.

    Milvus's standard analyzer keeps `run_target` and `DiffExecutor` as single tokens, so a query
    saying "diff executor" would miss them. Appending the split parts (`run target`, `diff
    executor`) lets both spellings match; the original tokens stay, so exact names still win.
    """
    parts: list[str] = []
    # Each identifier once, in the order of first use: the same text for the same chunk in every
    # process (a set's order changes with the interpreter's hash seed, and the field is cut).
    for ident in dict.fromkeys(compound_identifiers(text)):
        parts.extend(p.lower() for p in _PART.findall(ident) if len(p) > 1)
    if not parts:
        return text
    return text + "\n" + " ".join(parts)


def compound_identifiers(text: str) -> list[str]:
    """`_IDENTIFIER.findall(text)`, in a seventh of the time: the pattern is tried only on the
    runs of identifier characters that hold an underscore or a capital, as no other run can
    match (a fifth of an ingest's CPU outside the model went to trying it everywhere)."""
    found: list[str] = []
    for run in _RUN.findall(text):
        if "_" in run or not run.islower():
            found.extend(_IDENTIFIER.findall(run))
    return found


def validate_collection_name(name: str) -> str:
    if not _COLLECTION_NAME.match(name or ""):
        raise StoreError(
            f"invalid collection name {name!r}: use letters, digits and underscores, starting with "
            "a letter or underscore (at most 255 characters)"
        )
    return name


def document_rows(doc: EmbeddedDocument) -> list[dict[str, Any]]:
    """The rows of one document, in the collection's schema.

    The context and the BM25 text are cut to their fields' limits (counted in characters at 4
    bytes each, so any text fits); a chunk's own text is never cut: one too long for its field is
    refused (the loaders already leave such a chunk out, with a warning), rather than stored and
    returned incomplete.
    """
    if len(doc.situated) != len(doc.vectors):
        raise StoreError(f"document {doc.doc.id!r}: {len(doc.situated)} chunks but "
                         f"{len(doc.vectors)} vectors; nothing of it was written")
    if len(doc.doc.id.encode()) > MAX_DOC_ID:
        raise StoreError(f"document id {doc.doc.id[:80]!r}... is longer than the {MAX_DOC_ID} bytes "
                         "a stored document id can hold: give the document a shorter id")
    if len(doc.fingerprint) > MAX_HASH:
        raise StoreError(f"document {doc.doc.id!r}: fingerprint {doc.fingerprint[:80]!r} is longer "
                         f"than {MAX_HASH} characters: store a hash of it")
    metadata = {**doc.doc.metadata, "title": doc.doc.title}
    rows = []
    for s, vector in zip(doc.situated, doc.vectors, strict=True):
        size = len(s.chunk.text.encode())
        if size > MAX_TEXT:
            raise StoreError(f"document {doc.doc.id!r}, chunk {s.chunk.index} is {size} bytes, more "
                             f"than the {MAX_TEXT} a stored chunk can hold: split it; nothing of the "
                             "document was written")
        rows.append({
            "id": s.chunk.id,
            "doc_id": doc.doc.id,
            "chunk_index": s.chunk.index,
            "text": s.chunk.text,
            "context": s.context[:MAX_CONTEXT // 4],
            "doc_hash": doc.fingerprint,
            "chunk_hash": s.chunk.hash,
            "metadata": {**metadata, **s.chunk.where} if s.chunk.where else metadata,
            "lexical": lexical_text(s.indexed_text)[:MAX_TEXT // 4],
            # Python floats (as pymilvus makes of an array): numpy's scalars go into the
            # request's protobuf several times slower
            "dense": vector.tolist() if isinstance(vector, np.ndarray) else list(vector),
        })
    return rows


def groups_of_documents(documents: Iterable[EmbeddedDocument],
                         size: int) -> Iterator[list[EmbeddedDocument]]:
    """Whole documents in groups of about `size` chunks (a larger document alone), lazily."""
    return grouped(documents, size, lambda d: len(d.situated))


# The fields a row is written with: all but the sparse vector Milvus's BM25 function computes.
INPUT_FIELDS = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash", "chunk_hash",
                "metadata", "lexical", "dense")


def doc_filter(doc_ids: Iterable[str]) -> str:
    """The filter expression selecting the rows of `doc_ids`."""
    return f"doc_id in {json.dumps(list(doc_ids))}"


# The indexes every collection has, by field (Milvus Lite: a file, or `milvus-lite server`, whose
# AUTOINDEX is a per-segment HNSW when faiss is installed, else brute force).
INDEXES: dict[str, dict[str, Any]] = {
    "dense": {"index_type": "AUTOINDEX", "metric_type": "COSINE"},
    "sparse": {"index_type": "SPARSE_INVERTED_INDEX", "metric_type": "BM25"},
    "doc_id": {"index_type": "INVERTED"},
}
# On a Milvus server, the dense index Milvus documents for collections held in memory at large
# sizes: HNSW, built with M=16 links per node and efConstruction=200 (recall above 0.95 at a
# million rows in Milvus's own tables); searched with ef = max(limit, HNSW_EF), as ef must be at
# least the number of hits asked for. HNSW_EF covers what a hybrid search asks each leg for (100,
# and the store's 16 for ties), so that every ordinary search sends the same ef: `milvus-lite
# server` sets ef on its shared faiss index before each unfiltered search, so two concurrent
# searches with different ef could each run with the other's and rank the tail of their hits
# differently from the same search made alone (seen: a hybrid query's ranks 6-20 changed while a
# dense search ran beside it). A search of more than HNSW_EF hits still sends its own.
HNSW_PARAMS = {"M": 16, "efConstruction": 200}
HNSW_EF = 128
SERVER_INDEXES: dict[str, dict[str, Any]] = {
    **INDEXES, "dense": {"index_type": "HNSW", "metric_type": "COSINE", "params": HNSW_PARAMS}}
# Fields whose raw data a server memory-maps (Milvus "Use mmap": field-level `mmap.enabled`):
# what is read only for the hits returned (texts, metadata, hashes) and the raw vectors the HNSW
# index already holds. Ids, document ids and the indexes stay in memory: every search and every
# write's filter touches them.
MMAP_FIELDS = frozenset({"text", "context", "metadata", "lexical", "doc_hash", "chunk_hash", "dense",
                         "sparse"})


def indexes_for(server: bool) -> dict[str, dict[str, Any]]:
    """The indexes of a collection on a server, or in Milvus Lite."""
    return SERVER_INDEXES if server else INDEXES


def dense_search_params(server: bool, limit: int) -> dict[str, Any]:
    """The dense leg's search parameters: on a server (HNSW), ef of at least `limit`."""
    params: dict[str, Any] = {"metric_type": "COSINE"}
    if server:
        params["params"] = {"ef": max(limit, HNSW_EF)}
    return params


def collection_schema(client: Any, dim: int, mmap: bool = False) -> Any:
    """The schema of a collection of `dim`-d vectors: the fields `document_rows` fills, the dense
    vector, and the sparse vector Milvus's BM25 function computes from the lexical text. With
    `mmap` (a Milvus server), the raw data of MMAP_FIELDS is memory-mapped rather than loaded:
    a server that cannot map (milvus-lite server) ignores the setting."""
    from pymilvus import DataType, Function, FunctionType

    def mapped(name: str) -> dict[str, Any]:
        return {"mmap_enabled": True} if mmap and name in MMAP_FIELDS else {}

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("doc_id", DataType.VARCHAR, max_length=MAX_DOC_ID)
    schema.add_field("chunk_index", DataType.INT64)
    schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT, **mapped("text"))
    schema.add_field("context", DataType.VARCHAR, max_length=MAX_CONTEXT, **mapped("context"))
    schema.add_field("doc_hash", DataType.VARCHAR, max_length=MAX_HASH, **mapped("doc_hash"))
    schema.add_field("chunk_hash", DataType.VARCHAR, max_length=MAX_HASH, **mapped("chunk_hash"))
    schema.add_field("metadata", DataType.JSON, **mapped("metadata"))
    schema.add_field(
        "lexical", DataType.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True,
        analyzer_params={"tokenizer": "standard",
                         "filter": ["lowercase", {"type": "stop", "stop_words": STOP_WORDS}]},
        **mapped("lexical"),
    )
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim, **mapped("dense"))
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR, **mapped("sparse"))
    schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                 input_field_names=["lexical"], output_field_names=["sparse"]))
    return schema
