"""The plan of an ingest run, shared by the run and its dry run.

`plan_ingest` compares documents with the rows the collection holds for them, by fingerprint
(new, changed, unchanged; the chunks a changed document no longer has): the ingest flow
(`situate.flows.ingest`) plans each window with it before acting. `plan_run` makes the same plan
for a whole corpus without acting on it, and prices it (`situate ingest --dry-run`) as an
`IngestPlan`. `prepare` is the start both share. The flow imports this module, never the other
way round.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from situate.core.protocols import ChunkStore
from situate.core.records import Document, grouped, sha256
from situate.core.settings import get_settings
from situate.core.uri import is_missing_lite_file
from situate.flows.capacity import context_bytes, embedder_dim, store_capacity
from situate.flows.options import IngestOptions
from situate.flows.resources import Resources
from situate.flows.results import Alternative, Bill, IngestPlan, PlanAssumptions
from situate.storage.cache import ContextCache
from situate.storage.capacity import RowSizes
from situate.tasks.contexts.base import ContextConfig, Contextualizer, split_context
from situate.tasks.contexts.cache import cached_split
from situate.tasks.contexts.cost import Assumptions, CostModel, Estimate, get_cost_models
from situate.tasks.corpus.load import CorpusScan, scan_corpus, stream_corpus
from situate.tasks.embedders.base import check_embedder

IN_FLIGHT = 2  # windows in memory at once: one written while the next is situated and embedded
# Message Batches answer a whole window in one batch, which can take an hour: their windows are
# larger, so a big corpus makes few batches (each well under the API's 100,000 requests).
BATCH_WINDOW_FACTOR = 25
# diskcache's database file: a context cache directory without it holds no context.
_CACHE_FILE = "cache.db"


def fingerprint(doc: Document, pipeline: str) -> str:
    """What a document's rows were built from: its text and the pipeline that situated them
    (with how it was cut, for source code cut along its syntax)."""
    cut = doc.metadata.get("chunks")
    return sha256(f"{doc.hash}\x1f{pipeline}" + (f"\x1f{cut}" if cut else ""))


def pipeline_id(contextualizer: Contextualizer | CostModel, chunk_size: int,
                chunk_overlap: int) -> str:
    """What, besides a document's text, its rows depend on: the contextualizer's whole identity
    (every input that changes a context) and the chunking. Free providers (no identity) are
    named by their name alone, so their fingerprints do not change with a new identity field."""
    identity = contextualizer.cache_identity()
    described = (json.dumps(identity, sort_keys=True) if identity is not None
                 else f"{contextualizer.name}||")
    return f"{described}|{chunk_size}|{chunk_overlap}"


def context_config(options: IngestOptions) -> ContextConfig:
    """The context provider's configuration: `--context name:model` names the model (else
    `--model`, which names a Claude model by default), the server's address and the LLM
    settings (prices, context window, batch cache life) as the provider's extras."""
    name, model = split_context(options.context)
    if not model and (name == "anthropic" or not options.model.startswith("claude")):
        model = options.model
    settings = get_settings()
    extra: dict[str, object] = {"base_url": options.llm_base_url or "",
                                "batch_cache_ttl": settings.batch_cache_ttl}
    for key in ("price_input", "price_cached_input", "price_output", "context_window"):
        value = getattr(settings, f"llm_{key}")
        if value is not None and not (name == "anthropic" and key == "context_window"):
            extra[key] = value
    return ContextConfig(name=name, model=model, concurrency=options.concurrency,
                         group_chunks=options.group_chunks, batch=options.batch,
                         state_dir=options.cache_dir, extra=extra)


def window_size(options: IngestOptions) -> int:
    return get_settings().window * (BATCH_WINDOW_FACTOR if options.batch else 1)


@dataclass
class Plan:
    """Which documents to process, and what to delete, after comparing with the collection."""

    process: list[Document] = field(default_factory=list)
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    stale_ids: list[str] = field(default_factory=list)  # chunks of changed docs no longer produced
    new_ids: set[str] = field(default_factory=set)  # documents with no row stored at all

    def add(self, other: Plan) -> None:
        """Counts and stale chunks of another window's plan (its documents are not kept)."""
        self.new += other.new
        self.changed += other.changed
        self.unchanged += other.unchanged
        self.stale_ids.extend(other.stale_ids)


