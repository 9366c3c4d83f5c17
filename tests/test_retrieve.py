"""The Retriever's warm-up: a model's first call (its load) and the store's first search of each
kind are paid when it opens (`warm`), never by a user's query, and once per mode, not once
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

    def leg_search(self, collection, leg, query, vector, limit):
        return []

    def leg_scores(self, collection, leg, query, vector, ids):
        return {}

    def ranking(self, collection, leg, query, vector, limit):
        return [(h.id, h.score) for h in self.leg_search(collection, leg, query, vector, limit)]

    def hits(self, collection, ranked):
        import dataclasses

        return [dataclasses.replace(self._hit(int(i[1:]), 0.0), score=s) for i, s in ranked]


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
    retriever.warm("dense", "bm25", "hybrid")
    retriever.warm("dense", "hybrid")  # already warm: nothing more
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
    retriever.warm()
    assert retriever.search("alpha", 5) == []
    assert embedders._loaded == {}


class _LegStore(_EmptyStore):
    """A store whose two legs rank the same ten chunks differently, and whose calls of one kind
    (the legs' searches, then their scores) can be made to wait for each other: they pass the
    barrier only if both are made at the same time."""

    def __init__(self, barrier=None):
        self.barrier = barrier
        self.calls: list[tuple[str, str]] = []

    def _meet(self):
        if self.barrier is not None:
            self.barrier.wait()

    def _hit(self, i, score):
        from situate.core.records import Hit

        return Hit(id=f"c{i}", doc_id=f"d{i % 3}", index=i, text=f"text {i}", context="",
                   score=score)

    def ranking(self, collection, leg, query, vector, limit):
        self.calls.append(("ranking", leg))
        self._meet()
        return [(h.id, h.score) for h in self._leg(leg)][:limit]

    def leg_search(self, collection, leg, query, vector, limit):
        self.calls.append(("leg_search", leg))
        self._meet()
        return self._leg(leg)[:limit]

    def _leg(self, leg):
        if leg == "dense":
            return [self._hit(i, 1.0 - i / 20) for i in range(0, 8)]
        return [self._hit(i, 9.0 - i / 3) for i in range(9, 3, -1)]

    def leg_scores(self, collection, leg, query, vector, ids):
        self.calls.append(("leg_scores", leg))
        self._meet()
        return {i: (0.5 if leg == "dense" else 0.0) + int(i[1:]) / 100 for i in ids}


@pytest.mark.parametrize("fusion", ["cdbsf", "dbsf", "rrf"])
def test_hybrid_runs_its_legs_at_the_same_time_and_ranks_the_same(fusion):
    """Both legs' searches, then both legs' scores, are made at once (a barrier of two lets
    neither pass alone); hits, order and fused scores are those of the legs one after another."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from situate.tasks.retrieval.search import hybrid

    alone = hybrid(_LegStore(), "c", "q", [0.1], 10, fusion)
    store = _LegStore(threading.Barrier(2, timeout=60))
    with ThreadPoolExecutor(2) as pool:
        together = hybrid(store, "c", "q", [0.1], 10, fusion, pool)
    assert together == alone and len(alone) == 10
    kinds = ["ranking", "ranking"] + (["leg_scores", "leg_scores"] if fusion != "rrf" else [])
    assert [kind for kind, _ in store.calls] == kinds


def test_a_failing_leg_is_raised_once_the_other_is_done():
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from situate.core.errors import StoreError
    from situate.tasks.retrieval.search import hybrid

    finished = threading.Event()
    both_in = threading.Barrier(2, timeout=60)

    class Failing(_LegStore):
        """Both legs meet inside their searches, so they run at once; BM25 then fails at
        once while dense is still working, and dense finishes only 0.3 s later."""

        def ranking(self, collection, leg, query, vector, limit):
            both_in.wait()
            if leg == "bm25":
                raise StoreError("bm25 search in 'c' failed")
            time.sleep(0.3)
            ranked = super().ranking(collection, leg, query, vector, limit)
            finished.set()
            return ranked

    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(StoreError, match="bm25 search"):
            hybrid(Failing(), "c", "q", [0.1], 10, "cdbsf", pool)
        # Checked before the pool's exit, which would wait for the dense leg itself.
        assert finished.is_set()  # the dense leg was not left running behind the error
