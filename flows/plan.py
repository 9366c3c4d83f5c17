"""The plan of an ingest run, shared by the run and its dry run.

`plan_ingest` compares documents with the rows the collection holds for them, by fingerprint
(new, changed, unchanged; the chunks a changed document no longer has): the ingest flow
(`situate.flows.ingest`) plans each window with it before acting. `plan_run` makes the same plan
for a whole corpus without acting on it, and prices it (`situate ingest --dry-run`); `plan_table`
and `plan_text` show it. The flow imports this module, never the other way round.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from situate.core.protocols import ChunkStore
from situate.core.records import Document, grouped, sha256
from situate.core.settings import get_settings
from situate.core.uri import is_missing_lite_file
from situate.flows.options import check_ingest_options
from situate.storage.cache import ContextCache
from situate.storage.milvus import open_store
from situate.tasks.contexts.base import ContextConfig, Contextualizer
from situate.tasks.contexts.cache import cached_split
from situate.tasks.contexts.cost import Assumptions, CostModel, Estimate, get_cost_models
from situate.tasks.corpus.load import CorpusScan, scan_corpus, stream_corpus
from situate.tasks.embedders.base import check_embedder


def fingerprint(doc: Document, pipeline: str) -> str:
    """What a document's rows were built from: its text and the pipeline that situated them."""
    return sha256(f"{doc.hash}\x1f{pipeline}")


def pipeline_id(contextualizer: Contextualizer | CostModel, chunk_size: int,
                chunk_overlap: int) -> str:
    """What, besides a document's text, its rows depend on: the contextualizer's whole identity
    (every input that changes a context) and the chunking. Free providers (no identity) are
    named by their name alone, as they always were, so their collections stay unchanged."""
    identity = contextualizer.cache_identity()
    described = (json.dumps(identity, sort_keys=True) if identity is not None
                 else f"{contextualizer.name}||")
    return f"{described}|{chunk_size}|{chunk_overlap}"


@dataclass
class Plan:
    """Which documents to process, and what to delete, after comparing with the collection."""

    process: list[Document] = field(default_factory=list)
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    stale_ids: list[str] = field(default_factory=list)  # chunks of changed docs no longer produced
    new_ids: set[str] = field(default_factory=set)  # documents with no row stored at all
    deleted_docs: list[str] = field(default_factory=list)


IN_FLIGHT = 2  # windows in memory at once: one written while the next is situated and embedded
# Message Batches answer a whole window in one batch, which can take an hour: their windows are
# larger, so a big corpus makes few batches (each well under the API's 100,000 requests).
BATCH_WINDOW_FACTOR = 25


def resolve_options(collection: str, context: str | None, embedder: str | None,
                    milvus_uri: str | None, cache_dir: str | None, model: str | None,
                    concurrency: int | None, group_chunks: bool, batch: bool,
                    chunk_size: int | None, chunk_overlap: int | None
                    ) -> tuple[str, str, str, ContextConfig, int, int]:
    """An ingest's options, each flag or else its setting, checked: (uri, token, embedder,
    context config, chunk size, overlap). The run and its dry run resolve them alike."""
    s = get_settings()
    config = ContextConfig(
        name=context or s.default_context(), model=model or s.anthropic_model,
        concurrency=concurrency or s.concurrency, group_chunks=group_chunks, batch=batch,
        state_dir=cache_dir or s.cache_dir)
    embedder_spec = embedder or s.embedder
    check_ingest_options(collection, config.name, embedder_spec)
    return (milvus_uri or s.milvus_uri, s.milvus_token.get_secret_value(), embedder_spec, config,
            chunk_size or s.chunk_size, chunk_overlap or s.chunk_overlap)


def plan_ingest(documents: Iterable[Document], existing: dict[str, dict[str, str]], pipeline: str,
                force: bool) -> Plan:
    """Compare documents with the rows already stored for them (doc_id -> {chunk id:
    fingerprint}). Pruning is planned once the corpus is through (see
    `situate.flows.ingest.ingest_flow`)."""
    plan = Plan()
    for doc in documents:
        rows = existing.get(doc.id)
        fp = fingerprint(doc, pipeline)
        wanted = {c.id for c in doc.chunks}
        if rows is None:
            plan.new += 1
            plan.new_ids.add(doc.id)
        elif not force and set(rows) == wanted and set(rows.values()) == {fp}:
            plan.unchanged += 1
            continue
        else:
            plan.changed += 1
            plan.stale_ids.extend(sorted(set(rows) - wanted))
        plan.process.append(doc)
    return plan


