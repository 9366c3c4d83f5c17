"""Retrieval variants over a chunk store: dense, BM25, hybrid (the store fuses them: cdbsf,
dbsf or RRF) and hybrid reranked (Cohere or a local cross-encoder), for many queries, each
handled and timed alone. The store is given (any `situate.core.protocols.ChunkStore`); the flows open it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from situate.core.errors import InputError
from situate.core.protocols import SEARCH_MODES, ChunkStore
from situate.core.records import Hit
from situate.core.secrets import has_key
from situate.tasks.corpus.clean import clean_text
from situate.tasks.embedders.base import get_embedder

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
             mode: str, limit: int, reranker_spec: str = "cohere",
             on_query: Callable[[float], None] | None = None) -> list[list[Hit]]:
    """Top `limit` hits for each query in one mode.

    Each query is handled as a user's would be, alone: embedded (dense, hybrid, rerank), searched
    and, for `rerank`, reranked; `on_query` gets its wall time in seconds as it finishes (the
    evaluation's latency and progress). Loading the model and the reranker is not timed: with
    `on_query`, a model is warmed with one untimed query the first time it is used
    (`Embedder.warm_up`: once per loaded model, not per call; the evaluation calls this once per
    mode and collection).
    """
    check_modes([mode])
    embedder = get_embedder(embedder_spec) if mode in ("dense", "hybrid", "rerank") else None
    reranker = None
    if mode == "rerank":
        from situate.tasks.rerankers.base import get_reranker

        reranker = get_reranker(reranker_spec)
    if embedder is not None and queries and on_query is not None:
        embedder.warm_up(queries[0])  # untimed, once per model: only when timing is asked for
    results: list[list[Hit]] = []
    for q in queries:
        started = time.perf_counter()
        vector = embedder.embed_queries([q])[0] if embedder is not None else None
        if reranker is None:
            hits = store.search(collection, mode, q, vector, limit)
        else:
            hits = reranker.rerank(q, store.search(collection, "hybrid", q, vector,
                                                   max(limit, RERANK_DEPTH)), limit)
        results.append(hits)
        if on_query is not None:
            on_query(time.perf_counter() - started)
    return results
