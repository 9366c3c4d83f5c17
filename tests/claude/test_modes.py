"""The Claude contextualizer's two cheaper ways, through the real anthropic SDK against the
loopback fake service: group-chunks (a document's chunks situated in one request) and the
Message Batches API (half price, resumed, never paid twice)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from situate.core.records import Usage
from situate.storage.cache import DiskContextCache
from situate.tasks.contexts.cache import situate_corpus_cached
from situate.tasks.contexts.claude import (
    fence_of,
    mark_chunks,
    parse_group_answer,
    price,
)
from tests.claude_support import (
    BIG,
    HAIKU,
    SMALL,
    _assert_contexts_match,
    _digest,
    _doc,
    _make,
    _situate_all,
    _total,
)
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.timeout(60)


# --- group-chunks ----------------------------------------------------------------------------

def test_mark_chunks_wraps_each_span_in_place() -> None:
    assert mark_chunks("abcdef", [(0, 0, 3), (1, 2, 6)], "f00d") == (
        "[[chunk-f00d 0]]ab[[chunk-f00d 1]]c[[/chunk-f00d 0]]def[[/chunk-f00d 1]]")


def test_parse_group_answer_keeps_only_valid_asked_contexts() -> None:
    text = json.dumps({"contexts": [
        {"chunk": 1, "context": "one"}, {"chunk": 1, "context": "again"},
        {"chunk": 9, "context": "not asked"}, {"chunk": 2, "context": "  "},
        {"chunk": "3", "context": "id as text"}, {"chunk": True, "context": "bool"},
        {"chunk": 4, "context": "four"}, "junk"]})
    assert parse_group_answer(text, [1, 2, 3, 4]) == {1: "one", 4: "four"}
    assert parse_group_answer('{"contexts": [{"chunk": 1, "cont', [1]) == {}
    assert parse_group_answer("[]", [1]) == {}


def test_group_chunks_situates_a_small_document_in_one_request(fake: FakeAnthropic) -> None:
    docs = [SMALL, _doc("small2", 900)]
    results = _situate_all(_make(fake, group_chunks=True), docs)
    assert fake.messages_ok == 2
    for result, doc in zip(results, docs, strict=True):
        assert [s.chunk.index for s in result.situated] == [c.index for c in doc.chunks]
        for s in result.situated:
            assert f"[ctx chunk {s.chunk.index}]" in s.context and s.source == "generated"
    # The document text is sent once, with its chunks marked in place.
    for doc in docs:
        [sent] = [m["blocks"] for m in fake.messages_log if f"{doc.id}_word" in m["blocks"][-2]]
        assert f"[[chunk-{fence_of(doc)} 0]]" in sent[-2]
        assert sum(b.count(f"{doc.id}_word") for b in sent) == doc.text.count(f"{doc.id}_word")


def test_group_chunks_retries_missed_chunks_one_by_one(fake: FakeAnthropic) -> None:
    fake.group_omit_rate = 0.5
    result = _make(fake, group_chunks=True).situate(SMALL, SMALL.chunks)
    assert all(s.source == "generated" and s.context for s in result.situated)
    singles = [s for s in result.situated if not s.context.startswith("[ctx chunk")]
    assert singles, "with half the answers omitted, some chunks must come from single requests"
    for s in singles:
        assert f"[ctx {_digest(s.chunk.text)}]" in s.context
    assert any("missed chunk" in n for n in result.notes)


def test_group_chunks_bill_is_a_fraction_of_per_chunk(fake: FakeAnthropic) -> None:
    docs = [SMALL, _doc("small2", 2500), _doc("small3", 3800)]
    per_chunk = _total(_situate_all(_make(fake), docs))
    grouped = _total(_situate_all(_make(fake, group_chunks=True), docs))
    assert grouped.contexts_generated == per_chunk.contexts_generated == sum(
        len(d.chunks) for d in docs)
    assert grouped.cost_usd < 0.4 * per_chunk.cost_usd


def test_group_chunks_of_a_big_document_share_one_cached_prefix(fake: FakeAnthropic) -> None:
    doc = _doc("huge", 30_000)
    cz = _make(fake, group_chunks=True, extra={"group_size": 40})
    result = cz.situate(doc, doc.chunks)
    groups = -(-len(doc.chunks) // 40)
    assert groups >= 3 and result.usage.requests == groups
    assert len(fake.writes()) == 1 and len(fake.reads()) == groups - 1
    assert all(s.source == "generated" for s in result.situated)


# --- batch -----------------------------------------------------------------------------------

def test_batch_situates_everything_at_half_price(fake: FakeAnthropic, tmp_path: Path) -> None:
    docs = [BIG, SMALL]
    interactive = _total(_situate_all(_make(fake), docs))
    fake.clear_cache()
    fake.reset_counters()
    cz = _make(fake, tmp_path, batch=True)
    results = situate_corpus_cached(cz, docs, DiskContextCache(tmp_path / "cache"))
    assert results is not None
    _assert_contexts_match(results, docs)
    batch = _total(results)
    # Two phases: the first request of the cacheable document (and the uncached ones), then the
    # rest of it, which reads what the first phase wrote.
    assert fake.batches_created == 2 and fake.duplicate_writes() == 0
    # Half price, but the batch's cache writes are 1-hour writes (2x input, not 1.25x): a round
    # can outlive the 5-minute cache.
    writes = batch.cache_write_tokens
    assert writes == interactive.cache_write_tokens > 0
    assert batch.cost_usd == pytest.approx(
        interactive.cost_usd / 2 + writes * (HAIKU.pricing.cache_write_1h
                                             - HAIKU.pricing.cache_write) / 2 / 1e6)
    # Each batch was recorded while it ran, and forgotten once read in full.
    assert json.loads((tmp_path / "claude-batches.json").read_text()) == {"batches": {}}


def test_batch_is_resumed_not_paid_twice(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.batch_delay = 0.5
    cz = _make(fake, tmp_path, batch=True)
    items = [(SMALL, list(SMALL.chunks))]

    def killed(batch_id: str) -> None:
        raise RuntimeError("the run dies while the batch is processing")

    cz._batches._wait_batch = killed  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        cz.situate_corpus(items)
    assert fake.batches_created == 1
    restarted = _make(fake, tmp_path, batch=True)
    [result] = restarted.situate_corpus(items) or []
    assert fake.batches_created == 1  # the persisted batch was resumed
    assert all(s.source == "generated" for s in result.situated)


def test_batch_partial_failures_are_retried_in_another_round(fake: FakeAnthropic,
                                                             tmp_path: Path) -> None:
    fake.batch_error_rate = 0.3
    docs = [SMALL, _doc("other", 2000)]
    results = _make(fake, tmp_path, batch=True).situate_corpus([(d, d.chunks) for d in docs])
    assert results is not None
    _assert_contexts_match(results, docs)
    assert fake.batches_created >= 2


def test_batch_with_group_chunks(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.group_omit_rate = 0.3
    docs = [SMALL, _doc("other", 2000)]
    cz = _make(fake, tmp_path, batch=True, group_chunks=True)
    results = cz.situate_corpus([(d, d.chunks) for d in docs])
    assert results is not None
    for result, doc in zip(results, docs, strict=True):
        assert [s.chunk.index for s in result.situated] == [c.index for c in doc.chunks]
        assert all(s.source == "generated" and s.context for s in result.situated)
    # Round 1: one group request per document; round 2: the chunks the answers missed, alone.
    assert fake.batches_created == 2 and fake.usage["standard"]["requests"] == 0


def test_batch_mode_off_means_no_corpus_path(fake: FakeAnthropic) -> None:
    assert situate_corpus_cached(_make(fake), [SMALL], None) is None


def test_price_table_batch_is_half() -> None:
    u = Usage(input_tokens=1_000_000, output_tokens=1_000_000,
              cache_write_tokens=1_000_000, cache_read_tokens=1_000_000)
    assert price(u, HAIKU.pricing) == pytest.approx(1 + 5 + 1.25 + 0.1)
    assert price(u, HAIKU.pricing, batch=True) == pytest.approx((1 + 5 + 1.25 + 0.1) / 2)
