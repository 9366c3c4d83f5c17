"""Ending the processes a command started (a temporary Prefect server, a model's process, Dask
workers), on every way out; and a started process ending with the one that started it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


PARENT_POLL = 0.5  # how often a started process checks that its parent is still there (seconds)


def watch_parent(parent: int, gone: Callable[[], object]) -> None:
    """`gone()`, from a daemon thread, once this process's parent is no longer `parent` (the
    pid of the process that started it, given by that process: one that died while this one
    started has handed it to init already). A parent killed outright (SIGKILL, the OOM killer)
    never stops what it started, which would live on, holding its memory, with no one to
    serve."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL)
        gone()

    threading.Thread(target=watch, daemon=True, name="situate-parent-watch").start()


def stop_process_tree(grace: float) -> None:
    """End every descendant of this process: SIGKILL, since a terminated Prefect server prints
    tracebacks of the writes it was cut off in (its SQLite database survives a kill, as it must
    survive a power cut), and a model process or Dask worker holds nothing to save. `grace`
    bounds the wait for them to be gone."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=grace)
