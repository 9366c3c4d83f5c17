"""The ingest flow: load → situate (fanned out per document) → embed in batches → upsert to Milvus.

Incremental by design: a document whose rows already carry the same fingerprint (its text, the
context provider and the chunking) is skipped; a changed one is rewritten and its stale chunks
deleted; with `prune`, documents gone from the corpus are deleted.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, get_run_logger, task, unmapped
from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.futures import wait
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from situate.core.protocols import ChunkStore
from situate.core.records import Document, EmbeddedDocument, Situated, Usage, sha256
from situate.core.settings import get_settings
from situate.flows.options import check_ingest_options, check_task_runner
from situate.storage.cache import ContextCache
from situate.storage.milvus import open_store
from situate.tasks.contextualize import (
    ContextConfig,
    ContextResult,
    Contextualizer,
    get_contextualizer,
    situate_corpus_cached,
    situate_task,
)
from situate.tasks.embed import check_embedder, get_embedder, release_embedders
from situate.tasks.load import Corpus, load_corpus, load_corpus_task


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


def fingerprint(doc: Document, pipeline: str) -> str:
    """What a document's rows were built from: its text and the pipeline that situated them."""
    return sha256(f"{doc.hash}\x1f{pipeline}")


def pipeline_id(contextualizer: Contextualizer, chunk_size: int, chunk_overlap: int) -> str:
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
    deleted_docs: list[str] = field(default_factory=list)


PROGRESS_INTERVAL = 1.0  # seconds between progress-artifact updates


def make_task_runner(kind: str = "threads", dask_address: str | None = None,
                     milvus_uri: str = "") -> TaskRunner:
    """The runner for the per-document and per-batch tasks: threads here, or a Dask cluster.

    Dask runs tasks in other processes, which cannot share a Milvus Lite file with the flow
    (one process per file), so it needs a Milvus server URI. Without an address it starts a
    LocalCluster of worker processes for this run; with one it uses that existing cluster.
    """
    check_task_runner(kind, dask_address, milvus_uri)
    if kind == "threads":
        return ThreadPoolTaskRunner(max_workers=16)
    from prefect_dask import DaskTaskRunner

    if dask_address:
        return DaskTaskRunner(address=dask_address)
    return DaskTaskRunner(cluster_kwargs={"processes": True, "dashboard_address": None})


# A corpus the CLI parsed while checking its input, handed to the flow run it starts in this
# process (taken once): the corpus is parsed once per run. Deployment runs parse it in the flow.
_PREPARED: dict[tuple[str, int, int], Corpus] = {}


def prepare_corpus(path: str, chunk_size: int, chunk_overlap: int) -> Corpus:
    """Parse and check the corpus now (bad input fails before any flow run starts); the next
    ingest flow run of the same path and chunking in this process uses it instead of parsing."""
    corpus = load_corpus(path, chunk_size, chunk_overlap)
    _PREPARED.clear()
    _PREPARED[(str(path), chunk_size, chunk_overlap)] = corpus
    return corpus


def plan_ingest(corpus: Corpus, existing: dict[str, dict[str, str]], pipeline: str, prune: bool,
                force: bool) -> Plan:
    """Compare the corpus with the rows already stored (doc_id -> {chunk id: fingerprint})."""
    plan = Plan()
    for doc in corpus.documents:
        rows = existing.get(doc.id)
        fp = fingerprint(doc, pipeline)
        wanted = {c.id for c in doc.chunks}
        if rows is None:
            plan.new += 1
        elif not force and set(rows) == wanted and set(rows.values()) == {fp}:
            plan.unchanged += 1
            continue
        else:
            plan.changed += 1
            plan.stale_ids.extend(sorted(set(rows) - wanted))
        plan.process.append(doc)
    if prune:
        present = {d.id for d in corpus.documents}
        plan.deleted_docs = sorted(set(existing) - present)
    return plan


@task(task_run_name="embed-{label}", persist_result=False)
def embed_task(embedder_spec: str, results: list[ContextResult],
               label: str = "batch") -> list[list[float]]:
    """Embed one batch of situated documents (context + chunk of each chunk)."""
    texts = [x.indexed_text for r in results for x in r.situated]
    return get_embedder(embedder_spec).embed_documents(texts)


