"""The evaluate flow: run every query of an evaluation set through each retrieval mode and record
Pass@k, latency per query and the failures (each golden chunk's rank; the queries every mode
misses) as Prefect artifacts (a table, and a Markdown report with its chart, compared with the
previous run), a JSON report and a PNG chart under the results directory, and the flow's return
value. Several collections are evaluated in turn and compared in one more chart.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from situate.core.errors import InputError
from situate.core.records import Hit
from situate.core.settings import get_settings
from situate.flows.ingest import artifact_key
from situate.flows.options import check_evaluate_options, split_collections
from situate.flows.progress import bar
from situate.storage.milvus import open_existing_store, open_store
from situate.tasks.embedders.base import Embedder, get_embedder, release_embedders
from situate.tasks.rerankers.base import Reranker, get_reranker
from situate.tasks.retrieval.chart import pass_at_k_chart
from situate.tasks.retrieval.metrics import (
    EvalQuery,
    Golden,
    golden_ranks,
    latency_ms,
    load_eval_set,
    miss_sources,
    pass_at_k_of_ranks,
)
from situate.tasks.retrieval.search import retrieve

FAILURES_LISTED = 20  # failures listed in the Markdown report; the JSON keeps every rank
SNIPPET_CHARS = 160

# An evaluation set the CLI checked, handed to the flow run it starts in this process (taken
# once), as `ingest.prepare_corpus` hands over a corpus: read once per command, and not made a
# flow parameter (the flow-run record would keep every golden chunk). Deployment runs read it.
_PREPARED: dict[str, list[EvalQuery]] = {}


def prepare_eval_set(path: str) -> list[EvalQuery]:
    """Read and check the evaluation set now (a bad one fails before any flow run starts); the
    next evaluate flow run of the same path in this process uses it instead of reading it again."""
    queries = load_eval_set(path)
    _PREPARED.clear()
    _PREPARED[str(path)] = queries
    return queries


def pass_at_k_table(result: dict[str, Any]) -> pl.DataFrame:
    """One row per mode, one `pass@k` column per k."""
    rows = [{"mode": mode, **{f"pass@{k}": v for k, v in scores.items()}}
            for mode, scores in result["pass_at_k"].items()]
    return pl.DataFrame(rows)


def _collections(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-collection results of a flow result: itself, or each of several collections'."""
    return list(result["collections"].values()) if "collections" in result else [result]


def summary_text(result: dict[str, Any]) -> str:
    """What `situate evaluate` prints: Pass@k and latency per mode (and collection), then how many
    queries every mode missed and where the missed golden chunks were lost."""
    rows = []
    for r in _collections(result):
        for mode, scores in r["pass_at_k"].items():
            latency = r.get("latency_ms", {}).get(mode, {})
            rows.append({"collection": r["collection"], "mode": mode,
                         **{f"pass@{k}": v for k, v in scores.items()},
                         "median ms": latency.get("median"), "p95 ms": latency.get("p95")})
    table = pl.DataFrame(rows)
    several = "collections" in result
    if not several:
        table = table.drop("collection")
    with pl.Config(tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=2, tbl_rows=-1):
        lines = [f"Pass@k (%) on {result['collection']}, {result['queries']} queries; latency per "
                 f"query (embed + search):\n{table}"]
    for r in _collections(result):
        f = r.get("failures")
        if not f:
            continue
        where = f"{r['collection']}: " if several else ""
        line = (f"{where}{f['queries_missed']} of {r['queries']} queries missed by every mode "
                f"(no golden chunk in any top {f['k']})")
        if f.get("sources"):
            s = f["sources"]
            line += (f"; of {s['golden_chunks']} golden chunks, never retrieved by dense only "
                     f"{s['dense_only']}, by BM25 only {s['bm25_only']}, by both {s['both']}")
        lines.append(line)
    if result.get("chart"):
        lines.append(f"chart: {result['chart']}")
    return "\n".join(lines)


