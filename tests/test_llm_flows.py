"""`--context openai` and `--context ollama` through the ingest flow and the CLI, against the
loopback fakes: the codebase set ingested with contexts in every row, and a refused key as one
line with no collection."""

from __future__ import annotations

import pytest

from tests.conftest import CODEBASE
from tests.fakes.ollama_server import FakeOllama
from tests.fakes.openai_chat_server import FakeOpenAIChat
from tests.test_flows import _cli

KEY = "sk-test-llm-flows-secret"


@pytest.mark.slow  # the codebase set through the flow: ~737 requests and a Prefect run
def test_the_codebase_set_ingests_with_openai_contexts_in_every_row(prefect_harness, state,
                                                                   monkeypatch):
    from tests.helpers import ingest, open_store

    corpus = str(CODEBASE / "codebase_chunks.json")
    with FakeOpenAIChat(api_key=KEY, output_tokens=30) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        plan = ingest(corpus=corpus, collection="openai_codebase", context="openai:gpt-4.1-mini",
                      embedder="hash", llm_base_url=fake.base_url + "/v1", dry_run=True,
                      chars_per_token=4, context_tokens=30)
        run = ingest(corpus=corpus, collection="openai_codebase", context="openai:gpt-4.1-mini",
                     embedder="hash", llm_base_url=fake.base_url + "/v1")
        billed = fake.usage
    assert run.rows == run.contexts_generated == 737
    assert plan.requests == run.requests == billed["requests"] == 737
    assert abs(plan.cost_usd - run.cost_usd) <= 0.02 * run.cost_usd
    assert run.cache_read_tokens == billed["cached_tokens"] > 0
    rows = list(open_store(state["milvus_uri"]).rows("openai_codebase"))
    assert len(rows) == 737 and all(r["context"].startswith("[ctx ") for r in rows)


def _one_line(r) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "| ERROR" not in r.stderr, r.stderr
    # Lines that say error, not lines of the logger named `uvicorn.error` (the temporary
    # server's uvicorn warns there, e.g. `Invalid HTTP request received` when another process's
    # client still retries the port it was given, once another server's).
    errors = [line for line in r.stderr.splitlines()
              if "error" in line.lower().replace("uvicorn.error", "")]
    assert len(errors) == 1 and errors[0].startswith("situate ingest: error:"), r.stderr
    return errors[0]


@pytest.mark.slow  # runs the flow (a Prefect server) in a subprocess
def test_cli_refused_key_and_missing_model_are_one_line(tmp_path):
    from situate.storage.milvus import MilvusStore
    from tests.conftest import SAMPLE_CORPUS

    with FakeOpenAIChat(api_key=KEY) as fake:
        r = _cli("ingest", str(SAMPLE_CORPUS), "--collection", "c", "--context", "openai",
                 "--llm-base-url", fake.base_url + "/v1", cwd=tmp_path,
                 env={"OPENAI_API_KEY": "sk-wrong-key-77"})
        line = _one_line(r)
        assert "rejected the API key" in line and "OPENAI_API_KEY" in line
        assert "sk-wrong-key-77" not in r.stderr + r.stdout
        assert dict(fake.responses) == {401: 1}
    with FakeOllama() as ollama:
        r = _cli("ingest", str(SAMPLE_CORPUS), "--collection", "c", "--context",
                 "ollama:not-pulled", cwd=tmp_path, env={"OLLAMA_HOST": ollama.base_url})
        assert "ollama pull not-pulled" in _one_line(r)
    s = MilvusStore(str(tmp_path / "m.db"))
    assert not s.exists("c")
    s.close()
