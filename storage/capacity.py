"""What a collection will take in the store's memory, estimated before it is written.

Milvus Lite (a local file, or `milvus-lite server`) keeps every segment it writes in memory
(milvus-lite 3.2.2, `engine/collection.py`: `_segment_cache` holds each segment's Arrow table,
a float32 copy of its vectors, its ids and an id map; the HNSW index faiss builds per segment
holds the vectors again, and the BM25 inverted index its postings). A collection's memory is
therefore about rows x (vector bytes + text + BM25 + per-row overhead), plus a fixed part and
the transient buffers of writing, with the coefficients measured here
(`benchmarks/bench_capacity.py`, `benchmarks/bench_scale.py`): the estimate is the store's peak
while the rows are written, above an empty store (an empty `milvus-lite server` holds ~155 MiB).

A Milvus server (Standalone, Distributed, Zilliz Cloud) loads a collection's segments into its
query nodes' memory: the dense index (HNSW: the vectors and M x 2 links of 4 bytes per row), the
BM25 inverted index, and the raw data of every field unless it is memory-mapped (Milvus "Use
mmap": raw data and indexes mapped from local disk into the page cache). The figures for a
server are the documented ones (Milvus Sizing Tool: HNSW loading memory about 2.25x the raw
vectors at the default M); situate creates collections on a server with the raw fields mapped
(`situate.storage.rows.server_settings`), so the mapped figure is the one that applies to
collections it made there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from situate.core.records import Document
from situate.storage.rows import lexical_text

# Milvus Lite, fitted on `milvus-lite server` runs (benchmarks/SCALE_RESULTS.md: 5k-20k rows of
# 64-, 384- and 1536-d by bench_capacity.py, 100k of 384-d by bench_scale.py, 100k of 1536-d from an
# earlier run), 780-character chunks with structural contexts. Memory above an empty store, at its
# peak while the rows are written: a fixed part once the first rows arrive (faiss, the BM25
# analyzer, the first segments), each row's share once written (its Arrow columns, the float32
# copy of its vector and the HNSW index's, its BM25 postings, ids and id maps), and the transient
# memtable and compactions, which grow with the first rows and stop growing at about 300 MiB
# (milvus-lite flushes its memtable at 128 MiB of estimated bytes and compacts segments of up to
# 100,000 rows).
LITE_BASE = 90 * 2**20
LITE_TRANSIENT_CAP = 300 * 2**20
LITE_PER_VECTOR_BYTE = 5.4  # per byte of the float32 vector (dim x 4)
LITE_PER_TEXT_BYTE = 1.5  # per byte of chunk text, context, BM25 text and metadata JSON
LITE_PER_ROW = 2_400  # ids, hashes, id maps, sequence numbers, Python objects
# Past the first 100,000 rows (milvus-lite's largest compacted segment), each row costs what a
# large segment holds per row: its vector three times (Arrow column, float32 copy, HNSW index)
# and its text once (measured: 6.2 KB a 384-d row between 500k and 650k rows, bench_scale.py).
LITE_SEGMENT_ROWS = 100_000
LITE_LARGE_PER_VECTOR_BYTE = 3.0
LITE_LARGE_PER_TEXT_BYTE = 1.0
# A server's, from Milvus's documentation: HNSW with M links per node per direction at layer 0.
HNSW_M = 16
SERVER_PER_ROW = 120  # primary key and its index, timestamps, row ids
SPARSE_BYTES_PER_TERM = 8  # a posting: row offset and weight, 4 bytes each
_TERM = re.compile(r"\w+")


@dataclass
class RowSizes:
    """Bytes per row of what a collection stores, summed over the documents seen."""

    rows: int = 0
    text: int = 0  # chunk text and context, UTF-8
    lexical: int = 0  # the BM25 field
    terms: int = 0  # distinct BM25 terms (postings)
    metadata: int = 0  # the metadata JSON

    def add_document(self, doc: Document, contexts: Sequence[str] = ()) -> None:
        """One document's chunks, with their contexts when known (the dry run has none: it
        counts the chunk text, and `context_chars` per chunk is added by the caller)."""
        meta = len(json.dumps({**doc.metadata, "title": doc.title}))
        for i, chunk in enumerate(doc.chunks):
            context = contexts[i] if i < len(contexts) else ""
            lexical = lexical_text(f"{chunk.text}\n\n{context}" if context else chunk.text)
            self.rows += 1
            self.text += len(chunk.text.encode()) + len(context.encode())
            self.lexical += len(lexical.encode())
            self.terms += len(set(_TERM.findall(lexical.lower())))
            self.metadata += meta + (len(json.dumps(chunk.where)) if chunk.where else 0)

    def per_row(self) -> dict[str, float]:
        n = max(self.rows, 1)
        return {"text_bytes": self.text / n, "lexical_bytes": self.lexical / n,
                "terms": self.terms / n, "metadata_bytes": self.metadata / n}


@dataclass(frozen=True)
class StoreEstimate:
    """Estimated memory of a collection, in bytes, in each kind of store."""

    rows: int
    dim: int | None
    lite_bytes: int  # Milvus Lite (a file or milvus-lite server): peak while written
    server_bytes: int  # a Milvus server, the collection loaded, no mmap
    server_mmap_bytes: int  # a Milvus server, raw field data memory-mapped (situate's setting)
    disk_bytes: int  # what the rows take on disk (raw data, before compression)
    per_row: dict[str, float] = field(default_factory=dict)


def estimate_store(rows: int, dim: int | None, text_bytes: float, lexical_bytes: float,
                   metadata_bytes: float, terms: float | None = None) -> StoreEstimate:
    """The memory `rows` rows of `dim`-d vectors take, given their mean sizes in bytes (text
    and context; the BM25 field; the metadata JSON; distinct BM25 terms, else guessed from the
    BM25 text at one term in 7 bytes). An unknown dimension counts as 384 (the default
    embedder's)."""
    d = dim or 384
    vector = 4 * d
    postings = (terms if terms is not None else lexical_bytes / 7) * SPARSE_BYTES_PER_TERM
    text = text_bytes + lexical_bytes + metadata_bytes
    lite = LITE_PER_VECTOR_BYTE * vector + LITE_PER_TEXT_BYTE * text + LITE_PER_ROW
    lite_large = LITE_LARGE_PER_VECTOR_BYTE * vector + LITE_LARGE_PER_TEXT_BYTE * text
    small = min(rows, LITE_SEGMENT_ROWS)
    lite_total = (LITE_BASE + min(small * lite, LITE_TRANSIENT_CAP) + small * lite
                  + (rows - small) * lite_large) if rows else 0
    hnsw = vector + 2 * HNSW_M * 4
    raw = vector + text_bytes + metadata_bytes + lexical_bytes + 200  # ids, hashes, index
    server_mmap = hnsw + postings + SERVER_PER_ROW
    server = server_mmap + raw
    return StoreEstimate(rows=rows, dim=dim, lite_bytes=round(lite_total),
                         server_bytes=round(rows * server), server_mmap_bytes=round(rows * server_mmap),
                         disk_bytes=round(rows * raw),
                         per_row={"lite": round(lite), "lite_past_100k": round(lite_large),
                                  "server": round(server),
                                  "server_mmap": round(server_mmap)})


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20,
          "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """'512MiB', '2G', '1.5 GiB', '1000000' -> bytes (powers of 1024); ValueError otherwise."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text or "")
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size: give bytes with a unit, e.g. 512MiB or 8GiB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def human(n: float) -> str:
    """Bytes as the unit a reader expects: 850 MiB, 3.4 GiB."""
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 10 * 2**20 else f"{n / 2**20:.1f} MiB"
