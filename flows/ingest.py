"""The ingest flow: stream the corpus in windows; per window, situate → embed → upsert to Milvus.

A corpus of any size goes through in bounded memory: a checking pass first (bad input fails before
anything is written), then the plan, made from the pass and what the collection holds per
document (`situate.pipeline.plan`), then the documents it processes are read again lazily and cut
into windows of whole documents (about `SITUATE_WINDOW` chunks each), one task situating,
embedding and writing each; at most `IN_FLIGHT` windows are in memory, and a window's contexts and
vectors are gone once it is written. A million chunks make a few hundred task runs.

Incremental by design: a document whose rows already carry the same fingerprint (its text, the
context provider and the chunking) and chunks is skipped unread; a changed one is rewritten and
its stale chunks deleted by primary key; with `prune`, documents gone from the corpus are deleted
once the corpus is through. The run ends by keeping the collection (drift, rebuild) and the local
manifest of what it holds (`situate.storage.manifest`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture, wait
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from situate.core.protocols import ChunkStore, StoreSpec, StoreUpkeep
from situate.core.records import Document, EmbeddedDocument, StoredDocument, Usage, batched
from situate.core.secrets import redact
from situate.core.settings import get_settings
from situate.flows.artifacts import DOCUMENTS_SITUATED, IngestProgress, artifact_key
from situate.flows.progress import reporter
from situate.pipeline.ingest_report import Bill, IngestPlan, IngestSummary
from situate.pipeline.options import IngestOptions, check_task_runner
from situate.pipeline.order import WindowOrder
from situate.pipeline.plan import (
    IN_FLIGHT,
    Plan,
    RunInputs,
    context_config,
    fingerprint,
    fingerprint_of,
    gather_inputs,
    manifest_of,
    pipeline_id,
    plan_corpus,
    plan_run,
    run_warning,
    should_rebuild,
    window_size,
    windows,
)
from situate.pipeline.resources import Resources, run_resources, store_at
from situate.storage import import_store_clients
from situate.storage.cache import DiskContextCache
from situate.tasks.contexts.base import Contextualizer, contexts_of, get_contextualizer
from situate.tasks.contexts.cache import situate_documents
from situate.tasks.corpus.load import CorpusScan, scan_corpus, stream_corpus
from situate.tasks.embedders.base import Embedders
from situate.tasks.embedders.runtime import Runtime
from situate.tasks.embedders.spans import in_groups
from situate.tasks.sources.base import is_source

# Milvus's client configures logging when first imported: imported with the flow, before any run
# of this process starts, never during one (`situate.storage.client.import_client_library`).
import_store_clients()


@task(task_run_name="scan-corpus", persist_result=False, cache_policy=NO_CACHE)
def scan_corpus_task(path: str, chunk_size: int, chunk_overlap: int,
                     code_chunks: str | None = None,
                     follow_links: bool | None = None, cache_dir: str | None = None,
                     credentials_block: str | None = None) -> CorpusScan:
    """The checking pass over the corpus (a source synced first), as a task of the run (seen in
    the UI). Its parameters hold a credentials block's name, never what the block holds."""
    return scan_corpus(path, chunk_size, chunk_overlap, code_chunks=code_chunks,
                       follow_links=follow_links, cache_dir=cache_dir,
                       credentials_block=credentials_block)


def make_task_runner(options: IngestOptions) -> TaskRunner[Any]:
    """The runner of the per-window tasks: threads here, or a Dask cluster.

    Dask runs tasks in other processes, which open the store again from its spec, so it needs a
    store they share (a Milvus server, not a Milvus Lite file: `StoreKind.shared_problem`).
    Without an address it starts a LocalCluster of worker processes for this run, given the
    run's Milvus token in their environment (where a worker's settings read it); with one it
    uses that existing cluster, whose workers have their own SITUATE_MILVUS_TOKEN.
    """
    check_task_runner(options.task_runner, options.dask_address, options.milvus_uri)
    if options.task_runner == "threads":
        return ThreadPoolTaskRunner(max_workers=IN_FLIGHT)
    from prefect_dask.task_runners import DaskTaskRunner

    if options.dask_address:
        return DaskTaskRunner(address=options.dask_address)
    token = get_settings().milvus_token.get_secret_value()  # --milvus-token: not in os.environ
    env = {"SITUATE_MILVUS_TOKEN": token} if token else {}
    return DaskTaskRunner(cluster_kwargs={"processes": True, "dashboard_address": None,
                                          "env": env})


