"""The Anthropic contextualizer through the ingest flow and the CLI, against the loopback fake."""

from __future__ import annotations

import json

import pytest

from tests.anthropic_server import FakeAnthropic
from tests.conftest import SAMPLE_CORPUS
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
    from flows.ingest import ingest_flow
    from storage.milvus import open_store
    from tasks.load import load_corpus

    chunks = load_corpus(SAMPLE_CORPUS).chunk_count
    collection = "claude_batch" if batch else "claude"
    first = ingest_flow(corpus=str(SAMPLE_CORPUS), collection=collection, context="anthropic",
                        embedder="hash", batch=batch)
    assert first["contexts_generated"] == first["rows"] == chunks
    assert first["requests"] >= chunks and first["cost_usd"] > 0
    rows = list(open_store(state["milvus_uri"]).rows(collection))
    assert len(rows) == chunks and all(r["context"].strip() for r in rows)

    # Forced re-run: every context from the disk cache, no request reaches the API.
    fake.reset_counters()
    again = ingest_flow(corpus=str(SAMPLE_CORPUS), collection=collection, context="anthropic",
                        embedder="hash", batch=batch, force=True)
    assert again["requests"] == 0 and again["contexts_from_cache"] == chunks
    assert sum(fake.http_requests.values()) == 0
    summary = json.dumps(_artifact(f"ingest-summary-{collection.replace('_', '-')}").data)
    assert KEY not in summary


def test_cli_bad_key_is_one_line_and_no_rows(fake, tmp_path):
    import os

    from storage.milvus import ChunkStore

    env_key = "sk-ant-wrong-key-123"
    os.environ["ANTHROPIC_API_KEY"] = env_key
    try:
        r = _cli("ingest", str(SAMPLE_CORPUS), "--collection", "c", "--context", "anthropic",
                 cwd=tmp_path)
    finally:
        os.environ["ANTHROPIC_API_KEY"] = KEY
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and env_key not in r.stderr + r.stdout
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("situate ingest: error:"), r.stderr
    assert "key" in errors[0].lower()
    s = ChunkStore(str(tmp_path / "m.db"))
    assert not s.exists("c")
    s.close()
