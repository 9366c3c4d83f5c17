"""SIGTERM (`kill`) and Ctrl-C (SIGINT to the whole foreground process group, as a terminal sends
it) stop `situate ingest` and `situate evaluate` in every phase: reading the corpus, situating,
embedding, writing, and evaluating. Each time: the one `interrupted` line, no traceback anywhere
in stdout or stderr, exit 128 + the signal, every process the command started gone, and the flow
run (when one had started) recorded Cancelled with no task run left running, in the Prefect
database of the command's own temporary server. The next run finishes the job with exact rows."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from benchmarks.bench_scale import write_corpus
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.milvus_server import MilvusServer
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.prefect_server import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900)]

SITUATE = Path(sys.executable).with_name("situate")
SIGNALS = [signal.SIGTERM, signal.SIGINT]
# Ctrl-C in the phases whose stop is the same code path as SIGTERM's (the flow's task runs, a
# loopback server's client): in the soak tier (`make test-soak`), to keep CI under its budget.
SOAK_SIGINT = [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.soak)]
KEY = "sk-ant-stop-test"


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory) -> Path:
    """One Prefect home for this module's commands: its database is migrated once, and each
    command's temporary server records its runs there."""
    return tmp_path_factory.mktemp("prefect-home")


def _env(tmp_path: Path, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API_URL", "SITUATE_", "ANTHROPIC_"))}
    return {**env, "PREFECT_HOME": str(home), "SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
            "SITUATE_CACHE_DIR": str(tmp_path / "cache"),
            "SITUATE_RESULTS_DIR": str(tmp_path / "results"), **extra}


def _start(args: list[str], tmp_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """The command in a session of its own, as a shell runs a foreground job."""
    return subprocess.Popen([str(SITUATE), *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _latest_run(home: Path) -> tuple[str, str, int] | None:
    """(flow name, state, task runs not final) of the latest flow run in the Prefect database."""
    db = home / "prefect.db"
    if not db.exists():
        return None
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT flow_run.id, flow.name, flow_run.state_type FROM flow_run "
                           "JOIN flow ON flow.id = flow_run.flow_id "
                           "ORDER BY flow_run.created DESC LIMIT 1").fetchone()
        if row is None:
            return None
        open_tasks = conn.execute("SELECT count(*) FROM task_run WHERE flow_run_id = ? AND "
                                  "state_type IN ('RUNNING', 'PENDING', 'SCHEDULED')",
                                  (row[0],)).fetchone()[0]
    return row[1], row[2], open_tasks


def _stop_at(proc: subprocess.Popen, reached: Callable[[], bool], signum: int, what: str,
             command: str) -> tuple[str, str]:
    """Wait until the command is in the phase (`reached`), send the signal the way a user does,
    and check how it ended; returns its output."""
    deadline = time.monotonic() + 300
    while not reached():
        assert proc.poll() is None, f"{what}: ended before the phase\n" + "".join(proc.communicate())
        assert time.monotonic() < deadline, f"the run never reached its {what} phase"
        time.sleep(0.05)
    started = psutil.Process(proc.pid).children(recursive=True)
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
    else:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    name = signal.Signals(signum).name
    # Prompt: a stop that waited for the run would hang past the 60 s above (no bound in seconds
    # here: the 2-core machine decides those). The time is printed for the log.
    print(f"{what}: stopped {took:.1f} s after {signal.Signals(signum).name}")
    assert proc.returncode == 128 + signum, (proc.returncode, err[-3000:])
    assert "Traceback" not in out + err, f"{what}, {name}:\n{out}\n{err}"
    assert [line for line in err.splitlines() if "interrupted" in line] == [
        f"situate {command}: interrupted ({name}); what was done is kept: run the same command "
        "again to go on from there"], err
    wait_until(lambda: not _alive(started), 10, f"{what}: the processes the command started gone")
    return out, err


@contextmanager
def _phase_run(home: Path) -> Iterator[Callable[[str], None]]:
    """Yields a check that the latest flow run is the given flow's, recorded Cancelled."""
    before = _latest_run(home)

    def check(flow: str) -> None:
        run = _latest_run(home)
        assert run is not None and run != before, "no flow run was recorded"
        assert run == (flow, "CANCELLED", 0), run

    yield check


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_stopped_while_reading_the_corpus(tmp_path, prefect_home, signum):
    """Before any flow run: the corpus is being checked. Nothing is recorded, nothing written."""
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 160_000)
    proc = _start(["ingest", str(corpus), "--collection", "stop", "--embedder", "minilm"],
                  tmp_path, _env(tmp_path, prefect_home))

    def reading() -> bool:
        try:
            return any(f.path == str(corpus) for f in psutil.Process(proc.pid).open_files())
        except psutil.Error:
            return False

    before = _latest_run(prefect_home)
    _stop_at(proc, reading, signum, "reading", "ingest")
    assert _latest_run(prefect_home) == before  # no flow run had started
    # Nothing of the run's: at most the local model prepared for its embedder (written whole or
    # not at all, and kept for the next run).
    cache = tmp_path / "cache"
    assert not cache.exists() or {p.name for p in cache.iterdir()} <= {"models"}


@pytest.mark.parametrize("signum", SOAK_SIGINT, ids=lambda s: signal.Signals(s).name)
def test_stopped_while_situating(tmp_path, prefect_home, signum):
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 400)
    with FakeAnthropic(api_key=KEY, latency=0.3) as claude, FakeOpenAI() as embeddings:
        env = _env(tmp_path, prefect_home, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=claude.base_url,
                   OPENAI_API_KEY=embeddings.api_key, OPENAI_BASE_URL=embeddings.base_url + "/v1")
        args = ["ingest", str(corpus), "--collection", "stop", "--context", "anthropic",
                "--embedder", "openai"]
        with _phase_run(prefect_home) as cancelled:
            proc = _start(args, tmp_path, env)
            _stop_at(proc, lambda: sum(claude.http_requests.values()) >= 4, signum, "situating",
                     "ingest")
            cancelled("ingest")
        again = _start(args, tmp_path, env)
        out, err = again.communicate(timeout=600)
    assert again.returncode == 0 and "Traceback" not in out + err, err[-3000:]
    assert " rows " in out and _summary(out)["rows"] == "400"


def _summary(out: str) -> dict[str, str]:
    return dict(line.split(None, 1) for line in out.splitlines()[1:] if line.strip())


@pytest.mark.parametrize("signum", SOAK_SIGINT, ids=lambda s: signal.Signals(s).name)
def test_stopped_while_embedding(tmp_path, prefect_home, signum):
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 1600)  # 200 documents of 8 chunks
    with FakeOpenAI(latency=0.2) as embeddings:
        env = _env(tmp_path, prefect_home, OPENAI_API_KEY=embeddings.api_key,
                   OPENAI_BASE_URL=embeddings.base_url + "/v1", SITUATE_EMBED_BATCH="16")
        args = ["ingest", str(corpus), "--collection", "stop", "--embedder", "openai",
                "--context", "structural"]
        with _phase_run(prefect_home) as cancelled:
            proc = _start(args, tmp_path, env)
            _stop_at(proc, lambda: embeddings.requests >= 3, signum, "embedding", "ingest")
            cancelled("ingest")
        again = _start(args, tmp_path, env)
        out, err = again.communicate(timeout=600)
    assert again.returncode == 0 and "Traceback" not in out + err, err[-3000:]
    assert _summary(out)["rows"].strip() == "1600"  # exact: nothing lost, nothing twice


