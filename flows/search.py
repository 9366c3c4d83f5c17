"""`situate search`: one query, no orchestration, so no Prefect (its import alone takes seconds)."""

from __future__ import annotations

from situate.api.retriever import Retriever
from situate.core.records import Hit
from situate.flows.options import SearchOptions


def search(options: SearchOptions) -> list[Hit]:
    """The top `k` chunks of a collection for one query: the same `Retriever` an app searches
    with, so the same ranking as `situate evaluate` measures. The model runs in a process of its
    own, so that Ctrl-C stops the command at once, even while torch loads."""
    with Retriever(options.collection, options.milvus_uri, mode=options.mode,
                   fusion=options.fusion, reranker=options.reranker, backend=options.backend,
                   device=options.device, model_process=True) as retriever:
        return retriever.run(options.request)
