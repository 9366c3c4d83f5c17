"""`situate search`: one query, no orchestration, so no Prefect (its import alone takes seconds)."""

from __future__ import annotations

import time

from situate.api.retriever import Retriever
from situate.api.wire import SearchResponse, warnings_of
from situate.core.records import Hit
from situate.flows.options import SearchOptions


def search(options: SearchOptions) -> list[Hit]:
    """The top `k` chunks of a collection for one query (`respond`'s hits)."""
    return respond(options).hits


def respond(options: SearchOptions) -> SearchResponse:
    """The top `k` chunks of a collection for one query: the same `Retriever` an app searches
    with, so the same ranking as `situate evaluate` measures. The model runs in a process of its
    own, so that Ctrl-C stops the command at once, even while torch loads. The reply is the one
    `POST /search` sends (`situate.api.wire`): the hits, the time the search took once the
    store and the model were ready, and where a long query was cut."""
    with Retriever.open(options.config(model_process=True)) as retriever:
        started = time.perf_counter()
        hits = retriever.run(options.request)
        return SearchResponse(hits=hits, took_ms=round((time.perf_counter() - started) * 1000, 3),
                              warnings=warnings_of(options.request))
