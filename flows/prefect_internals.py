"""Everything situate does with Prefect's private parts, in one place.

Each use says why Prefect's public API does not do it. `TOUCHED` lists every module attribute
and every instance attribute this module reaches for; `tests/test_prefect_internals.py` fails
loudly when a Prefect upgrade moves one, instead of a run silently losing what it bought.
Where one is missing at run time, situate goes on without the improvement it gave.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# (module, attribute): module-level names; ("prefect.runner:Runner", attr): instance attributes.
TOUCHED = (
    ("prefect.utilities.engine", "_prefect_sigterm_handler"),
    ("prefect.server.api.server", "SubprocessASGIServer"),
    ("prefect.server.api.server:SubprocessASGIServer", "_instances"),
    ("prefect.events.worker", "EventsWorker"),
    ("prefect.events.worker:EventsWorker", "drain_all"),
    ("prefect.flows", "_display_serve_start_message"),
    ("prefect.runner:Runner", "handle_sigterm"),
    ("prefect.runner:Runner", "_process_manager"),
    ("prefect.runner:Runner", "_scheduled_run_poller"),
    ("prefect.runner._process_manager:ProcessManager", "flow_run_ids"),
    ("prefect.runner._scheduled_run_poller:ScheduledRunPoller", "_submitting_flow_run_ids"),
)


def bound_sigterm(stop: Callable[[int], None], deadline: float) -> None:
    """Give Prefect's SIGTERM handling of a flow run a deadline.

    Inside a flow run Prefect swaps SIGTERM for a handler that raises in the main thread, marks
    the run crashed and re-sends the signal to the previous handler once the run's task runner
    has let its worker threads finish. That last wait is unbounded, and no setting bounds it.
    Wrapping Prefect's handler (a module attribute its engine reads when a run starts) starts a
    timer that calls `stop(signum)` after `deadline` seconds whatever the threads are doing.
    """
    try:
        from prefect.utilities import engine as prefect_engine
    except ImportError:
        return
    original = getattr(prefect_engine, "_prefect_sigterm_handler", None)
    if original is None or getattr(original, "_situate_deadline", False):
        return

    def with_deadline(signum: int, frame: object) -> None:
        timer = threading.Timer(deadline, stop, args=(signum,))
        timer.daemon = True
        timer.start()
        original(signum, frame)

    with_deadline._situate_deadline = True  # type: ignore[attr-defined]
    prefect_engine._prefect_sigterm_handler = with_deadline


def temporary_server() -> Any:
    """The running temporary API server of this process, if Prefect started one (Prefect keeps
    its singletons in a private class attribute; nothing public says whether one runs)."""
    import sys

    module = sys.modules.get("prefect.server.api.server")
    if module is None:
        return None
    instances = getattr(module.SubprocessASGIServer, "_instances", {})
    return next((s for s in instances.values() if getattr(s, "running", False)), None)


def start_temporary_server() -> None:
    """Start the temporary server now (the flow would start the same singleton on its first API
    call and wait for it; started here, its start overlaps the model's load)."""
    from prefect.server.api.server import SubprocessASGIServer

    SubprocessASGIServer().start()


def drain_events(timeout: float) -> None:
    """Send every event the client still holds (task-run states travel as events)."""
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=timeout)


def display_serve_start(deployments: list[Any]) -> None:
    """Prefect's own banner for served deployments (private: `flow.serve` prints it itself)."""
    try:
        from prefect.flows import _display_serve_start_message
    except ImportError:  # a release without it: the runner's own log says enough
        return
    _display_serve_start_message(*deployments)


def set_runner_sigterm(runner: Any, handler: Callable[..., None]) -> None:
    """`Runner.start` installs `self.handle_sigterm` for SIGTERM (and on it stops badly: it calls
    the async `stop` without awaiting it); ours, set on the instance, replaces it."""
    runner.handle_sigterm = handler


def runs_in_hand(runner: Any) -> set[Any]:
    """Ids of the flow runs this runner has started or is starting (Prefect 3.8's private
    bookkeeping, read defensively: if a release renames it, the runs are still cancelled by
    `astop`, only not re-checked afterwards)."""
    ids: set[Any] = set()
    manager = getattr(runner, "_process_manager", None)
    if manager is not None and hasattr(manager, "flow_run_ids"):
        ids |= set(manager.flow_run_ids())
    poller = getattr(runner, "_scheduled_run_poller", None)
    ids |= set(getattr(poller, "_submitting_flow_run_ids", ()) or ())
    return ids