def plan_ingest(documents: Iterable[Document], existing: dict[str, dict[str, str]], pipeline: str,
                force: bool) -> Plan:
    """Compare documents with the rows already stored for them (doc_id -> {chunk id:
    fingerprint}). Pruning is planned once the corpus is through."""
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


@dataclass
class Setup:
    """What a run and its dry run start from: the checked corpus, the embedder's id, and the
    store with whether the collection exists (None: a Milvus Lite file that does not exist,
    which a dry run does not create)."""

    scan: CorpusScan
    embedder_id: str
    store: ChunkStore | None
    existed: bool


def prepare(options: IngestOptions, resources: Resources, dry_run: bool = False) -> Setup:
    """The corpus checked (or the command's check taken), the embedder checked, the store opened
    and an existing collection checked against the embedder (no model is loaded for it)."""
    scan = resources.scan or scan_corpus(options.corpus, options.chunk_size, options.chunk_overlap,
                                         code_chunks=options.code_chunks,
                                         follow_links=options.follow_links)
    resources.scan = None  # taken once
    name, model, _ = check_embedder(options.embedder)
    embedder_id = f"{name}:{model}"
    store = (None if dry_run and is_missing_lite_file(options.milvus_uri)
             else resources.store(options.milvus_uri))
    if store is not None and not dry_run:
        store.tidy(options.collection)  # a rebuild stopped half-way: finished or undone
    existed = store is not None and store.exists(options.collection)
    if existed:
        assert store is not None
        store.check_embedder(options.collection, embedder_id)
    return Setup(scan, embedder_id, store, existed)


# --- the plan of a run, made without running it (`situate ingest --dry-run`) ---------------------

@dataclass
class _ModeTally:
    """One cost model's view of the corpus: its plan against the collection, and its bill."""

    model: CostModel
    pipeline: str
    counts: Plan = field(default_factory=Plan)
    estimate: Estimate = field(default_factory=Estimate)
    written: int = 0
    rows_delta: int = 0  # rows after the run minus rows before, over the documents processed
    to_situate: int = 0

    def bill(self, waves: int) -> dict[str, int | float]:
        """The bill under the summary's names, and the time its requests should take."""
        u = self.estimate.usage
        u.cost_usd = self.model.price(u)
        return {**Bill.of(u),
                "estimated_seconds": round(self.model.seconds(self.estimate, waves), 1)}

    def add_window(self, docs: list[Document], existing: dict[str, dict[str, str]], force: bool,
                   cache: ContextCache | None) -> None:
        """One window of documents planned as the ingest flow plans it, and priced."""
        plan = plan_ingest(docs, existing, self.pipeline, force)
        self.counts.add(plan)
        identity = self.model.cache_identity()
        for doc in plan.process:
            cached, missing = cached_split(identity, doc, cache)
            estimate = self.model.estimate(doc, missing)
            estimate.usage.contexts_from_cache += cached
            self.estimate.add(estimate)
            self.written += len(doc.chunks)
            self.rows_delta += len(doc.chunks) - len(existing.get(doc.id, {}))
            self.to_situate += len(missing)


