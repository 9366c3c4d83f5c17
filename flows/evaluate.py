"""The evaluate flow: run every query of an evaluation set through each retrieval mode and record
Pass@k as Prefect artifacts (a table and a Markdown report compared with the previous run), a JSON
report under the results directory, and the flow's return value.
"""

from __future__ import annotations

import json
import time
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
from situate.flows.options import check_evaluate_options
from situate.storage.milvus import open_existing_store, open_store
from situate.tasks.embed import release_embedders
from situate.tasks.metrics import load_eval_set, mean_pass_at_k
from situate.tasks.retrieve import retrieve


def pass_at_k_table(result: dict[str, Any]) -> pl.DataFrame:
    """One row per mode, one `pass@k` column per k."""
    rows = [{"mode": mode, **{f"pass@{k}": v for k, v in scores.items()}}
            for mode, scores in result["pass_at_k"].items()]
    return pl.DataFrame(rows)


def _previous(results_dir: Path, collection: str) -> dict[str, Any] | None:
    history = sorted(results_dir.glob(f"evaluate-{collection}-*.json"))
    if not history:
        return None
    try:
        return json.loads(history[-1].read_text())
    except (OSError, json.JSONDecodeError):
        return None


def markdown_report(result: dict[str, Any], previous: dict[str, Any] | None) -> str:
    table = pass_at_k_table(result)
    lines = [f"# Pass@k on `{result['collection']}`", "",
             f"{result['queries']} queries from `{result['eval_set']}`, embedder "
             f"`{result['embedder']}`, {result['seconds']:.1f} s.", ""]
    header = "| mode | " + " | ".join(c for c in table.columns if c != "mode") + " |"
    lines += [header, "|" + "---|" * len(table.columns)]
    for row in table.iter_rows(named=True):
        cells = []
        for col in table.columns[1:]:
            k = col.split("@")[1]
            cell = f"{row[col]:.2f}"
            before = (previous or {}).get("pass_at_k", {}).get(row["mode"], {}).get(k)
            if before is not None:
                cell += f" ({row[col] - before:+.2f})"
            cells.append(cell)
        lines.append(f"| {row['mode']} | " + " | ".join(cells) + " |")
    if previous:
        lines += ["", f"In brackets: change since the previous run ({previous.get('finished', '?')})."]
    else:
        lines += ["", "First evaluation of this collection: nothing to compare with yet."]
    return "\n".join(lines)


@task(task_run_name="retrieve-{mode}", persist_result=False)
def retrieve_task(uri: str, token: str, collection: str, embedder_spec: str, queries: list[str],
                  mode: str, limit: int, reranker_spec: str = "cohere") -> list[list[Hit]]:
    """One mode's hits for every query, as a Prefect task; opens the store by URI on the
    process's shared client, so it can run in any worker."""
    return retrieve(open_store(uri, token), collection, embedder_spec, queries, mode, limit,
                    reranker_spec)


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
    """Measure Pass@k of COLLECTION on EVAL_SET for each retrieval mode."""
    s = get_settings()
    logger = get_run_logger()
    reranker_spec = reranker or s.reranker
    ks, mode_list = check_evaluate_options(collection, k, modes, reranker_spec)
    queries = load_eval_set(eval_set)
    uri = milvus_uri or s.milvus_uri
    token = s.milvus_token.get_secret_value()
    store = open_existing_store(uri, collection, token)
    stored_embedder = store.describe(collection)["embedder"]
    if embedder and stored_embedder and not stored_embedder.startswith(embedder.split(":")[0]):
        raise InputError(f"collection {collection!r} was embedded with {stored_embedder}, not "
                         f"{embedder}: drop --embedder or use the same one")
    embedder_spec = embedder or stored_embedder or s.embedder

    started = time.perf_counter()
    texts = [q.query for q in queries]
    scores: dict[str, dict[str, float]] = {}
    try:
        for mode in mode_list:
            hits = retrieve_task(uri, token, collection, embedder_spec, texts, mode, max(ks),
                                 reranker_spec)
            cases = [(q.golden, [(h.doc_id, h.text) for h in hs])
                     for q, hs in zip(queries, hits, strict=True)]
            scores[mode] = {str(kk): round(mean_pass_at_k(cases, kk), 2) for kk in ks}
    finally:
        release_embedders()
    result: dict[str, Any] = {
        "collection": collection,
        "queries": len(queries),
        "pass_at_k": scores,
        "eval_set": eval_set,
        "embedder": embedder_spec,
        "reranker": reranker_spec if "rerank" in mode_list else None,
        "seconds": round(time.perf_counter() - started, 2),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
    }

    results_dir = Path(s.results_dir)
    previous = _previous(results_dir, collection)
    table = pass_at_k_table(result)
    create_table_artifact(table.to_dicts(), key=artifact_key("pass-at-k", collection),
                          description=f"Pass@k (%) of {collection} on {len(queries)} queries")
    create_markdown_artifact(markdown_report(result, previous),
                             key=artifact_key("evaluation-report", collection),
                             description=f"evaluation of {collection}")
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    (results_dir / f"evaluate-{collection}-{stamp}.json").write_text(json.dumps(result, indent=2))
    if json_out:
        out = Path(json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        public = {key: result[key] for key in ("collection", "queries", "pass_at_k")}
        out.write_text(json.dumps(public, indent=2) + "\n")
    logger.info(f"{collection}: " + ", ".join(
        f"{m} pass@{ks[-1]}={v[str(ks[-1])]:.2f}" for m, v in scores.items()))
    return result


def search(query: str, collection: str, mode: str = "hybrid", k: int = 10,
           milvus_uri: str | None = None, reranker: str | None = None) -> list[Hit]:
    """The top `k` chunks of COLLECTION for one query (`situate search`): a plain function, not a
    flow, since one query needs no orchestration. The query is cleaned and bounded first
    (`clean_query`): an empty one fails before the store is opened."""
    from situate.tasks.retrieve import clean_query

    query = clean_query(query)
    s = get_settings()
    reranker = reranker or s.reranker
    check_evaluate_options(collection, "1", mode, reranker)
    store = open_existing_store(milvus_uri or s.milvus_uri, collection,
                                s.milvus_token.get_secret_value())
    embedder = store.describe(collection)["embedder"] or s.embedder
    return retrieve(store, collection, embedder, [query], mode, k, reranker)[0]
