"""Checks of a run's options, written once: the flows call them as they start (deployment runs),
and the CLI calls the same functions before Prefect is even imported, so bad options fail in a
fraction of a second and write nothing. Imports no Prefect."""

from __future__ import annotations

from situate.core.errors import InputError, StoreError
from situate.core.uri import is_lite

TASK_RUNNERS = ("threads", "dask")


def check_ingest_options(collection: str, context: str, embedder: str, task_runner: str = "threads",
                         dask_address: str | None = None, milvus_uri: str = "") -> None:
    """Collection name, context provider, embedder (package and key) and task runner."""
    from situate.storage.rows import validate_collection_name
    from situate.tasks.contexts.base import CONTEXTUALIZERS
    from situate.tasks.embedders.base import check_embedder

    validate_collection_name(collection)
    CONTEXTUALIZERS.check(context)
    check_embedder(embedder)
    check_task_runner(task_runner, dask_address, milvus_uri)


def check_task_runner(kind: str, dask_address: str | None = None, milvus_uri: str = "") -> None:
    """Threads, or Dask with a Milvus server (its workers are other processes)."""
    if kind not in TASK_RUNNERS:
        raise InputError(f"unknown task runner {kind!r}: use one of {', '.join(TASK_RUNNERS)}")
    if kind == "threads" and dask_address:
        raise InputError("--dask-address needs --task-runner dask")
    if kind == "dask" and milvus_uri and is_lite(milvus_uri):
        raise InputError(f"--task-runner dask needs a Milvus server, not the Milvus Lite file "
                         f"{milvus_uri!r} (one process per file): run `milvus-lite server --data-dir "
                         "DIR --port 19530` or a Milvus Standalone and pass --milvus-uri "
                         "http://HOST:PORT")


def split_collections(text: str) -> list[str]:
    """`--collection a,b,c` -> ['a', 'b', 'c'] (Milvus names cannot hold a comma), each name
    checked; InputError for an empty or repeated one."""
    from situate.storage.rows import validate_collection_name

    names = [c.strip() for c in text.split(",")]
    if not all(names):
        raise InputError(f"--collection {text!r} has an empty name: give names separated by commas")
    for name in names:
        try:
            validate_collection_name(name)
        except StoreError as e:
            raise InputError(str(e)) from None
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"--collection names {repeated[0]!r} twice: give each collection once")
    return names


def check_evaluate_options(collection: str, k: str, modes: str | None,
                           reranker: str = "cohere") -> tuple[list[int], list[str]]:
    """(cut-offs, modes) after checking the collection name, `k`, the modes and, for `rerank`,
    that the reranker is configured (its key, or its model's directory; nothing is loaded)."""
    from situate.storage.rows import validate_collection_name
    from situate.tasks.retrieval.metrics import parse_ks
    from situate.tasks.retrieval.search import check_modes, default_modes

    validate_collection_name(collection)
    ks = parse_ks(k)
    mode_list = check_modes([m.strip() for m in (modes or default_modes(reranker)).split(",") if m.strip()])
    if "rerank" in mode_list:
        from situate.tasks.rerankers.base import get_reranker

        get_reranker(reranker)
    if {"hybrid", "rerank"} & set(mode_list):
        from situate.core.settings import get_settings
        from situate.tasks.retrieval.search import check_fusion

        check_fusion(get_settings().fusion)
    return ks, mode_list
