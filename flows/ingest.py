"""The ingest flow: stream the corpus in windows; per window, situate → embed → upsert to Milvus.

A corpus of any size goes through in bounded memory: a checking pass first (bad input fails before
anything is written), then the documents are read again lazily and cut into windows of whole
documents (about `window` chunks each). Each window is planned against the collection, then one
task situates, embeds and writes it; at most `IN_FLIGHT` windows are in memory, and a window's
contexts and vectors are gone once it is written. A million chunks make a few hundred task runs.

Incremental by design: a document whose rows already carry the same fingerprint (its text, the
context provider and the chunking) is skipped; a changed one is rewritten and its stale chunks
deleted; with `prune`, documents gone from the corpus are deleted once the corpus is through.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from situate.core.protocols import ChunkStore
from situate.core.records import Document, EmbeddedDocument, Usage, batched
from situate.core.settings import get_settings
from situate.flows.options import check_task_runner
from situate.flows.plan import (
    BATCH_WINDOW_FACTOR,
    IN_FLIGHT,
    Plan,
    fingerprint,
    pipeline_id,
    plan_ingest,
    plan_run,
    plan_table,
    resolve_options,
    windows,
    write_json,
)
from situate.flows.progress import PROGRESS_LINE, reporter, reporting
from situate.flows.progress import bar as progress_bar
from situate.storage.cache import ContextCache
from situate.storage.milvus import open_store
from situate.tasks.contexts.base import ContextResult, Contextualizer, get_contextualizer
from situate.tasks.contexts.cache import situate_corpus_cached, situate_document
from situate.tasks.corpus.load import CorpusScan, scan_corpus, stream_corpus
from situate.tasks.embedders.base import check_embedder, get_embedder, release_embedders


@task(task_run_name="scan-corpus", persist_result=False, cache_policy=NO_CACHE)
def scan_corpus_task(path: str, chunk_size: int, chunk_overlap: int) -> CorpusScan:
    """Prefect task over `scan_corpus`: the checking pass, seen in the UI."""
    return scan_corpus(path, chunk_size, chunk_overlap)


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


PROGRESS_INTERVAL = 1.0  # seconds between progress-artifact updates and progress log lines
DOCUMENTS_SITUATED = "documents situated"  # what window tasks report, document by document
SITUATE_THREADS = 16  # documents of a window situated at once by a paid provider


def make_task_runner(kind: str = "threads", dask_address: str | None = None,
                     milvus_uri: str = "") -> TaskRunner:
    """The runner for the per-window tasks: threads here, or a Dask cluster.

    Dask runs tasks in other processes, which cannot share a Milvus Lite file with the flow
    (one process per file), so it needs a Milvus server URI. Without an address it starts a
    LocalCluster of worker processes for this run; with one it uses that existing cluster.
    """
    check_task_runner(kind, dask_address, milvus_uri)
    if kind == "threads":
        return ThreadPoolTaskRunner(max_workers=IN_FLIGHT)
    from prefect_dask import DaskTaskRunner

    if dask_address:
        return DaskTaskRunner(address=dask_address)
    return DaskTaskRunner(cluster_kwargs={"processes": True, "dashboard_address": None})


# A corpus the CLI checked while checking its input, handed to the flow run it starts in this
# process (taken once): the checking pass runs once per run. Deployment runs check in the flow.
_PREPARED: dict[tuple[str, int, int], CorpusScan] = {}


def prepare_corpus(path: str, chunk_size: int, chunk_overlap: int) -> CorpusScan:
    """Check the corpus now (bad input fails before any flow run starts); the next ingest flow
    run of the same path and chunking in this process uses this check instead of its own."""
    scan = scan_corpus(path, chunk_size, chunk_overlap)
    _PREPARED.clear()
    _PREPARED[(str(path), chunk_size, chunk_overlap)] = scan
    return scan


@dataclass
class WindowResult:
    """What one window's task did: its bill, its rows and the notes its providers left."""

    usage: Usage
    written: int
    chunks: int
    notes: list[str] = field(default_factory=list)


def situate_window(contextualizer: Contextualizer, docs: Sequence[Document],
                   cache: ContextCache | None) -> list[ContextResult]:
    """Contexts of every chunk of `docs`, in order. A provider that batches a whole corpus
    (Message Batches) gets the window in one call; a paid one gets `SITUATE_THREADS` documents at
    once (its own concurrency bounds the requests); a free one works through them in turn."""
    report = reporter(DOCUMENTS_SITUATED)  # the flow's bar, when this runs in its process
    batched = situate_corpus_cached(contextualizer, docs, cache)
    if batched is not None:
        report(len(docs))
        return batched
    if contextualizer.cache_identity() is None or len(docs) == 1:
        results = []
        for d in docs:
            results.append(situate_document(contextualizer, d, cache))
            report(1)
        return results
    with ThreadPoolExecutor(max_workers=min(SITUATE_THREADS, len(docs)),
                            thread_name_prefix="situate") as pool:
        futures = [pool.submit(situate_document, contextualizer, d, cache) for d in docs]
        for f in futures:
            f.add_done_callback(lambda f: f.cancelled() or f.exception() or report(1))
        try:
            return [f.result() for f in futures]
        except BaseException:
            # One document failed: the run stops, and the others stop quickly too.
            contextualizer.abort()
            for f in futures:
                f.cancel()
            raise