def plan_run(options: IngestOptions, resources: Resources) -> IngestPlan:
    """What the ingest flow with the same options would do and cost, worked out without doing it.

    The same loader and windows, the same plan against the collection (its stored fingerprints:
    new, changed, unchanged, and with `prune` deleted), the same disk cache (a cached context
    costs nothing) and the same requests (`get_cost_models`: the contextualizer's own planner).
    Writes nothing and calls nothing: a Milvus Lite file that does not exist is not created (it
    holds nothing: every document is new), nor is a cache; no model is loaded, no provider asked.
    """
    config = context_config(options)
    assumptions = Assumptions(chars_per_token=options.chars_per_token,
                              context_tokens=options.context_tokens or Assumptions.context_tokens)
    t = time.perf_counter()
    setup = prepare(options, resources, dry_run=True)
    models = get_cost_models(config, assumptions)
    seconds = {"scan": time.perf_counter() - t}
    t = time.perf_counter()
    tallies = [_ModeTally(m, pipeline_id(m, options.chunk_size, options.chunk_overlap))
               for m in models]
    sizes = RowSizes()
    gone, pruned_rows, count = _tally(options, setup, tallies, sizes)
    seconds["plan"] = time.perf_counter() - t

    batch_window = get_settings().window * BATCH_WINDOW_FACTOR

    def waves(tally: _ModeTally) -> int:
        return math.ceil(math.ceil(tally.to_situate / batch_window) / IN_FLIGHT)

    chosen = tallies[0]
    scan = setup.scan
    return IngestPlan(
        collection=options.collection, corpus=options.corpus, context=config.name,
        embedder=setup.embedder_id, mode=chosen.model.mode, documents=scan.documents,
        new=chosen.counts.new, changed=chosen.counts.changed, unchanged=chosen.counts.unchanged,
        deleted_documents=len(gone), skipped_empty=scan.skipped_empty,
        skipped_large_files=scan.skipped_large_files, skipped_chunks=scan.skipped_chunks,
        cleaned_chars=scan.cleaned_chars, formats=dict(scan.formats),
        units=dict(scan.units), skipped=dict(scan.skipped), chunks_written=chosen.written,
        chunks_deleted=len(chosen.counts.stale_ids) + pruned_rows,
        rows=count + chosen.rows_delta - pruned_rows,
        **_drift(options, setup, chosen, pruned_rows, count + chosen.rows_delta - pruned_rows),
        **chosen.bill(waves(chosen)),
        alternatives={t.model.mode: Alternative(flags=t.model.flags, changed=t.counts.changed,
                                                **t.bill(waves(t)))
                      for t in tallies[1:]},
        assumptions=PlanAssumptions(
            chars_per_token=chosen.model.chars_per_token, context_tokens=assumptions.context_tokens,
            request_seconds=assumptions.request_seconds,
            output_tokens_per_second=assumptions.output_tokens_per_second,
            batch_round_seconds=assumptions.batch_round_seconds, concurrency=config.concurrency),
        seconds={k: round(v, 3) for k, v in seconds.items()},
        store_memory=store_capacity(
            options.milvus_uri, count + chosen.rows_delta - pruned_rows,
            embedder_dim(setup.embedder_id, _stored_dim(setup, options.collection)), sizes,
            context_bytes(config.name, assumptions.context_tokens, chosen.model.chars_per_token)))


def _stored_dim(setup: Setup, collection: str) -> int | None:
    """The existing collection's vector dimension (None for a new one)."""
    if not setup.existed or setup.store is None:
        return None
    return setup.store.describe(collection).dim


def should_rebuild(options: IngestOptions, drift: int, rows: int) -> bool:
    """Whether a run ends by rebuilding the collection: asked to, or its drift reached
    `rebuild_at` of its rows (the one rule of the run and its dry run)."""
    return options.rebuild or (drift > 0 and drift >= options.rebuild_at * rows)


def _drift(options: IngestOptions, setup: Setup, chosen: _ModeTally, pruned_rows: int,
           rows: int) -> dict[str, int | float | bool]:
    """The drift the run would leave (what it writes or deletes in a collection that held rows
    before it, on top of the drift already there), and whether the run would rebuild."""
    drift = 0
    if setup.existed and setup.store is not None:
        drift = (setup.store.drift(options.collection) + chosen.written
                 + len(chosen.counts.stale_ids) + pruned_rows)
    rebuilt = rows > 0 and should_rebuild(options, drift, rows)
    return {"drift_rows": drift, "drift_share": round(drift / max(rows, 1), 4), "rebuilt": rebuilt}


def _tally(options: IngestOptions, setup: Setup, tallies: list[_ModeTally],
           sizes: RowSizes | None = None) -> tuple[list[str], int, int]:
    """Every window through every mode's tally (and each chunk's bytes into `sizes`, for the
    store's estimate); (documents pruning would delete, their rows, the collection's rows now)."""
    store, collection = setup.store, options.collection
    cache_file = Path(options.cache_dir) / _CACHE_FILE
    cache = ContextCache(options.cache_dir) if cache_file.is_file() else None
    try:
        for docs in windows(stream_corpus(options.corpus, options.chunk_size, options.chunk_overlap,
                                         code_chunks=options.code_chunks,
                                         follow_links=options.follow_links),
                            window_size(options)):
            existing = (store.fingerprints(collection, [d.id for d in docs])
                        if setup.existed and store is not None else {})
            for tally in tallies:
                tally.add_window(docs, existing, options.force, cache)
            if sizes is not None:
                for doc in docs:
                    sizes.add_document(doc)
    finally:
        if cache is not None:
            cache.close()
    if not setup.existed or store is None:
        return [], 0, 0
    gone = (sorted(set(store.document_ids(collection)) - setup.scan.ids) if options.prune else [])
    pruned = sum(len(rows) for rows in (store.fingerprints(collection, gone) if gone else {}).values())
    return gone, pruned, store.count(collection)
