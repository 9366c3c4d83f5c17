"""How a `situate` command stops on SIGTERM or Ctrl-C: within seconds, with one line, its flow run
recorded Cancelled, every process it started ended, and nothing it did lost.

Nothing a run has done is lost by stopping it at any point: every context is cached as its answer
arrives, a document's rows are written in one upsert under deterministic ids, and the next run
re-plans against what the collection holds. So a stop does not unwind the run (that would wait
for the embedding and writes already queued, minutes on a large corpus, and have Prefect log the
interruption as a failure with its traceback): it says so in one line, records the flow run as
Cancelled (with its task runs), ends the process tree and exits with 128 + the signal's number.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from situate.core.processes import stop_process_tree

# After SIGTERM or Ctrl-C: how long recording the run as Cancelled may take, and how long the
# processes the command started get to be gone once killed.
RECORD_SECONDS = 3.0
STOP_GRACE_SECONDS = 2.0
CANCELLED_MESSAGE = ("stopped by {signal}; what was done is kept: run the same command again to go "
                     "on from there")
_stopping = threading.Lock()
_command = ["situate"]  # the command being run, for the one line said on a stop


def install_stop_handlers(command: str) -> Callable[[], None]:
    """SIGTERM and Ctrl-C stop the command within seconds (`stop_now`). Returns what puts the
    previous handlers back (for callers of `main` inside another program, such as the tests)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.signal(sig, lambda signum, frame: stop_now(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    _command[0] = command

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def take_over_flow_run_sigterm() -> None:
    """Inside a flow run Prefect swaps SIGTERM for its own handler, which raises into the run
    (logged as a task failure with a traceback) and records it Crashed; ours stops it as above
    instead (`prefect_internals.replace_sigterm`)."""
    from situate.flows.prefect_internals import replace_sigterm

    replace_sigterm(lambda signum, frame: stop_now(signum))


def stop_now(signum: int) -> None:
    """Say it once, record the run Cancelled, end the process tree, exit. Safe to call from any
    thread, more than once."""
    if not _stopping.acquire(blocking=False):
        return
    try:
        from situate.flows import progress

        progress.abandon()  # bars down first: the terminal gets its cursor back
        name = signal.Signals(signum).name
        sys.stdout.flush()
        sys.stderr.write(f"situate {_command[0]}: interrupted ({name}); what was done is kept: "
                         "run the same command again to go on from there\n")
        sys.stderr.flush()
        record_cancelled(CANCELLED_MESSAGE.format(signal=name))
        stop_process_tree(STOP_GRACE_SECONDS)
    finally:
        os._exit(128 + signum)


def record_cancelled(message: str, timeout: float = RECORD_SECONDS) -> None:
    """The flow run in progress in this process, if any, and its unfinished task runs, recorded
    Cancelled, in a thread of its own (the interrupted one may hold a client's lock), for at most
    `timeout` seconds."""
    run_id = _current_flow_run()
    if run_id is None:
        return
    done = threading.Thread(target=_cancel, args=(run_id, message), daemon=True)
    done.start()
    done.join(timeout)


def _current_flow_run() -> Any:
    try:
        from prefect.context import FlowRunContext
    except ImportError:
        return None
    context = FlowRunContext.get()
    return context.flow_run.id if context is not None and context.flow_run is not None else None


def _cancel(run_id: Any, message: str) -> None:
    try:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas import filters as f
        from prefect.client.schemas.objects import StateType
        from prefect.states import Cancelled

        open_tasks = f.TaskRunFilter(state=f.TaskRunFilterState(type=f.TaskRunFilterStateType(
            any_=[StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING])))
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(run_id, Cancelled(message=message), force=True)
            for task in client.read_task_runs(
                    flow_run_filter=f.FlowRunFilter(id=f.FlowRunFilterId(any_=[run_id])),
                    task_run_filter=open_tasks):
                client.set_task_run_state(task.id, Cancelled(message=message), force=True)
    except Exception:  # noqa: BLE001 - the stop goes on: the record is a courtesy
        pass
