"""Every private part of Prefect that situate reaches for (flows/prefect_internals.py) is still
where it was: a Prefect upgrade that moves one fails here, loudly, instead of a run quietly
losing what it bought (a bounded stop, a quiet temporary server, a clean `serve`)."""

from __future__ import annotations

import importlib
import inspect
import os
import signal
import subprocess
import sys

import pytest

from situate.flows.prefect_internals import TOUCHED


@pytest.mark.parametrize(("owner", "attribute"), TOUCHED)
def test_what_situate_touches_is_there(owner, attribute):
    module_name, _, class_name = owner.partition(":")
    module = importlib.import_module(module_name)
    if not class_name:
        assert hasattr(module, attribute), f"{module_name}.{attribute} is gone"
        return
    cls = getattr(module, class_name)
    if hasattr(cls, attribute):
        return
    # An instance attribute: set in the class's own code.
    source = inspect.getsource(cls)
    assert f"self.{attribute}" in source, f"{owner}: no attribute {attribute}"


def test_a_run_of_this_process_stops_through_the_handler_given():
    """What `capture_sigterm` installs for a flow run is the handler situate gave."""
    import signal

    from prefect.utilities import engine

    from situate.flows import prefect_internals

    calls: list[int] = []
    original = engine._prefect_sigterm_handler
    try:
        prefect_internals.replace_sigterm(lambda signum, frame: calls.append(signum))
        with engine.capture_sigterm():
            handler = signal.getsignal(signal.SIGTERM)
            handler(signal.SIGTERM, None)
        assert calls == [signal.SIGTERM]
    finally:
        engine._prefect_sigterm_handler = original


def test_the_temporary_server_gets_a_port_the_kernel_picked(monkeypatch):
    """Prefect draws its temporary server's port from 8000-8999 at random; two commands starting
    together drew the same one in CI (the second ran against the first's server and died with
    `Connection refused` when it stopped). situate asks the kernel for a free port instead."""
    from prefect.server.api import server as module

    from situate.flows import prefect_internals

    started: list[int] = []

    class Server:
        running = False

        def __init__(self) -> None:
            self.port = None

        def start(self) -> None:
            started.append(self.port)

    monkeypatch.setattr(module, "SubprocessASGIServer", Server)
    prefect_internals.start_temporary_server()
    low, high = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert len(started) == 1 and low <= started[0] <= high


def test_the_temporary_server_is_killed_at_exit_once_its_run_is_recorded(monkeypatch):
    """Prefect stops its temporary server at exit with `terminate()`: SIGTERM, then the server's
    shutdown, which cancels its background writers wherever they are (one cut off in a
    commit printed SQLAlchemy's traceback after the command's line). Once the command has seen its
    run recorded, `kill_at_exit(True)` makes that stop a SIGKILL: no shutdown code runs."""
    import signal
    import subprocess
    import sys
    from types import SimpleNamespace

    from prefect.server.api.server import SubprocessASGIServer

    from situate.flows import prefect_internals

    assert "self.server_process.terminate()" in inspect.getsource(SubprocessASGIServer.stop)
    monkeypatch.setattr(prefect_internals, "temporary_server", lambda: None)
    assert prefect_internals.kill_at_exit(True) is False  # no temporary server: nothing to do
    server = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: (print('shutting down'), sys.exit(0)))\n"
              "print('up', flush=True)\ntime.sleep(60)\n")
    for recorded, code in ((False, 0), (True, -signal.SIGKILL)):
        process = prefect_internals._ServerProcess([sys.executable, "-c", server],
                                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline() == "up\n"
        monkeypatch.setattr(prefect_internals, "temporary_server",
                            lambda p=process: SimpleNamespace(server_process=p))
        assert prefect_internals.kill_at_exit(recorded)
        process.terminate()  # Prefect's SubprocessASGIServer.stop
        assert process.wait(30) == code
        assert ("shutting down" in process.stdout.read()) is not recorded
        process.stdout.close()


def test_the_early_server_runs_the_very_command_prefect_asks_for(monkeypatch):
    """`EarlyServer` starts Prefect's temporary server before Prefect's server module is
    imported, predicting its command; Prefect is handed that process only for an identical
    Popen. A Prefect release that changes the command fails here (at run time it would only
    lose the head start)."""
    from prefect.server.api import server as module

    from situate.flows import prefect_internals

    asked: list[dict] = []

    class Recorder:
        def __getattr__(self, name):
            return getattr(subprocess, name)

        @staticmethod
        def Popen(*args, **kwargs):  # noqa: N802
            assert not args
            asked.append(kwargs)

    monkeypatch.setattr(module, "subprocess", Recorder())
    server = module.SubprocessASGIServer(54321)
    try:
        server._run_uvicorn_command()
    finally:
        module.SubprocessASGIServer._instances.pop(54321, None)
    assert asked == [prefect_internals._server_command(54321)]


def test_the_early_server_is_handed_over_once_for_its_own_command_and_else_killed(monkeypatch):
    from situate.flows import prefect_internals

    command = {"args": [sys.executable, "-c", "import time; time.sleep(60)"], "env": dict(os.environ)}
    monkeypatch.setattr(prefect_internals, "_server_command", lambda port: dict(command))
    early = prefect_internals.EarlyServer()
    process = early.take(prefect_internals._as_started(command))
    assert process is not None and process.poll() is None
    assert early.take(prefect_internals._as_started(command)) is None  # once
    process.kill()
    process.wait()

    other = prefect_internals.EarlyServer()
    running = other._process
    changed = {**command, "args": [*command["args"], "--another"]}
    assert other.take(prefect_internals._as_started(changed)) is None
    assert running is not None and running.wait(10) == -signal.SIGKILL

    unused = prefect_internals.EarlyServer()
    running = unused._process
    unused.discard()
    assert running is not None and running.wait(10) == -signal.SIGKILL


@pytest.mark.slow
def test_prefect_starts_its_temporary_server_on_the_early_process(tmp_path):
    """In a process of its own (the temporary server is a singleton): the server Prefect runs
    is the process started early, and it answers."""
    script = (
        "from situate.flows import prefect_internals as p\n"
        "early = p.EarlyServer(); pid = early._process.pid\n"
        "p.start_temporary_server(early)\n"
        "server = p.temporary_server()\n"
        "assert server.server_process.pid == pid, (server.server_process.pid, pid)\n"
        "import httpx; assert httpx.get(server.api_url + '/health').status_code == 200\n"
        "print('taken')\n")
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": ""}
    env.pop("PREFECT_API_URL")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0 and done.stdout.strip() == "taken", done.stderr[-2000:]
