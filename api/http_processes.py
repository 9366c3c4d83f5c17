"""`situate api --processes N`: N server processes answering on one listening socket; by
default (0) on a Milvus server, as many as the first one's collection calls for
(`situate.api.http.auto_processes`: one per core, at most 4, and on a `milvus-lite server` only
while the collection is small).

One `situate api` process answers every request in one Python interpreter: its event loop (HTTP)
and its search threads take turns at one lock, and while it works on a request the model's and
Milvus Lite's processes wait for it, so concurrent clients leave part of the cores idle
(docs/benchmarks: concurrent queries, where two processes are measured against one).

The parent listens (`situate.api.http.listen`), then starts the processes one after another,
each a spawned interpreter: it opens its own `Retriever` (its model process, its lexical index),
tells the parent it is ready, or why it could not start, and serves with uvicorn until told to
stop. The parent accepts the connections and hands each to the next process that serves, in
turn (`Handing`, as Node's cluster module does), so that clients connecting together are spread
evenly: left to the kernel, the process that woke first took most of a burst (8 connections
opened together went 5/3, 6/2 or 7/1 far more often than 4/4), and its clients queued behind
one interpreter while the other idled. A process whose parent is gone stops.

The first one builds the lexical index if it is missing or stale and saves it; the next ones read
the saved index (its vectors mapped from the file, one copy in memory for all). The parent starts
nothing more once one fails, and gives its error as its own. A signal before the first one serves
ends the command as a single process's start does: one line, "stopped (SIGTERM) while starting,
before serving", exit 128 + the signal's number.

Limits apply per process: the guard's requests in flight (one client's, all clients') and the
largest body are each process's own. A process that dies while the others serve stops them all,
and the command says so (one line, exit 2): a service manager restarts the whole server.
SIGTERM or Ctrl-C stops every process gracefully (uvicorn's own shutdown, each closing its
retriever).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from situate.api.config import RetrieverConfig
from situate.api.guard import Policy
from situate.core.errors import SituateError

ACCEPT_POLL = 0.25  # how often the parent's accept loop checks that it should stop (seconds)
STOP_SECONDS = 20.0  # a process's graceful shutdown (uvicorn's 10 s) and its retriever's close


class ServerProcessError(SituateError):
    """A server process of several could not start, or died while the others served."""


def serve_processes(config: RetrieverConfig, sock: socket.socket, policy: Policy, processes: int,
                    announce: Callable[[dict[str, Any], int], None], target: Callable[..., None],
                    auto: Callable[[dict[str, Any]], int] | None = None) -> str | None:
    """Serve on `sock` from `processes` spawned processes until SIGINT or SIGTERM; returns that
    signal's name. Each runs `target(config, policy, sock, told)` (`situate.api.http.child`),
    which sends on `told` the collection's description once it serves, or its error. With
    `processes` 0, `auto(info)` says how many, from the first one's description.
    `announce(info, processes)` is called once the first process serves."""
    context = multiprocessing.get_context("spawn")
    # The processes share one resource tracker (started with the first), which frees what a
    # killed process left (its model pool's semaphores) and would then warn of it after the
    # command's last line: the command has already said which process ended, and how.
    sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    stopped: list[str] = []
    previous = {sig: signal.signal(sig, lambda s, f: stopped.append(signal.Signals(s).name))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    children: list[Any] = []
    handing = Handing(sock)
    total = processes or 1  # 0: as many as the first one's collection calls for
    try:
        n = -1
        while (n := n + 1) < total:
            ready, told = context.Pipe(duplex=False)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            handing.keep(ours)
            child = context.Process(target=target, args=(config, policy, theirs, told),
                                    name=f"situate-api-{n + 1}", daemon=False)
            child.start()
            told.close()
            theirs.close()
            children.append(child)
            answer = _started(child, ready, n + 1, total, stopped)
            if answer is not None:
                handing.add(ours)
            if answer is None and n == 0:  # stopped before serving: said as a lone start says it
                _stop(children)
                name = stopped[0]
                sys.stderr.write(f"situate api: stopped ({name}) while starting, before serving\n")
                sys.stderr.flush()
                os._exit(128 + signal.Signals[name].value)
            if answer is None:  # stopped while a later one started: the others served
                return stopped[0]
            if n == 0:
                if not processes and auto is not None:
                    total = max(1, auto(answer))
                announce(answer, total)
        while not stopped:
            gone = wait([c.sentinel for c in children], timeout=0.5)
            if gone and not stopped:
                dead = next(c for c in children if c.sentinel in gone)
                dead.join(5)  # its sentinel closes as it exits, before its exit code is there
                raise ServerProcessError(
                    f"server process {children.index(dead) + 1} of {total} (pid {dead.pid}) "
                    f"ended with exit code {dead.exitcode} while serving; the others were "
                    "stopped: see the lines above, then start the server again")
        return stopped[0]
    finally:
        handing.stop()
        _stop(children)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()


class Handing:
    """The parent's accept loop: each connection it accepts on `sock` is handed to the next
    serving process in turn, its descriptor sent over a Unix socket pair (SCM_RIGHTS; the child's
    end is `situate.api.http.Handed`). A process that cannot take it at once (gone, or its queue
    of connections full) is passed over for the next; the loop never waits on one."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._kept: list[socket.socket] = []  # every parent's end, closed by `stop`
        self._ends: list[socket.socket] = []  # those of the processes that serve
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next = 0
        self._thread: threading.Thread | None = None

    def keep(self, end: socket.socket) -> None:
        end.setblocking(False)
        self._kept.append(end)

    def add(self, end: socket.socket) -> None:
        """`end`'s process serves: it takes its turn from the next connection on."""
        with self._lock:
            self._ends.append(end)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="situate-api-accept",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        self._sock.settimeout(ACCEPT_POLL)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:  # the socket was closed: the server is stopping
                return
            with conn, self._lock:
                for _ in range(len(self._ends)):
                    end = self._ends[self._next % len(self._ends)]
                    self._next += 1
                    try:
                        socket.send_fds(end, [b"c"], [conn.fileno()])
                        break
                    except OSError:  # gone (the main loop stops them all) or full: the next
                        continue

    def stop(self) -> None:
        """No more connections accepted; the processes' ends closed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(ACCEPT_POLL * 8)
        for end in self._kept:
            end.close()


def _started(child: Any, ready: Connection, n: int, processes: int,
             stopped: list[str]) -> dict[str, Any] | None:
    """What the child said once ready (its collection's description); None if a signal came
    first; its error, raised, if it could not start."""
    def ended() -> ServerProcessError:
        child.join(5)  # its exit code is there once it is joined
        return ServerProcessError(f"server process {n} of {processes} ended with exit code "
                                  f"{child.exitcode} while starting: see the lines above")

    try:
        while not ready.poll(0.2):
            if stopped:
                return None
            if not child.is_alive():
                raise ended()
        try:
            said = ready.recv()
        except EOFError:
            raise ended() from None
    finally:
        ready.close()
    if isinstance(said, BaseException):
        raise said
    return dict(said)


def _stop(children: list[Any]) -> None:
    """Every child asked to stop (SIGTERM: uvicorn's graceful shutdown), waited for, and killed
    if it has not stopped within STOP_SECONDS (its model's process follows it out)."""
    for child in children:
        if child.is_alive():
            child.terminate()
    for child in children:
        child.join(STOP_SECONDS)
        if child.is_alive():
            child.kill()
            child.join(5)
