"""The plan of an ingest run, shared by the run and its dry run.

`plan_corpus` compares the corpus, as its checking pass saw it, with what the collection holds
per document (`read_contents`: the local manifest when the store agrees with it, else one pass over
the collection), by fingerprint and chunk indexes: new, changed, unchanged, the rows a changed
document no longer has, and the documents gone. The ingest flow (`situate.flows.ingest`) plans
the whole run with it before reading any document again. `plan_run` makes the same plan without
acting on it, and prices it (`situate ingest --dry-run`) as an `IngestPlan`. `gather_inputs` is the
start both share. The flow imports this module, never the other way round.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from situate.core.protocols import ChunkStore
from situate.core.records import Document, Indexes, StoredDocument, grouped, sha256
from situate.core.secrets import redact
from situate.core.settings import get_settings
from situate.core.uri import is_missing_lite_file
from situate.pipeline.capacity import (
    context_bytes,
    embedder_dim,
    in_memory,
    scan_capacity,
    store_capacity,
)
from situate.pipeline.ingest_report import Alternative, Bill, IngestPlan, PlanAssumptions
from situate.pipeline.options import IngestOptions
from situate.pipeline.providers import provider_config
from situate.pipeline.resources import Resources
from situate.storage.cache import DiskContextCache
from situate.storage.capacity import RowSizes
from situate.storage.manifest import Manifest
from situate.tasks.contexts.base import ContextConfig, Contextualizer
from situate.tasks.contexts.cache import cached_split
from situate.tasks.contexts.cost import Assumptions, CostModel, Estimate, get_cost_models
from situate.tasks.corpus.load import CorpusScan, ScannedDocument, scan_corpus, stream_corpus
from situate.tasks.embedders.base import check_embedder
from situate.tasks.sources.base import is_source
from situate.tasks.sources.preview import SourcePreview, preview_scan

IN_FLIGHT = 2  # windows in memory at once: one written while the next is situated and embedded
# Message Batches answer a whole window in one batch, which can take an hour: their windows are
# larger, so a big corpus makes few batches (each well under the API's 100,000 requests).
BATCH_WINDOW_FACTOR = 25
TAIL = 8  # the last windows of a run halve down to an eighth of a window (`windows`)
# diskcache's database file: a context cache directory without it holds no context.
_CACHE_FILE = "cache.db"


def fingerprint_of(text_hash: str, cut: str, pipeline: str) -> str:
    """What a document's rows were built from: its text (by hash) and the pipeline that situated
    them (with how it was cut, for source code cut along its syntax)."""
    return sha256(f"{text_hash}\x1f{pipeline}" + (f"\x1f{cut}" if cut else ""))


def fingerprint(doc: Document, pipeline: str) -> str:
    return fingerprint_of(doc.hash, str(doc.metadata.get("chunks") or ""), pipeline)


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
    """The context provider's configuration (`--context`, `--model`, the LLM settings)."""
    return provider_config(options.context, options.model, concurrency=options.concurrency,
                           state_dir=options.cache_dir, base_url=options.llm_base_url,
                           group_chunks=options.group_chunks, batch=options.batch)


def window_size(options: IngestOptions) -> int:
    return get_settings().window * (BATCH_WINDOW_FACTOR if options.batch else 1)


@dataclass
class Plan:
    """What a run does to the collection, decided from the corpus's scan and what the collection
    holds (`StoredDocument`s) before any document is read again: the documents to process (new
    or changed, with their chunks), how many were found unchanged, and the documents the
    collection holds that the corpus no longer has (deleted with `prune`)."""

    documents: dict[str, int] = field(default_factory=dict)  # doc id -> its chunks, corpus order
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    stale_rows: int = 0  # rows of changed documents that none of their new chunks replaces
    replaced_rows: int = 0  # rows the processed documents held before
    gone: list[str] = field(default_factory=list)
    gone_rows: int = 0

    @property
    def chunks(self) -> int:
        """The chunks the run situates, embeds and writes."""
        return sum(self.documents.values())


def is_unchanged(scanned: ScannedDocument, stored: StoredDocument, pipeline: str) -> bool:
    """A document whose rows were built from the same text by the same pipeline, with the same
    chunks: nothing to do for it (a comparison per document, none per chunk)."""
    return (not stored.other and stored.indexes == scanned.indexes
            and stored.fingerprint == fingerprint_of(scanned.hash, scanned.cut, pipeline))


