"""Retrieval over any `ChunkStore`: dense, BM25, hybrid (both legs fused here: cdbsf, dbsf or
RRF, `situate.core.fusion`) and hybrid reranked (Cohere or a local cross-encoder), for many
queries, each handled and timed alone. The store searches one leg at a time; the embedder and the
reranker are given, loaded by the caller."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from situate.core.errors import InputError
from situate.core.fusion import FUSIONS, SCORED
from situate.core.protocols import LEGS, ChunkStore
from situate.core.records import Hit
from situate.core.secrets import has_key
from situate.tasks.corpus.clean import clean_text

if TYPE_CHECKING:
    from situate.tasks.embedders.base import Embedder
    from situate.tasks.rerankers.base import Reranker

SEARCH_MODES = (*LEGS, "hybrid")
MODES = (*SEARCH_MODES, "rerank")
# Candidates each leg of a hybrid search contributes to the fusion.
FUSION_DEPTH = 100
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


def check_fusion(fusion: str) -> str:
    if fusion not in FUSIONS:
        raise InputError(f"SITUATE_FUSION={fusion!r} is not a fusion: use one of "
                         f"{', '.join(FUSIONS)}")
    return fusion


def search(store: ChunkStore, collection: str, mode: str, query_text: str,
           query_vector: Sequence[float] | None, limit: int, fusion: str = "cdbsf") -> list[Hit]:
    """The top `limit` chunks of one search mode: a leg of the store (`dense`, `bm25`) or both
    legs fused (`hybrid`)."""
    if mode == "hybrid":
        return hybrid(store, collection, query_text, query_vector, limit, fusion)
    if mode not in LEGS:
        raise InputError(f"unknown search mode {mode!r}: use one of {', '.join(SEARCH_MODES)}")
    return store.search(collection, mode, query_text, query_vector, limit)


def hybrid(store: ChunkStore, collection: str, query_text: str,
           query_vector: Sequence[float] | None, limit: int, fusion: str = "cdbsf") -> list[Hit]:
    """Dense and BM25 fused: each leg's top FUSION_DEPTH candidates, and (for the score-based
    fusions) each leg's own scores of the other leg's candidates it did not return, fused by
    `fusion`; each hit's score becomes its fused score."""
    fuse = FUSIONS[check_fusion(fusion)]
    depth = max(limit, FUSION_DEPTH)
    legs = [store.search(collection, leg, query_text, query_vector, depth) for leg in LEGS]
    by_id = {h.id: h for leg in reversed(legs) for h in leg}
    extras = None
    if fusion in SCORED:
        returned = [{h.id for h in leg} for leg in legs]
        extras = [store.leg_scores(collection, leg, query_text, query_vector,
                                   [i for i in by_id if i not in ids])
                  for leg, ids in zip(LEGS, returned, strict=True)]
    fused = fuse([[(h.id, h.score) for h in leg] for leg in legs], extras)
    return [dataclasses.replace(by_id[i], score=score) for i, score in fused[:limit]]


def retrieve(store: ChunkStore, collection: str, queries: Sequence[str], mode: str, limit: int, *,
             embedder: Embedder | None = None, reranker: Reranker | None = None,
             fusion: str = "cdbsf",
             on_query: Callable[[float], None] | None = None) -> list[list[Hit]]:
    """Top `limit` hits for each query in one mode (`retrieve_each`, collected)."""
    return list(retrieve_each(store, collection, queries, mode, limit, embedder=embedder,
                              reranker=reranker, fusion=fusion, on_query=on_query))


def retrieve_each(store: ChunkStore, collection: str, queries: Sequence[str], mode: str,
                  limit: int, *, embedder: Embedder | None = None,
                  reranker: Reranker | None = None, fusion: str = "cdbsf",
                  on_query: Callable[[float], None] | None = None) -> Iterator[list[Hit]]:
    """Top `limit` hits for each query in one mode, yielded as each query finishes, so that an
    evaluation of thousands of queries keeps what it needs of each (ranks, first hit) rather than
    every hit of every query.

    Each query is handled as a user's would be, alone: embedded (dense, hybrid, rerank: the
    `embedder` is needed), searched and, for `rerank`, reranked by `reranker`; `on_query` gets
    its wall time in seconds as it finishes (the evaluation's latency and progress). Queries are
    not embedded in batches: a query's latency is then the latency a user sees for it, its
    embedding included, and the time of a set is proportional to its queries either way. Loading
    the model is not timed: with `on_query`, a model is warmed with one untimed query the first
    time it is used (`Embedder.warm_up`: once per loaded model, not per call).
    """
    check_modes([mode])
    if mode != "bm25" and embedder is None:
        raise InputError(f"retrieval mode {mode!r} needs an embedder")
    if mode == "rerank" and reranker is None:
        raise InputError("retrieval mode 'rerank' needs a reranker")
    return _each(store, collection, queries, mode, limit, embedder if mode != "bm25" else None,
                 reranker, fusion, on_query)


def _each(store: ChunkStore, collection: str, queries: Sequence[str], mode: str, limit: int,
          encoder: Embedder | None, reranker: Reranker | None, fusion: str,
          on_query: Callable[[float], None] | None) -> Iterator[list[Hit]]:
    if encoder is not None and queries and on_query is not None:
        encoder.warm_up(queries[0])  # untimed, once per model: only when timing is asked for
    for q in queries:
        started = time.perf_counter()
        vector = encoder.embed_queries([q])[0] if encoder is not None else None
        if mode == "rerank":
            assert reranker is not None
            candidates = hybrid(store, collection, q, vector, max(limit, RERANK_DEPTH), fusion)
            hits = reranker.rerank(q, candidates, limit)
        else:
            hits = search(store, collection, mode, q, vector, limit, fusion)
        if on_query is not None:
            on_query(time.perf_counter() - started)
        yield hits
