"""Concurrent queries embedded together: `QueryBatcher`.

A small query costs a local model little arithmetic and much fixed work (a call into its
process, a forward pass of Python between native kernels), so concurrent queries are embedded
as one call, as infinity and TEI batch dynamically. A batcher keeps a thread per call a lane (a
model process) may have under way (two for a model process: `base.CALLS_PER_PROCESS`); a thread
that is free takes every request waiting (at most `max_batch`) at once. Nothing waits for
company: a lone query goes straight through, and the queries that arrive while a lane embeds go
together into its next call. `linger` (seconds) would hold a batch open for stragglers;
it is 0 by default because no measured setting paid for the wait (BENCHMARKS.md).

The vectors are the lane's business: each caller gets its own row of the batch it was embedded
in, so a lane must give every text the vector it would give it alone (`ModelProcess` does:
tasks/embedders/local.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from situate.core.errors import ProviderError
from situate.core.settings import default

# Most queries a lane embeds in one call: the embedders' own batch size (SITUATE_EMBED_BATCH's
# default, as base.EMBED_BATCH).
MAX_BATCH: int = default("embed_batch")

log = logging.getLogger("situate.embed")

Lane = Callable[[list[str]], Sequence[Any]]  # texts -> one vector per text, in order


class QueryBatcher:
    """Requests from many threads, embedded in batches by `lanes` (one thread each, or `calls`
    threads for a lane that takes that many batches at once: `add_lane`).

    `embed(texts)` returns one vector per text, each embedded in some batch; an error raised by a
    lane reaches every caller whose text was in the failing batch; `close()` fails the requests
    still waiting (and every later one) with a ProviderError saying so. A lane may first need to
    get ready (`ready`, e.g. a model still loading): its thread takes no request before.
    """

    def __init__(self, lanes: Sequence[Lane] = (), *, max_batch: int = MAX_BATCH,
                 linger: float = 0.0, name: str = "queries") -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        self.max_batch = max_batch
        self.linger = linger
        self.name = name
        self._pending: deque[tuple[str, Future[Any]]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._lanes = 0
        self.batches: deque[int] = deque(maxlen=1_000)  # sizes of the last batches embedded
        for lane in lanes:
            self.add_lane(lane)

    @property
    def lanes(self) -> int:
        return self._lanes

    def add_lane(self, lane: Lane, ready: Callable[[], object] | None = None, *,
                 calls: int = 1) -> None:
        """One more lane taking batches, `calls` at once (a thread each: a model process runs
        its calls one at a time, in order, so its next batch waits at its door instead of here);
        `ready()` is waited for before its first, and a failure of it reported once."""
        if calls < 1:
            raise ValueError(f"calls must be at least 1, not {calls}")
        with self._cond:
            if self._closed:
                raise ProviderError(f"the {self.name} batcher is closed")
            threads = [threading.Thread(target=self._serve, args=(lane, ready, n == 0),
                                        daemon=True,
                                        name=f"situate-{self.name}-{len(self._threads) + n}")
                       for n in range(calls)]
            self._threads.extend(threads)
            self._lanes += 1
        for thread in threads:
            thread.start()

    def embed(self, texts: Sequence[str]) -> list[Any]:
        """One vector per text, in order; blocks until all are embedded."""
        futures: list[Future[Any]] = [Future() for _ in texts]
        with self._cond:
            if self._closed:
                raise ProviderError(f"the {self.name} batcher is closed: open a new retriever")
            self._pending.extend(zip(texts, futures, strict=True))
            self._cond.notify(len(futures))
        return [f.result() for f in futures]

    def close(self) -> None:
        """Fail every request still waiting, and every later one; lanes stop after their current
        batch (whose callers get its result or its error)."""
        with self._cond:
            self._closed = True
            waiting = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        for _, future in waiting:
            future.set_exception(ProviderError(
                f"the {self.name} batcher was closed before this query was embedded"))

    def _take(self) -> list[tuple[str, Future[Any]]] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            if self.linger > 0:
                deadline = time.monotonic() + self.linger
                while len(self._pending) < self.max_batch and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if not self._pending:  # another lane took them while this one lingered
                    return []
            n = min(self.max_batch, len(self._pending))
            return [self._pending.popleft() for _ in range(n)]

    def _serve(self, lane: Lane, ready: Callable[[], object] | None, reports: bool) -> None:
        if ready is not None:
            try:
                ready()
            except Exception as e:  # the other lanes go on; the first lane's load is reported
                if reports:
                    log.warning(f"a {self.name} lane could not start: {type(e).__name__}: {e}")
                return
        while (batch := self._take()) is not None:
            if not batch:
                continue
            self.batches.append(len(batch))
            try:
                vectors = lane([text for text, _ in batch])
                if len(vectors) != len(batch):
                    raise ProviderError(f"the {self.name} lane returned {len(vectors)} vectors "
                                        f"for {len(batch)} texts")
            except BaseException as e:  # every waiter of this batch hears of it
                for _, future in batch:
                    future.set_exception(e)
                if not isinstance(e, Exception):
                    raise
                continue
            for (_, future), vector in zip(batch, vectors, strict=True):
                future.set_result(vector)
