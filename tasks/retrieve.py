"""Retrieval variants over the chunk store: dense, BM25, hybrid (RRF), and hybrid reranked by
Cohere, for many queries."""

from __future__ import annotations

import os
from collections.abc import Sequence

from prefect import task

from storage.milvus import MODES as STORE_MODES
from storage.milvus import ChunkStore, open_store
from tasks.embed import get_embedder
from tasks.errors import InputError
from tasks.records import Hit

MODES = (*STORE_MODES, "rerank")
# Hybrid candidates handed to the reranker: one Cohere request (one search unit) per query.
RERANK_DEPTH = 100


def default_modes() -> str:
    """Every mode this configuration can run: `rerank` joins when a Cohere key is set."""
    return ",".join(MODES if os.environ.get("COHERE_API_KEY") else STORE_MODES)


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
    from tasks.rerank import get_reranker

    reranker = get_reranker(reranker_spec)
    return [reranker.rerank(q, store.search(collection, "hybrid", q, v, max(limit, RERANK_DEPTH)), limit)
            for q, v in zip(queries, vectors, strict=True)]


@task(task_run_name="retrieve-{mode}", persist_result=False)
def retrieve_task(uri: str, token: str, collection: str, embedder_spec: str,
                  queries: list[str], mode: str, limit: int) -> list[list[Hit]]:
    """Prefect task over `retrieve`; uses the process's client so it can run in any worker."""
    return retrieve(open_store(uri, token), collection, embedder_spec, queries, mode, limit)
