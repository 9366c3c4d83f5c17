"""The `situate` command: parses arguments and calls the flows. Nothing else lives here.

Every error a user can act on (SituateError) is printed as one line on stderr with exit code 2;
flags override `SITUATE_*` environment variables, which override the defaults.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from typing import Any

# Quiet, offline one-off runs: set before Prefect is imported (a user's own values win).
_PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_UI_ENABLED": "false",
    # The temporary server of a one-off run skips block-type registration (importing every
    # installed Prefect collection, Dask's among them): situate's flows use no blocks, and a
    # `prefect server start` registers them for the UI.
    "PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
    "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def _prefect_env() -> None:
    for key, value in _PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)


class _DropUserErrors(logging.Filter):
    """Prefect logs a failing flow's exception with its traceback, and an ERROR line for every
    task left waiting on the failed one; for a SituateError the CLI prints the one-line message
    itself, so both are noise. (A task that failed of a bug still logs its own traceback.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        from tasks.errors import SituateError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, SituateError):
            return False
        msg = record.getMessage()
        if "NotReady(" in msg and "Upstream task run" in msg:
            return False  # a task left waiting on the failed one: same failure, said once
        return not ("SituateError" in msg or "InputError" in msg or "ProviderError" in msg
                    or "StoreError" in msg)


