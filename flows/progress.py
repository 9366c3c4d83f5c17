"""Live progress in the terminal: rich progress bars when stderr is a terminal, nothing otherwise
(the flows' periodic log lines and Prefect progress artifacts carry progress everywhere else).

Interface (used by the ingest and evaluate flows):

    with bar("chunks situated, embedded and written", total=n, unit="chunks") as advance:
        advance(done_now)

Bars open at the same time share one display (rich allows one live display per process). It is
drawn on the console Prefect's log handler prints to, so log lines scroll above the bars instead
of through them; while it is up, the flows' own periodic progress lines (records carrying
`PROGRESS_LINE`) stay off the terminal, since the bars say the same. Work in other threads of
the run reports through `reporting` / `reporter`; in another process (a Dask worker) a reporter
does nothing, and the flow advances its bar when the work comes back.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text
from rich.theme import Theme

# Set on a log record (`extra={PROGRESS_LINE: True}`) that only says how far a run is.
PROGRESS_LINE = "situate_progress_line"


def _nothing(n: int = 1) -> None:
    return None


@contextmanager
def bar(description: str, total: int, unit: str = "items") -> Iterator[Callable[[int], None]]:
    """A progress bar of `total` `unit`s; yields `advance(n)`. Not a terminal: does nothing."""
    display = _Display.open()
    if display is None:
        yield _nothing
        return
    try:
        task_id = display.progress.add_task(description, total=total, unit=unit)
        yield lambda n: display.progress.advance(task_id, n)
    finally:
        display.close()


def terminal() -> bool:
    """Whether bars are drawn: stderr is a terminal that can move its cursor."""
    try:
        return sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def active() -> bool:
    """Whether bars are on the terminal now."""
    return _Display.current is not None


def abandon() -> None:
    """Take the bars down now, whoever has them open: for a command stopped by a signal, which
    exits without unwinding (the terminal gets its cursor and plain stderr back)."""
    display = _Display.current
    if display is not None:
        display.users = 1
        display.close()


# Tasks submitted from inside `reporting(...)` run in a copy of the submitting context (Prefect's
# thread runner copies it), so they find the run's reporters; elsewhere they find none.
_reporters: ContextVar[dict[str, Callable[[int], None]] | None] = ContextVar(
    "situate_reporters", default=None)


@contextmanager
def reporting(name: str, advance: Callable[[int], None]) -> Iterator[None]:
    """Within this block (and the task runs submitted from it), `reporter(name)` is `advance`."""
    token = _reporters.set({**(_reporters.get() or {}), name: advance})
    try:
        yield
    finally:
        _reporters.reset(token)


def reporter(name: str) -> Callable[[int], None]:
    """What advances `name` in this context; a no-op where nobody listens (another process)."""
    return (_reporters.get() or {}).get(name, _nothing)


class _HideProgressLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, PROGRESS_LINE, False)


class _Display:
    """The one rich progress display of this process, shared by the bars open at once."""

    current: _Display | None = None
    _lock = threading.RLock()  # re-entered by `abandon` from a signal handler

    def __init__(self) -> None:
        self.users = 0
        self._undo: list[Callable[[], None]] = []
        handlers = _terminal_handlers()
        prefect_consoles = [h for h in handlers if isinstance(getattr(h, "console", None), Console)]
        if prefect_consoles:
            # Prefect's own console, so its log lines are printed above the bars. Its theme
            # leaves out rich's default styles, which the bars need: added on top while up.
            console: Console = getattr(prefect_consoles[0], "console")  # noqa: B009 - not a Handler's
            console.push_theme(Theme())
            self._undo.append(console.pop_theme)
        else:
            console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
            TextColumn("{task.completed}/{task.total} {task.fields[unit]}"), _RateColumn(),
            TimeRemainingColumn(elapsed_when_finished=True),
            console=console, redirect_stdout=_same_terminal(sys.stdout), redirect_stderr=True)
        hide = _HideProgressLines()
        for h in handlers:
            h.addFilter(hide)
            self._undo.append(partial(h.removeFilter, hide))
        self.progress.start()
        self._undo.insert(0, self.progress.stop)
        # Any other console or handler writing to the terminal goes through the display too.
        for h in handlers:
            other = getattr(h, "console", console)
            if other is not console:
                setattr(h, "console", console)  # noqa: B010 - not a Handler's attribute
                self._undo.append(partial(setattr, h, "console", other))
            elif not hasattr(h, "console") and isinstance(h, logging.StreamHandler):
                previous = h.setStream(sys.stderr)  # rich's proxy of stderr, while it is up
                self._undo.append(partial(h.setStream, previous))

    @classmethod
    def open(cls) -> _Display | None:
        with cls._lock:
            if cls.current is None:
                if not terminal():
                    return None
                try:
                    cls.current = cls()
                except Exception:  # noqa: BLE001 - a bar is a courtesy: the run goes on without
                    return None
            cls.current.users += 1
            return cls.current

    def close(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users:
                return
            _Display.current = None
            # Stop first (the last frame stays on the terminal), then put handlers back.
            for undo in self._undo:
                try:
                    undo()
                except Exception:  # noqa: BLE001 - putting things back must not hide the run's outcome
                    pass


def _same_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _terminal_handlers() -> list[logging.Handler]:
    """Logging handlers that write to a terminal: the root's (Prefect's console handler) and
    any logger's own."""
    loggers = [logging.getLogger()] + [x for x in logging.root.manager.loggerDict.values()
                                        if isinstance(x, logging.Logger)]
    found: list[logging.Handler] = []
    for lg in loggers:
        for h in lg.handlers:
            stream = getattr(h, "stream", None)
            if h not in found and isinstance(h, logging.StreamHandler) and _same_terminal(stream):
                found.append(h)
    return found


class _RateColumn(ProgressColumn):
    """Units a second: over rich's last 30 s while running, the average once done."""

    def render(self, task: Task) -> Text:
        unit = task.fields.get("unit", "")
        if task.finished and task.finished_time:
            speed: float | None = task.completed / task.finished_time
        else:
            speed = task.speed
        if speed is None:
            return Text(f"- {unit}/s", style="progress.data.speed")
        shown = f"{speed:,.1f}" if speed < 10 else f"{speed:,.0f}"
        return Text(f"{shown} {unit}/s", style="progress.data.speed")
