"""Concurrent searches of one kind sent to the store as one call: `Coalescer`.

Milvus Lite's dense search costs a pass over every row of the collection in Python per call,
whatever the number of query vectors in it (its executor builds a map of every primary key and a
mask of every row before it asks an index): at 100,000 chunks a call with one vector took 474 ms
on a loaded two-core machine, one with eight 811 ms (`benchmarks/bench_search_scale.py`'s
server, /tmp probe). So searches that arrive while one is under way wait for it, and then go
together in the next call. Nothing waits for company: a lone search goes straight through.

One call of a kind is under way at a time. Two at once (the next waiting at Lite's door while this
process hands out an answer, as a model process gets: `base.CALLS_PER_PROCESS`) kept a little
more of two cores busy at 737 chunks (8 clients: 1.02x the queries a second), but at 100,000
chunks each call's pass over every row was paid twice as often: 0.77x the queries a second, Lite's
CPU per query 35-45 ms against 25-32 (`bench_throughput`, hybrid, 8 clients, 4 rounds).

Only searches that would be answered the same alone are put together (same collection, field,
limit and output fields: the limit sets the HNSW search's breadth), and each gets its own row of
the batch's answer: the chunks it would get alone, each cosine of Lite's equal within a
float32's last bits (Lite scores a segment without an index, and its unsealed rows, with a
matrix product for a batch and a matrix-vector product for one query). The store ranks them by
cosines it computes itself from the hits' vectors (`MilvusStore.search`), the same to the bit
either way, so a shared call ranks as a lone one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

Q = TypeVar("Q")
R = TypeVar("R")
MAX_BATCH = 64  # query vectors in one call at most


class Coalescer(Generic[Q, R]):
    """`run(key, query, call)`: `call(queries)` answers a list of queries of one `key` with one
    result each, in order; `run` returns this query's result, from a call made by this thread or
    by another one that took it along. A call's error reaches every query it held."""

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        self.max_batch = max_batch
        self._cond = threading.Condition()
        self._waiting: dict[Hashable, list[tuple[Q, Future[R]]]] = {}
        self._busy: set[Hashable] = set()
        self.batches: list[int] = []  # sizes of the last calls (at most 1,000 kept)

    def run(self, key: Hashable, query: Q, call: Callable[[list[Q]], Sequence[R]]) -> R:
        mine: Future[R] = Future()
        with self._cond:
            self._waiting.setdefault(key, []).append((query, mine))
            while not mine.done() and key in self._busy:
                self._cond.wait()
            if mine.done():
                return mine.result()
            self._busy.add(key)
            waiting = self._waiting[key]
            at = next(i for i, (_, f) in enumerate(waiting) if f is mine)
            start = min(at, max(0, len(waiting) - self.max_batch))
            batch = waiting[start:start + self.max_batch]
            del waiting[start:start + self.max_batch]
            if not waiting:
                del self._waiting[key]
            self.batches = [*self.batches[-999:], len(batch)]
        try:
            results = call([q for q, _ in batch])
            for (_, future), result in zip(batch, results, strict=True):
                future.set_result(result)
        except BaseException as e:
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
        finally:
            with self._cond:
                self._busy.discard(key)
                self._cond.notify_all()
        return mine.result()


def rows_of(answer: Any, n: int) -> list[Any]:
    """A search answer's per-query hit lists, `n` of them (an empty answer: none found)."""
    rows = list(answer) if answer else []
    return [*rows, *([[]] * (n - len(rows)))]