def _install_log_filter() -> None:
    f = _DropUserErrors()
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs", "prefect.engine"):
        logging.getLogger(name).addFilter(f)
        for h in logging.getLogger(name).handlers:
            h.addFilter(f)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="situate", description="Contextual retrieval, offline batch "
                                "pipeline: ingest a corpus into Milvus, evaluate Pass@k, search.")
    sub = p.add_subparsers(dest="command", required=True)

    def store_flags(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--collection", required=True, help="Milvus collection name")
        sp.add_argument("--milvus-uri", help="Milvus Lite file or http(s)://host:port "
                        "[SITUATE_MILVUS_URI, default data/milvus.db]")
        sp.add_argument("--milvus-token", help="token for a Milvus server or Zilliz Cloud "
                        "[SITUATE_MILVUS_TOKEN]; prefer the variable, flags show in `ps`")

    ing = sub.add_parser("ingest", help="load, situate, embed and index a corpus")
    ing.add_argument("corpus", help="pre-chunked .json, .jsonl of documents, or a directory")
    store_flags(ing)
    ing.add_argument("--context", help="structural | anthropic | none [SITUATE_CONTEXT; default "
                     "anthropic if ANTHROPIC_API_KEY is set, else structural]")
    ing.add_argument("--embedder", help="minilm | voyage | cohere | openai | bge-m3, or name:model "
                     "[SITUATE_EMBEDDER, default minilm]")
    ing.add_argument("--model", help="Claude model for --context anthropic "
                     "[SITUATE_ANTHROPIC_MODEL, default claude-haiku-4-5]")
    ing.add_argument("--concurrency", type=int, help="concurrent context requests "
                     "[SITUATE_CONCURRENCY, default 8]")
    ing.add_argument("--group-chunks", action="store_true", help="situate all chunks of a small "
                     "document in one request")
    ing.add_argument("--batch", action="store_true", help="use the Message Batches API (half price)")
    ing.add_argument("--cache-dir", help="context cache [SITUATE_CACHE_DIR, default data/cache]")
    ing.add_argument("--chunk-size", type=int, help="characters per chunk for unchunked input "
                     "[SITUATE_CHUNK_SIZE, default 800]")
    ing.add_argument("--chunk-overlap", type=int, help="characters of overlap "
                     "[SITUATE_CHUNK_OVERLAP, default 100]")
    ing.add_argument("--prune", action="store_true", help="delete documents no longer in the corpus")
    ing.add_argument("--force", action="store_true", help="re-process unchanged documents too")
    ing.add_argument("--task-runner", choices=("threads", "dask"), default="threads",
                     help="run the per-document tasks on threads here (default) or on Dask "
                     "(needs a Milvus server --milvus-uri)")
    ing.add_argument("--dask-address", help="scheduler of an existing Dask cluster, e.g. "
                     "tcp://10.0.0.5:8786 (default with dask: a LocalCluster for this run)")

    ev = sub.add_parser("evaluate", help="measure Pass@k of a collection on an evaluation set")
    ev.add_argument("eval_set", help="evaluation JSONL (the codebase evaluation_set.jsonl format)")
    store_flags(ev)
    ev.add_argument("--k", default="5,10,20", help="cut-offs, comma-separated (default 5,10,20)")
    ev.add_argument("--modes", help="retrieval modes to compare: dense, bm25, hybrid, rerank "
                    "(default: all but rerank; rerank too when COHERE_API_KEY is set)")
    ev.add_argument("--json", dest="json_out", metavar="OUT", help="write the results as JSON")
    ev.add_argument("--results-dir", help="history of evaluations [SITUATE_RESULTS_DIR, default "
                    "data/results]")

    sv = sub.add_parser("serve", help="serve the ingest and evaluate deployments on cron schedules "
                        "(needs a Prefect server: PREFECT_API_URL)")
    sv.add_argument("corpus", help="corpus the ingest deployment re-reads on every run")
    store_flags(sv)
    sv.add_argument("--eval-set", help="evaluation JSONL; without it only ingest is served")
    sv.add_argument("--context", help="structural | anthropic | none [SITUATE_CONTEXT]")
    sv.add_argument("--embedder", help="embedder name or name:model [SITUATE_EMBEDDER]")
    sv.add_argument("--ingest-cron", default="0 * * * *", help="ingest schedule (default hourly)")
    sv.add_argument("--evaluate-cron", default="30 * * * *", help="evaluate schedule (default "
                    "hourly at :30)")
    sv.add_argument("--no-prune", dest="prune", action="store_false", help="keep documents that "
                    "left the corpus (default: delete them)")
    sv.add_argument("--paused", action="store_true", help="register the schedules paused (runs "
                    "only when triggered)")
    sv.add_argument("--name", default="situate", help="deployment name (default situate: "
                    "ingest/situate, evaluate/situate)")

    se = sub.add_parser("search", help="print the top chunks for a query")
    se.add_argument("query")
    store_flags(se)
    se.add_argument("--k", type=int, default=10, help="number of hits (default 10)")
    se.add_argument("--mode", default="hybrid", help="dense | bm25 | hybrid | rerank (hybrid reranked "
                    "by Cohere; needs COHERE_API_KEY) (default hybrid)")
    return p


def _apply_env(args: argparse.Namespace) -> None:
    """Flags that name where state lives or secrets travel through settings, not parameters."""
    for flag, var in (("milvus_token", "SITUATE_MILVUS_TOKEN"), ("results_dir", "SITUATE_RESULTS_DIR"),
                      ("cache_dir", "SITUATE_CACHE_DIR")):
        value = getattr(args, flag, None)
        if value:
            os.environ[var] = value
    from flows.settings import get_settings

    get_settings.cache_clear()


def _print_table(rows: list[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")


def _run_tags(flow: str, collection: str) -> Any:
    """The tags deployment runs carry (flows/deploy.py), so the UI filters CLI runs the same way."""
    from prefect import tags

    return tags("situate", flow, f"collection:{collection}")


def cmd_ingest(args: argparse.Namespace) -> int:
    from flows.settings import get_settings
    from storage.milvus import validate_collection_name
    from tasks.embed import check_embedder

    s = get_settings()
    validate_collection_name(args.collection)
    check_embedder(args.embedder or s.embedder)
    _load_model_early(args, s)  # before Prefect is imported: a local model takes seconds to load

    # Validate options and the whole input before a flow run starts, so bad input writes nothing
    # (and a model that started loading is stopped: see main).
    from flows.ingest import ingest_flow, make_task_runner
    from tasks.contextualize import known_contextualizers
    from tasks.errors import InputError
    from tasks.load import load_corpus

    runner = make_task_runner(args.task_runner, args.dask_address, args.milvus_uri or s.milvus_uri)
    context = args.context or s.default_context()
    if context not in known_contextualizers():
        raise InputError(f"unknown context provider {context!r}: use one of "
                         f"{', '.join(known_contextualizers())}")
    load_corpus(args.corpus, args.chunk_size or s.chunk_size, args.chunk_overlap or s.chunk_overlap)
    # An existing collection skips the model unless documents changed: not warmed for it.
    _open_store_early(args, s, lambda store: None if store.exists(args.collection)
                      else args.embedder or s.embedder, create=True)
    _start_temporary_server()
    gc.freeze()  # what is loaded by now lives to the end: keep the collector off it (see _quick_exit)
    with _run_tags("ingest", args.collection):
        summary = ingest_flow.with_options(task_runner=runner)(
            corpus=args.corpus, collection=args.collection, context=args.context,
            embedder=args.embedder, milvus_uri=args.milvus_uri, cache_dir=args.cache_dir,
            model=args.model, concurrency=args.concurrency, group_chunks=args.group_chunks,
            batch=args.batch, chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap,
            prune=args.prune, force=args.force)
    print(f"ingested {args.corpus} into {args.collection}:")
    _print_table([(k, v) for k, v in summary.items() if k not in ("seconds",)]
                 + [(f"seconds {k}", v) for k, v in summary["seconds"].items()])
    return 0


def _start_temporary_server() -> None:
    """Start Prefect's temporary API server for a one-off run, while the model loads.

    A flow run with no PREFECT_API_URL starts Prefect's `SubprocessASGIServer` on its first API
    call and waits for it (seconds). Starting that same singleton here, before the flow, overlaps
    its start with the embedding model's load in its own process. With a configured server: nothing.
    """
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return
    try:
        from prefect.server.api.server import SubprocessASGIServer

        SubprocessASGIServer().start()
    except Exception:  # the flow starts it again and reports any error properly
        pass


def _load_model_early(args: argparse.Namespace, s: Any) -> None:
    """Start loading the embedding model now when the collection is surely new.

    A local model loads in a process of its own (tasks/local_models.py), so the load overlaps
    Prefect's import, the temporary server's start, the flow's start and the first contexts.
    """
    from storage.milvus import is_missing_lite_file
    from tasks.embed import get_embedder

    if is_missing_lite_file(args.milvus_uri or s.milvus_uri):
        get_embedder(args.embedder or s.embedder)


def _open_store_early(args: argparse.Namespace, s: Any, embedder_for: Any,
                      create: bool = False) -> None:
    """Open the store in a background thread (it takes a second; the flow finds it open) and
    start loading the model `embedder_for(store)` names, if any.

    Called once the input is validated (bad input must not create a Milvus Lite file); a file
    that does not exist yet is opened, so created, only with `create` (ingest).
    """
    import threading

    from storage.milvus import is_missing_lite_file, open_store
    from tasks.embed import get_embedder

    uri = args.milvus_uri or s.milvus_uri
    if not create and is_missing_lite_file(uri):
        return

    def run() -> None:
        try:
            spec = embedder_for(open_store(uri, s.milvus_token.get_secret_value()))
            if spec:
                get_embedder(spec)
        except Exception:  # the flow opens it again and reports any error properly
            pass

    threading.Thread(target=run, daemon=True).start()


def _check_reranker(modes: list[str]) -> None:
    """A missing Cohere key is reported before any flow starts."""
    if "rerank" in modes:
        from tasks.rerank import get_reranker

        get_reranker()


def cmd_evaluate(args: argparse.Namespace) -> int:
    from flows.evaluate import evaluate_flow, pass_at_k_table
    from flows.settings import get_settings
    from storage.milvus import validate_collection_name
    from tasks.metrics import load_eval_set, parse_ks
    from tasks.retrieve import check_modes, default_modes

    validate_collection_name(args.collection)
    parse_ks(args.k)
    modes = check_modes([m.strip() for m in (args.modes or default_modes()).split(",") if m.strip()])
    _check_reranker(modes)
    load_eval_set(args.eval_set)
    s = get_settings()
    _open_store_early(args, s, lambda store: store.exists(args.collection) and (
        store.describe(args.collection)["embedder"] or s.embedder))
    _start_temporary_server()
    gc.freeze()  # what is loaded by now lives to the end: keep the collector off it (see _quick_exit)
    with _run_tags("evaluate", args.collection):
        result = evaluate_flow(eval_set=args.eval_set, collection=args.collection, k=args.k,
                               modes=args.modes, milvus_uri=args.milvus_uri, json_out=args.json_out)
    import polars as pl

    with pl.Config(tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=2):
        print(f"Pass@k (%) on {result['collection']}, {result['queries']} queries:")
        print(pass_at_k_table(result))
    if args.json_out:
        print(f"wrote {args.json_out}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from prefect.settings import PREFECT_API_URL

    from flows.deploy import ServeConfig, serve_deployments
    from tasks.errors import InputError

    if not PREFECT_API_URL.value():  # from the environment or the active Prefect profile
        raise InputError("situate serve needs a running Prefect server: start one with `prefect "
                         "server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api")
    # Runs start in subprocesses, maybe from another directory: pass absolute paths.
    from flows.settings import get_settings

    uri = args.milvus_uri or get_settings().milvus_uri
    if "://" not in uri:
        uri = str(Path(uri).resolve())
    serve_deployments(ServeConfig(
        corpus=str(Path(args.corpus).resolve()), collection=args.collection,
        eval_set=str(Path(args.eval_set).resolve()) if args.eval_set else None,
        context=args.context, embedder=args.embedder, milvus_uri=uri, prune=args.prune,
        ingest_cron=args.ingest_cron, evaluate_cron=args.evaluate_cron, name=args.name,
        paused=args.paused))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from flows.settings import get_settings
    from storage.milvus import open_existing_store
    from tasks.retrieve import check_modes, retrieve

    _check_reranker(check_modes([args.mode]))
    s = get_settings()
    uri = args.milvus_uri or s.milvus_uri
    store = open_existing_store(uri, args.collection, s.milvus_token.get_secret_value())
    embedder = store.describe(args.collection)["embedder"] or s.embedder
    hits = retrieve(store, args.collection, embedder, [args.query], args.mode, args.k)[0]
    if not hits:
        print("no results")
    for rank, h in enumerate(hits, start=1):
        print(f"{rank:>3}. {h.score:.4f}  {h.doc_id} #{h.index}")
        if h.context:
            print(f"     context: {_one_line(h.context, 200)}")
        print(f"     {_one_line(h.text, 300)}")
    return 0


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    _prefect_env()
    _quick_exit()
    args = _parser().parse_args(argv)
    from tasks.errors import SituateError

    _apply_env(args)
    _install_log_filter()
    commands = {"ingest": cmd_ingest, "evaluate": cmd_evaluate, "search": cmd_search,
                "serve": cmd_serve}
    try:
        return commands[args.command](args)
    except SituateError as e:
        print(f"situate {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"situate {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        _stop_models()


def _quick_exit() -> None:
    """Skip the collector's passes over Prefect's, Milvus's and the libraries' objects at exit.

    A one-off command loads several hundred thousand long-lived objects; the interpreter's
    final collections walk them all for about a second after the work is done. Frozen objects
    are left out of those walks (registered first, this runs after every other exit handler:
    logs are flushed and the temporary server stopped by then). Stores are closed explicitly.
    """
    import atexit

    from storage.milvus import close_stores

    atexit.register(gc.freeze)
    atexit.register(close_stores)


def _stop_models() -> None:
    """The command is over: no local model is needed any more, and a failed run must not wait
    at exit for one to finish loading."""
    from tasks.embed import release_embedders

    release_embedders(kill=True)


if __name__ == "__main__":
    sys.exit(main())