@dataclass
class WindowResult:
    """What one window's task did: its bill, its rows, the notes its providers left, and the
    seconds it spent situating, embedding and writing."""

    usage: Usage
    written: int
    chunks: int
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    embedder: dict[str, str] = field(default_factory=dict)  # device, backend, precision


@dataclass(frozen=True)
class Window:
    """One window's work: the documents to process, and the ids the collection holds for each
    changed one (new ones hold none), which their rows replace."""

    docs: list[Document]
    stored: dict[str, list[str]]


@task(task_run_name="window-{index}", persist_result=False, cache_policy=NO_CACHE)
def window_task(window: Window, contextualizer: Contextualizer, cache: DiskContextCache | None,
                store: ChunkStore | StoreSpec, embedders: Embedders, embedder_spec: str,
                collection: str, pipeline: str, index: int = 0, runtime: Runtime | None = None,
                order: WindowOrder | None = None) -> WindowResult:
    """Situate, embed and write window `index` of whole documents. Its contexts and vectors live
    only here: gone when the window is written. Each document's rows are written in one go (never
    half a document), replacing what the collection held for it, stale chunks included (by
    primary key: nothing is read back). With `order`, the window embeds and writes after the one
    before it (`situate.pipeline.order`). `store` is the run's own on a thread, its spec on a Dask
    worker (which opens it for the write and closes it after)."""
    order = order or WindowOrder(first=index)  # unordered (Dask): nothing to wait for
    clock = time.perf_counter()
    seconds: dict[str, float] = {}

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[phase] = now - clock
        clock = now

    try:
        results = situate_documents(contextualizer, window.docs, cache, reporter(DOCUMENTS_SITUATED))
        lap("situate")
        embedder = embedders.get(embedder_spec, runtime)
        # One window embeds at a time (the one before is written meanwhile), in the order read.
        with order.stage("embed", index), embedder.turn():
            clock = time.perf_counter()
            vectors = embed(embedder, [x.indexed_text for r in results for x in r.situated])
        lap("embed")
        info = embedder.info
        documents: list[EmbeddedDocument] = []
        i = 0
        for doc, r in zip(window.docs, results, strict=True):
            n = len(r.situated)
            documents.append(EmbeddedDocument(doc, fingerprint(doc, pipeline), tuple(r.situated),
                                              vectors[i:i + n]))
            i += n
        with order.stage("write", index):
            clock = time.perf_counter()
            with store_at(store) as chunks:  # on Dask: opened here, from its spec
                if i and not chunks.exists(collection):
                    # Created at the first write: a run that fails before any window is written
                    # leaves no empty collection behind. The windows write in order (on Dask,
                    # the flow writes the first alone): no race here.
                    chunks.ensure_collection(collection, len(vectors[0]), embedder.id,
                                             backend=info["backend"], precision=info["precision"])
                del vectors
                written = chunks.write(collection, documents,
                                       batch_size=get_settings().write_batch, stored=window.stored)
        lap("write")
    finally:
        order.done(index)
    usage = Usage()
    for r in results:
        usage.add(r.usage)
    usage.contexts_generated = sum(1 for r in results for x in r.situated
                                   if x.source == "generated")
    return WindowResult(usage, written, sum(len(d.chunks) for d in window.docs),
                        [note for r in results for note in r.notes], seconds, info)


@task(task_run_name="rebuild-{collection}", persist_result=False, cache_policy=NO_CACHE)
def rebuild_task(store: StoreUpkeep, collection: str, order: Sequence[str],
                 stored: Mapping[str, StoredDocument] | None = None) -> int:
    """The collection rebuilt from its own rows in corpus order and swapped in whole
    (`StoreUpkeep.rebuild`): BM25 statistics as a fresh ingest's. Returns the rows copied."""
    return store.rebuild(collection, order, batch_size=get_settings().write_batch, stored=stored)


