"""Claude's Message Batches keep their prompt cache: situate's batches send a document's first
request in one round and the rest in the next, and a round can outlive the 5-minute cache. With
the fake's expiry set shorter than a round, 5-minute entries pay the document's write again in
the second round, 1-hour entries pay each document's write once; the plan prices both."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from situate.core.records import Document, Usage
from situate.storage.cache import DiskContextCache
from situate.tasks.contexts.base import ContextConfig, get_contextualizer
from situate.tasks.contexts.cache import situate_corpus_cached
from situate.tasks.contexts.claude import MODELS
from situate.tasks.contexts.cost import Assumptions, Estimate, get_cost_models
from situate.tasks.corpus.load import make_chunks
from tests.fakes.anthropic_server import CHARS_PER_TOKEN, FakeAnthropic

pytestmark = pytest.mark.timeout(60)

KEY = "sk-ant-batch-cache-key"
OUTPUT = 50
HAIKU = MODELS["claude-haiku-4-5"].pricing


def _doc(doc_id: str, tokens: int) -> Document:
    words = [f"{doc_id}_word{i}" for i in range(tokens * 4 // 12 + 1)]
    text = " ".join(words)[: tokens * 4]
    return Document(doc_id, text, make_chunks(doc_id, text, 800, 0))


DOCS = [_doc("a", 6000), _doc("b", 5000), _doc("c", 1200)]  # two over Haiku 4.5's floor


def _config(fake: FakeAnthropic, tmp_path: Path, ttl: str) -> ContextConfig:
    return ContextConfig(name="anthropic", batch=True, state_dir=str(tmp_path), extra={
        "base_url": fake.base_url, "retry_base_seconds": 0.01, "batch_poll_seconds": 0.02,
        "batch_cache_ttl": ttl})


def _run(ttl: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[Usage, Counter, dict[str, int], Estimate, float, float]:
    """One batch run with entries of `ttl`, on a fake whose 5-minute entries live 1 µs and whose
    batch requests take 5 ms each: the second round finds them gone; and the plan of it."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeAnthropic(api_key=KEY, output_tokens=OUTPUT, batch_delay=0.05, batch_latency=0.005,
                       ttl_5m=1e-6) as fake:
        config = _config(fake, tmp_path / ttl, ttl)
        models = {m.mode: m for m in get_cost_models(config, Assumptions(
            chars_per_token=CHARS_PER_TOKEN, context_tokens=OUTPUT))}
        plans = {mode: Estimate() for mode in ("batch", "batch-5m-cache")}
        for doc in DOCS:
            for mode, plan in plans.items():
                plan.add(models[mode].estimate(doc, doc.chunks))
        cz = get_contextualizer(config)
        results = situate_corpus_cached(cz, DOCS, DiskContextCache(tmp_path / ttl / "cache")) or []
        cz.close()
        usage = Usage()
        for r in results:
            usage.add(r.usage)
        writes = Counter(e.key for e in fake.writes())
        chosen = plans["batch" if ttl == "1h" else "batch-5m-cache"]
        return (usage, writes, dict(fake.usage["batch"]), chosen,
                models["batch"].price(plans["batch"].usage),
                models["batch-5m-cache"].price(plans["batch-5m-cache"].usage))


def test_one_hour_entries_pay_each_documents_write_once_five_minute_ones_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hour, hour_writes, hour_bill, hour_plan, plan_1h, plan_5m = _run("1h", tmp_path, monkeypatch)
    five, five_writes, five_bill, five_plan, *_ = _run("5m", tmp_path, monkeypatch)
    chunks = sum(len(d.chunks) for d in DOCS)
    assert hour.contexts_generated == five.contexts_generated == chunks
    # 1 hour: one write per cacheable document, every other request of it reads.
    assert sorted(hour_writes.values()) == [1, 1]
    assert hour_bill["cache_creation_1h_input_tokens"] == hour_bill["cache_creation_input_tokens"]
    # 5 minutes: the entries are gone by the second round: each of its requests writes again.
    assert sorted(five_writes.values()) == [len(DOCS[1].chunks), len(DOCS[0].chunks)]
    assert five_bill["cache_read_input_tokens"] == 0
    assert five_bill["cache_creation_input_tokens"] > 5 * hour_bill["cache_creation_input_tokens"]
    print(f"\nbatch with 1-hour entries ${hour.cost_usd:.5f} (plan ${plan_1h:.5f}); "
          f"with 5-minute entries ${five.cost_usd:.5f} (plan ${plan_5m:.5f})")
    assert hour.cost_usd < five.cost_usd
    # The plan shows both prices, each within 2% of what the run then paid.
    for plan, bill, paid in ((plan_1h, hour_plan, hour), (plan_5m, five_plan, five)):
        assert bill.usage.requests == paid.requests
        assert abs(plan - paid.cost_usd) <= 0.02 * paid.cost_usd, (plan, paid.cost_usd)
    # The bill: half price, 1-hour writes at 2x input, 5-minute ones at 1.25x.
    assert hour.cost_usd == pytest.approx(0.5 * (
        hour.input_tokens * HAIKU.input + hour.output_tokens * HAIKU.output
        + hour.cache_write_tokens * HAIKU.cache_write_1h
        + hour.cache_read_tokens * HAIKU.cache_read) / 1e6)


def test_live_requests_keep_the_five_minute_cache(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside batches a document's requests follow each other within seconds: 5-minute entries
    (1.25x) are the cheaper write, and no request asks for the 1-hour cache."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeAnthropic(api_key=KEY, output_tokens=OUTPUT) as fake:
        cz = get_contextualizer(ContextConfig(name="anthropic", extra={
            "base_url": fake.base_url, "retry_base_seconds": 0.01}))
        u = cz.situate(DOCS[0], DOCS[0].chunks).usage
        cz.close()
    assert fake.usage["standard"]["cache_creation_1h_input_tokens"] == 0
    assert u.cache_write_tokens > 0 and u.cache_read_tokens > 0