def windows(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    """Whole documents in groups of about `size` chunks (a larger document alone)."""
    return grouped(documents, size, lambda d: len(d.chunks))


# --- the plan of a run, made without running it (`situate ingest --dry-run`) ---------------------

# diskcache's database file: a context cache directory without it holds no context.
_CACHE_FILE = "cache.db"


@dataclass
class _ModeTally:
    """One cost model's view of the corpus: its plan against the collection, and its bill."""

    model: CostModel
    pipeline: str
    counts: Plan = field(default_factory=Plan)
    estimate: Estimate = field(default_factory=Estimate)
    written: int = 0
    stale: int = 0
    rows_delta: int = 0  # rows after the run minus rows before, over the documents processed
    to_situate: int = 0

    def summary(self, waves: int) -> dict[str, Any]:
        """The bill under the run summary's names."""
        u = self.estimate.usage
        u.cost_usd = self.model.price(u)
        return {
            "contexts_generated": u.contexts_generated,
            "contexts_from_cache": u.contexts_from_cache,
            "requests": u.requests,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_write_tokens": u.cache_creation_input_tokens,
            "cache_read_tokens": u.cache_read_input_tokens,
            "prompt_cache_hit_ratio": round(u.prompt_cache_hit_ratio, 4),
            "cost_usd": round(u.cost_usd, 6),
            "estimated_seconds": round(self.model.seconds(self.estimate, waves), 1),
        }


def plan_run(corpus: str, collection: str, *, context: str | None = None,
             embedder: str | None = None, milvus_uri: str | None = None,
             cache_dir: str | None = None, model: str | None = None,
             concurrency: int | None = None, group_chunks: bool = False, batch: bool = False,
             chunk_size: int | None = None, chunk_overlap: int | None = None, prune: bool = False,
             force: bool = False, chars_per_token: float | None = None,
             context_tokens: int | None = None, scan: CorpusScan | None = None) -> dict[str, Any]:
    """What `ingest_flow` with the same options would do and cost, worked out without doing it.

    The same loader and windows, the same plan against the collection (its stored fingerprints:
    new, changed, unchanged, and with `prune` deleted), the same disk cache (a cached context
    costs nothing) and the same requests (`get_cost_models`: the contextualizer's own planner).
    Writes nothing and calls nothing: a Milvus Lite file that does not exist is not created (it
    holds nothing: every document is new), nor is a cache; no model is loaded, no provider asked.
    Returns the run summary's keys with the expected figures, plus `dry_run`, `mode`,
    `estimated_seconds`, the other modes (`alternatives`) and the `assumptions`.
    """
    s = get_settings()
    uri, token, embedder_spec, config, size, overlap = resolve_options(
        collection, context, embedder, milvus_uri, cache_dir, model, concurrency, group_chunks,
        batch, chunk_size, chunk_overlap)
    assumptions = Assumptions(chars_per_token=chars_per_token,
                              context_tokens=context_tokens or Assumptions.context_tokens)
    timings: dict[str, float] = {}

    t = time.perf_counter()
    scan = scan or scan_corpus(corpus, size, overlap)
    models = get_cost_models(config, assumptions)
    name, model_name, _ = check_embedder(embedder_spec)
    embedder_id = f"{name}:{model_name}"
    store: ChunkStore | None = None if is_missing_lite_file(uri) else open_store(uri, token)
    existed = store is not None and store.exists(collection)
    if existed:
        store.check_embedder(collection, embedder_id)
    timings["scan"] = time.perf_counter() - t

    t = time.perf_counter()
    cache = (ContextCache(config.state_dir)
             if (Path(config.state_dir) / _CACHE_FILE).is_file() else None)
    tallies = [_ModeTally(m, pipeline_id(m, size, overlap)) for m in models]
    window = s.window * (BATCH_WINDOW_FACTOR if config.batch else 1)
    try:
        for docs in windows(stream_corpus(corpus, size, overlap), window):
            existing = store.fingerprints(collection, [d.id for d in docs]) if existed else {}
            for tally in tallies:
                _plan_window(tally, docs, existing, force, cache)
        gone: list[str] = []
        pruned_rows = count = 0
        if existed:
            count = store.count(collection)
            if prune:
                gone = sorted(set(store.document_ids(collection)) - scan.ids)
                pruned_rows = sum(len(rows) for rows in
                                  (store.fingerprints(collection, gone) if gone else {}).values())
    finally:
        if cache is not None:
            cache.close()
    timings["plan"] = time.perf_counter() - t

    batch_window = s.window * BATCH_WINDOW_FACTOR

    def waves(tally: _ModeTally) -> int:
        return math.ceil(math.ceil(tally.to_situate / batch_window) / IN_FLIGHT)

    chosen = tallies[0]
    summary: dict[str, Any] = {
        "dry_run": True,
        "collection": collection,
        "corpus": corpus,
        "context": config.name,
        "embedder": embedder_id,
        "mode": chosen.model.mode,
        "documents": scan.documents,
        "new": chosen.counts.new,
        "changed": chosen.counts.changed,
        "unchanged": chosen.counts.unchanged,
        "deleted_documents": len(gone),
        "skipped_empty": scan.skipped_empty,
        "skipped_large_files": scan.skipped_large_files,
        "skipped_chunks": scan.skipped_chunks,
        "cleaned_chars": scan.cleaned_chars,
        "chunks_written": chosen.written,
        "chunks_deleted": chosen.stale + pruned_rows,
        "rows": count + chosen.rows_delta - pruned_rows,
        **chosen.summary(waves(chosen)),
        "alternatives": {tally.model.mode: {"flags": tally.model.flags,
                                            "changed": tally.counts.changed,
                                            **tally.summary(waves(tally))}
                         for tally in tallies[1:]},
        "assumptions": {
            "chars_per_token": chosen.model.chars_per_token,
            "context_tokens": assumptions.context_tokens,
            "request_seconds": assumptions.request_seconds,
            "output_tokens_per_second": assumptions.output_tokens_per_second,
            "batch_round_seconds": assumptions.batch_round_seconds,
            "concurrency": config.concurrency,
        },
        "seconds": {k: round(v, 3) for k, v in timings.items()},
    }
    return summary


def _plan_window(tally: _ModeTally, docs: list[Document], existing: dict[str, dict[str, str]],
                 force: bool, cache: ContextCache | None) -> None:
    """One window of documents planned as `ingest_flow` plans it, and priced."""
    plan = plan_ingest(docs, existing, tally.pipeline, force)
    tally.counts.new += plan.new
    tally.counts.changed += plan.changed
    tally.counts.unchanged += plan.unchanged
    tally.stale += len(plan.stale_ids)
    identity = tally.model.cache_identity()
    for doc in plan.process:
        cached, missing = cached_split(identity, doc, cache)
        estimate = tally.model.estimate(doc, missing)
        estimate.usage.contexts_from_cache += cached
        tally.estimate.add(estimate)
        tally.written += len(doc.chunks)
        tally.rows_delta += len(doc.chunks) - len(existing.get(doc.id, {}))
        tally.to_situate += len(missing)


def plan_table(plan: dict[str, Any]) -> list[dict[str, str]]:
    """The plan as the rows of its table artifact: the run summary's metrics, then each other
    mode's bill and time, then the assumptions."""
    rows = [{"metric": k, "value": str(v)} for k, v in plan.items()
            if k not in ("alternatives", "assumptions", "seconds")]
    for mode, alt in plan["alternatives"].items():
        for key in ("requests", "cost_usd", "estimated_seconds"):
            rows.append({"metric": f"{key} {mode} ({alt['flags'] or 'no flag'})",
                         "value": str(alt[key])})
    rows += [{"metric": f"assumed {k}", "value": str(v)} for k, v in plan["assumptions"].items()]
    return rows


def plan_text(plan: dict[str, Any]) -> str:
    """The plan as the CLI prints it: what the run would do, what it would cost in each mode, how
    long its context requests would take, and on which assumptions."""
    hidden = ("dry_run", "alternatives", "assumptions", "seconds")
    rows = [(k, v) for k, v in plan.items() if k not in hidden]
    width = max(len(k) for k, _ in rows)
    lines = [f"plan of ingesting {plan['corpus']} into {plan['collection']} (dry run: nothing "
             "written, no request made):"]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    a = plan["assumptions"]
    if plan["alternatives"]:
        cost = plan["cost_usd"]
        lines.append(f"the same run in the other modes (now {plan['mode']}):")
        for mode, alt in plan["alternatives"].items():
            ratio = f", x{alt['cost_usd'] / cost:.2f}" if cost else ""
            lines.append(f"  {mode:<14} {alt['flags'] or '(no flag)':<24} {alt['requests']} "
                         f"requests, ${alt['cost_usd']:.4f}{ratio}, "
                         f"~{_duration(alt['estimated_seconds'])}")
    if a["chars_per_token"]:
        lines.append(
            f"estimates: {a['chars_per_token']:g} characters per token, contexts of "
            f"{a['context_tokens']} tokens; a live request {a['request_seconds']:g} s plus "
            f"{a['output_tokens_per_second']:g} output tokens/s, {a['concurrency']} at once "
            f"(~{_duration(plan['estimated_seconds'])} for this run's requests); a round of "
            f"Message Batches {_duration(a['batch_round_seconds'])}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def write_json(summary: dict[str, Any], out: str | None) -> None:
    """The summary (of a run, or of a plan) as JSON at `out`, when given."""
    if not out:
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")