@task(task_run_name="window-{label}", persist_result=False, cache_policy=NO_CACHE)
def window_task(contextualizer: Contextualizer, cache: ContextCache | None,
                docs: list[Document], stale_ids: list[str], new_ids: set[str], embedder_spec: str,
                uri: str, token: str, collection: str, pipeline: str,
                label: str = "0") -> WindowResult:
    """Situate, embed and write one window of whole documents. Its contexts and vectors live only
    here: gone when the window is written. Each document's rows are written in one go (never
    half a document), replacing what the collection held for it, stale chunks included."""
    s = get_settings()
    results = situate_window(contextualizer, docs, cache)
    texts = [x.indexed_text for r in results for x in r.situated]
    embedder = get_embedder(embedder_spec)
    # Held as float32 arrays (4 bytes a number; a list of Python floats takes 32), converted
    # batch by batch as the embedder answers.
    parts = [np.asarray(embedder.embed_documents(list(b), batch_size=s.embed_batch),
                        dtype=np.float32) for b in batched(texts, s.embed_batch)]
    vectors = np.concatenate(parts) if parts else np.empty((0, 0), dtype=np.float32)
    del texts, parts
    store: ChunkStore = open_store(uri, token)
    if len(vectors) and not store.exists(collection):
        # Created at the first write: a run that fails before any window is written leaves no
        # empty collection behind. The flow writes its first window alone, so no race here.
        store.ensure_collection(collection, len(vectors[0]), embedder.id)
    documents: list[EmbeddedDocument] = []
    i = 0
    for doc, r in zip(docs, results, strict=True):
        n = len(r.situated)
        documents.append(EmbeddedDocument(doc, fingerprint(doc, pipeline), tuple(r.situated),
                                          vectors[i:i + n]))
        i += n
    del vectors
    written = store.write(collection, documents, batch_size=s.write_batch, absent=new_ids)
    if stale_ids:
        store.delete_ids(collection, stale_ids)
    usage = Usage()
    notes: list[str] = []
    for r in results:
        usage.add(r.usage)
        notes.extend(r.notes)
    usage.contexts_generated = sum(1 for r in results for x in r.situated
                                   if x.source == "generated")
    return WindowResult(usage, written, sum(len(d.chunks) for d in docs), notes)


class _Progress:
    """Progress of the run: a Prefect progress artifact and log lines, at most once a second
    (each artifact update is an API call), and on a terminal, live bars of documents situated
    and chunks embedded and written (`situate.flows.progress`). Documents found unchanged count
    as done in both. Window tasks on this process's threads report each document as it is
    situated; on Dask, a window's documents count when the window comes back. Call `close`."""

    def __init__(self, collection: str, total_chunks: int, total_documents: int) -> None:
        self.total = max(1, total_chunks)
        self.done = 0
        self.started = time.monotonic()
        self.last = 0.0
        self.artifact = create_progress_artifact(
            0.0, key=artifact_key("ingest-progress", collection),
            description=f"chunks situated, embedded and written (or found unchanged) of "
                        f"{total_chunks}")
        self.lock = threading.Lock()
        self.docs_reported = 0  # situated, as reported by window tasks in this process
        self.docs_settled = 0  # skipped as unchanged, or in a window that came back
        self.docs_skipped = 0
        self.docs_shown = 0
        self.windows: deque[int] = deque()  # documents of each window in flight, oldest first
        self.bars = ExitStack()
        self.bar_docs = self.bars.enter_context(progress_bar("documents situated",
                                                             total_documents, "docs"))
        self.bar_chunks = self.bars.enter_context(progress_bar("chunks embedded and written",
                                                               total_chunks, "chunks"))
        self.bars.enter_context(reporting(DOCUMENTS_SITUATED, self.situated))

    def skipped(self, documents: int, chunks: int) -> None:
        """Documents of a window found unchanged: done without a task."""
        with self.lock:
            self.docs_skipped += documents
            self.docs_settled += documents
        self._show_documents()
        self.advance(chunks)

    def submitted(self, documents: int) -> None:
        self.windows.append(documents)

    def window_done(self, chunks: int) -> None:
        """The oldest window in flight came back (windows are settled in order)."""
        with self.lock:
            self.docs_settled += self.windows.popleft() if self.windows else 0
        self._show_documents()
        self.advance(chunks)

    def situated(self, documents: int) -> None:
        """A window task on this process's threads situated `documents` more."""
        with self.lock:
            self.docs_reported += documents
        self._show_documents()

    def _show_documents(self) -> None:
        with self.lock:
            now = max(self.docs_skipped + self.docs_reported, self.docs_settled)
            step, self.docs_shown = now - self.docs_shown, max(now, self.docs_shown)
        if step > 0:
            self.bar_docs(step)

    def advance(self, chunks: int) -> None:
        self.done += chunks
        self.bar_chunks(chunks)
        now = time.monotonic()
        if self.done < self.total and now - self.last < PROGRESS_INTERVAL:
            return
        self.last = now
        update_progress_artifact(self.artifact, min(100.0, 100.0 * self.done / self.total))
        rate = self.done / max(now - self.started, 1e-9)
        # On a terminal the bars say it: the line goes to the run's logs, not the console.
        get_run_logger().info(f"{self.done}/{self.total} chunks ({100 * self.done / self.total:.0f}%), "
                              f"{rate:.0f} chunks/s", extra={PROGRESS_LINE: True})

    def close(self) -> None:
        self.bars.close()