@task(task_run_name="write-{label}", persist_result=False)
def write_task(uri: str, token: str, collection: str, rows_meta: list[tuple[Document, list[Situated]]],
               vectors: list[list[float]], pipeline: str, label: str = "batch") -> int:
    """Write one embedded batch (whole documents, so a document is never half-written); the store
    replaces each document's rows, stale chunks of a changed one included."""
    documents: list[EmbeddedDocument] = []
    i = 0
    for doc, situated in rows_meta:
        documents.append(EmbeddedDocument(doc, fingerprint(doc, pipeline), tuple(situated),
                                          vectors[i:i + len(situated)]))
        i += len(situated)
    store: ChunkStore = open_store(uri, token)
    return store.write(collection, documents, batch_size=get_settings().write_batch)


def _situate_and_embed(contextualizer: Contextualizer, docs: Sequence[Document],
                       cache: ContextCache | None, collection: str, embedder_spec: str,
                       batch_size: int) -> tuple[list[ContextResult], list[Batch]]:
    """Situate every document and embed them in batches, each batch as soon as it is situated.

    Batches are whole documents (about `batch_size` chunks), fixed before any context exists, so
    the same corpus always gives the same batches. Per batch, the documents' contexts are mapped
    (one task each) and the batch's embedding task is submitted right behind them: it waits for
    those contexts only, so the embedder works while later documents are still being situated.
    Providers that batch a whole corpus (Message Batches) answer in one call; then every batch
    is embedded from their answer.
    """
    logger = get_run_logger()
    groups = [[d for d, _ in g] for g in _batches_of_documents([(d, d.chunks) for d in docs],
                                                                 batch_size)]
    corpus_results = situate_corpus_cached(contextualizer, docs, cache) if docs else None
    batches: list[Batch] = []
    if corpus_results is not None:
        it = iter(corpus_results)
        for n, group in enumerate(groups):
            results = [next(it) for _ in group]
            batches.append(Batch(group, embed_task.submit(embedder_spec, results, label=str(n))))
        return corpus_results, batches

    progress = create_progress_artifact(
        0.0, key=artifact_key("ingest-progress", collection),
        description=f"documents situated of {len(docs)}")
    futures: list[Any] = []
    for n, group in enumerate(groups):
        mapped = situate_task.map(unmapped(contextualizer), group, unmapped(cache))
        futures.extend(mapped)
        batches.append(Batch(group, embed_task.submit(embedder_spec, list(mapped), label=str(n))))
    results: list[ContextResult] = []
    step = max(1, len(docs) // 20)
    last = time.monotonic()
    try:
        for n, f in enumerate(futures, start=1):
            results.append(f.result())
            # Every 5%, at most once a second: each update is an API call, and a fast corpus
            # would otherwise spend more time reporting progress than making it.
            if n == len(docs) or (n % step == 0 and time.monotonic() - last >= PROGRESS_INTERVAL):
                update_progress_artifact(progress, 100.0 * n / len(docs))
                last = time.monotonic()
    except BaseException:
        # A document failed: the run stops. The other documents' tasks stop too (on threads; on
        # Dask the workers' own copies finish their documents), and the error goes up only when
        # every task has ended, so none is still using the contextualizer, the cache or the
        # model when the flow closes them.
        contextualizer.abort()
        wait([*futures, *(b.vectors for b in batches)])
        raise
    for r in results:
        for note in r.notes:
            logger.warning(note)
    return results, batches


@dataclass
class Batch:
    """One embedding batch: whole documents, and the future of their vectors."""

    docs: list[Document]
    vectors: Any  # PrefectFuture[list[list[float]]]


@flow(name="ingest", log_prints=False, task_runner=ThreadPoolTaskRunner(max_workers=16))
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
) -> dict[str, Any]:
    """Ingest CORPUS into COLLECTION; returns the run summary (also a table artifact)."""
    s = get_settings()
    logger = get_run_logger()
    uri = milvus_uri or s.milvus_uri
    token = s.milvus_token.get_secret_value()
    embedder_spec = embedder or s.embedder
    config = ContextConfig(
        name=context or s.default_context(), model=model or s.anthropic_model,
        concurrency=concurrency or s.concurrency, group_chunks=group_chunks, batch=batch,
        state_dir=cache_dir or s.cache_dir)
    size, overlap = chunk_size or s.chunk_size, chunk_overlap or s.chunk_overlap
    check_ingest_options(collection, config.name, embedder_spec)
    timings: dict[str, float] = {}

    t = time.perf_counter()
    loaded = _PREPARED.pop((str(corpus), size, overlap), None) or load_corpus_task(corpus, size, overlap)
    if loaded.skipped_empty:
        logger.warning(f"skipped {loaded.skipped_empty} empty document(s) in {corpus}")
    if loaded.skipped_files:
        logger.warning(f"skipped {loaded.skipped_files} binary or non-text file(s) in {corpus}")
    if loaded.skipped_large_files:
        logger.warning(f"skipped {loaded.skipped_large_files} file(s) over {s.max_file_bytes} bytes "
                       f"in {corpus} (SITUATE_MAX_FILE_BYTES); their paths are in the log above")
    if loaded.skipped_chunks:
        logger.warning(f"skipped {loaded.skipped_chunks} chunk(s) too long to store in {corpus}; "
                       "their documents and indexes are in the log above")
    if loaded.cleaned_chars:
        logger.warning(f"cleaned {loaded.cleaned_chars} NUL byte(s) or lone surrogate(s) in {corpus}")
    contextualizer = get_contextualizer(config)
    name, model_name, _ = check_embedder(embedder_spec)
    embedder_id = f"{name}:{model_name}"
    store: ChunkStore = open_store(uri, token)
    existing: dict[str, dict[str, str]] = {}
    if store.exists(collection):
        # Same embedder id, same vectors: no need to load a model when nothing may change.
        store.check_embedder(collection, embedder_id)
        existing = store.fingerprints(collection)
    pipeline = pipeline_id(contextualizer, size, overlap)
    plan = plan_ingest(loaded, existing, pipeline, prune, force)
    timings["load"] = time.perf_counter() - t

    t = time.perf_counter()
    cache = ContextCache(config.state_dir)
    try:
        results, batches = _situate_and_embed(contextualizer, plan.process, cache, collection,
                                              embedder_spec, s.embed_batch)
    finally:
        contextualizer.close()
    usage = Usage()
    for r in results:
        usage.add(r.usage)
    usage.contexts_generated = sum(1 for r in results for x in r.situated if x.source == "generated")
    timings["situate"] = time.perf_counter() - t

    t = time.perf_counter()
    if not store.exists(collection):
        # Created only now that every context exists: a failed run leaves no empty collection.
        emb = get_embedder(embedder_spec)
        store.ensure_collection(collection, emb.dim, emb.id)
    situated = dict(zip((d.id for d in plan.process), (r.situated for r in results), strict=True))
    writes = [write_task.submit(uri, token, collection, [(d, situated[d.id]) for d in b.docs],
                                b.vectors, pipeline, label=str(n)) for n, b in enumerate(batches)]
    try:
        for b in batches:
            b.vectors.wait()
    finally:
        # Every embedding task has ended, so none can load the model again: let a local model's
        # process exit while the last writes finish. (After a failed context the flow stops
        # before this; the process goes when this one does.)
        release_embedders()
    written = sum(f.result() for f in writes)
    # The writes replaced each changed document's rows, its stale chunks (plan.stale_ids) included.
    deleted = len(plan.stale_ids) + store.delete_documents(collection, plan.deleted_docs)
    timings["embed+write"] = time.perf_counter() - t

    summary = {
        "collection": collection,
        "corpus": corpus,
        "context": config.name,
        "embedder": embedder_id,
        "documents": len(loaded.documents),
        "new": plan.new,
        "changed": plan.changed,
        "unchanged": plan.unchanged,
        "deleted_documents": len(plan.deleted_docs),
        "skipped_empty": loaded.skipped_empty,
        "skipped_large_files": loaded.skipped_large_files,
        "skipped_chunks": loaded.skipped_chunks,
        "cleaned_chars": loaded.cleaned_chars,
        "chunks_written": written,
        "chunks_deleted": deleted,
        "rows": store.count(collection),
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
    logger.info(f"{collection}: {written} chunks written, {summary['rows']} rows, "
                f"{plan.unchanged} unchanged document(s) skipped")
    return summary


def _batches_of_documents(pairs: Sequence[tuple[Document, list[Situated]]], size: int):
    """Group whole documents into batches of about `size` chunks (a large document alone)."""
    group: list[tuple[Document, list[Situated]]] = []
    count = 0
    for doc, situated in pairs:
        if group and count + len(situated) > size:
            yield group
            group, count = [], 0
        group.append((doc, situated))
        count += len(situated)
    if group:
        yield group

