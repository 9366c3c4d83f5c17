"""The store's side of a plan: what the collection will take in memory, and whether a Milvus Lite
file will fit in this machine.

`situate ingest --dry-run` reports it (`IngestPlan.store_memory`, from the corpus's own chunk
sizes) and a real run logs the warning before writing (from the scan's chunk count at the
configured chunk size). The per-row figures are `situate.storage.capacity`'s: measured for
Milvus Lite, documented for a Milvus server. The limit is the memory available on this machine
(psutil), or `SITUATE_STORE_MEMORY_LIMIT` when set (to test the warning, or to keep a margin for
other work).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from situate.core.errors import InputError
from situate.core.settings import get_settings
from situate.pipeline.ingest_report import StoreCapacity
from situate.storage.capacity import RowSizes, estimate_store, human, parse_bytes
from situate.tasks.embedders.base import EMBEDDERS

if TYPE_CHECKING:
    pass

# Dimensions of the registered embedders' default models, known without loading them.
KNOWN_DIMS = {"minilm": 384, "e5-small": 384, "bge-m3": 1024, "voyage:voyage-2": 1024,
              "cohere": 1024, "openai:text-embedding-3-small": 1536,
              "openai:text-embedding-3-large": 3072, "openai:text-embedding-ada-002": 1536}
# Mean bytes of a context by provider, when the dry run cannot know them: structural contexts
# name the document and its place (tens of bytes); an LLM's are `context_tokens` long.
STRUCTURAL_CONTEXT_BYTES = 60


def embedder_dim(embedder_id: str, stored: int | None = None) -> int | None:
    """The vectors' dimension: the collection's when it exists, a known model's, or the
    dimension an API embedder's function reports without being called; None when only loading
    the model would tell."""
    if stored:
        return stored
    name, _, model = embedder_id.partition(":")
    for key in (embedder_id, name):
        if key in KNOWN_DIMS:
            return KNOWN_DIMS[key]
    try:
        spec = EMBEDDERS.get(name)
        if spec.local:
            return None
        from situate.core.secrets import api_key

        function = spec.builder()(model, api_key(spec.key, user="") if spec.key else "")
        return int(getattr(function, "dim"))  # noqa: B009 - pymilvus-model's property, untyped
    except Exception:
        return None


def memory_limit() -> tuple[int, str]:
    """(bytes, what they are): SITUATE_STORE_MEMORY_LIMIT, else the memory available now."""
    setting = get_settings().store_memory_limit
    if setting:
        try:
            return parse_bytes(setting), "SITUATE_STORE_MEMORY_LIMIT"
        except ValueError as e:
            raise InputError(f"SITUATE_STORE_MEMORY_LIMIT: {e}") from None
    import psutil

    return int(psutil.virtual_memory().available), "available on this machine"


def context_bytes(context: str, context_tokens: int, chars_per_token: float | None) -> float:
    """Mean bytes of one chunk's context for a provider, as the dry run assumes them."""
    name = context.partition(":")[0]
    if name in ("", "none"):
        return 0.0
    if name == "structural":
        return float(STRUCTURAL_CONTEXT_BYTES)
    return context_tokens * (chars_per_token or 4.0)


def store_capacity(uri: str, rows: int, dim: int | None, sizes: RowSizes,
                   extra_context_bytes: float = 0.0) -> StoreCapacity:
    """The collection's estimated memory in each kind of store, and for a Milvus Lite file the
    one-line warning when it is above the limit (`memory_limit`)."""
    mean = sizes.per_row()
    text = mean["text_bytes"] + extra_context_bytes
    lexical = mean["lexical_bytes"] + extra_context_bytes
    terms = mean["terms"] + extra_context_bytes / 7 if sizes.rows else None
    e = estimate_store(rows, dim, text, lexical, mean["metadata_bytes"], terms)
    limit, source = memory_limit()
    lite = in_memory(uri)
    warning = ""
    if lite and e.lite_bytes > limit:
        warning = (f"Milvus Lite would need about {human(e.lite_bytes)} of memory for {rows:,} rows"
                   f"{'' if dim else ' (384-d assumed)'}, more than the {human(limit)} {source}: "
                   "run a Milvus server and give its address with --milvus-uri "
                   f"(it would need about {human(e.server_mmap_bytes)} with situate's mmap "
                   "settings), or ingest a smaller corpus")
    return StoreCapacity(store="lite" if lite else "server", rows=rows, dim=dim,
                         lite_bytes=e.lite_bytes, server_bytes=e.server_bytes,
                         server_mmap_bytes=e.server_mmap_bytes, disk_bytes=e.disk_bytes,
                         limit_bytes=limit, limit_source=source, warning=warning)


def scan_capacity(uri: str, rows: int, dim: int | None, chunk_size: int,
                  context: str) -> StoreCapacity:
    """The estimate a real run can make before reading the corpus: `rows` chunks of
    `chunk_size` characters (the scan counts chunks, not bytes)."""
    sizes = RowSizes(rows=1, text=chunk_size, lexical=chunk_size, terms=chunk_size // 7,
                     metadata=40)
    return store_capacity(uri, rows, dim, sizes, context_bytes(context, 100, None))


def in_memory(uri: str) -> bool:
    """Whether the store keeps its collections in this machine's memory: its kind says
    (`StoreKind.holds_in_memory`: a Milvus Lite file does, a server does not)."""
    from situate.storage import store_kind

    return store_kind(uri).holds_in_memory(uri)
