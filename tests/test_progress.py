"""Live progress: rich bars on a terminal with Prefect's log lines printed above them, nothing on a
pipe (plain periodic log lines instead), and Prefect's per-task-run lines only with --verbose."""

from __future__ import annotations

import contextvars
import fcntl
import io
import logging
import os
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from situate.flows import progress
from situate.flows.progress import PROGRESS_LINE, bar, reporter, reporting
from tests.conftest import ROOT, SAMPLE_CORPUS

SITUATE = Path(sys.executable).with_name("situate")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| (INFO|WARNING|ERROR) +\| ")


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal and keeps what is written to it."""

    def isatty(self) -> bool:
        return True


def _segments(raw: str) -> list[str]:
    """What a terminal shows line by line, roughly: text between line ends and line erases, with
    colours and cursor moves taken out."""
    return [ANSI.sub("", s) for s in re.split(r"\x1b\[2K|\r|\n", raw)]


# --- the bar itself -------------------------------------------------------------------------------

def test_not_a_terminal_no_bar_and_nothing_written(capsys):
    with bar("queries evaluated", 3, "queries") as advance:
        assert not progress.active()
        advance(3)
    assert capsys.readouterr().err == ""


def test_bars_share_one_display_with_log_lines_above_it(monkeypatch):
    from prefect.logging.handlers import PrefectConsoleHandler

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setenv("TERM", "xterm-256color")
    handler = PrefectConsoleHandler(stream=term)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d | %(levelname)-7s | %(name)s - "
                                           "%(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.addHandler(handler)
    console, filters = handler.console, list(handler.filters)
    log = logging.getLogger("situate.test_progress")
    try:
        with bar("documents situated", 4, "docs") as docs:
            with bar("chunks embedded and written", 10, "chunks") as chunks:
                assert progress.active()
                docs(4)
                log.warning("a line written while the bars are up")
                log.warning("42 of 10 things", extra={PROGRESS_LINE: True})  # the bars say it
                chunks(10)
                time.sleep(0.3)  # a refresh or two
        assert not progress.active()
        log.warning("after the bars, progress lines are back", extra={PROGRESS_LINE: True})
    finally:
        root.removeHandler(handler)
    assert handler.console is console and handler.filters == filters
    assert sys.stderr is term  # rich's redirection undone
    shown = _segments(term.getvalue())
    line = [s for s in shown if "a line written while the bars are up" in s]
    assert line and all(LOG_LINE.match(s) and "━" not in s for s in line), shown
    assert not any("42 of 10 things" in s for s in shown)
    assert any("after the bars, progress lines are back" in s for s in shown)
    final = "\n".join(shown[-12:])
    assert re.search(r"documents situated +━+ +100% 4/4 docs", final), final
    assert re.search(r"chunks embedded and written +━+ +100% 10/10 chunks", final), final


def test_reporters_reach_threads_that_copy_the_context_only():
    got: list[int] = []
    with reporting("documents situated", got.append):
        reporter("documents situated")(2)
        reporter("something else")(100)
        copied = contextvars.copy_context()
        t = threading.Thread(target=copied.run, args=(lambda: reporter("documents situated")(3),))
        t.start()
        t.join()
        t = threading.Thread(target=lambda: reporter("documents situated")(5))  # a fresh context
        t.start()
        t.join()
    reporter("documents situated")(7)
    assert got == [2, 3]


class _Paid:
    """A provider with a cache identity (so documents are situated on threads), no network."""

    def __new__(cls):
        from situate.tasks.contexts.base import NoContext

        class Paid(NoContext):
            name = "paid"

            def cache_identity(self):
                return {"provider": "paid"}

        return Paid()


@pytest.mark.parametrize("provider", ["structural", "paid"])
def test_a_window_reports_each_document_it_situates(provider):
    from situate.flows.artifacts import DOCUMENTS_SITUATED
    from situate.flows.progress import reporter
    from situate.tasks.contexts.base import ContextConfig, get_contextualizer
    from situate.tasks.contexts.cache import situate_documents
    from situate.tasks.corpus.load import scan_corpus, stream_corpus

    scan_corpus(SAMPLE_CORPUS, 800, 100)
    docs = list(stream_corpus(SAMPLE_CORPUS, 800, 100))
    contextualizer = _Paid() if provider == "paid" else get_contextualizer(ContextConfig())
    got: list[int] = []
    lock = threading.Lock()

    def count(n: int) -> None:
        with lock:
            got.append(n)

    with reporting(DOCUMENTS_SITUATED, count):
        results = situate_documents(contextualizer, docs, None, reporter(DOCUMENTS_SITUATED))
    assert len(results) == len(docs) > 1
    assert got == [1] * len(docs)


# --- through the CLI ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory):
    """One Prefect home for these runs: its database is migrated once, not per run."""
    return tmp_path_factory.mktemp("prefect-home")


def _env(prefect_home: Path, tmp: Path) -> dict[str, str]:
    env = {**os.environ, "PREFECT_HOME": str(prefect_home), "SITUATE_CACHE_DIR": str(tmp / "cache"),
           "SITUATE_RESULTS_DIR": str(tmp / "results"), "TERM": "xterm-256color", "COLUMNS": "120"}
    for var in ("ANTHROPIC_API_KEY", "PREFECT_API_URL", "NO_COLOR", "FORCE_COLOR"):
        env.pop(var, None)
    return env


def _ingest_args(tmp: Path, *extra: str) -> list[str]:
    return [str(SITUATE), "ingest", str(SAMPLE_CORPUS), "--collection", "x",
            "--milvus-uri", str(tmp / "m.db"), *extra]


def _on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 600) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal 120 columns wide; (exit code, terminal, stdout)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    out = bytearray()
    stdout: list[bytes] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # every writer closed the terminal
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    reader.join(timeout=10)
    return proc.returncode, out.decode(errors="replace"), (stdout or [b""])[0].decode()


@pytest.mark.slow
def test_ingest_on_a_terminal_shows_bars_and_no_task_run_lines(prefect_home, tmp_path):
    from situate.tasks.corpus.load import scan_corpus

    scan = scan_corpus(SAMPLE_CORPUS, 800, 100)
    code, term, stdout = _on_a_terminal(_ingest_args(tmp_path), _env(prefect_home, tmp_path))
    assert code == 0, term
    assert "ingested" in stdout and "━" not in stdout  # the summary on stdout, bars on stderr
    shown = _segments(term)
    final = "\n".join(shown)
    # The last frame: both bars full, with their counts, a rate and the time they took.
    assert re.search(rf"documents situated +━+ +100% {scan.documents}/{scan.documents} docs "
                     r"+[\d.,]+ docs/s +\d:\d\d:\d\d", final), final
    assert re.search(rf"chunks embedded and written +━+ +100% {scan.chunks}/{scan.chunks} chunks "
                     r"+[\d.,]+ chunks/s +\d:\d\d:\d\d", final), final
    assert "\x1b[?25h" in term  # the cursor is given back
    assert not any("Task run '" in s for s in shown), final
    assert not any("chunks (100%)" in s for s in shown), final  # the bars say it instead
    assert any("Beginning flow run" in s for s in shown) and any("chunks written" in s for s in shown)


@pytest.mark.slow
def test_ingest_on_a_terminal_verbose_prints_task_run_lines_above_the_bars(prefect_home, tmp_path):
    code, term, _ = _on_a_terminal(_ingest_args(tmp_path, "--verbose"), _env(prefect_home, tmp_path))
    assert code == 0, term
    shown = _segments(term)
    task_lines = [s for s in shown if "Task run 'window-0'" in s]
    # Logged while the bars are up, each on a line of its own, not through a bar.
    assert task_lines, "\n".join(shown)
    assert all(LOG_LINE.match(s) and "━" not in s and s.rstrip().endswith("Completed()")
               for s in task_lines), task_lines
    assert any("━" in s for s in shown)


@pytest.mark.slow
def test_ingest_on_a_pipe_plain_progress_lines_no_bar_no_task_run_lines(prefect_home, tmp_path):
    r = subprocess.run(_ingest_args(tmp_path), cwd=ROOT, env=_env(prefect_home, tmp_path),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "━" not in r.stderr + r.stdout and "\x1b[" not in r.stderr
    assert "documents situated" not in r.stderr
    assert re.search(r"\| Flow run '[^']+' - \d+/\d+ chunks \(100%\), \d+ chunks/s", r.stderr), r.stderr
    assert "Finished in state" in r.stderr  # the flow run's own line stays
    assert "Task run '" not in r.stderr, r.stderr