@flow(name="ingest", log_prints=False, task_runner=ThreadPoolTaskRunner(max_workers=IN_FLIGHT))
def ingest_flow(
    corpus: str,
    collection: str,
    context: str | None = None,
    embedder: str | None = None,
    milvus_uri: str | None = None,
    cache_dir: str | None = None,
    model: str | None = None,
    concurrency: int | None = None,
    group_chunks: bool = False,
    batch: bool = False,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    prune: bool = False,
    force: bool = False,
    dry_run: bool = False,
    json_out: str | None = None,
    chars_per_token: float | None = None,
    context_tokens: int | None = None,
) -> dict[str, Any]:
    """Ingest CORPUS into COLLECTION; returns the run summary (also a table artifact), also
    written as JSON to `json_out` when given.

    With `dry_run`, only plans the run (`plan_run`: writes nothing, calls no provider) and returns
    the plan under the summary's keys, recorded as the `ingest-plan-<collection>` table artifact;
    `chars_per_token` and `context_tokens` tune its estimate (see `Assumptions`).
    """
    s = get_settings()
    logger = get_run_logger()
    uri, token, embedder_spec, config, size, overlap = resolve_options(
        collection, context, embedder, milvus_uri, cache_dir, model, concurrency, group_chunks,
        batch, chunk_size, chunk_overlap)
    if dry_run:
        scan = (_PREPARED.pop((str(corpus), size, overlap), None)
                or scan_corpus_task(corpus, size, overlap))
        _warn_skipped(scan, s.max_file_bytes)
        plan = plan_run(corpus, collection, context=config.name, embedder=embedder_spec, milvus_uri=uri,
                        cache_dir=config.state_dir, model=config.model,
                        concurrency=config.concurrency, group_chunks=group_chunks, batch=batch,
                        chunk_size=size, chunk_overlap=overlap, prune=prune, force=force,
                        chars_per_token=chars_per_token, context_tokens=context_tokens, scan=scan)
        create_table_artifact(plan_table(plan), key=artifact_key("ingest-plan", collection),
                              description=f"plan (dry run) of ingesting {corpus} into {collection}")
        write_json(plan, json_out)
        logger.info(f"{collection}: dry run, {plan['requests']} request(s) and "
                    f"${plan['cost_usd']:.4f} expected; nothing written")
        return plan
    timings: dict[str, float] = {}

    t = time.perf_counter()
    scan = _PREPARED.pop((str(corpus), size, overlap), None) or scan_corpus_task(corpus, size, overlap)
    _warn_skipped(scan, s.max_file_bytes)
    contextualizer = get_contextualizer(config)
    name, model_name, _ = check_embedder(embedder_spec)
    embedder_id = f"{name}:{model_name}"
    store: ChunkStore = open_store(uri, token)
    existed = store.exists(collection)
    if existed:
        # Same embedder id, same vectors: no need to load a model when nothing may change.
        store.check_embedder(collection, embedder_id)
    pipeline = pipeline_id(contextualizer, size, overlap)
    timings["scan"] = time.perf_counter() - t

    t = time.perf_counter()
    cache = ContextCache(config.state_dir)
    window = s.window * (BATCH_WINDOW_FACTOR if config.batch else 1)
    totals = Plan()
    usage = Usage()
    written = 0
    progress = _Progress(collection, scan.chunks, scan.documents)
    pending: deque[Any] = deque()
    submitted = 0

    def settle(future: Any) -> None:
        nonlocal written
        result: WindowResult = future.result()
        usage.add(result.usage)
        written += result.written
        for note in result.notes:
            logger.warning(note)
        progress.window_done(result.chunks)

    try:
        for docs in windows(stream_corpus(corpus, size, overlap), window):
            existing = store.fingerprints(collection, [d.id for d in docs]) if existed else {}
            plan = plan_ingest(docs, existing, pipeline, force)
            totals.new += plan.new
            totals.changed += plan.changed
            totals.unchanged += plan.unchanged
            totals.stale_ids.extend(plan.stale_ids)
            skipped = sum(len(d.chunks) for d in docs) - sum(len(d.chunks) for d in plan.process)
            if skipped:
                progress.skipped(len(docs) - len(plan.process), skipped)
            if not plan.process:
                continue
            pending.append(window_task.submit(contextualizer, cache, plan.process, plan.stale_ids,
                                              plan.new_ids, embedder_spec, uri, token, collection,
                                              pipeline, label=str(submitted)))
            progress.submitted(len(plan.process))
            submitted += 1
            # The first window creates the collection: it goes alone. Then at most IN_FLIGHT.
            while pending and (len(pending) >= IN_FLIGHT or submitted == 1):
                settle(pending.popleft())
        while pending:
            settle(pending.popleft())
    except BaseException:
        # A window failed (or the run was stopped): the other windows stop too (on threads; on
        # Dask the workers' own copies finish their documents), and the error goes up only when
        # every task has ended, so none is still using the contextualizer, the cache or the
        # model when the flow closes them. What was written stays: the next run goes on from it.
        contextualizer.abort()
        wait(list(pending))
        raise
    finally:
        progress.close()
        contextualizer.close()
        # No window is left to embed: let a local model's process exit now.
        release_embedders()
    deleted = len(totals.stale_ids)
    if prune and existed:
        gone = sorted(set(store.document_ids(collection)) - scan.ids)
        totals.deleted_docs = gone
        deleted += store.delete_documents(collection, gone)
    timings["situate+embed+write"] = time.perf_counter() - t

    summary = {
        "collection": collection,
        "corpus": corpus,
        "context": config.name,
        "embedder": embedder_id,
        "documents": scan.documents,
        "new": totals.new,
        "changed": totals.changed,
        "unchanged": totals.unchanged,
        "deleted_documents": len(totals.deleted_docs),
        "skipped_empty": scan.skipped_empty,
        "skipped_large_files": scan.skipped_large_files,
        "skipped_chunks": scan.skipped_chunks,
        "cleaned_chars": scan.cleaned_chars,
        "chunks_written": written,
        "chunks_deleted": deleted,
        "rows": store.count(collection) if existed or written else 0,
        "contexts_generated": usage.contexts_generated,
        "contexts_from_cache": usage.contexts_from_cache,
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_write_tokens": usage.cache_creation_input_tokens,
        "cache_read_tokens": usage.cache_read_input_tokens,
        "prompt_cache_hit_ratio": round(usage.prompt_cache_hit_ratio, 4),
        "cost_usd": round(usage.cost_usd, 6),
        "seconds": {k: round(v, 3) for k, v in timings.items()},
    }
    create_table_artifact(
        [{"metric": k, "value": str(v)} for k, v in summary.items() if k != "seconds"]
        + [{"metric": f"seconds {k}", "value": f"{v:.2f}"} for k, v in timings.items()],
        key=artifact_key("ingest-summary", collection),
        description=f"ingest of {corpus} into {collection}")
    write_json(summary, json_out)
    logger.info(f"{collection}: {written} chunks written, {summary['rows']} rows, "
                f"{totals.unchanged} unchanged document(s) skipped")
    return summary


def _warn_skipped(scan: CorpusScan, max_file_bytes: int) -> None:
    logger = get_run_logger()
    corpus = scan.path
    if scan.skipped_empty:
        logger.warning(f"skipped {scan.skipped_empty} empty document(s) in {corpus}")
    if scan.skipped_files:
        logger.warning(f"skipped {scan.skipped_files} binary or non-text file(s) in {corpus}")
    if scan.skipped_large_files:
        logger.warning(f"skipped {scan.skipped_large_files} file(s) over {max_file_bytes} bytes "
                       f"in {corpus} (SITUATE_MAX_FILE_BYTES); their paths are in the log above")
    if scan.skipped_chunks:
        logger.warning(f"skipped {scan.skipped_chunks} chunk(s) too long to store in {corpus}; "
                       "their documents and indexes are in the log above")
    if scan.cleaned_chars:
        logger.warning(f"cleaned {scan.cleaned_chars} NUL byte(s) or lone surrogate(s) in {corpus}")
