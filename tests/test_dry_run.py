"""`situate ingest --dry-run`: the plan's requests, tokens and dollars against what the fake
Anthropic service then bills for the real run, in each mode; and a dry run writes and calls
nothing, through the flow and through the CLI.

The fake counts one token per 4 characters (`tests.fakes.anthropic_server.CHARS_PER_TOKEN`) and answers
every context with `output_tokens` tokens: it stands in for Claude's tokenizer and for the
length of Claude's contexts. The plan is told both, as a user calibrates the estimate to a bill
(`chars_per_token`, `context_tokens`); everything else it must get right on its own: which
documents go, which requests, which of them write or read the prompt cache, what the disk cache
answers already. The bill is the fake's own usage counters priced here, not situate's summary.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import CHARS_PER_TOKEN, FakeAnthropic
from tests.test_flows import _artifact, _cli

KEY = "sk-ant-dry-run-test-key"
CONTEXT_TOKENS = 100
# claude-haiku-4-5, dollars per million tokens (Anthropic's published prices); Batches: half.
PRICES = {"input_tokens": 1.0, "output_tokens": 5.0, "cache_creation_input_tokens": 1.25,
          "cache_read_input_tokens": 0.10}
TOKEN_KINDS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens",
               "cache_write_tokens": "cache_creation_input_tokens",
               "cache_read_tokens": "cache_read_input_tokens"}


def _paragraphs(doc: str, count: int) -> str:
    return "\n\n".join(f"## {doc} part {i}\n\n" + " ".join(
        f"{doc} part{i} word{w} explains" for w in range(24)) for i in range(count))


def _corpus(root: Path) -> Path:
    """Documents of every kind the planner tells apart on Haiku 4.5 (cache floor 4,096 tokens):
    long enough to cache in both modes (two groups of chunks), long enough to cache per chunk
    only (one group), long enough for situate's high estimate but under the floor for the service
    (the first request tries the cache, the others go without), short ones, a one-chunk one."""
    root.mkdir()
    sizes = {"big": 44, "medium": 26, "borderline": 18, "small_a": 4, "small_b": 3, "small_c": 5}
    for name, count in sizes.items():
        (root / f"{name}.md").write_text(f"# {name}\n\n" + _paragraphs(name, count))
    (root / "tiny.md").write_text("# tiny\n\nOne short note that makes a single chunk.")
    return root


def _bill(fake: FakeAnthropic, batch: bool) -> tuple[dict[str, int], float]:
    """The fake's counters priced; 1-hour cache writes (Message Batches') at 2x input."""
    usage = fake.usage["batch" if batch else "standard"]
    dollars = sum(usage[k] * p for k, p in PRICES.items()) / 1e6
    dollars += usage["cache_creation_1h_input_tokens"] * (2.0 - 1.25) / 1e6
    return dict(usage), dollars * (0.5 if batch else 1.0)


def _close(predicted: float, billed: float, tolerance: float = 0.02) -> bool:
    return abs(predicted - billed) <= tolerance * max(billed, 1e-9)


def _nothing_written(state_dir: Path, uri: Path, fake: FakeAnthropic) -> None:
    assert not uri.exists(), "the dry run created the Milvus Lite file"
    assert not state_dir.exists(), "the dry run created the context cache"
    assert sum(fake.http_requests.values()) == 0, dict(fake.http_requests)


@pytest.mark.slow
@pytest.mark.parametrize(("group", "batch"), [(False, False), (True, False), (False, True)],
                         ids=["per-chunk", "grouped", "batch"])
def test_the_plan_predicts_the_bill(prefect_harness, state, tmp_path, monkeypatch, group, batch):
    from tests.helpers import ingest

    corpus = _corpus(tmp_path / "corpus")
    uri, cache = tmp_path / "plan.db", tmp_path / "plan-cache"
    collection = "plan_" + ("group" if group else "batch" if batch else "chunk")
    options = dict(corpus=str(corpus), collection=collection, context="anthropic",
                   embedder="hash", milvus_uri=str(uri), cache_dir=str(cache),
                   group_chunks=group, batch=batch)
    with FakeAnthropic(api_key=KEY, output_tokens=CONTEXT_TOKENS, batch_delay=0.05) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        plan = ingest(**options, dry_run=True, json_out=str(tmp_path / "plan.json"),
                           chars_per_token=CHARS_PER_TOKEN, context_tokens=CONTEXT_TOKENS)
        _nothing_written(cache, uri, fake)
        data = _artifact(f"ingest-plan-{collection.replace('_', '-')}").data
        table = {row["metric"]: row["value"]
                 for row in (json.loads(data) if isinstance(data, str) else data)}
        assert table["requests"] == str(plan.requests)
        run = ingest(**options, json_out=str(tmp_path / "run.json"))
        usage, dollars = _bill(fake, batch)

    print(f"\n{plan.mode}: predicted {plan.requests} requests, ${plan.cost_usd:.6f}; "
          f"billed {usage['requests']}, ${dollars:.6f}; "
          + ", ".join(f"{k} {getattr(plan, k)}/{usage[v]}" for k, v in TOKEN_KINDS.items()))
    assert plan.new == run.new == 7
    assert plan.contexts_generated == run.contexts_generated == run.rows == plan.rows
    assert plan.requests == run.requests == usage["requests"]
    for key, counter in TOKEN_KINDS.items():
        assert _close(getattr(plan, key), usage[counter]), (key, getattr(plan, key), usage[counter])
    assert usage["cache_creation_input_tokens"] > 0 and usage["input_tokens"] > 0
    assert _close(plan.cost_usd, dollars), (plan.cost_usd, dollars)
    # A plan and the run after it compare by a script: the run's keys are the plan's keys.
    saved_plan = json.loads((tmp_path / "plan.json").read_text())
    saved_run = json.loads((tmp_path / "run.json").read_text())
    assert saved_plan["requests"] == plan.requests and set(saved_run) <= set(saved_plan)


@pytest.mark.slow
def test_the_plan_follows_the_collection_and_the_disk_cache(prefect_harness, state, tmp_path,
                                                            monkeypatch):
    """Unchanged documents cost nothing; a changed and a new one cost what the run then pays;
    contexts already in the disk cache cost nothing, even for a collection that does not exist."""
    from tests.helpers import ingest

    corpus = _corpus(tmp_path / "corpus")
    options = dict(corpus=str(corpus), context="anthropic", embedder="hash")
    with FakeAnthropic(api_key=KEY, output_tokens=CONTEXT_TOKENS) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        first = ingest(**options, collection="kept")
        assert first.requests > 0

        again = ingest(**options, collection="kept", dry_run=True)
        assert (again.unchanged, again.new, again.changed) == (7, 0, 0)
        assert again.requests == again.cost_usd == again.chunks_written == 0
        assert again.rows == first.rows

        # Elsewhere, the same documents: every context is in the disk cache.
        cached = ingest(**options, collection="elsewhere", dry_run=True,
                             chars_per_token=CHARS_PER_TOKEN, context_tokens=CONTEXT_TOKENS)
        assert cached.new == 7 and cached.requests == 0 and cached.cost_usd == 0
        assert cached.contexts_from_cache == first.rows
        # Grouped contexts are other contexts: none of them is cached yet.
        assert cached.alternatives["grouped"].requests > 0

        (corpus / "small_b.md").write_text("# small_b\n\n" + _paragraphs("small_b rewritten", 3))
        (corpus / "extra.md").write_text("# extra\n\n" + _paragraphs("extra", 6))
        fake.reset_counters()
        plan = ingest(**options, collection="kept", dry_run=True,
                           chars_per_token=CHARS_PER_TOKEN, context_tokens=CONTEXT_TOKENS)
        assert sum(fake.http_requests.values()) == 0
        assert (plan.new, plan.changed, plan.unchanged) == (1, 1, 6)
        run = ingest(**options, collection="kept")
        usage, dollars = _bill(fake, batch=False)
    assert plan.requests == run.requests == usage["requests"] > 0
    assert plan.rows == run.rows and plan.chunks_written == run.chunks_written
    assert _close(plan.cost_usd, dollars)


def test_free_contextualizers_plan_to_nothing(prefect_harness, state, tmp_path):
    from situate.tasks.corpus.load import load_corpus
    from tests.helpers import ingest

    corpus = _corpus(tmp_path / "corpus")
    chunks = load_corpus(corpus).chunk_count
    for context, generated in (("structural", chunks), ("none", 0)):
        plan = ingest(corpus=str(corpus), collection=f"free_{context}", context=context,
                           embedder="hash", dry_run=True)
        assert plan.requests == plan.cost_usd == plan.estimated_seconds == 0
        assert plan.new == 7 and plan.chunks_written == chunks
        assert plan.contexts_generated == generated and plan.alternatives == {}
    assert not Path(state["milvus_uri"]).exists() and not Path(state["cache_dir"]).exists()


@pytest.mark.slow
def test_cli_dry_run_writes_and_calls_nothing(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    out = tmp_path / "out" / "plan.json"
    with FakeAnthropic(api_key=KEY) as fake:
        r = _cli("ingest", str(corpus), "--collection", "c", "--context", "anthropic",
                 "--group-chunks", "--dry-run", "--json", str(out), cwd=tmp_path,
                 env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": fake.base_url})
        assert r.returncode == 0, r.stderr[-3000:]
        _nothing_written(tmp_path / "cache", tmp_path / "m.db", fake)
    assert "dry run" in r.stdout and "--batch" in r.stdout and KEY not in r.stdout + r.stderr
    plan = json.loads(out.read_text())
    assert plan["dry_run"] is True and plan["mode"] == "grouped" and plan["new"] == 7
    assert plan["requests"] > 0 and plan["cost_usd"] > 0 and plan["estimated_seconds"] > 0
    batch = plan["alternatives"]["grouped+batch"]
    assert batch["requests"] == plan["requests"] and batch["cost_usd"] < plan["cost_usd"]
    assert plan["alternatives"]["per-chunk"]["cost_usd"] > plan["cost_usd"]

    # The estimate's two assumptions, from the command line: fewer characters per token means
    # more input tokens; the output is the chunks times the context length asked for.
    tuned_out = tmp_path / "out" / "tuned.json"
    r = _cli("ingest", str(corpus), "--collection", "c", "--context", "anthropic", "--dry-run",
             "--chars-per-token", "3", "--context-tokens", "80", "--json", str(tuned_out),
             cwd=tmp_path, env={"ANTHROPIC_API_KEY": KEY})
    assert r.returncode == 0, r.stderr[-3000:]
    tuned = json.loads(tuned_out.read_text())
    per_chunk = plan["alternatives"]["per-chunk"]
    assert tuned["requests"] == per_chunk["requests"]
    assert tuned["output_tokens"] == 80 * tuned["chunks_written"]
    assert tuned["input_tokens"] > per_chunk["input_tokens"]

    free = _cli("ingest", str(corpus), "--collection", "c", "--context", "structural",
                "--dry-run", cwd=tmp_path)
    assert free.returncode == 0, free.stderr[-3000:]
    assert "cost_usd" in free.stdout and not (tmp_path / "m.db").exists()


def test_cli_dry_run_of_a_bad_corpus_is_one_line(tmp_path):
    r = _cli("ingest", str(tmp_path / "missing.json"), "--collection", "c", "--dry-run",
             cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("situate ingest: error: corpus not found")
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("group", "batch"), [(False, False), (True, False), (False, True),
                                              (True, True)])
def test_a_plan_reuses_what_the_run_would(group, batch):
    """The configured mode comes first, and its cache identity is the contextualizer's own: a plan
    counts as unchanged and as cached exactly what the run will."""
    from situate.tasks.contexts.base import ContextConfig
    from situate.tasks.contexts.claude import AnthropicContextualizer
    from situate.tasks.contexts.cost import Assumptions, get_cost_models

    config = ContextConfig(name="anthropic", model="claude-sonnet-4-5", group_chunks=group,
                           batch=batch, extra={"group_size": 8, "max_tokens": 300})
    models = get_cost_models(config, Assumptions())
    assert (models[0].flags.split().count("--group-chunks"), models[0].batch) == (group, batch)
    # Four modes, and the two batch modes with 5-minute cache entries (priced beside the 1-hour).
    assert len({m.mode for m in models}) == 6
    run = AnthropicContextualizer(config, api_key="sk-ant-never-used")
    try:
        assert models[0].cache_identity() == run.cache_identity()
    finally:
        run.close()


def test_a_plan_reads_an_existing_cache_without_adding_to_it(tmp_path):
    """The plan opens a context cache that exists (to count what it answers) and adds nothing."""
    from situate.core.records import Chunk, Document
    from situate.storage.cache import DiskContextCache
    from situate.tasks.contexts.cache import cached_split, context_key

    doc = Document("d", "alpha beta", (Chunk("d", 0, "alpha"), Chunk("d", 1, "beta")))
    cache = DiskContextCache(tmp_path / "cache")
    identity = {"provider": "p"}
    cache.put(context_key(identity, doc.hash, doc.chunks[0].hash), "ctx")
    assert cached_split(identity, doc, cache) == (1, [doc.chunks[1]])
    assert cached_split(None, doc, cache) == (0, list(doc.chunks))
    assert len(cache) == 1
    cache.close()
    shutil.rmtree(tmp_path / "cache")