@pytest.mark.parametrize("signum", SOAK_SIGINT, ids=lambda s: signal.Signals(s).name)
def test_stopped_while_writing(tmp_path, prefect_home, signum):
    """Writing to a Milvus server in small upserts, the rows seen arriving from outside."""
    from situate.storage.milvus import MilvusStore

    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 1600)
    server = MilvusServer(tmp_path / "milvus")
    server.start()
    try:
        with FakeOpenAI() as embeddings, MilvusStore(server.uri) as watcher:
            env = _env(tmp_path, prefect_home, OPENAI_API_KEY=embeddings.api_key,
                       OPENAI_BASE_URL=embeddings.base_url + "/v1", SITUATE_WRITE_BATCH="8",
                       SITUATE_MILVUS_URI=server.uri)
            args = ["ingest", str(corpus), "--collection", "stop", "--embedder", "openai",
                    "--context", "structural"]

            def writing() -> bool:
                return watcher.exists("stop") and watcher.count("stop") > 0

            with _phase_run(prefect_home) as cancelled:
                proc = _start(args, tmp_path, env)
                _stop_at(proc, writing, signum, "writing", "ingest")
                cancelled("ingest")
            assert watcher.count("stop") < 1600
            again = _start(args, tmp_path, env)
            out, err = again.communicate(timeout=600)
            assert again.returncode == 0 and "Traceback" not in out + err, err[-3000:]
            assert watcher.count("stop") == 1600
    finally:
        server.stop()


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_stopped_while_evaluating(tmp_path, prefect_home, signum):
    from tests.conftest import SAMPLE_CORPUS, SAMPLE_EVAL

    with FakeOpenAI() as embeddings:
        env = _env(tmp_path, prefect_home, OPENAI_API_KEY=embeddings.api_key,
                   OPENAI_BASE_URL=embeddings.base_url + "/v1")
        done = _start(["ingest", str(SAMPLE_CORPUS), "--collection", "stop", "--embedder", "openai",
                       "--context", "structural"], tmp_path, env)
        assert done.wait(timeout=600) == 0
        ingested = embeddings.requests
        embeddings.latency = 0.3  # each query's embedding: the evaluation is underway
        with _phase_run(prefect_home) as cancelled:
            proc = _start(["evaluate", str(SAMPLE_EVAL), "--collection", "stop"], tmp_path, env)
            _stop_at(proc, lambda: embeddings.requests >= ingested + 4, signum, "evaluating",
                     "evaluate")
            cancelled("evaluate")
