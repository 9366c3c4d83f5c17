"""SIGTERM and Ctrl-C stop `situate ingest` within seconds, with every process it started, in one
line and without a traceback; the next run finishes the job with exact rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.bench_scale import write_corpus
from tests.fakes.openai_server import FakeOpenAI


def _env(tmp_path: Path, fake: FakeOpenAI) -> dict[str, str]:
    env = {**os.environ, "OPENAI_API_KEY": fake.api_key, "OPENAI_BASE_URL": fake.base_url + "/v1",
           "SITUATE_MILVUS_URI": str(tmp_path / "m.db"), "SITUATE_CACHE_DIR": str(tmp_path / "cache"),
           "SITUATE_RESULTS_DIR": str(tmp_path / "results"),
           "SITUATE_EMBED_BATCH": "16"}  # many small embedding calls: a long embedding phase
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def _ingest(corpus: Path, tmp_path: Path, env: dict[str, str]) -> subprocess.Popen:
    situate = Path(sys.executable).with_name("situate")
    return subprocess.Popen([str(situate), "ingest", str(corpus), "--collection", "stop",
                             "--embedder", "openai", "--context", "structural"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_in_the_embedding_phase_stops_the_whole_tree_and_the_next_run_finishes(tmp_path, signum):
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, 1600)  # 200 documents of 8 chunks
    with FakeOpenAI(latency=0.2) as fake:
        env = _env(tmp_path, fake)
        proc = _ingest(corpus, tmp_path, env)
        deadline = time.monotonic() + 240
        while fake.requests < 3:  # in the middle of embedding (and writing)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached its embedding phase"
            time.sleep(0.1)
        started = _descendants(proc.pid)
        assert started, "the run started no process (Prefect's temporary server expected)"
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
        assert took < 10, f"stopped after {took:.1f} s"
        assert proc.returncode == 128 + signum
        assert "Traceback" not in out + err
        lines = [line for line in err.splitlines() if "interrupted" in line]
        assert lines == [f"situate ingest: interrupted ({signal.Signals(signum).name}); what was done "
                         "is kept: run the same command again to go on from there"]
        time.sleep(0.5)
        assert not _alive(started), f"left running: {[p.pid for p in _alive(started)]}"

        again = _ingest(corpus, tmp_path, env)
        out, err = again.communicate(timeout=600)
        assert again.returncode == 0, err[-2000:]
        assert "Traceback" not in out + err
        summary = dict(line.split(None, 1) for line in out.splitlines()[1:] if line.strip())
        assert summary["rows"].strip() == "1600"  # exact: nothing lost, nothing twice
