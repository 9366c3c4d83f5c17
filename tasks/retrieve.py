"""Retrieval variants over a chunk store: dense, BM25, hybrid (RRF), and hybrid reranked (Cohere),
for many queries. The store is given (any `situate.core.protocols.ChunkStore`); the flows open it."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from situate.core.errors import InputError
from situate.core.protocols import SEARCH_MODES, ChunkStore
from situate.core.records import Hit
from situate.core.secrets import has_key
from situate.tasks.clean import clean_text
from situate.tasks.embed import get_embedder

MODES = (*SEARCH_MODES, "rerank")
# Hybrid candidates handed to the reranker: one Cohere request (one search unit) per query.
RERANK_DEPTH = 100
# Characters of a query kept for embedding and BM25: ten times a chunk, and far more than any
# embedder reads (MiniLM reads 256 word pieces); a longer query is cut, not refused.
MAX_QUERY_CHARS = 8_192

log = logging.getLogger("situate.retrieve")


def clean_query(text: str) -> str:
    """A query as it is searched: NUL bytes removed, lone surrogates replaced (as the loaders
    clean documents), cut to MAX_QUERY_CHARS; InputError if nothing is left to search for."""
    text, _ = clean_text(text)
    if not text.strip():
        raise InputError("empty query: give words to search for")
    if len(text) > MAX_QUERY_CHARS:
        log.warning(f"query of {len(text)} characters cut to its first {MAX_QUERY_CHARS}")
        text = text[:MAX_QUERY_CHARS]
    return text


def default_modes(reranker: str = "cohere") -> str:
    """Every mode this configuration can run: `rerank` joins when the reranker is local (`st:`)
    or a Cohere key is set."""
    local = reranker.partition(":")[0].strip().lower() != "cohere"
    return ",".join(MODES if local or has_key("cohere") else SEARCH_MODES)


def check_modes(modes: Sequence[str]) -> list[str]:
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise InputError(f"unknown retrieval mode {bad[0]!r}: use one of {', '.join(MODES)}")
    if not modes:
        raise InputError(f"no retrieval mode given: use one or more of {', '.join(MODES)}")
    return list(modes)


def retrieve(store: ChunkStore, collection: str, embedder_spec: str, queries: Sequence[str],
             mode: str, limit: int, reranker_spec: str = "cohere") -> list[list[Hit]]:
    """Top `limit` hits for each query in one mode; query vectors are embedded in batches."""
    check_modes([mode])
    vectors: list[list[float]] | list[None]
    if mode in ("dense", "hybrid", "rerank"):
        vectors = get_embedder(embedder_spec).embed_queries(list(queries))
    else:
        vectors = [None] * len(queries)
    if mode != "rerank":
        return [store.search(collection, mode, q, v, limit)
                for q, v in zip(queries, vectors, strict=True)]
    from situate.tasks.rerank import get_reranker

    reranker = get_reranker(reranker_spec)
    return [reranker.rerank(q, store.search(collection, "hybrid", q, v, max(limit, RERANK_DEPTH)), limit)
            for q, v in zip(queries, vectors, strict=True)]

