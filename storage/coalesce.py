"""Concurrent searches of one kind sent to the store as one call: `Coalescer`.

Milvus Lite's dense search costs a pass over every row of the collection in Python per call,
whatever the number of query vectors in it (its executor builds a map of every primary key and a
mask of every row before it asks an index): at 100,000 chunks a call with one vector took 474 ms
on a loaded two-core machine, one with eight 811 ms (`benchmarks/bench_search_scale.py`'s
server, /tmp probe). So searches that arrive while calls are under way wait for one to end, and
then go together in the next call. Nothing waits for company: a lone search goes straight through.

Two calls of a kind may be under way at once (`IN_FLIGHT`): while the store answers one, the next
is already at its door, so it does not sit idle while this process reads an answer, hands it
out and sends the next call (a thread that was waiting must first win the interpreter's lock).

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
IN_FLIGHT = 2  # calls of one key under way at once at most


class Coalescer(Generic[Q, R]):
    """`run(key, query, call)`: `call(queries)` answers a list of queries of one `key` with one
    result each, in order; `run` returns this query's result, from a call made by this thread or
    by another one that took it along. A call's error reaches every query it held. At most
    `in_flight` calls of one key are under way at once."""

    def __init__(self, max_batch: int = MAX_BATCH, in_flight: int = IN_FLIGHT) -> None:
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, not {in_flight}")
        self.max_batch = max_batch
        self.in_flight = in_flight
        self._cond = threading.Condition()
        self._waiting: dict[Hashable, list[tuple[Q, Future[R]]]] = {}
        self._busy: dict[Hashable, int] = {}  # calls under way, by key
        self.batches: list[int] = []  # sizes of the last calls (at most 1,000 kept)

    def run(self, key: Hashable, query: Q, call: Callable[[list[Q]], Sequence[R]]) -> R:
        mine: Future[R] = Future()
        with self._cond:
            self._waiting.setdefault(key, []).append((query, mine))
            # Until it is answered, or it can make a call: it is still waiting (no call under way
            # took it along) and fewer than `in_flight` calls are under way.
            while not mine.done() and (self._busy.get(key, 0) >= self.in_flight
                                       or not _holds(self._waiting.get(key, ()), mine)):
                self._cond.wait()
            if mine.done():
                return mine.result()
            self._busy[key] = self._busy.get(key, 0) + 1
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
                if self._busy[key] == 1:
                    del self._busy[key]
                else:
                    self._busy[key] -= 1
                self._cond.notify_all()
        return mine.result()


def _holds(waiting: Sequence[tuple[Any, Future[Any]]], future: Future[Any]) -> bool:
    return any(f is future for _, f in waiting)


def rows_of(answer: Any, n: int) -> list[Any]:
    """A search answer's per-query hit lists, `n` of them (an empty answer: none found)."""
    rows = list(answer) if answer else []
    return [*rows, *([[]] * (n - len(rows)))]
