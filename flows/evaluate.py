"""The evaluate flow: run every query of an evaluation set through each retrieval mode and record
Pass@k, latency per query and the failures (each golden chunk's rank; the queries every mode
misses) as Prefect artifacts (a table, and a Markdown report with its chart, compared with the
previous run), a JSON report and a PNG chart under the results directory, and the flow's return
value (`Evaluation`). Several collections are evaluated in turn and compared in one more chart.
Every query goes through `situate.api.Retriever`, the search an app uses; `search` answers one
query (`situate search`), without a flow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from situate.api.retriever import Retriever
from situate.core.records import Hit
from situate.flows.artifacts import artifact_key
from situate.flows.progress import bar
from situate.pipeline.options import EvaluateOptions
from situate.pipeline.resources import Resources, run_resources
from situate.storage import import_store_clients
from situate.tasks.rerankers.base import Reranker, get_reranker
from situate.tasks.retrieval.chart import pass_at_k_chart
from situate.tasks.retrieval.evaluation import (
    CollectionEvaluation,
    Comparison,
    Evaluation,
    Latency,
    QueryRanks,
)
from situate.tasks.retrieval.failures import failure_analysis
from situate.tasks.retrieval.ir import ir_metrics, write_trec
from situate.tasks.retrieval.metrics import (
    EvalQuery,
    golden_ranks,
    latency_ms,
    load_eval_set,
    pass_at_k_of_ranks,
)
from situate.tasks.retrieval.report import (
    comparison_markdown,
    log_line,
    markdown_report,
    pass_at_k_table,
)
from situate.tasks.retrieval.stats import compare, intervals_of, mode_pairs

# Milvus's client configures logging when first imported: imported with the flow, before any run
# of this process starts, never during one (`situate.storage.client.import_client_library`).
import_store_clients()


@task(task_run_name="retrieve-{collection}-{mode}", persist_result=False, cache_policy=NO_CACHE)
def retrieve_task(retriever: Retriever, collection: str, queries: list[str], mode: str, limit: int,
                  advance: Callable[[int], None] | None = None,
                  keep: Callable[[int, list[Hit]], list[Hit]] | None = None,
                  batch: int = 1) -> tuple[list[list[Hit]], list[float]]:
    """One mode's hits for every query through `retriever`, `batch` queries at a time
    (`Retriever.search_many`: each ranks as `Retriever.search` ranks it alone, as an app's query
    is), and each query's seconds; `advance(n)` as each batch of n finishes (the terminal's
    progress bar). With `keep`, what it returns of query i's hits is kept instead of all of them
    (memory bounded by the batch and what the caller keeps, not by the set). A query's seconds
    are its batch's wall time shared among its queries: with `batch` 1, what a user of a warm
    retriever waits (its embedding and search, not the model's load: `Retriever.warm`, before)."""
    seconds: list[float] = []
    hits: list[list[Hit]] = []
    for start in range(0, len(queries), batch):
        some = queries[start:start + batch]
        started = time.perf_counter()
        found = retriever.search_many(some, limit, mode, batch=batch)
        each = (time.perf_counter() - started) / len(some)
        for i, one in enumerate(found, start):
            seconds.append(each)
            hits.append(keep(i, one) if keep is not None else one)
        if advance is not None:
            advance(len(some))
    return hits, seconds


@flow(name="evaluate", log_prints=False)
def evaluate_flow(options: EvaluateOptions) -> Evaluation:
    """Measure Pass@k and latency of a collection on an evaluation set for each retrieval mode,
    and list the queries every mode misses; several collections, comma-separated, are evaluated
    one after the other and compared in one chart."""
    names = options.names
    with run_resources() as resources:
        queries = resources.eval_set or load_eval_set(options.eval_set)
        resources.eval_set = None  # taken once
        for name in names[1:]:  # a missing collection fails before the first is evaluated
            resources.existing_store(options.milvus_uri, name)
        results_dir = Path(options.results_dir)
        results_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        reranker = get_reranker(options.reranker) if "rerank" in options.modes else None
        results: list[CollectionEvaluation] = []
        try:
            with bar("queries evaluated", total=len(queries) * len(options.modes) * len(names),
                     unit="queries") as advance:
                for name in names:
                    result = _evaluate_collection(options, name, queries, resources, reranker,
                                                  advance)
                    _record(result, results_dir, stamp)
                    results.append(result)
                    get_run_logger().info(log_line(result))
        finally:
            resources.embedders.release()
    evaluation = Evaluation(eval_set=options.eval_set, queries=len(queries), collections=results,
                            comparisons=_collections_compared(results, options.k))
    if evaluation.several:
        chart = pass_at_k_chart({r.collection: r.pass_at_k for r in results}, options.k,
                                f"Pass@k by collection: {len(queries)} queries",
                                {r.collection: r.intervals for r in results},
                                evaluation.comparisons)
        path = results_dir / f"compare-{'-'.join(names)}-{stamp}.png"
        path.write_bytes(chart)
        create_markdown_artifact(comparison_markdown(evaluation, chart),
                                 key=artifact_key("evaluation-comparison", *names),
                                 description=f"Pass@k of {', '.join(names)} compared")
        evaluation.chart = str(path)
    else:
        evaluation.chart = results[0].chart
        chart = Path(evaluation.chart).read_bytes()
    evaluation.write_json(options.json_out, chart)
    return evaluation


def _evaluate_collection(options: EvaluateOptions, collection: str, queries: list[EvalQuery],
                         resources: Resources, reranker: Reranker | None,
                         advance: Callable[[int], None]) -> CollectionEvaluation:
    """Every mode over one collection: Pass@k, latency, ranks, failures."""
    store = resources.existing_store(options.milvus_uri, collection)
    retriever = Retriever.over(store, collection, embedders=resources.embedders,
                               mode=options.modes[0], fusion=options.fusion, reranker=reranker,
                               embedder=options.embedder, backend=options.backend,
                               device=options.device)
    retriever.warm(*options.modes)  # the model loaded and warmed: no query times its load
    spec = retriever.embedder
    started = time.perf_counter()
    texts = [q.query for q in queries]
    limit = max(options.k)
    scores: dict[str, dict[str, float]] = {}
    latency: dict[str, Latency] = {}
    ranks: dict[str, list[list[int | None]]] = {}
    firsts: dict[str, list[Hit | None]] = {}
    ids: dict[str, list[list[str]]] = {}
    for mode in options.modes:
        mode_ranks: list[list[int | None]] = []
        mode_ids: list[list[str]] = ids.setdefault(mode, [])

        def keep(i: int, hs: list[Hit], mode_ranks: list[list[int | None]] = mode_ranks,
                 mode_ids: list[list[str]] = mode_ids) -> list[Hit]:
            """A query's golden ranks and hit ids, as its hits arrive; its first hit kept (the
            failures')."""
            mode_ranks.append(golden_ranks(queries[i].golden, [(h.doc_id, h.text) for h in hs]))
            mode_ids.append([h.id for h in hs])
            return hs[:1]

        hits, seconds = retrieve_task(retriever, collection, texts, mode, limit, advance, keep,
                                      options.query_batch)
        ranks[mode] = mode_ranks
        scores[mode] = {str(k): round(pass_at_k_of_ranks(ranks[mode], k), 2) for k in options.k}
        latency[mode] = Latency(**latency_ms(seconds))
        firsts[mode] = [hs[0] if hs else None for hs in hits]
    if options.trec_dir:
        write_trec(options.trec_dir, collection, ranks, limit)
    per_query = [QueryRanks(query=q.query, golden=[g.doc_id or g.source for g in q.golden],
                            ranks={m: ranks[m][i] for m in options.modes},
                            first={m: _doc_id(firsts[m][i]) for m in options.modes},
                            hits={m: ids[m][i] for m in options.modes})
                 for i, q in enumerate(queries)]
    return CollectionEvaluation(
        collection=collection, queries=len(queries), pass_at_k=scores, latency_ms=latency,
        intervals=intervals_of(ranks, options.k),
        metrics={mode: ir_metrics(mode_ranks, options.k) for mode, mode_ranks in ranks.items()},
        differences=[_compared(a, b, k, ranks[a], ranks[b]) for a, b in mode_pairs(options.modes)
                     for k in options.k],
        failures=failure_analysis(queries, ranks, firsts, limit), eval_set=options.eval_set,
        embedder=spec, reranker=options.reranker if "rerank" in options.modes else None,
        seconds=round(time.perf_counter() - started, 2),
        finished=datetime.now(UTC).isoformat(timespec="seconds"), per_query=per_query)


def _compared(a: str, b: str, k: int, a_ranks: list[list[int | None]],
              b_ranks: list[list[int | None]]) -> Comparison:
    d = compare(a_ranks, b_ranks, k)
    return Comparison(a=a, b=b, k=k, difference=round(d.mean, 2), low=round(d.low, 2),
                      high=round(d.high, 2), p=round(d.p, 4))


def _collections_compared(results: list[CollectionEvaluation], ks: list[int]) -> list[Comparison]:
    """Each later collection against the first, mode by mode, on the same queries."""
    first = results[0]
    out = []
    for other in results[1:]:
        for mode in first.pass_at_k:
            if mode not in other.pass_at_k:
                continue
            a = [q.ranks[mode] for q in first.per_query]
            b = [q.ranks[mode] for q in other.per_query]
            for k in ks:
                out.append(_compared(f"{mode} · {first.collection}",
                                     f"{mode} · {other.collection}", k, a, b))
    return out


def _doc_id(hit: Hit | None) -> str | None:
    return hit.doc_id if hit is not None else None


def _record(result: CollectionEvaluation, results_dir: Path, stamp: str) -> None:
    """One collection's artifacts (table; Markdown with its chart) and history files (JSON, PNG)."""
    collection = result.collection
    previous = CollectionEvaluation.previous(results_dir, collection)
    chart = pass_at_k_chart({collection: result.pass_at_k}, result.ks,
                            f"Pass@k on {collection}: {result.queries} queries, {result.embedder}",
                            {collection: result.intervals}, result.differences)
    create_table_artifact(pass_at_k_table(result).to_dicts(),
                          key=artifact_key("pass-at-k", collection),
                          description=f"Pass@k (%) of {collection} on {result.queries} queries")
    create_markdown_artifact(markdown_report(result, previous, chart),
                             key=artifact_key("evaluation-report", collection),
                             description=f"evaluation of {collection}")
    stem = results_dir / f"evaluate-{collection}-{stamp}"
    stem.with_suffix(".png").write_bytes(chart)
    result.chart = str(stem.with_suffix(".png"))
    result.write_history(stem)

