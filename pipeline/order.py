"""The order an ingest's windows take the model and the store in: the order they were read.

Two windows are in flight at once (`situate.pipeline.plan.IN_FLIGHT`): one is written while the next
is embedded, so the model never waits for a write. Left to the threads, the window read second
could reach the model first (its contexts came sooner), and the windows would then be written in
either order. In order instead:

- the collection is written the same way on every run: Milvus Lite seals its segments in the
  order rows arrive, and BM25 keeps its statistics per segment, so the order of the writes is
  part of how a collection ranks;
- the first window creates the collection in its write, before any other window writes, so the
  second can embed meanwhile instead of waiting for the first to be written;
- the flow, which waits for the windows in the order it read them, gets each one's result as soon
  as it is written, and reads the next window while the model embeds.

A window that ends without reaching a stage (it failed, or the run was stopped) passes it, so it
holds back none of the windows after it. The order lives in the flow's process: windows run on
other processes (Dask) are not ordered, and the flow writes their first window alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

STAGES = ("embed", "write")


class WindowOrder:
    """Window `i` enters a stage once every window from `first` up to it has passed that stage."""

    def __init__(self, first: int = 0) -> None:
        self._changed = threading.Condition()
        self._next = dict.fromkeys(STAGES, first)  # the first window not yet through each stage
        self._ahead: dict[str, set[int]] = {stage: set() for stage in STAGES}  # through, early

    @contextmanager
    def stage(self, stage: str, index: int) -> Iterator[None]:
        """Wait for the windows before `index` to pass `stage`, then hold it until the block ends."""
        with self._changed:
            self._changed.wait_for(lambda: self._next[stage] >= index)
        try:
            yield
        finally:
            self.passed(stage, index)

    def passed(self, stage: str, index: int) -> None:
        """Window `index` is through `stage` (done with it, or never to reach it)."""
        with self._changed:
            if index < self._next[stage]:
                return
            ahead = self._ahead[stage]
            ahead.add(index)
            while self._next[stage] in ahead:
                ahead.remove(self._next[stage])
                self._next[stage] += 1
            self._changed.notify_all()

    def done(self, index: int) -> None:
        """Window `index` has ended, however: it holds back no window after it."""
        for stage in STAGES:
            self.passed(stage, index)