def plan_corpus(scan: CorpusScan, stored: Mapping[str, StoredDocument], pipeline: str,
                force: bool) -> Plan:
    """The plan of a run over the scanned corpus against what the collection holds."""
    plan = Plan()
    for doc_id, scanned in scan.scanned.items():
        held = stored.get(doc_id)
        if held is None:
            plan.new += 1
        elif not force and is_unchanged(scanned, held, pipeline):
            plan.unchanged += 1
            continue
        else:
            plan.changed += 1
            plan.replaced_rows += held.rows
            plan.stale_rows += len(_positions(held) - _positions_of(scanned.indexes))
        plan.documents[doc_id] = (scanned.indexes if isinstance(scanned.indexes, int)
                                else len(scanned.indexes))
    plan.gone = sorted(set(stored) - set(scan.scanned))
    plan.gone_rows = sum(stored[d].rows for d in plan.gone)
    return plan


def _positions(held: StoredDocument) -> set[tuple[int, str | None]]:
    return set(held.positions())


def _positions_of(indexes: Indexes) -> set[tuple[int, str | None]]:
    return {(i, None) for i in (range(indexes) if isinstance(indexes, int) else indexes)}


def windows(documents: Iterable[Document], size: int,
            total: int | None = None) -> Iterator[list[Document]]:
    """Whole documents in groups of about `size` chunks (a larger document alone).

    Given the `total` chunks to come, the last `size` of them go in windows that halve, down to a
    `TAIL`th of `size`: the last window's write is the one step of a run that nothing overlaps
    (the model has nothing left to embed), so it is kept small. A run of one window is left
    whole: a text's vector depends a little (float rounding) on the batch it is embedded in, so
    cutting it would move a small collection's rankings for nothing to overlap. A total that
    proves wrong only changes where the windows are cut."""
    def chunks(doc: Document) -> int:
        return len(doc.chunks)

    if total is None or total <= size:
        return grouped(documents, size, chunks)
    smallest, known = max(1, size // TAIL), total

    def cut(done: int) -> int:
        remaining = known - done
        return size if remaining > size else max(smallest, -(-remaining // 2))

    return grouped(documents, cut, chunks)


@dataclass
class RunInputs:
    """What a run and its dry run start from: the checked corpus, the embedder's id, the store
    with whether the collection exists (None: a Milvus Lite file that does not exist, which a
    dry run does not create), and what the collection holds (`CollectionContents`)."""

    scan: CorpusScan
    embedder_id: str
    store: ChunkStore | None
    existed: bool
    contents: CollectionContents = field(default_factory=lambda: CollectionContents({}, "none", 0))
    preview: SourcePreview | None = None  # a dry run's source: its listing, not synced


@dataclass
class CollectionContents:
    """What the collection holds before the run, per document, and where that was read from:
    "manifest" (the local copy, its token and row count checked against the store), "store"
    (one pass over the collection's rows) or "none" (no collection)."""

    documents: dict[str, StoredDocument]
    source: str
    rows: int


def gather_inputs(options: IngestOptions, resources: Resources, dry_run: bool = False) -> RunInputs:
    """The corpus checked (or the command's check taken), the embedder checked, the store opened,
    an existing collection checked against the embedder (no model is loaded for it) and what it
    holds read (`read_contents`)."""
    scan, preview = resources.scan, None
    if scan is None and dry_run and is_source(options.corpus):  # listed only, nothing fetched
        scan, preview = preview_scan(options.corpus, options.chunk_size, options.chunk_overlap,
                                     options.code_chunks, options.cache_dir,
                                     options.credentials_block)
    scan = scan or scan_corpus(options.corpus, options.chunk_size, options.chunk_overlap,
                                         code_chunks=options.code_chunks,
                                         follow_links=options.follow_links,
                                         cache_dir=options.cache_dir,
                                         credentials_block=options.credentials_block)
    resources.scan = None  # taken once
    name, model, _ = check_embedder(options.embedder)
    embedder_id = f"{name}:{model}"
    store = (None if dry_run and is_missing_lite_file(options.milvus_uri)
             else resources.store(options.milvus_uri, options.cache_dir))
    if store is not None and store.upkeep is not None and not dry_run:
        store.upkeep.tidy(options.collection)  # a rebuild stopped half-way: finished or undone
    existed = store is not None and store.exists(options.collection)
    inputs = RunInputs(scan, embedder_id, store, existed, preview=preview)
    if existed:
        assert store is not None
        store.require_embedder(options.collection, embedder_id)
        inputs.contents = read_contents(store, options.collection, options.cache_dir)
    return inputs


def manifest_of(store: ChunkStore, collection: str, cache_dir: str) -> Manifest:
    return Manifest(cache_dir, store.uri, collection)


def read_contents(store: ChunkStore, collection: str, cache_dir: str) -> CollectionContents:
    """What an existing collection holds: the local manifest when its token and row count agree
    with the store's (a store with upkeep keeps one), else one streaming pass over the collection."""
    rows = store.count(collection)
    if store.upkeep is not None:
        documents = manifest_of(store, collection, cache_dir).load(
            store.upkeep.manifest_token(collection), rows)
        if documents is not None:
            return CollectionContents(documents, "manifest", rows)
    return CollectionContents(store.stored_documents(collection), "store", rows)


# --- the plan of a run, made without running it (`situate ingest --dry-run`) ---------------------

@dataclass
class _ModeTally:
    """One cost model's view of the corpus: its plan against the collection, and its bill."""

    model: CostModel
    plan: Plan
    estimate: Estimate = field(default_factory=Estimate)
    to_situate: int = 0

    def bill(self, waves: int) -> dict[str, int | float]:
        """The bill under the summary's names, and the time its requests should take."""
        u = self.estimate.usage
        u.cost_usd = self.model.price(u)
        return {**Bill.of(u),
                "estimated_seconds": round(self.model.seconds(self.estimate, waves), 1)}

    def add(self, doc: Document, cache: DiskContextCache | None) -> None:
        """A document the plan processes, priced as the ingest flow would situate it."""
        cached, missing = cached_split(self.model.cache_identity(), doc, cache)
        estimate = self.model.estimate(doc, missing)
        estimate.usage.contexts_from_cache += cached
        self.estimate.add(estimate)
        self.to_situate += len(missing)


def plan_run(options: IngestOptions, resources: Resources) -> IngestPlan:
    """What the ingest flow with the same options would do and cost, worked out without doing it.

    The same plan against the collection (what it holds per document: new, changed, unchanged,
    and with `prune` deleted), the same disk cache (a cached context costs nothing) and the same
    requests (`get_cost_models`: the contextualizer's own planner). Writes nothing and calls
    nothing: a Milvus Lite file that does not exist is not created (it holds nothing: every
    document is new), nor is a cache or a manifest; no model is loaded, no provider asked.
    """
    config = context_config(options)
    assumptions = Assumptions(chars_per_token=options.chars_per_token,
                              context_tokens=options.context_tokens or Assumptions.context_tokens)
    t = time.perf_counter()
    inputs = gather_inputs(options, resources, dry_run=True)
    models = get_cost_models(config, assumptions)
    seconds = {"scan": inputs.scan.seconds, "plan": time.perf_counter() - t}
    t = time.perf_counter()
    tallies = [_ModeTally(m, plan_corpus(inputs.scan, inputs.contents.documents,
                                         pipeline_id(m, options.chunk_size, options.chunk_overlap),
                                         options.force))
               for m in models]
    sizes = RowSizes()
    _tally(options, inputs.scan, tallies, sizes)
    seconds["read"] = time.perf_counter() - t

    batch_window = get_settings().window * BATCH_WINDOW_FACTOR

    def waves(tally: _ModeTally) -> int:
        return math.ceil(math.ceil(tally.to_situate / batch_window) / IN_FLIGHT)

    chosen = tallies[0]
    plan = chosen.plan
    scan = inputs.scan
    pruned_rows = plan.gone_rows if options.prune else 0
    rows = inputs.contents.rows + plan.chunks - plan.replaced_rows - pruned_rows
    return IngestPlan(
        collection=options.collection, corpus=redact(options.corpus), context=config.name,
        embedder=inputs.embedder_id, mode=chosen.model.mode, documents=scan.documents,
        new=plan.new, changed=plan.changed, unchanged=plan.unchanged,
        deleted_documents=len(plan.gone) if options.prune else 0,
        skipped_empty=scan.skipped_empty,
        skipped_large_files=scan.skipped_large_files, skipped_chunks=scan.skipped_chunks,
        cleaned_chars=scan.cleaned_chars, formats=dict(scan.formats),
        units=dict(scan.units), skipped=dict(scan.skipped), chunks_written=plan.chunks,
        chunks_deleted=plan.stale_rows + pruned_rows, rows=rows,
        **_drift(options, inputs, plan, pruned_rows, rows),
        **chosen.bill(waves(chosen)),
        alternatives={t.model.mode: Alternative(flags=t.model.flags, changed=t.plan.changed,
                                                **t.bill(waves(t)))
                      for t in tallies[1:]},
        assumptions=PlanAssumptions(
            chars_per_token=chosen.model.chars_per_token, context_tokens=assumptions.context_tokens,
            request_seconds=assumptions.request_seconds,
            output_tokens_per_second=assumptions.output_tokens_per_second,
            batch_round_seconds=assumptions.batch_round_seconds, concurrency=config.concurrency),
        seconds={k: round(v, 3) for k, v in seconds.items()},
        **({"source": inputs.preview.counts(), "failed": dict(inputs.preview.failures),
            "source_note": inputs.preview.note()} if inputs.preview else {}),
        store_memory=store_capacity(
            options.milvus_uri, rows,
            embedder_dim(inputs.embedder_id, _stored_dim(inputs, options.collection)), sizes,
            context_bytes(config.name, assumptions.context_tokens, chosen.model.chars_per_token)))


def _stored_dim(inputs: RunInputs, collection: str) -> int | None:
    """The existing collection's vector dimension (None for a new one)."""
    if not inputs.existed or inputs.store is None:
        return None
    return inputs.store.describe(collection).dim


def should_rebuild(options: IngestOptions, drift: int, rows: int) -> bool:
    """Whether a run ends by rebuilding the collection (the one rule of the run and its dry run):
    asked to; or, with rows written or deleted since it was built, its drift reached
    `rebuild_at` of its rows, or it is small enough (`rebuild_below` rows) that a rebuild costs
    seconds. `rebuild_at` inf: never by itself.

    Why a size and not a share alone: on Milvus Lite each stored segment scores BM25 with its own
    statistics, so the few rows an update writes are scored apart from the rest, and on the
    codebase benchmark Pass@k moved by up to 3 points at any drift from 0.4% to 25%
    (docs/benchmarks): no share short of 0 bounds that; a small collection is kept exact
    at the cost of seconds, a large one is rebuilt when its drift has paid for it."""
    if options.rebuild:
        return True
    if drift <= 0 or not math.isfinite(options.rebuild_at):
        return False
    return drift >= options.rebuild_at * rows or rows <= options.rebuild_below


def _drift(options: IngestOptions, inputs: RunInputs, plan: Plan, pruned_rows: int,
           rows: int) -> dict[str, int | float | bool]:
    """The drift the run would leave (what it writes or deletes in a collection that held rows
    before it, on top of the drift already there), and whether the run would rebuild."""
    drift = 0
    if inputs.existed and inputs.store is not None and inputs.store.upkeep is not None:
        drift = (inputs.store.upkeep.drift(options.collection) + plan.chunks + plan.stale_rows
                 + pruned_rows)
    # A store without upkeep (None: a dry run's store not opened yet is Milvus) is never rebuilt.
    upkept = inputs.store is None or inputs.store.upkeep is not None
    rebuilt = upkept and rows > 0 and should_rebuild(options, drift, rows)
    return {"drift_rows": drift, "drift_share": round(drift / max(rows, 1), 4), "rebuilt": rebuilt}


def _tally(options: IngestOptions, scan: CorpusScan, tallies: list[_ModeTally],
           sizes: RowSizes) -> None:
    """Every document through the store's estimate (`sizes`: what each chunk would weigh), and
    each document a mode's plan processes priced by that mode."""
    if not scan.documents:  # a source not mirrored yet: nothing to read
        return
    cache_file = Path(options.cache_dir) / _CACHE_FILE
    cache = DiskContextCache(options.cache_dir) if cache_file.is_file() else None
    try:
        for doc in stream_corpus(options.corpus, options.chunk_size, options.chunk_overlap,
                                 code_chunks=options.code_chunks,
                                 follow_links=options.follow_links,
                                 wanted=scan.order if scan.kept else None, kept=scan.kept,
                                 cache_dir=options.cache_dir):
            sizes.add_document(doc)
            for tally in tallies:
                if doc.id in tally.plan.documents:
                    tally.add(doc, cache)
    finally:
        if cache is not None:
            cache.close()


def run_warning(options: IngestOptions, inputs: RunInputs) -> str:
    """The warning a run starts with when its Milvus Lite file will not hold the collection
    (empty when it will, or when the store is a server): the scan's chunks plus the rows the
    collection holds now."""
    if not in_memory(options.milvus_uri):
        return ""
    held, stored_dim = 0, None
    if inputs.existed and inputs.store is not None:
        held = inputs.store.count(options.collection)
        stored_dim = inputs.store.describe(options.collection).dim
    capacity = scan_capacity(options.milvus_uri, held + inputs.scan.chunks,
                             embedder_dim(inputs.embedder_id, stored_dim), options.chunk_size,
                             options.context or get_settings().default_context())
    return capacity.warning
