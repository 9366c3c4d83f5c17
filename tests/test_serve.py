"""`situate serve` as a service: stopped by SIGTERM or Ctrl-C in the middle of a run (quickly,
exit 0, no run left Running, no process left), ingest and evaluate due in the same minute on one
Milvus Lite file (both complete, one after the other), and a second situate process on that file
(one clear line, exit 2). Real processes throughout: `prefect server start`, `situate serve`, the
runs it starts, and a loopback OpenAI embeddings service."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from benchmarks.bench_scale import write_corpus
from tests.conftest import SAMPLE_CORPUS, SAMPLE_EVAL
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.prefect_server import BIN, PrefectApi, prefect_server, wait_until

NOT_DONE = ["SCHEDULED", "PENDING", "RUNNING", "CANCELLING", "PAUSED"]
IN_PROGRESS = ["PENDING", "RUNNING", "CANCELLING"]


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[PrefectApi]:
    with prefect_server(tmp_path_factory.mktemp("prefect")) as server:
        yield server


def _env(api: PrefectApi, state: Path, fake: FakeOpenAI, **extra: str) -> dict[str, str]:
    env = api.env(OPENAI_API_KEY=fake.api_key, OPENAI_BASE_URL=fake.base_url + "/v1",
                  SITUATE_MILVUS_URI=str(state / "milvus.db"), SITUATE_CACHE_DIR=str(state / "cache"),
                  SITUATE_RESULTS_DIR=str(state / "results"),
                  PREFECT_RUNNER_POLL_FREQUENCY="2", **extra)
    for key in ("ANTHROPIC_API_KEY", "COHERE_API_KEY"):
        env.pop(key, None)
    return env


def _situate(*args: str, env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "situate"), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _serve(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    """`situate serve` with its output in cwd/serve.log (a pipe nobody reads could fill up)."""
    with open(cwd / "serve.log", "wb") as log:
        return subprocess.Popen([str(BIN / "situate"), "serve", *args], env=env, cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT)


def _alive(procs: list[psutil.Process]) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def _stop(serve: subprocess.Popen, signum: int, log: Path) -> tuple[float, str]:
    """Send `signum`; returns the seconds serve took to exit and everything it printed."""
    sent = time.monotonic()
    serve.send_signal(signum)
    try:
        serve.wait(timeout=60)
    except subprocess.TimeoutExpired:
        serve.kill()
        serve.wait()
        pytest.fail(f"situate serve still running 60 s after {signal.Signals(signum).name}:\n"
                    + log.read_text()[-3000:])
    return time.monotonic() - sent, log.read_text()


def _one_error_line(proc: subprocess.CompletedProcess, command: str, db: Path) -> str:
    """The failed command's one line: what (Milvus), where (the file), what to do."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if f"situate {command}: error:" in line]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert f"cannot open Milvus at {db}" in lines[0]
    assert "one process per file" in lines[0] and "milvus-lite server" in lines[0]
    return lines[0]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_run_stops_serve_and_no_run_is_left_running(api, tmp_path, signum):
    name = f"stop-{signal.Signals(signum).name.lower()}"
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 1600)  # 200 documents of 8 chunks: a run of a minute or more
    with FakeOpenAI(latency=0.2) as fake:
        env = _env(api, tmp_path / "state", fake, SITUATE_EMBED_BATCH="16")
        serve = _serve([str(corpus), "--collection", "served", "--embedder", "openai",
                        "--context", "structural", "--paused", "--name", name], env, tmp_path)
        try:
            dep = wait_until(lambda: api.deployment("ingest", name), 180, "ingest deployment")
            run = api.create_run(dep["id"])  # as `prefect deployment run ingest/NAME` does
            wait_until(lambda: fake.requests >= 3, 300, "the run's embedding phase", every=0.1)
            assert api.flow_run(run["id"])["state_type"] == "RUNNING"
            tree = psutil.Process(serve.pid).children(recursive=True)
            assert tree, "serve runs its flow runs in processes of their own"
            took, out = _stop(serve, signum, tmp_path / "serve.log")
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()

    # Prompt: a stop that waited for the run would pass _stop's 60 s and fail there.
    print(f"situate serve stopped {took:.2f} s after {signal.Signals(signum).name}")
    assert serve.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-5000:]
    assert out.strip().splitlines()[-1] == (
        f"situate serve: stopped ({signal.Signals(signum).name}); 1 run(s) in progress cancelled; "
        "what they did is kept, and the next run goes on from there")
    wait_until(lambda: not _alive(tree), 10, f"every process serve started gone ({_alive(tree)})")

    final = api.flow_run(run["id"])
    assert final["state_type"] in ("CANCELLED", "CRASHED", "FAILED"), final["state"]
    assert not api.flow_runs([dep["id"]], IN_PROGRESS)
    assert api.task_runs(run["id"])  # the run had got going
    assert not api.task_runs(run["id"], IN_PROGRESS), "task runs left in progress in the UI"


