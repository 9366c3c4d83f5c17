"""The Retriever's warm-up: a model's first call (its load) and the store's first search of each
kind are paid when it opens (`prepare`), never by a user's query, and once per mode, not once
per query; every query after it is embedded alone."""

from __future__ import annotations

import pytest


class _EmptyStore:
    uri = "memory"

    def require(self, collection):
        pass

    def describe(self, collection):
        from situate.core.records import CollectionInfo

        return CollectionInfo(64, "hash:bow-64")

    def search(self, collection, leg, query, vector, limit):
        return []

    def leg_scores(self, collection, leg, query, vector, ids):
        return {}


@pytest.fixture
def hash_embedder(monkeypatch, embedders):
    """A freshly loaded `hash` embedder, whose query batches are recorded."""
    embedder = embedders.get("hash:bow-64")  # a test's own pool: not one an earlier test has warmed
    batches: list[list[str]] = []
    encode = embedder._function.encode_queries
    monkeypatch.setattr(embedder._function, "encode_queries",
                        lambda texts: batches.append(list(texts)) or encode(texts))
    return batches


def test_a_retriever_is_warmed_once_per_mode_and_never_with_a_users_query(hash_embedder,
                                                                          embedders):
    from situate.api.retriever import WARM_UP_QUERY, Retriever

    retriever = Retriever.over(_EmptyStore(), "c", embedders=embedders)
    assert hash_embedder == []  # `over` loads nothing
    retriever.prepare("dense", "bm25", "hybrid")
    retriever.prepare("dense", "hybrid")  # already warm: nothing more
    assert hash_embedder == [[WARM_UP_QUERY]] * 2  # one warm search per mode that embeds
    queries = ["alpha beta", "gamma", "delta"]
    for mode in ("dense", "bm25", "hybrid"):
        for q in queries:
            retriever.search(q, 5, mode)
    # Then each query embedded alone, in each mode that embeds.
    assert hash_embedder[2:] == [[q] for q in queries] * 2


def test_a_bm25_retriever_loads_no_model(embedders):
    from situate.api.retriever import Retriever

    retriever = Retriever.over(_EmptyStore(), "c", embedders=embedders, mode="bm25")
    retriever.prepare()
    assert retriever.search("alpha", 5) == []
    assert embedders._loaded == {}
