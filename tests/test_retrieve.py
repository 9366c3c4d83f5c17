"""Retrieval's timing: a model's first call (its load) stays out of the timed queries, and is paid
once per loaded model, not once per mode."""

from __future__ import annotations

import pytest


class _EmptyStore:
    def search(self, collection, leg, query, vector, limit):
        return []

    def leg_scores(self, collection, leg, query, vector, ids):
        return {}


@pytest.fixture
def hash_embedder(monkeypatch, embedders):
    """A freshly loaded `hash` embedder, whose query batches are recorded."""
    embedder = embedders.get("hash")  # a test's own pool: not one an earlier test has warmed
    batches: list[list[str]] = []
    encode = embedder._function.encode_queries
    monkeypatch.setattr(embedder._function, "encode_queries",
                        lambda texts: batches.append(list(texts)) or encode(texts))
    return batches


def test_a_model_is_warmed_once_for_every_timed_mode(hash_embedder, embedders):
    from situate.tasks.retrieval.search import retrieve

    queries = ["alpha beta", "gamma", "delta"]
    seconds: list[float] = []

    embedder = embedders.get("hash")
    for mode in ("dense", "bm25", "hybrid"):
        retrieve(_EmptyStore(), "c", queries, mode, 5, embedder=embedder, on_query=seconds.append)
    # One untimed warm-up query, then each query embedded alone in each mode that embeds.
    assert hash_embedder == [["alpha beta"]] + [[q] for q in queries] * 2
    assert len(seconds) == 3 * len(queries)


def test_an_untimed_search_is_not_warmed(hash_embedder, embedders):
    from situate.tasks.retrieval.search import retrieve

    retrieve(_EmptyStore(), "c", ["alpha"], "dense", 5, embedder=embedders.get("hash"))
    assert hash_embedder == [["alpha"]]