def embed(embedder: Any, texts: Sequence[str]) -> np.ndarray:
    """Vectors of `texts`, held as float32 arrays (4 bytes a number; a list of Python floats
    takes 32), converted batch by batch as the embedder answers.

    The window's texts go to the embedder longest first, so that each call, and each batch a
    local model pads to its longest text, holds texts of about one length: the padding a batch
    of mixed lengths would compute is most of its cost (BENCHMARKS.md). The vectors come back in
    the texts' order.

    A call holds `SITUATE_EMBED_BATCH` texts, or the model's forward batch where that is larger
    (a GPU's 256): a call smaller than the batch would leave the GPU a smaller batch per pass and
    pay the model process's round trip for each."""
    size = max(get_settings().embed_batch, getattr(embedder, "forward_batch", 0))
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out = in_groups(len(texts), batched(order, size),
                    lambda members: embedder.embed_documents([texts[i] for i in members],
                                                             batch_size=size))
    return np.empty((0, 0), dtype=np.float32) if out is None else out


@flow(name="ingest", log_prints=False)
def ingest_flow(options: IngestOptions) -> IngestSummary | IngestPlan:
    """Ingest a corpus into a collection; returns the run summary (also a table artifact, and
    JSON at `json_out` when given).

    With `dry_run`, only plans the run (`plan_run`: writes nothing, calls no provider) and returns
    the plan, recorded as the `ingest-plan-<collection>` table artifact.
    """
    with run_resources() as resources:
        if options.dry_run and resources.scan is None and is_source(options.corpus):
            return _dry_run(options, resources)  # a source listed, not synced (plan_run)
        if resources.scan is None:
            resources.scan = scan_corpus_task(options.corpus, options.chunk_size,
                                              options.chunk_overlap, options.code_chunks,
                                              options.follow_links, options.cache_dir,
                                              options.credentials_block)
        warn_skipped(resources.scan)
        if options.dry_run:
            return _dry_run(options, resources)
        return _Ingest(options, resources).run()


def _dry_run(options: IngestOptions, resources: Resources) -> IngestPlan:
    plan = plan_run(options, resources)
    create_table_artifact(plan.table(), key=artifact_key("ingest-plan", options.collection),
                          description=f"plan (dry run) of ingesting {redact(options.corpus)} into "
                                      f"{options.collection}")
    plan.write_json(options.json_out)
    get_run_logger().info(f"{options.collection}: dry run, {plan.requests} request(s) and "
                          f"${plan.cost_usd:.4f} expected; nothing written")
    return plan


PHASES = ("scan", "plan", "read", "situate", "embed", "write", "prune", "rebuild")


