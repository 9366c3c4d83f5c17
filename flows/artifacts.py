"""What runs record in Prefect besides their logs: artifact keys, and the progress of an ingest
(a progress artifact and log lines at most once a second, and live bars on a terminal)."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from contextlib import ExitStack
from typing import cast
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from situate.flows.progress import PROGRESS_LINE, bar, reporting

PROGRESS_INTERVAL = 1.0  # seconds between progress-artifact updates and progress log lines
DOCUMENTS_SITUATED = "documents situated"  # what window tasks report, document by document


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


class IngestProgress:
    """Progress of an ingest run: a Prefect progress artifact and log lines, at most once a second
    (each artifact update is an API call), and on a terminal, live bars of documents situated
    and chunks embedded and written (`situate.flows.progress`), of the documents the run
    processes (the ingest flow leaves unchanged ones out of the totals; `skipped` counts any
    that a caller counts as done). Window tasks on this process's threads report each document
    as it is situated; on Dask, a window's documents count when the window comes back. Call
    `close`."""

    def __init__(self, collection: str, total_chunks: int, total_documents: int) -> None:
        self.total = max(1, total_chunks)
        self.done = 0
        self.started = time.monotonic()
        self.last = 0.0
        self.artifact: UUID = cast(UUID, create_progress_artifact(  # sync: not a coroutine
            0.0, key=artifact_key("ingest-progress", collection),
            description=f"chunks situated, embedded and written of "
                        f"{total_chunks}"))
        self.lock = threading.Lock()
        self.docs_reported = 0  # situated, as reported by window tasks in this process
        self.docs_settled = 0  # skipped as unchanged, or in a window that came back
        self.docs_skipped = 0
        self.docs_shown = 0
        self.windows: deque[int] = deque()  # documents of each window in flight, oldest first
        self.bars = ExitStack()
        self.bar_docs = self.bars.enter_context(bar("documents situated", total_documents, "docs"))
        self.bar_chunks = self.bars.enter_context(bar("chunks embedded and written",
                                                      total_chunks, "chunks"))
        self.bars.enter_context(reporting(DOCUMENTS_SITUATED, self.situated))

    def skipped(self, documents: int, chunks: int) -> None:
        """Documents of a window found unchanged: done without a task."""
        with self.lock:
            self.docs_skipped += documents
            self.docs_settled += documents
        self._show_documents()
        self.advance(chunks)

    def submitted(self, documents: int) -> None:
        self.windows.append(documents)

    def window_done(self, chunks: int) -> None:
        """The oldest window in flight came back (windows are settled in order)."""
        with self.lock:
            self.docs_settled += self.windows.popleft() if self.windows else 0
        self._show_documents()
        self.advance(chunks)

    def situated(self, documents: int) -> None:
        """A window task on this process's threads situated `documents` more."""
        with self.lock:
            self.docs_reported += documents
        self._show_documents()

    def _show_documents(self) -> None:
        with self.lock:
            now = max(self.docs_skipped + self.docs_reported, self.docs_settled)
            step, self.docs_shown = now - self.docs_shown, max(now, self.docs_shown)
        if step > 0:
            self.bar_docs(step)

    def advance(self, chunks: int) -> None:
        self.done += chunks
        self.bar_chunks(chunks)
        now = time.monotonic()
        if self.done < self.total and now - self.last < PROGRESS_INTERVAL:
            return
        self.last = now
        update_progress_artifact(self.artifact, min(100.0, 100.0 * self.done / self.total))
        rate = self.done / max(now - self.started, 1e-9)
        # On a terminal the bars say it: the line goes to the run's logs, not the console.
        get_run_logger().info(f"{self.done}/{self.total} chunks ({100 * self.done / self.total:.0f}%), "
                              f"{rate:.0f} chunks/s", extra={PROGRESS_LINE: True})

    def close(self) -> None:
        self.bars.close()