def _previous(results_dir: Path, collection: str) -> dict[str, Any] | None:
    history = sorted(results_dir.glob(f"evaluate-{collection}-*.json"))
    if not history:
        return None
    try:
        return json.loads(history[-1].read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _one_line(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _golden_doc(g: Golden) -> dict[str, str]:
    return {"doc_id": g.doc_id, "source": g.source}


def _hit_doc(hit: Hit, paths: dict[str, str]) -> dict[str, str]:
    """A hit's document for a report: its id, its path (its own metadata's, else the one the
    evaluation set gives its original id), and its original id when the corpus kept one."""
    meta = hit.metadata or {}
    original = str(meta.get("original_uuid") or "")
    source = meta.get("relative_path") or meta.get("path") or paths.get(original) or paths.get(hit.doc_id)
    return {"doc_id": hit.doc_id, "source": str(source or ""), "original_id": original}


def failure_analysis(queries: Sequence[EvalQuery], ranks: dict[str, list[list[int | None]]],
                     firsts: dict[str, list[Hit | None]], k: int,
                     listed: int = FAILURES_LISTED) -> dict[str, Any]:
    """Where retrieval fails, at the largest k.

    A query is missed by a mode when none of its golden chunks is in that mode's top k (its
    Pass@k is 0); the queries every mode missed are counted and the first `listed` of them kept,
    each with its golden documents and what ranked first instead (hybrid's first hit when hybrid
    ran). `sources` counts golden chunks, not queries, by which of dense and BM25 never retrieved
    them in its top k (only when both modes ran).
    """
    modes = list(ranks)
    missed = [i for i in range(len(queries))
              if all(all(r is None for r in ranks[m][i]) for m in modes)]
    first_mode = "hybrid" if "hybrid" in firsts else modes[0]
    paths = {g.doc_id: g.source for q in queries for g in q.golden if g.doc_id and g.source}
    examples = []
    for i in missed[:listed]:
        hit = firsts[first_mode][i]
        first = None
        if hit is not None:
            doc = _hit_doc(hit, paths)
            same = any(g.doc_id in (hit.doc_id, doc["original_id"]) for g in queries[i].golden)
            first = {**doc, "same_document": same, "snippet": _one_line(hit.text)}
        examples.append({
            "query": queries[i].query,
            "golden": [_golden_doc(g) for g in queries[i].golden],
            "first_mode": first_mode,
            "first": first,
        })
    sources = (miss_sources(ranks["dense"], ranks["bm25"])
               if "dense" in ranks and "bm25" in ranks else None)
    return {"k": k, "queries_missed": len(missed), "listed": examples, "sources": sources}


def _doc_label(doc: dict[str, str]) -> str:
    doc_id = doc["doc_id"] if len(doc["doc_id"]) <= 24 else doc["doc_id"][:12] + "…"
    if doc.get("source") and doc["source"] != doc["doc_id"]:
        return f"`{doc['source']}` ({doc_id})"
    return f"`{doc_id}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def failures_markdown(f: dict[str, Any], queries: int) -> list[str]:
    lines = ["", f"## Queries every mode missed at k = {f['k']}", ""]
    if not f["queries_missed"]:
        return lines + [f"None: every query has a golden chunk in some mode's top {f['k']}."]
    lines += [f"{f['queries_missed']} of {queries} queries have no golden chunk in the top {f['k']} "
              "of any mode.", "",
              f"| query | golden document | ranked first instead ({f['listed'][0]['first_mode']}) |",
              "|---|---|---|"]
    for e in f["listed"]:
        golden = ", ".join(dict.fromkeys(_doc_label(g) for g in e["golden"]))
        first = ("nothing" if e["first"] is None
                 else f"{_doc_label(e['first'])}"
                 + (" (same document)" if e["first"].get("same_document") else "")
                 + f": {_cell(e['first']['snippet'])}")
        lines.append(f"| {_cell(e['query'])} | {golden} | {first} |")
    more = f["queries_missed"] - len(f["listed"])
    if more > 0:
        lines += ["", f"… and {more} more (every rank is in the JSON report, under `per_query`)."]
    return lines


def sources_markdown(s: dict[str, int] | None, k: int) -> list[str]:
    if not s:
        return []
    found = s["golden_chunks"] - s["dense_only"] - s["bm25_only"] - s["both"]
    return ["", f"## Where golden chunks are lost (top {k})", "",
            "Counted on golden chunks, not queries: which retriever never ranked each one in its "
            f"top {k}.", "",
            "| golden chunk | count |", "|---|---|",
            f"| found by both dense and BM25 | {found} |",
            f"| missed by dense only (BM25 found it) | {s['dense_only']} |",
            f"| missed by BM25 only (dense found it) | {s['bm25_only']} |",
            f"| missed by both | {s['both']} |",
            f"| all golden chunks | {s['golden_chunks']} |"]


def _image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def markdown_report(result: dict[str, Any], previous: dict[str, Any] | None,
                    chart: bytes | None = None) -> str:
    table = pass_at_k_table(result)
    lines = [f"# Pass@k on `{result['collection']}`", "",
             f"{result['queries']} queries from `{result['eval_set']}`, embedder "
             f"`{result['embedder']}`, {result['seconds']:.1f} s.", ""]
    header = "| mode | " + " | ".join(c for c in table.columns if c != "mode") + " |"
    latency = result.get("latency_ms") or {}
    if latency:
        header += " median ms | p95 ms |"
    lines += [header, "|" + "---|" * (len(table.columns) + (2 if latency else 0))]
    for row in table.iter_rows(named=True):
        cells = []
        for col in table.columns[1:]:
            k = col.split("@")[1]
            cell = f"{row[col]:.2f}"
            before = (previous or {}).get("pass_at_k", {}).get(row["mode"], {}).get(k)
            if before is not None:
                cell += f" ({row[col] - before:+.2f})"
            cells.append(cell)
        if latency:
            ms = latency.get(row["mode"], {})
            cells += [f"{ms.get('median', 0):.1f}", f"{ms.get('p95', 0):.1f}"]
        lines.append(f"| {row['mode']} | " + " | ".join(cells) + " |")
    if previous:
        lines += ["", f"In brackets: change since the previous run ({previous.get('finished', '?')})."]
    else:
        lines += ["", "First evaluation of this collection: nothing to compare with yet."]
    if latency:
        lines += ["", "Latency: wall time per query, each embedded alone as a user's would be, "
                  "then searched (and reranked); median and 95th percentile."]
    if chart:
        lines += ["", _image(chart, f"Pass@k of {result['collection']} per mode and k")]
    if result.get("failures"):
        lines += failures_markdown(result["failures"], result["queries"])
        lines += sources_markdown(result["failures"]["sources"], result["failures"]["k"])
    return "\n".join(lines)


def comparison_markdown(results: list[dict[str, Any]], chart: bytes) -> str:
    """The Markdown artifact of a multi-collection evaluation: one table, one chart."""
    first = results[0]
    ks = list(next(iter(first["pass_at_k"].values())))
    names = ", ".join(f"`{r['collection']}`" for r in results)
    lines = [f"# Pass@k compared: {names}", "",
             f"{first['queries']} queries from `{first['eval_set']}`.", "",
             "| collection | mode | " + " | ".join(f"pass@{k}" for k in ks) + " | median ms | p95 ms |",
             "|" + "---|" * (len(ks) + 4)]
    for r in results:
        for mode, scores in r["pass_at_k"].items():
            ms = r["latency_ms"][mode]
            lines.append(f"| {r['collection']} | {mode} | "
                         + " | ".join(f"{scores[k]:.2f}" for k in ks)
                         + f" | {ms['median']:.1f} | {ms['p95']:.1f} |")
    lines += ["", _image(chart, "Pass@k per mode and collection")]
    return "\n".join(lines)


@task(task_run_name="retrieve-{collection}-{mode}", persist_result=False)
def retrieve_task(uri: str, token: str, collection: str, embedder_spec: str, queries: list[str],
                  mode: str, limit: int, reranker_spec: str = "cohere",
                  advance: Callable[[int], None] | None = None,
                  ) -> tuple[list[list[Hit]], list[float]]:
    """One mode's hits for every query and each query's seconds, as a Prefect task; opens the
    store by URI on the process's shared client, so it can run in any worker. `advance(1)` is
    called as each query finishes (the terminal's progress bar)."""
    seconds: list[float] = []

    def done(s: float) -> None:
        seconds.append(s)
        if advance is not None:
            advance(1)

    embedder, reranker = _tools(mode, embedder_spec, reranker_spec)
    hits = retrieve(open_store(uri, token), collection, queries, mode, limit, embedder=embedder,
                    reranker=reranker, fusion=get_settings().fusion, on_query=done)
    return hits, seconds


def _tools(mode: str, embedder_spec: str, reranker_spec: str) -> tuple[Embedder | None,
                                                                       Reranker | None]:
    """The embedder and the reranker one retrieval mode needs (loaded once per process)."""
    embedder = get_embedder(embedder_spec) if mode != "bm25" else None
    reranker = get_reranker(reranker_spec) if mode == "rerank" else None
    return embedder, reranker


PUBLIC_KEYS = ("collection", "queries", "pass_at_k", "latency_ms", "failures", "per_query")


def _evaluate_collection(collection: str, queries: list[EvalQuery], ks: list[int], modes: list[str],
                         uri: str, token: str, embedder: str | None, reranker_spec: str,
                         eval_set: str, advance: Callable[[int], None]) -> dict[str, Any]:
    """Every mode over one collection: the result dict (Pass@k, latency, ranks, failures)."""
    s = get_settings()
    store = open_existing_store(uri, collection, token)
    stored_embedder = store.describe(collection).embedder
    if embedder and stored_embedder and not stored_embedder.startswith(embedder.split(":")[0]):
        raise InputError(f"collection {collection!r} was embedded with {stored_embedder}, not "
                         f"{embedder}: drop --embedder or use the same one")
    embedder_spec = embedder or stored_embedder or s.embedder

    started = time.perf_counter()
    texts = [q.query for q in queries]
    scores: dict[str, dict[str, float]] = {}
    latency: dict[str, dict[str, float]] = {}
    ranks: dict[str, list[list[int | None]]] = {}
    firsts: dict[str, list[Hit | None]] = {}
    for mode in modes:
        hits, seconds = retrieve_task(uri, token, collection, embedder_spec, texts, mode, max(ks),
                                      reranker_spec, advance)
        retrieved = [[(h.doc_id, h.text) for h in hs] for hs in hits]
        ranks[mode] = [golden_ranks(q.golden, r) for q, r in zip(queries, retrieved, strict=True)]
        scores[mode] = {str(kk): round(pass_at_k_of_ranks(ranks[mode], kk), 2) for kk in ks}
        latency[mode] = latency_ms(seconds)
        firsts[mode] = [hs[0] if hs else None for hs in hits]
    per_query = [{"query": q.query, "golden": [g.doc_id or g.source for g in q.golden],
                  "ranks": {m: ranks[m][i] for m in modes},
                  "first": {m: (firsts[m][i].doc_id if firsts[m][i] else None) for m in modes}}
                 for i, q in enumerate(queries)]
    return {
        "collection": collection,
        "queries": len(queries),
        "pass_at_k": scores,
        "latency_ms": latency,
        "failures": failure_analysis(queries, ranks, firsts, max(ks)),
        "eval_set": eval_set,
        "embedder": embedder_spec,
        "reranker": reranker_spec if "rerank" in modes else None,
        "seconds": round(time.perf_counter() - started, 2),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "per_query": per_query,
    }


def _record(result: dict[str, Any], ks: list[int], results_dir: Path, stamp: str) -> None:
    """One collection's artifacts (table; Markdown with its chart) and history files (JSON, PNG)."""
    collection = result["collection"]
    previous = _previous(results_dir, collection)
    chart = pass_at_k_chart({collection: result["pass_at_k"]}, ks,
                            f"Pass@k on {collection}: {result['queries']} queries, "
                            f"{result['embedder']}")
    create_table_artifact(pass_at_k_table(result).to_dicts(),
                          key=artifact_key("pass-at-k", collection),
                          description=f"Pass@k (%) of {collection} on {result['queries']} queries")
    create_markdown_artifact(markdown_report(result, previous, chart),
                             key=artifact_key("evaluation-report", collection),
                             description=f"evaluation of {collection}")
    stem = results_dir / f"evaluate-{collection}-{stamp}"
    stem.with_suffix(".png").write_bytes(chart)
    result["chart"] = str(stem.with_suffix(".png"))
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))


