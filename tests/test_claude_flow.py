"""The Anthropic contextualizer through the ingest flow and the CLI, against the loopback fake."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import SAMPLE_CORPUS
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI
from tests.test_flows import _artifact, _cli

KEY = "sk-ant-flow-test-secret"


@pytest.fixture
def fake(monkeypatch):
    with FakeAnthropic(api_key=KEY, latency=0.01, output_tokens=40) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


@pytest.mark.parametrize("batch", [False, True])
def test_ingest_with_claude_contexts_pays_once(prefect_harness, state, fake, batch):
    from situate.tasks.corpus.load import load_corpus
    from tests.helpers import ingest, open_store

    chunks = load_corpus(SAMPLE_CORPUS).chunk_count
    collection = "claude_batch" if batch else "claude"
    first = ingest(corpus=str(SAMPLE_CORPUS), collection=collection, context="anthropic",
                        embedder="hash", batch=batch)
    assert first.contexts_generated == first.rows == chunks
    assert first.requests >= chunks and first.cost_usd > 0
    rows = list(open_store(state["milvus_uri"]).rows(collection))
    assert len(rows) == chunks and all(r["context"].strip() for r in rows)

    # Forced re-run: every context from the disk cache, no request reaches the API.
    fake.reset_counters()
    again = ingest(corpus=str(SAMPLE_CORPUS), collection=collection, context="anthropic",
                        embedder="hash", batch=batch, force=True)
    assert again.requests == 0 and again.contexts_from_cache == chunks
    assert sum(fake.http_requests.values()) == 0
    summary = json.dumps(_artifact(f"ingest-summary-{collection.replace('_', '-')}").data)
    assert KEY not in summary


def _one_line_failure(r, tmp_path, secret: str) -> str:
    """The CLI said one thing, with exit 2: no traceback, no Prefect ERROR line, no secret, and
    no collection."""
    from situate.storage.milvus import MilvusStore

    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "| ERROR" not in r.stderr, r.stderr
    assert secret not in r.stderr + r.stdout
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("situate ingest: error:"), r.stderr
    s = MilvusStore(str(tmp_path / "m.db"))
    assert not s.exists("c")
    s.close()
    return errors[0]


@pytest.mark.slow  # runs the flow (a Prefect server) in a subprocess
def test_cli_bad_key_is_one_line_and_no_rows(fake, tmp_path):
    env_key = "sk-ant-wrong-key-123"
    r = _cli("ingest", str(SAMPLE_CORPUS), "--collection", "c", "--context", "anthropic",
             cwd=tmp_path, env={"ANTHROPIC_API_KEY": env_key, "ANTHROPIC_BASE_URL": fake.base_url})
    line = _one_line_failure(r, tmp_path, env_key)
    assert "rejected the API key" in line and "ANTHROPIC_API_KEY" in line
    assert dict(fake.responses) == {401: 1}  # the first call goes alone: one refusal stops the run


@pytest.mark.slow  # runs the flow (a Prefect server) in a subprocess
def test_cli_document_too_long_stops_the_others_cleanly(tmp_path):
    """One document over the model's context window (a 400 for that document alone) while the
    others' requests are in flight: the run stops with the service's message, and every other
    task ends before the flow closes the client (no tracebacks from tasks still running)."""
    from tests.fakes.anthropic_server import DEFAULT_MODELS, ModelSpec
    from tests.helpers import huge_and_small

    corpus = tmp_path / "corpus"
    huge_and_small(corpus)
    models = {**DEFAULT_MODELS, "claude-haiku-4-5": ModelSpec(4096, context_window=3000)}
    with FakeAnthropic(api_key=KEY, latency=0.3, models=models) as server:
        r = _cli("ingest", str(corpus), "--collection", "c", "--context", "anthropic",
                 "--concurrency", "4", cwd=tmp_path,
                 env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.base_url})
    line = _one_line_failure(r, tmp_path, KEY)
    assert "prompt is too long" in line and "a_huge.md" in line, line


def _long_documents(corpus: Path, count: int) -> None:
    """`count` Markdown documents of about 24 chunks each (over Haiku 4.5's cache floor, so the
    first request of each goes alone and the rest concurrently), every paragraph distinct."""
    corpus.mkdir()
    for n in range(count):
        (corpus / f"doc_{n:02}.md").write_text(f"# Document {n}\n\n" + "\n\n".join(
            f"## Part {i}\n\n" + " ".join(f"doc{n} part{i} word{w}" for w in range(40))
            for i in range(40)))


@pytest.mark.slow
def test_a_killed_ingest_pays_again_for_no_more_than_the_answers_in_flight(tmp_path):
    """`situate ingest` SIGKILLed (with every process it started) in the middle of its context
    phase, then run again to the end: every answer that had arrived was kept, so over both runs
    the service billed at most one answer per chunk plus the `concurrency` still on the wire;
    and the collection holds every chunk exactly once, each with its context."""
    from situate.storage.milvus import MilvusStore
    from situate.tasks.corpus.load import load_corpus

    concurrency = 8
    corpus = tmp_path / "corpus"
    _long_documents(corpus, 12)
    chunks = load_corpus(corpus).chunk_count
    assert chunks > 250
    situate = Path(sys.executable).with_name("situate")
    command = [str(situate), "ingest", str(corpus), "--collection", "killed", "--context",
               "anthropic", "--embedder", "openai", "--concurrency", str(concurrency)]
    with FakeAnthropic(api_key=KEY, latency=0.05, output_tokens=40) as claude, \
            FakeOpenAI() as embeddings:
        env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": claude.base_url,
               "OPENAI_API_KEY": embeddings.api_key, "OPENAI_BASE_URL": embeddings.base_url + "/v1",
               "SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
               "SITUATE_CACHE_DIR": str(tmp_path / "cache"),
               "SITUATE_RESULTS_DIR": str(tmp_path / "results")}
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 240
        while claude.messages_ok < chunks // 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never got a third of its answers"
            time.sleep(0.005)
        tree = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGKILL)
        for child in tree:  # any that left the process group
            try:
                child.kill()
            except psutil.Error:
                pass
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        killed_at = claude.messages_ok
        assert killed_at < chunks, "the first run finished before it was killed"

        again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        paid = claude.messages_ok
        assert claude.max_in_flight <= concurrency  # what the bound below counts on
    print(f"\nkilled after {killed_at} answers; paid {paid} over both runs for {chunks} chunks "
          f"at concurrency {concurrency}")
    assert chunks <= paid <= chunks + concurrency
    store = MilvusStore(str(tmp_path / "m.db"))
    try:
        rows = list(store.rows("killed"))
    finally:
        store.close()
    assert len(rows) == len({r["id"] for r in rows}) == chunks  # exact: none lost, none twice
    assert all(r["context"].strip() for r in rows)
