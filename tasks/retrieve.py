"""Retrieval variants over the chunk store: dense, BM25 and hybrid (RRF), for many queries."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task

from storage.milvus import MODES, ChunkStore, open_store
from tasks.embed import get_embedder
from tasks.errors import InputError
from tasks.records import Hit


def check_modes(modes: Sequence[str]) -> list[str]:
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise InputError(f"unknown retrieval mode {bad[0]!r}: use one of {', '.join(MODES)}")
    return list(modes)


def retrieve(store: ChunkStore, collection: str, embedder_spec: str, queries: Sequence[str],
             mode: str, limit: int) -> list[list[Hit]]:
    """Top `limit` hits for each query in one mode; query vectors are embedded in batches."""
    vectors: list[list[float]] | list[None]
    if mode in ("dense", "hybrid"):
        vectors = get_embedder(embedder_spec).embed_queries(list(queries))
    else:
        vectors = [None] * len(queries)
    return [store.search(collection, mode, q, v, limit) for q, v in zip(queries, vectors,
                                                                           strict=True)]


@task(task_run_name="retrieve-{mode}", persist_result=False)
def retrieve_task(uri: str, token: str, collection: str, embedder_spec: str,
                  queries: list[str], mode: str, limit: int) -> list[list[Hit]]:
    """Prefect task over `retrieve`; uses the process's client so it can run in any worker."""
    return retrieve(open_store(uri, token), collection, embedder_spec, queries, mode, limit)
