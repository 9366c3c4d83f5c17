"""Deployments of the two flows, served by this process (`situate serve`): no work pool, no worker,
nothing that needs the internet. Prefect's scheduler creates runs from the cron schedules; this
process polls for them (and for runs triggered from the UI or `prefect deployment run`) and runs
each in a subprocess.

`prefect.yaml` describes the same two deployments for a process work pool and `prefect worker`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from situate.core.errors import InputError

DEPLOYMENT = "situate"
INGEST_CRON = "0 * * * *"
EVALUATE_CRON = "30 * * * *"


@dataclass(frozen=True)
class ServeConfig:
    """What the two deployments run with; the token stays in SITUATE_MILVUS_TOKEN, off the UI."""

    corpus: str
    collection: str
    eval_set: str | None = None
    context: str | None = None
    embedder: str | None = None
    milvus_uri: str | None = None
    prune: bool = True
    ingest_cron: str = INGEST_CRON
    evaluate_cron: str = EVALUATE_CRON
    name: str = DEPLOYMENT
    paused: bool = False


def _drop_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def build_deployments(cfg: ServeConfig) -> list[Any]:
    """The ingest (and, given an evaluation set, evaluate) deployments with their schedules.

    Ingest has a concurrency limit of 1: a slow run and the next scheduled one must not write the
    same collection at once (and a Milvus Lite file admits one process anyway).
    """
    from situate.flows.evaluate import evaluate_flow
    from situate.flows.ingest import ingest_flow
    from situate.storage.rows import validate_collection_name

    validate_collection_name(cfg.collection)
    tags = ["situate", f"collection:{cfg.collection}"]
    out = [ingest_flow.to_deployment(
        name=cfg.name, cron=cfg.ingest_cron, paused=cfg.paused, concurrency_limit=1,
        tags=[*tags, "ingest"],
        description=f"Incremental ingest of {cfg.corpus} into {cfg.collection}",
        parameters=_drop_none({"corpus": cfg.corpus, "collection": cfg.collection,
                               "context": cfg.context, "embedder": cfg.embedder,
                               "milvus_uri": cfg.milvus_uri, "prune": cfg.prune}))]
    if cfg.eval_set:
        out.append(evaluate_flow.to_deployment(
            name=cfg.name, cron=cfg.evaluate_cron, paused=cfg.paused, tags=[*tags, "evaluate"],
            description=f"Pass@k of {cfg.collection} on {cfg.eval_set}",
            parameters=_drop_none({"eval_set": cfg.eval_set, "collection": cfg.collection,
                                   "milvus_uri": cfg.milvus_uri})))
    return out


def resolve_paths(cfg: ServeConfig) -> ServeConfig:
    """Runs start in subprocesses, maybe from another directory: absolute paths, and the Milvus
    URI from settings when none is given."""
    from situate.core.settings import get_settings

    uri = cfg.milvus_uri or get_settings().milvus_uri
    if "://" not in uri:
        uri = str(Path(uri).resolve())
    return replace(cfg, corpus=str(Path(cfg.corpus).resolve()), milvus_uri=uri,
                   eval_set=str(Path(cfg.eval_set).resolve()) if cfg.eval_set else None)


def serve_deployments(cfg: ServeConfig, limit: int | None = None) -> None:
    """Register the deployments with the Prefect API and run their flow runs until interrupted."""
    from prefect import serve
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():  # from the environment or the active Prefect profile
        raise InputError("situate serve needs a running Prefect server: start one with `prefect "
                         "server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api")
    serve(*build_deployments(resolve_paths(cfg)), limit=limit)
