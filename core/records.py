"""Records that cross module boundaries: plain, frozen dataclasses with no imports from the project."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

T = TypeVar("T")


def sha256(text: str) -> str:
    """Hex SHA-256 of a string; the one content hash used across the project."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_id(doc_id: str, index: int) -> str:
    """Deterministic primary key of a chunk.

    Derived from the document id and the chunk's position only, so a re-run upserts the same rows
    and a changed document overwrites its chunks in place. Hashed so that any document id (a path,
    a URL, a UUID) gives a short key of one fixed alphabet.
    """
    return hashlib.sha256(f"{doc_id}\x1f{index}".encode()).hexdigest()[:32]


Indexes = int | tuple[int, ...]  # a document's chunk indexes: n for 0..n-1, else sorted


def index_key(indexes: Iterable[int]) -> Indexes:
    """A document's chunk indexes in the one compact form plans compare: their number when they
    are 0..n-1 (every cut situate makes), else the sorted tuple (a pre-chunked corpus's own)."""
    ordered = sorted(indexes)
    return len(ordered) if all(i == n for n, i in enumerate(ordered)) else tuple(ordered)


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """What a collection holds for one document, without its texts: the fingerprint its rows were
    written with (None when its rows disagree), its chunks' indexes (`index_key`), and any row
    whose id is not `chunk_id(doc_id, index)`, as (index, id) (none that situate wrote).

    Row ids follow from the document id and the indexes, so a plan, a delete and a rebuild
    address a document's rows by primary key with no id held per row."""

    fingerprint: str | None
    indexes: Indexes
    other: tuple[tuple[int, str], ...] = ()

    @property
    def rows(self) -> int:
        n = self.indexes if isinstance(self.indexes, int) else len(self.indexes)
        return n + len(self.other)

    def positions(self) -> Iterator[tuple[int, str | None]]:
        """(chunk index, the row's id when it is not the derived one), in index order."""
        regular: Iterable[int] = (range(self.indexes) if isinstance(self.indexes, int)
                                  else self.indexes)
        if not self.other:
            return ((i, None) for i in regular)
        both: list[tuple[int, str | None]] = [(i, None) for i in regular]
        both.extend(self.other)
        return iter(sorted(both, key=lambda p: (p[0], p[1] or "")))

    def ids(self, doc_id: str) -> list[str]:
        """Its rows' ids, in chunk order."""
        return [row_id or chunk_id(doc_id, i) for i, row_id in self.positions()]


@dataclass(frozen=True)
class Chunk:
    """A piece of a document, the unit that is contextualized, embedded and retrieved."""

    doc_id: str
    index: int
    text: str
    # Character offset of the chunk in its document, or -1 when the input was pre-chunked and the
    # chunk could not be located verbatim.
    start: int = -1
    # Where the chunk is in its document, from the document's own structure: `page`/`page_end`,
    # `heading_path`, `slide`, `sheet` and `rows`, `cell`, `chapter`, `symbols` (code). Stored
    # in the row's metadata; not part of the chunk's identity.
    where: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def id(self) -> str:
        return chunk_id(self.doc_id, self.index)

    @property
    def hash(self) -> str:
        return sha256(self.text)


@dataclass(frozen=True)
class Document:
    """A source document and its chunks, as produced by the loaders."""

    id: str
    text: str
    chunks: tuple[Chunk, ...]
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return sha256(self.text)


@dataclass(frozen=True)
class Situated:
    """A chunk with the context that situates it in its document."""

    chunk: Chunk
    context: str
    # Where the context came from: "generated", "cache" or "none"; feeds run summaries.
    source: str = "generated"

    @property
    def indexed_text(self) -> str:
        """The text that is embedded and BM25-indexed: the chunk, then its context.

        Chunk first because embedders truncate (all-MiniLM-L6-v2 reads 256 word pieces, about one
        800-character chunk of code): what falls off the end should be the context, not the chunk.
        BM25 is order-blind. Measured on the codebase benchmark and a held-out corpus in
        BENCHMARKS.md ("where the context goes").
        """
        if not self.context:
            return self.chunk.text
        return f"{self.chunk.text}\n\n{self.context}"


