"""Ending the processes a command started (a temporary Prefect server, a model's process, Dask
workers), on every way out."""

from __future__ import annotations


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
