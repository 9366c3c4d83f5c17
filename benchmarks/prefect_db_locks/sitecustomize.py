"""Who holds the write lock of Prefect's SQLite database (issue 36), seen from inside each process.

Put this folder first on PYTHONPATH and set LOCKWATCH_DIR=DIR: every Python process started
so (the test workers, each `situate` command, each temporary Prefect server they start, which
inherit both) then records, per SQLAlchemy connection, the first write of each transaction
(INSERT, UPDATE, DELETE, REPLACE, BEGIN IMMEDIATE) and forgets it at its commit or rollback. A
write left open longer than HOLD_SECONDS is written to DIR/hold-PID.txt: the statement, the
coroutine chain of the asyncio task that made it (followed through `cr_await`), the chains of
every other task, the stack of every thread, and the `/proc/locks` lines of the database in
PREFECT_HOME. Without LOCKWATCH_DIR nothing is installed.

    LOCKWATCH_DIR=/tmp/holds PYTHONPATH=benchmarks/prefect_db_locks make test

Only the task is kept (weakly), so a transaction's objects are collected as they would be.
SQLAlchemy is hooked when it is first imported, not before: processes that never use it pay
nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import io
import os
import sys
import threading
import time
import traceback
import weakref
from typing import Any

import proc_locks  # this folder, first on PYTHONPATH

HOLD_SECONDS = 5.0
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "BEGIN IMMEDIATE")


class _Holds:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.open: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def install(self) -> None:
        import asyncio

        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        def key(conn: Any) -> int:
            try:
                return id(conn.connection.dbapi_connection)
            except Exception:  # noqa: BLE001 - an invalidated connection
                return id(conn)

        def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            if not statement.lstrip()[:15].upper().startswith(WRITES):
                return
            k = key(conn)
            with self.lock:
                if k in self.open:
                    return
                try:
                    task = asyncio.current_task()
                except RuntimeError:
                    task = None
                self.open[k] = {"start": time.time(), "statement": statement[:300],
                                "task": weakref.ref(task) if task is not None else None,
                                "thread": threading.current_thread().name, "reported": False}

        def end(conn: Any) -> None:
            with self.lock:
                self.open.pop(key(conn), None)

        event.listen(Engine, "before_cursor_execute", before)
        event.listen(Engine, "commit", end)
        event.listen(Engine, "rollback", end)
        threading.Thread(target=self.watch, daemon=True, name="sqlite-holds").start()

    def watch(self) -> None:
        while True:
            time.sleep(1.0)
            now = time.time()
            with self.lock:
                due = [h for h in self.open.values()
                       if now - h["start"] >= HOLD_SECONDS and not h["reported"]]
                for held in due:
                    held["reported"] = True
            for held in due:
                self.report(held, now - held["start"])

    def report(self, held: dict[str, Any], age: float) -> None:
        out = io.StringIO()
        out.write(f"=== {time.strftime('%H:%M:%S')} pid {os.getpid()} {sys.argv[:3]}: a write open "
                  f"{age:.1f} s (thread {held['thread']})\n{held['statement']}\n")
        task = held["task"]() if held["task"] is not None else None
        if task is not None:
            out.write(f"--- the task that wrote: {task!r}\n{_chain(task.get_coro())}")
            try:
                import asyncio

                for other in asyncio.all_tasks(task.get_loop()):
                    out.write(f"--- task {other.get_name()}\n{_chain(other.get_coro())}")
            except RuntimeError as e:
                out.write(f"(tasks not listed: {e})\n")
        out.write("--- threads\n")
        for ident, frame in sys._current_frames().items():
            out.write(f"thread {ident}\n" + "".join(traceback.format_stack(frame, limit=15)))
        out.write("--- /proc/locks on the database\n" + _proc_locks() + "\n")
        os.makedirs(self.folder, exist_ok=True)
        with open(os.path.join(self.folder, f"hold-{os.getpid()}.txt"), "a") as f:
            f.write(out.getvalue())


def _chain(coro: Any) -> str:
    lines = []
    for _ in range(80):
        if coro is None:
            break
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) \
            or getattr(coro, "ag_frame", None)
        lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
                     if frame is not None else f"  <{coro!r}>")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) \
            or getattr(coro, "ag_await", None)
    return "\n".join(lines) + "\n"


def _proc_locks() -> str:
    home = os.environ.get("PREFECT_HOME", os.path.expanduser("~/.prefect"))
    locks = proc_locks.read()
    out = []
    for name in ("prefect.db-shm", "prefect.db"):
        out.append(f"{name}:")
        out += [" ".join(parts) for parts in proc_locks.on(os.path.join(home, name), locks)]
    return "\n".join(out)


class _OnSQLAlchemy(importlib.abc.MetaPathFinder):
    """Installs the hooks right after `sqlalchemy.engine` is imported, wherever that happens."""

    def __init__(self, holds: _Holds) -> None:
        self.holds = holds

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "sqlalchemy.engine":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, holds = spec.loader, self.holds
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            holds.install()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("LOCKWATCH_DIR"):
    sys.meta_path.insert(0, _OnSQLAlchemy(_Holds(os.environ["LOCKWATCH_DIR"])))
