"""How a `situate` command stops on SIGTERM or Ctrl-C: within seconds, with one line, every
process it started ended, and nothing it did lost (see `install_stop_handlers`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

# After SIGTERM or Ctrl-C: how long the processes a run started get to end before they are killed,
# and how long a flow run gets to record itself as crashed before the process stops regardless.
STOP_GRACE_SECONDS = 2.0
STOP_DEADLINE_SECONDS = 3.0
_stopping = threading.Lock()
_command = ["situate"]  # the command being run, for the one line said on a stop


def install_stop_handlers(command: str) -> Callable[[], None]:
    """SIGTERM and Ctrl-C stop the command within seconds, with every process it started.

    Left alone, Ctrl-C raises in the main thread only, and Prefect turns a SIGTERM during a flow
    run into an exception that first waits for the run's worker threads: either way the
    embedding and writes already queued go on (minutes on a large corpus), and once the process
    ends, Prefect's temporary server and the model's process live on as orphans. Nothing a run
    has done is lost by stopping it at any point: every context is cached as its answer arrives,
    a document's rows are written in one upsert under deterministic ids, and the next run
    re-plans against what the collection holds. So: one line saying so, the process tree ended
    (terminate, then kill after a grace period) and an exit with 128 + the signal's number. During
    a flow run Prefect's own SIGTERM handling still runs first, so the run is recorded as crashed,
    but for at most STOP_DEADLINE_SECONDS (see `bound_prefect_sigterm`). Returns what puts the
    previous handlers back (for callers of `main` inside another program, such as the tests).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.signal(sig, lambda signum, frame: _stop_now(command, signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    _command[0] = command

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _stop_now(command: str, signum: int) -> None:
    """Say it once, end the process tree, exit. Safe to call from any thread, more than once."""
    if not _stopping.acquire(blocking=False):
        return
    try:
        from situate.flows import progress

        progress.abandon()  # bars down first: the terminal gets its cursor back
        sys.stdout.flush()
        sys.stderr.write(f"situate {command}: interrupted ({signal.Signals(signum).name}); what was "
                         "done is kept: run the same command again to go on from there\n")
        sys.stderr.flush()
        stop_process_tree(STOP_GRACE_SECONDS)
    finally:
        os._exit(128 + signum)


def bound_prefect_sigterm() -> None:
    """Prefect's SIGTERM handling of a flow run, bounded: the command stops after
    STOP_DEADLINE_SECONDS whatever the run's threads are doing (see
    `prefect_internals.bound_sigterm`)."""
    from situate.flows.prefect_internals import bound_sigterm

    bound_sigterm(lambda signum: _stop_now(_command[0], signum), STOP_DEADLINE_SECONDS)


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