class _Ingest:
    """One ingest run: the plan, the windows through their tasks, then pruning, the collection's
    upkeep and the summary."""

    def __init__(self, options: IngestOptions, resources: Resources) -> None:
        self.options = options
        self.resources = resources
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.plan = Plan()
        self.usage = Usage()
        self.embedder: dict[str, str] = {}  # device, backend, precision of the first window
        self.written = 0
        self.deleted = 0
        self.deleted_docs: list[str] = []
        self.drift = 0
        self.rebuilt = False

    def run(self) -> IngestSummary:
        t = time.perf_counter()
        inputs = gather_inputs(self.options, self.resources)
        if warning := run_warning(self.options, inputs):  # a Lite file too small for the corpus
            get_run_logger().warning(warning)
        config = context_config(self.options)
        contextualizer = get_contextualizer(config)
        pipeline = pipeline_id(contextualizer, self.options.chunk_size, self.options.chunk_overlap)
        self.plan = plan_corpus(inputs.scan, inputs.contents.documents, pipeline, self.options.force)
        self.seconds["scan"] = inputs.scan.seconds
        self.seconds["plan"] = time.perf_counter() - t
        try:
            self._windows(inputs, contextualizer, pipeline)
        finally:
            contextualizer.close()
            # No window is left to embed: let a local model's process exit now.
            self.resources.embedders.release()
        t = time.perf_counter()
        self.deleted = self.plan.stale_rows + self._prune(inputs)
        self.seconds["prune"] = time.perf_counter() - t
        rows = self._maintain(inputs, pipeline)
        if rows and inputs.store is not None:  # what `situate mcp`'s description tool says
            inputs.store.record_ingest(self.options.collection, contexts_of(config),
                                      datetime.now(UTC).isoformat(timespec="seconds"))
        return self._summary(inputs, rows)

    def _read(self, documents: Iterator[Document]) -> Iterator[Document]:
        """The documents as the stream reads them, the time spent reading counted."""
        while True:
            t = time.perf_counter()
            doc = next(documents, None)
            self.seconds["read"] += time.perf_counter() - t
            if doc is None:
                return
            yield doc

    def _windows(self, inputs: RunInputs, contextualizer: Contextualizer, pipeline: str) -> None:
        """Every window of the documents the plan processes (read again, the others not) handed
        to a task; at most IN_FLIGHT in flight, in order (`situate.pipeline.order`)."""
        o, plan = self.options, self.plan
        if plan.unchanged:
            get_run_logger().info(f"{o.collection}: {plan.unchanged} unchanged document(s) "
                                  "skipped unread")
        if not plan.documents:
            return
        store = inputs.store
        assert store is not None
        held = inputs.contents.documents
        cache = DiskContextCache(o.cache_dir)
        progress = IngestProgress(o.collection, plan.chunks, len(plan.documents))
        pending: deque[PrefectFuture[WindowResult]] = deque()
        submitted = 0
        # Windows on threads here embed and write in the order read; on Dask the first is
        # written alone, as it creates the collection.
        order = WindowOrder() if o.task_runner == "threads" else None
        # A Dask worker is another process: it gets the store's spec and opens it itself.
        sent = store if order is not None else store.spec
        try:
            with make_task_runner(o) as runner:
                try:
                    documents = self._read(stream_corpus(o.corpus, o.chunk_size, o.chunk_overlap,
                                                         code_chunks=o.code_chunks,
                                                         follow_links=o.follow_links,
                                                         wanted=plan.documents,
                                                         kept=inputs.scan.kept,
                                                         cache_dir=o.cache_dir))
                    # Message Batches' windows stay whole: each batch takes its own wait.
                    tail = None if o.batch else plan.chunks
                    for docs in windows(documents, window_size(o), tail):
                        stored = {d.id: held[d.id].ids(d.id) for d in docs if d.id in held}
                        if inputs.existed and store.upkeep is not None:
                            # counted before written: a stop keeps it counted
                            stale = sum(len(set(stored[d.id]) - {c.id for c in d.chunks})
                                        for d in docs if d.id in stored)
                            store.upkeep.add_drift(o.collection,
                                                   sum(len(d.chunks) for d in docs) + stale)
                        pending.append(runner.submit(window_task, {
                            "window": Window(docs, stored),
                            "contextualizer": contextualizer, "cache": cache, "store": sent,
                            "embedders": self.resources.embedders,
                            "embedder_spec": o.embedder, "collection": o.collection,
                            "pipeline": pipeline, "index": submitted,
                            "runtime": o.runtime(), "order": order}))
                        progress.submitted(len(docs))
                        submitted += 1
                        while pending and (len(pending) >= IN_FLIGHT
                                           or (submitted == 1 and order is None)):
                            self._take_result(pending.popleft(), progress)
                    while pending:
                        self._take_result(pending.popleft(), progress)
                except BaseException:
                    # A window failed (or the run was stopped): the other windows stop too (on
                    # threads; on Dask the workers' own copies finish their documents), and the
                    # error goes up only when every task has ended, so none is still using the
                    # contextualizer, the cache or the model when they are closed. What was
                    # written stays: the next run goes on from it.
                    contextualizer.abort()
                    wait(list(pending))
                    raise
        finally:
            progress.close()
            cache.close()

    def _take_result(self, future: PrefectFuture[WindowResult], progress: IngestProgress) -> None:
        result = future.result()
        self.usage.add(result.usage)
        self.written += result.written
        for phase, seconds in result.seconds.items():
            self.seconds[phase] += seconds
        for note in result.notes:
            get_run_logger().warning(note)
        self.embedder = self.embedder or result.embedder
        progress.window_done(result.chunks)

    def _prune(self, inputs: RunInputs) -> int:
        """With `prune`, delete the rows of the documents gone from the corpus, by primary key
        (what the collection holds per document says which); the rows deleted, counted as drift
        before."""
        plan = self.plan
        if not (self.options.prune and inputs.existed and inputs.store is not None and plan.gone):
            return 0
        sync = inputs.scan.sync
        if sync is not None and not sync.complete:
            get_run_logger().warning(
                f"{self.options.collection}: {len(plan.gone)} document(s) not listed by "
                f"{sync.url} kept: the sync saw only part of it, so nothing is pruned")
            return 0
        store, collection, held = inputs.store, self.options.collection, inputs.contents.documents
        if store.upkeep is not None:
            store.upkeep.add_drift(collection, plan.gone_rows)
        store.delete_ids(collection, (i for d in plan.gone for i in held[d].ids(d)))
        self.deleted_docs = plan.gone
        return plan.gone_rows

    def _maintain(self, inputs: RunInputs, pipeline: str) -> int:
        """The collection's drift, and a rebuild when it passes `rebuild_at` of its rows (or
        `rebuild` asks for one); then the local manifest of what it holds. Returns the rows the
        collection holds."""
        o, store = self.options, inputs.store
        assert store is not None
        if not (inputs.existed or self.written) or not store.exists(o.collection):
            return 0
        changed = bool(self.written or self.deleted)
        upkeep = store.upkeep
        if changed and upkeep is not None:
            t = time.perf_counter()
            upkeep.flush(o.collection)
            self.seconds["write"] += time.perf_counter() - t
        rows = store.count(o.collection)
        if upkeep is None:  # a store that needs none searches as a fresh one, and is read back
            return rows
        self.drift = upkeep.drift(o.collection)
        held = self._held_after(inputs, pipeline)
        if should_rebuild(o, self.drift, rows):
            t = time.perf_counter()
            rebuild_task(upkeep, o.collection, inputs.scan.order,
                         held if sum(d.rows for d in held.values()) == rows else None)
            self.seconds["rebuild"] = time.perf_counter() - t
            self.rebuilt = True
            get_run_logger().info(
                f"{o.collection}: rebuilt from its {rows} rows in {self.seconds['rebuild']:.1f} s "
                f"({self.drift} written or deleted since it was built; no context paid, nothing "
                "embedded): BM25 now scores as on a fresh ingest")
        elif self.drift:
            get_run_logger().info(
                f"{o.collection}: {self.drift} rows written or deleted since it was built "
                f"({self.drift / max(rows, 1):.1%} of {rows}), under --rebuild-at "
                f"{o.rebuild_at:g}: not rebuilt; BM25 may score differently from a fresh ingest")
        t = time.perf_counter()
        self._keep_manifest(inputs, upkeep, held, rows, changed)
        self.seconds["plan"] += time.perf_counter() - t
        return rows

    def _held_after(self, inputs: RunInputs, pipeline: str) -> dict[str, StoredDocument]:
        """What the collection holds after the run's writes and deletes, per document: what it
        held, with the processed documents as written and the pruned ones gone."""
        held = inputs.contents.documents
        for doc_id in self.plan.documents:
            scanned = inputs.scan.scanned[doc_id]
            held[doc_id] = StoredDocument(fingerprint_of(scanned.hash, scanned.cut, pipeline),
                                          scanned.indexes)
        for doc_id in self.deleted_docs:
            held.pop(doc_id, None)
        return held

    def _keep_manifest(self, inputs: RunInputs, upkeep: StoreUpkeep, held: dict[str, StoredDocument],
                       rows: int, changed: bool) -> None:
        """The local manifest written for the collection as the run leaves it, and its token
        recorded in the collection (`situate.storage.manifest`): the next run plans from it
        without reading the collection. Not written when it could be wrong (its rows do not add
        up to the collection's); nothing to do when the run changed nothing it already held."""
        o, store = self.options, inputs.store
        assert store is not None
        if not changed and inputs.contents.source == "manifest":
            return
        manifest = manifest_of(store, o.collection, o.cache_dir)
        if sum(d.rows for d in held.values()) != rows:
            get_run_logger().warning(
                f"{o.collection}: holds {rows} rows, its documents as planned "
                f"{sum(d.rows for d in held.values())}; the next run reads them from the store")
            manifest.forget()
            return
        delta = ({*self.plan.documents, *self.deleted_docs} if inputs.contents.source == "manifest"
                 else None)
        upkeep.set_manifest_token(o.collection, manifest.save(held, changed=delta))

    def _summary(self, inputs: RunInputs, rows: int) -> IngestSummary:
        o, scan, plan = self.options, inputs.scan, self.plan
        self.seconds["total"] = time.perf_counter() - self.started + scan.seconds
        summary = IngestSummary(
            collection=o.collection, corpus=redact(o.corpus), context=o.context,
            embedder=inputs.embedder_id, documents=scan.documents, new=plan.new,
            changed=plan.changed, unchanged=plan.unchanged,
            deleted_documents=len(self.deleted_docs), skipped_empty=scan.skipped_empty,
            skipped_large_files=scan.skipped_large_files, skipped_chunks=scan.skipped_chunks,
            cleaned_chars=scan.cleaned_chars, formats=dict(scan.formats),
            units=dict(scan.units), skipped=dict(scan.skipped), chunks_written=self.written,
            chunks_deleted=self.deleted,
            rows=rows, drift_rows=self.drift, drift_share=round(self.drift / max(rows, 1), 4),
            rebuilt=self.rebuilt, **Bill.of(self.usage),
            **{k: self.embedder.get(k, "") for k in ("device", "backend", "precision")},
            seconds={k: round(v, 3) for k, v in self.seconds.items()},
            source=scan.sync.counts() if scan.sync else {},
            source_revision=scan.sync.revision if scan.sync else "",
            failed=dict(scan.sync.failed) if scan.sync else {})
        create_table_artifact(summary.table(), key=artifact_key("ingest-summary", o.collection),
                              description=f"ingest of {redact(o.corpus)} into {o.collection}")
        summary.write_json(o.json_out)
        get_run_logger().info(f"{o.collection}: {self.written} chunks written, {rows} rows, "
                              f"{plan.unchanged} unchanged document(s) skipped")
        return summary