HOLD = """
import sys, time
from pymilvus import MilvusClient
client = MilvusClient(sys.argv[1])
print("holding", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_second_situate_process_on_a_held_lite_file_gets_one_line(api, tmp_path):
    """What `situate ingest` or `situate search` meets while a served run holds the file (the
    holder here is any process with the file open, as a run is: the lock is the file's)."""
    db = tmp_path / "state" / "milvus.db"
    db.parent.mkdir(parents=True)
    holder = subprocess.Popen([str(BIN / "python"), "-c", HOLD, str(db)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding", holder.communicate()[0]
        corpus = tmp_path / "corpus.jsonl"
        write_corpus(corpus, 16)
        with FakeOpenAI() as fake:
            env = _env(api, tmp_path / "state", fake)
            second = [_situate("ingest", str(corpus), "--collection", "other", "--embedder",
                               "openai", "--context", "structural", env=env, cwd=tmp_path),
                      _situate("search", "anything", "--collection", "served", env=env, cwd=tmp_path),
                      _situate("evaluate", str(SAMPLE_EVAL), "--collection", "served", env=env,
                               cwd=tmp_path)]
    finally:
        holder.kill()
        holder.communicate()
    for proc, command in zip(second, ("ingest", "search", "evaluate"), strict=True):
        _one_error_line(proc, command, db)
    for proc in second:
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.soak  # the soak tier (`make test-soak`): see README, Tests
def test_ingest_and_evaluate_due_at_once_on_a_lite_file_both_complete(api, tmp_path):
    name = "due-at-once"
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 1600)  # an ingest of several seconds: long enough to overlap the evaluate
    with FakeOpenAI(latency=0.05) as fake:
        env = _env(api, tmp_path / "state", fake)
        first = _situate("ingest", str(SAMPLE_CORPUS), "--collection", "due", "--embedder",
                         "openai", "--context", "structural", env=env, cwd=tmp_path)
        assert first.returncode == 0, first.stderr[-3000:]  # the evaluate has a collection to read
        every_minute = "* * * * *"
        serve = _serve([str(corpus), "--collection", "due", "--eval-set", str(SAMPLE_EVAL),
                        "--embedder", "openai", "--context", "structural", "--name", name,
                        "--ingest-cron", every_minute, "--evaluate-cron", every_minute], env, tmp_path)
        try:
            deps = {flow: wait_until(lambda flow=flow: api.deployment(flow, name), 180,
                                     f"{flow} deployment")["id"] for flow in ("ingest", "evaluate")}

            def first_pair_done() -> list[dict] | None:
                runs = [r for r in api.flow_runs(list(deps.values()))
                        if r["state_type"] not in NOT_DONE]
                by_minute: dict[str, list[dict]] = {}
                for r in runs:
                    by_minute.setdefault(r["expected_start_time"], []).append(r)
                return next((by_minute[t] for t in sorted(by_minute) if len(by_minute[t]) == 2), None)

            pair = wait_until(first_pair_done, 420, "an ingest and an evaluate due the same minute")
            took, out = _stop(serve, signal.SIGTERM, tmp_path / "serve.log")
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()

    runs = {("ingest" if r["deployment_id"] == deps["ingest"] else "evaluate"): r for r in pair}
    assert set(runs) == {"ingest", "evaluate"}
    for flow, r in runs.items():
        assert r["state_type"] == "COMPLETED", (flow, r["state"])
    ingest, evaluate = runs["ingest"], runs["evaluate"]
    assert ingest["end_time"] <= evaluate["start_time"] or evaluate["end_time"] <= ingest["start_time"]
    assert "one process at a time: they run one after another" in out
    assert serve.returncode == 0 and "Traceback" not in out, out[-5000:]
    print(f"situate serve stopped {took:.2f} s after SIGTERM")
    assert not api.flow_runs(list(deps.values()), IN_PROGRESS)


def test_runs_on_a_lite_file_one_at_a_time_on_a_server_together():
    from situate.flows.deploy import run_limit
    from situate.pipeline.options import ServeOptions

    def limit(uri: str) -> int | None:
        return run_limit(ServeOptions(corpus="c", collection="x", milvus_uri=uri))

    assert limit("/data/milvus.db") == 1
    assert limit("http://127.0.0.1:19530") is None
    assert limit("https://in01.zillizcloud.com") is None


def test_a_waiting_run_is_said_once_and_why():
    import logging

    from situate.flows.deploy import _SayWaitingOnce

    f = _SayWaitingOnce()

    def record(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("prefect.runner", logging.INFO, __file__, 1, msg, args, None)

    waiting = [record("%d scheduled runs skipped (at capacity)", 1) for _ in range(3)]
    passed = [r for r in waiting if f.filter(r)]
    assert [r.getMessage() for r in passed] == [
        "1 scheduled runs skipped (at capacity); each starts when the run before it ends"]
    assert f.filter(record("%d scheduled runs skipped (at capacity)", 2))
    assert f.filter(record("Pausing all deployments..."))
