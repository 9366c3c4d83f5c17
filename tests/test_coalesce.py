"""Concurrent dense searches on Milvus Lite share one call (`situate.storage.coalesce`): those
that arrive while one is under way go together in the next, each gets what it would get alone,
an error reaches every search of its call, and searches that would be answered otherwise (another
limit, collection or field) are never put together."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from situate.storage.coalesce import Coalescer
from tests.test_lexical import C, documents, fresh

# How long a test waits for something that should happen at once (never a measure of speed).
PATIENCE = 60


def _gated(calls: list[list[int]], gate: threading.Event, fail: bool = False):
    def call(queries: list[int]) -> list[int]:
        calls.append(list(queries))
        if len(calls) == 1:
            assert gate.wait(PATIENCE)
        if fail:
            raise RuntimeError("the store is down")
        return [q * 10 for q in queries]
    return call


def _waiting(coalescer: Coalescer, key: object, n: int) -> None:
    deadline = time.monotonic() + PATIENCE
    while len(coalescer._waiting.get(key, [])) < n:
        assert time.monotonic() < deadline, "the searches never queued"
        time.sleep(0.01)


def test_searches_arriving_during_a_call_go_together_in_the_next():
    coalescer: Coalescer[int, int] = Coalescer()
    calls: list[list[int]] = []
    gate = threading.Event()
    call = _gated(calls, gate)
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(coalescer.run, "k", 0, call)
        while not calls:
            time.sleep(0.01)
        rest = [pool.submit(coalescer.run, "k", q, call) for q in range(1, 6)]
        _waiting(coalescer, "k", 5)
        other = pool.submit(coalescer.run, "other", 7, lambda qs: [-q for q in qs])
        assert other.result(PATIENCE) == -7  # another key is not held up by this one's call
        gate.set()
        assert first.result(PATIENCE) == 0
        assert [f.result(PATIENCE) for f in rest] == [10, 20, 30, 40, 50]
    assert [sorted(c) for c in calls] == [[0], [1, 2, 3, 4, 5]]


def test_an_error_reaches_every_search_of_its_call_and_the_next_ones_still_run():
    coalescer: Coalescer[int, int] = Coalescer()
    calls: list[list[int]] = []
    gate = threading.Event()
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(coalescer.run, "k", 0, _gated(calls, gate, fail=True))
        while not calls:
            time.sleep(0.01)
        rest = [pool.submit(coalescer.run, "k", q, _gated(calls, gate, fail=True))
                for q in (1, 2)]
        _waiting(coalescer, "k", 2)
        gate.set()
        for f in (first, *rest):
            with pytest.raises(RuntimeError, match="down"):
                f.result(PATIENCE)
    assert coalescer.run("k", 3, lambda qs: [q + 1 for q in qs]) == 4


def test_concurrent_dense_searches_on_lite_answer_as_alone(tmp_path):
    """Eight threads searching a Lite file at once: each ranking is the one it gets alone, the
    same chunks in the same order with the same scores to the bit (Lite's own cosines of a batch,
    a matrix product, differ in the last bits from one query's, a matrix-vector product: the
    store scores the hits from their vectors itself), and the searches that waited went in one
    call; the hits of a dense search too."""
    store = fresh(str(tmp_path / "a.db"), documents(60, 21))
    rng = np.random.default_rng(5)
    vectors = [list(map(float, v)) for v in rng.standard_normal((8, 8))]
    alone = [store.ranking(C, "dense", "", v, 20) for v in vectors]
    search = store.client.search
    gate = threading.Event()

    def slow_first(*a, **kw):  # the first call waits until the others queue behind it
        if not gate.is_set():
            gate.set()
            time.sleep(0.5)
        return search(*a, **kw)

    store.client.search = slow_first
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda v: store.ranking(C, "dense", "", v, 20), vectors))
    assert together == alone
    assert max(store._coalescer.batches[-8:]) > 1
    hits_alone = [store.leg_search(C, "dense", "", v, 20) for v in vectors]
    gate.clear()
    with ThreadPoolExecutor(8) as pool:
        hits_together = list(pool.map(lambda v: store.leg_search(C, "dense", "", v, 20), vectors))
    assert hits_together == hits_alone
    assert [[(h.id, h.score) for h in hs] for hs in hits_alone] == alone
    assert max(store._coalescer.batches[-8:]) > 1
    store.close()


def test_cosines_of_a_vector_do_not_depend_on_the_others_scored_with_it():
    """`cosines` sums each row on its own: a matrix product's kernel changes with the number of
    rows, and its cosines with it."""
    from situate.storage.milvus import cosines

    rng = np.random.default_rng(9)
    query = rng.standard_normal(384).astype(np.float32).tolist()
    rows = rng.standard_normal((117, 384)).astype(np.float32)
    together = cosines(query, rows)
    assert together == [cosines(query, [row])[0] for row in rows]
    assert together[:5] == cosines(query, rows[:5])


def test_vectors_as_python_floats_or_float32_arrays_score_the_same():
    """pymilvus gives a vector as a list of Python floats (a search's hits) or, read by id with
    `strict_float32`, as a float32 array: `float32` reads either as NumPy's own float32
    conversion does, to the bit, and their cosines are the same."""
    from situate.storage.milvus import cosines, float32

    rng = np.random.default_rng(3)
    rows = rng.standard_normal((50, 384)).tolist()  # doubles: each rounds to a float32
    assert np.array_equal(float32(rows), np.asarray(rows, dtype=np.float32))
    assert float32(rows).dtype == np.float32
    query = rng.standard_normal(384).tolist()
    assert cosines(query, rows) == cosines(query, [np.asarray(r, dtype=np.float32) for r in rows])


def test_rows_read_for_their_dense_scores_carry_float32_vectors(tmp_path):
    """The rows a hybrid search reads by id come with each vector as a float32 array (pymilvus's
    `strict_float32`: one array for the answer, not a list of Python floats a row), the
    vector stored."""
    store = fresh(str(tmp_path / "a.db"), documents(10, 7))
    stored = {r["id"]: r["dense"] for r in store.client.query(C, filter="", limit=100,
                                                                output_fields=["id", "dense"])}
    rows = store._read_scored(C, sorted(stored)[:5])
    assert len(rows) == 5
    answer = rows[0]["dense"].base  # the one array of the answer's vectors
    assert answer is not None and all(r["dense"].base is answer for r in rows)
    for r in rows:
        assert isinstance(r["dense"], np.ndarray) and r["dense"].dtype == np.float32
        assert np.array_equal(r["dense"], np.asarray(stored[r["id"]], dtype=np.float32))
    store.close()


def test_a_dense_rankings_ids_and_vectors_are_read_from_the_answers_columns(tmp_path):
    """A dense ranking on Lite reads its hits' ids and vectors from the columns of pymilvus's
    answer (`_search_columns`): the same ids in the same order, the same vectors to the bit, as
    the hits pymilvus makes one by one; and the ranking is `search`'s."""
    from situate.storage.milvus import _hit_id, _search_columns, float32

    store = fresh(str(tmp_path / "a.db"), documents(30, 9))
    query = np.random.default_rng(2).standard_normal(8).tolist()
    found = store._client_search(C, "dense", "", query, 20, ["id"])[0]
    columns = _search_columns(found)
    assert columns is not None
    ids, vectors = columns
    assert ids == [_hit_id(h) for h in found]
    assert np.array_equal(vectors, float32([h["entity"]["dense"] for h in found]))
    assert _search_columns(found) is None  # made into hits now: read one by one
    assert store.ranking(C, "dense", "", query, 20) == [
        (h.id, h.score) for h in store.leg_search(C, "dense", "", query, 20)]
    store.close()