def warn_skipped(scan: CorpusScan) -> None:
    """What the checking pass left out, said once in the run's log."""
    logger = get_run_logger()
    corpus = scan.path
    if scan.sync is not None:
        sync = scan.sync
        logger.info(f"{corpus}: {sync.listed} listed, {sync.fetched} fetched "
                    f"({sync.fetched_bytes} bytes), {sync.unchanged} unchanged (not fetched), "
                    f"{sync.deleted} gone from the source, in {sync.seconds:.1f} s")
        if sync.failed_count:
            named = "; ".join(f"{d}: {why}" for d, why in sync.failed)
            logger.warning(f"{corpus}: {sync.failed_count} document(s) failed, nothing pruned "
                           f"this run: {named}")
    if scan.skipped_empty:
        logger.warning(f"skipped {scan.skipped_empty} empty document(s) in {corpus}")
    unreadable = sum(n for _, n in scan.skipped)
    if scan.skipped_files - unreadable:
        logger.warning(f"skipped {scan.skipped_files - unreadable} binary or non-text file(s) in "
                       f"{corpus}")
    if unreadable:
        said = ", ".join(f"{n} {kind}" for kind, n in scan.skipped)
        logger.warning(f"skipped {unreadable} file(s) in {corpus}: {said}; their paths "
                       "are in the log above")
    if scan.skipped_large_files:
        logger.warning(f"skipped {scan.skipped_large_files} file(s) over "
                       f"{get_settings().max_file_bytes} bytes in {corpus} "
                       "(SITUATE_MAX_FILE_BYTES); their paths are in the log above")
    if scan.skipped_chunks:
        logger.warning(f"skipped {scan.skipped_chunks} chunk(s) too long to store in {corpus}; "
                       "their documents and indexes are in the log above")
    if scan.cleaned_chars:
        logger.warning(f"cleaned {scan.cleaned_chars} NUL byte(s) or lone surrogate(s) in {corpus}")