@dataclass(frozen=True)
class CollectionInfo:
    """What a collection says of itself: its vectors' dimension, the embedder that made them, the
    contexts its last ingest gave its chunks (`structural`, `anthropic:claude-haiku-4-5`, ...) and
    when that ingest ended (ISO 8601, UTC); "" for what a collection made before situate recorded
    it does not say."""

    dim: int | None
    embedder: str
    contexts: str = ""
    ingested: str = ""
    backend: str = ""  # how the embedder ran: torch, openvino, onnx, ... ("": not recorded)
    precision: str = ""  # fp32, fp16, int8 ("": not recorded)


def same_embedder(stored: str, wanted: str | None) -> bool:
    """The one rule of which embedder may write to, or query, a collection: the one its vectors
    came from (`stored`, as `name:model`). `wanted` names it by name, and by model when it gives
    one (`minilm` is whichever minilm model the collection holds). How the model ran (backend,
    precision) is no part of it: another precision of the same model is the same vector space.
    Either side "" agrees with anything: a collection made before situate recorded its embedder,
    or a caller that leaves the embedder to the collection."""
    if not stored or not wanted:
        return True
    name, _, model = wanted.partition(":")
    stored_name, _, stored_model = stored.partition(":")
    return name == stored_name and (not model or model == stored_model)


@dataclass(frozen=True)
class Hit:
    """One chunk found: its id, document, place in the document, text, context, score (higher is
    better; fused for hybrid, the reranker's for rerank) and its document's metadata. What every
    face returns: `Retriever.search` in Python, and as JSON over HTTP and MCP."""

    id: str
    doc_id: str
    index: int
    text: str
    context: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Usage:
    """Token accounting of one contextualizer over a run; summed across documents."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    contexts_generated: int = 0
    contexts_from_cache: int = 0

    @property
    def prompt_cache_hit_ratio(self) -> float:
        """Share of prompt tokens read from the provider's prompt cache (0 when none were sent)."""
        total = self.input_tokens + self.cache_write_tokens + self.cache_read_tokens
        return self.cache_read_tokens / total if total else 0.0

    def add(self, other: Usage) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def report(self, names: Iterable[str]) -> dict[str, int | float]:
        """The counters `names` asks for, by the names they have here (a report's fields: an
        ingest's `Bill`, a synth summary's), dollars rounded to a millionth and the prompt
        cache's hit ratio to four places."""
        rounded = {"cost_usd": round(self.cost_usd, 6),
                   "prompt_cache_hit_ratio": round(self.prompt_cache_hit_ratio, 4)}
        return {name: rounded.get(name, getattr(self, name)) for name in names}


def batched(items: Iterable[T], n: int) -> Iterator[tuple[T, ...]]:
    """itertools.batched for Python 3.11: tuples of at most n items, lazily."""
    from itertools import islice

    it = iter(items)
    while batch := tuple(islice(it, n)):
        yield batch


def grouped(items: Iterable[T], size: int | Callable[[int], int],
            weight: Callable[[T], int]) -> Iterator[list[T]]:
    """Items in groups of about `size` by `weight` (whole documents by their chunks), lazily; an
    item heavier than `size` forms a group alone. Never splits an item. `size` may be a function
    of the weight already grouped, asked at the start of each group."""
    fixed = size if isinstance(size, int) else 0
    limit = size if callable(size) else (lambda _done: fixed)
    group: list[T] = []
    total = done = 0
    cut = limit(done)
    for item in items:
        w = weight(item)
        if group and total + w > cut:
            yield group
            done += total
            group, total = [], 0
            cut = limit(done)
        group.append(item)
        total += w
    if group:
        yield group


@dataclass(frozen=True)
class EmbeddedDocument:
    """What the store writes for one document: its situated chunks and their vectors, in chunk
    order, and the fingerprint of what they were built from (text, context provider, chunking)."""

    doc: Document
    fingerprint: str
    situated: tuple[Situated, ...]
    vectors: Sequence[Sequence[float]] | NDArray[np.float32]  # one row a chunk
