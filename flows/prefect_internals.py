"""Everything situate does with Prefect's private parts, in one place.

Each use says why Prefect's public API does not do it. `TOUCHED` lists every module attribute
and every instance attribute this module reaches for; `tests/test_prefect_internals.py` fails
loudly when a Prefect upgrade moves one, instead of a run silently losing what it bought.
Where one is missing at run time, situate goes on without the improvement it gave.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

# (module, attribute): module-level names; ("prefect.runner:Runner", attr): instance attributes.
TOUCHED = (
    ("prefect.utilities.engine", "_prefect_sigterm_handler"),
    ("prefect.utilities.engine", "capture_sigterm"),
    ("prefect.server.api.server", "SubprocessASGIServer"),
    ("prefect.server.api.server", "subprocess"),
    ("prefect.server.api.server:SubprocessASGIServer", "_run_uvicorn_command"),
    ("prefect.server.api.server:SubprocessASGIServer", "_instances"),
    ("prefect.server.api.server:SubprocessASGIServer", "port"),
    ("prefect.server.api.server:SubprocessASGIServer", "server_process"),
    ("prefect", "__module_path__"),
    ("prefect.events.worker", "EventsWorker"),
    ("prefect.events.worker:EventsWorker", "wait_until_empty"),
    ("prefect.flows", "_display_serve_start_message"),
    ("prefect.runner:Runner", "handle_sigterm"),
    ("prefect.runner:Runner", "_process_manager"),
    ("prefect.runner:Runner", "_scheduled_run_poller"),
    ("prefect.runner._process_manager:ProcessManager", "flow_run_ids"),
    ("prefect.runner._scheduled_run_poller:ScheduledRunPoller", "_submitting_flow_run_ids"),
)


def replace_sigterm(handler: Callable[[int, Any], None]) -> None:
    """Use `handler` for SIGTERM during the flow runs of this process, in place of Prefect's.

    Inside a flow run Prefect swaps SIGTERM for a handler (`capture_sigterm`, installing the
    module attribute `_prefect_sigterm_handler`, looked up when a run starts) that raises
    `TerminationSignal` into the run: a task in progress is then logged as failed with its
    traceback, and the run is recorded Crashed after its threads have finished. No setting turns
    it off. For a one-off `situate` command, `handler` (situate's stop) runs instead. Deployment
    runs, started by Prefect's runner in processes of their own, keep Prefect's (it carries the
    runner's cancellations)."""
    try:
        from prefect.utilities import engine as prefect_engine
    except ImportError:
        return
    if getattr(prefect_engine, "_prefect_sigterm_handler", None) is None:
        return
    setattr(prefect_engine, "_prefect_sigterm_handler", handler)  # noqa: B010 - a private name


def temporary_server() -> Any:
    """The running temporary API server of this process, if Prefect started one (Prefect keeps
    its singletons in a private class attribute; nothing public says whether one runs)."""
    import sys

    module = sys.modules.get("prefect.server.api.server")
    if module is None:
        return None
    instances = getattr(module.SubprocessASGIServer, "_instances", {})
    return next((s for s in instances.values() if getattr(s, "running", False)), None)


# The temporary server of a one-off run holds no automations, so it runs none of their services:
# Prefect's ephemeral server would otherwise evaluate automations every 5 s and run every event
# through its reactive triggers (reading and writing their tables in the same SQLite file as the
# run's own writes), and cancel them wherever they are when it shuts down. What the
# run needs stays: the API, the task-run recorder and the event persister (`launch.wait_until_recorded`
# waits for both). Only that server's process gets it: a `prefect server start` the user (or a
# test) starts from the same environment keeps its automations.
TEMPORARY_SERVER_ENV = {"PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false"}


# Prefect's temporary server, as `SubprocessASGIServer._run_uvicorn_command` runs it: uvicorn on
# Prefect's app factory, with these variables over the environment and Prefect's settings.
# `tests/test_prefect_internals.py` checks it against the command Prefect asks for.
_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1"}


def _server_command(port: int) -> dict[str, Any]:
    """The Popen arguments of Prefect's temporary server on `port`, as Prefect would pass them."""
    import os

    import prefect
    from prefect.settings import get_current_settings

    return {"args": [sys.executable, "-m", "uvicorn", "--app-dir",
                     str(prefect.__module_path__.parent), "--factory",
                     "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port",
                     str(port), "--log-level", "error", "--lifespan", "on"],
            "env": {**os.environ, **_SERVER_ENV,
                    **get_current_settings().to_environment_variables(exclude_unset=True)}}


def _as_started(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What situate adds to the server's Popen (`start_temporary_server` says why)."""
    kwargs = dict(kwargs)
    kwargs.setdefault("start_new_session", True)
    if isinstance(kwargs.get("env"), dict):
        kwargs["env"] = dict(kwargs["env"])
        for key, value in TEMPORARY_SERVER_ENV.items():
            kwargs["env"].setdefault(key, value)  # the user's own setting wins
    if _LIBC is not None:
        kwargs.setdefault("preexec_fn", _stop_with_parent)
    return kwargs


class EarlyServer:
    """The temporary server's process, started before Prefect's server module is imported.

    That module takes about 2 s to import, and the server's own process imports it again before
    it answers: one after the other, they were the longest wait before a one-off run could begin.
    Started here with the command Prefect will ask for, the server imports while this process
    does; Prefect's `start` (`start_temporary_server`) is then handed this process when it asks
    for the same command, and goes on as always (its log line, its health check, its stop at
    exit). Asked for anything else (another port after a clash, a command a Prefect upgrade
    changed), Prefect gets a process of its own and this one is killed."""

    def __init__(self) -> None:
        self.port = _free_loopback_port()
        self._kwargs = _as_started(_server_command(self.port))
        self._process: _ServerProcess | None = _ServerProcess(**self._kwargs)

    def take(self, kwargs: dict[str, Any]) -> _ServerProcess | None:
        """This process, for a Popen of exactly the command it runs (once); else None."""
        process, self._process = self._process, None
        if process is not None and kwargs == self._kwargs and process.poll() is None:
            return process
        self._discard(process)
        return None

    def discard(self) -> None:
        """Kill the process if Prefect never took it."""
        process, self._process = self._process, None
        self._discard(process)

    @staticmethod
    def _discard(process: _ServerProcess | None) -> None:
        if process is not None:
            process.kill()
            process.wait()


def start_temporary_server(early: EarlyServer | None = None) -> None:
    """Start the temporary server now (the flow would start the same singleton on its first API
    call and wait for it; started here, its start overlaps the model's load), in a session of its
    own: a Ctrl-C at the terminal reaches the whole foreground process group, and the server must
    not shut down (printing the tracebacks of the writes it was cut off in) before the command
    has recorded its run as cancelled. Out of the group, a `kill -9` of the command would leave
    it running for good: on Linux it is asked to stop (SIGTERM) when the command's process ends,
    however it ends. Prefect starts it with `subprocess.Popen` in `_run_uvicorn_command`, with no
    way to pass either: the module's `subprocess` is swapped for the call. With `early`, the
    process started already (`EarlyServer`) is what that call gets.

    Its port is the operating system's pick, not Prefect's: Prefect draws one of 1,000 ports
    (8000-8999) at random and checks it is free seconds before its server binds it. Two
    commands starting together can draw the same one; the second's server then fails to bind,
    its health check is answered by the first's server, and its run dies with `Connection
    refused` when the first command ends (seen when two runs start at once). The kernel's
    pick from its ephemeral range (about 28,000 ports, never one in use) makes that a stray
    chance instead of a likely one, for one-off runs started side by side by a scheduler or a
    test suite."""
    from prefect.server.api import server as module

    class _NewSession:
        def __getattr__(self, name: str) -> Any:
            return getattr(subprocess, name)

        @staticmethod
        def Popen(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:  # noqa: N802 - the name it replaces
            if args:
                kwargs["args"], args = args[0], args[1:]
            kwargs = _as_started(kwargs)
            taken = early.take(kwargs) if early is not None and not args else None
            return taken if taken is not None else _ServerProcess(*args, **kwargs)

    real = getattr(module, "subprocess")  # noqa: B009 - not exported: read as an attribute
    setattr(module, "subprocess", _NewSession())  # noqa: B010
    try:
        server = module.SubprocessASGIServer()
        if not getattr(server, "running", False) and getattr(server, "port", 0) is None:
            server.port = early.port if early is not None else _free_loopback_port()
        server.start()
    finally:
        setattr(module, "subprocess", real)  # noqa: B010
        if early is not None:
            early.discard()  # not asked for (a server was running already): not needed


class _ServerProcess(subprocess.Popen):  # type: ignore[type-arg]
    """The temporary server's process. Prefect stops it at exit with `terminate()` (SIGTERM, then
    SIGKILL after 5 s); once `kill_at_exit(True)` said so, that stop is a SIGKILL at once."""

    without_shutdown = False

    def terminate(self) -> None:
        if self.without_shutdown:
            self.kill()
        else:
            super().terminate()


def kill_at_exit(recorded: bool) -> bool:
    """Have the temporary server killed at exit when `recorded` (everything this process's runs
    sent is in its database: `launch.wait_until_recorded`), else asked to shut down, Prefect's
    way; False if this process started no temporary server.

    Why kill: a shutdown cancels the server's background services mid-commit, and their
    tracebacks reach the command's stderr after its last line. With everything recorded there is
    nothing left to save (SQLite keeps every committed transaction through a kill)."""
    process = getattr(temporary_server(), "server_process", None)
    if not isinstance(process, _ServerProcess):
        return False
    process.without_shutdown = recorded
    return True


def _free_loopback_port() -> int:
    """A loopback port the kernel says is free now (bound to port 0, read, released)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent process ends (Linux's prctl); a plain
    C call through a libc loaded before the fork."""
    assert _LIBC is not None
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def send_events(timeout: float) -> bool:
    """Wait (at most `timeout` seconds) until the client has sent every event it holds (task-run
    states travel as events); True if it has. Not Prefect's `EventsWorker.drain_all`: that stops
    the sender, which then logs `Still processing items: N items remaining...` as a warning
    whenever events are still queued (under load, most runs)."""
    import threading

    from prefect.events.worker import EventsWorker

    sender = EventsWorker.instance()
    sent = threading.Thread(target=sender.wait_until_empty, daemon=True)
    sent.start()
    sent.join(timeout)
    return not sent.is_alive()


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