@flow(name="evaluate", log_prints=False)
def evaluate_flow(
    eval_set: str,
    collection: str,
    k: str = "5,10,20",
    modes: str | None = None,
    milvus_uri: str | None = None,
    embedder: str | None = None,
    json_out: str | None = None,
    reranker: str | None = None,
) -> dict[str, Any]:
    """Measure Pass@k and latency of COLLECTION on EVAL_SET for each retrieval mode, and list the
    queries every mode misses; COLLECTION may name several collections, comma-separated, which
    are evaluated one after the other and compared in one chart."""
    s = get_settings()
    logger = get_run_logger()
    reranker_spec = reranker or s.reranker
    names = split_collections(collection)
    for name in names:
        ks, mode_list = check_evaluate_options(name, k, modes, reranker_spec)
    queries = _PREPARED.pop(str(eval_set), None) or load_eval_set(eval_set)
    uri = milvus_uri or s.milvus_uri
    token = s.milvus_token.get_secret_value()
    for name in names[1:]:  # a missing collection fails before the first is evaluated
        open_existing_store(uri, name, token)
    results_dir = Path(s.results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")

    results: list[dict[str, Any]] = []
    try:
        with bar("queries evaluated", total=len(queries) * len(mode_list) * len(names),
                 unit="queries") as advance:
            for name in names:
                result = _evaluate_collection(name, queries, ks, mode_list, uri, token, embedder,
                                              reranker_spec, eval_set, advance)
                _record(result, ks, results_dir, stamp)
                results.append(result)
                logger.info(f"{name}: " + ", ".join(
                    f"{m} pass@{ks[-1]}={v[str(ks[-1])]:.2f} ({result['latency_ms'][m]['median']:.0f} ms)"
                    for m, v in result["pass_at_k"].items())
                    + f"; {result['failures']['queries_missed']} queries missed by every mode")
    finally:
        release_embedders()

    if len(results) == 1:
        out: dict[str, Any] = results[0]
        public: dict[str, Any] = {key: out[key] for key in PUBLIC_KEYS}
        chart = Path(out["chart"]).read_bytes()
    else:
        chart = pass_at_k_chart({r["collection"]: r["pass_at_k"] for r in results}, ks,
                                f"Pass@k by collection: {len(queries)} queries")
        path = results_dir / f"compare-{'-'.join(names)}-{stamp}.png"
        path.write_bytes(chart)
        create_markdown_artifact(comparison_markdown(results, chart),
                                 key=artifact_key("evaluation-comparison", *names),
                                 description=f"Pass@k of {', '.join(names)} compared")
        out = {"collection": ",".join(names), "queries": len(queries), "eval_set": eval_set,
               "collections": {r["collection"]: r for r in results}, "chart": str(path)}
        public = {"collections": {r["collection"]: {key: r[key] for key in PUBLIC_KEYS}
                                  for r in results},
                  "queries": len(queries)}
    if json_out:
        target = Path(json_out)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(public, indent=2) + "\n")
        target.with_suffix(".png").write_bytes(chart)
    return out


def search(query: str, collection: str, mode: str = "hybrid", k: int = 10,
           milvus_uri: str | None = None, reranker: str | None = None) -> list[Hit]:
    """The top `k` chunks of COLLECTION for one query (`situate search`): a plain function, not a
    flow, since one query needs no orchestration. The query is cleaned and bounded first
    (`clean_query`): an empty one fails before the store is opened."""
    from situate.tasks.retrieval.search import clean_query

    query = clean_query(query)
    s = get_settings()
    reranker = reranker or s.reranker
    check_evaluate_options(collection, "1", mode, reranker)
    store = open_existing_store(milvus_uri or s.milvus_uri, collection,
                                s.milvus_token.get_secret_value())
    embedder, ranker = _tools(mode, store.describe(collection).embedder or s.embedder, reranker)
    return retrieve(store, collection, [query], mode, k, embedder=embedder, reranker=ranker,
                    fusion=s.fusion)[0]
