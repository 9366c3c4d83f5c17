"""The `situate` command: parses arguments, calls a flow through `startup`, prints its summary.

Every error a user can act on (SituateError) is printed as one line on stderr with exit code 2;
flags override `SITUATE_*` environment variables, which override the defaults. Start-up plumbing
(Prefect's temporary server, warming the model, exit handling) lives in `situate.flows.startup`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from situate.flows import startup

# Each help ends with real commands, run from the repository's root (as `git` and `llm` do).
EXAMPLES = {
    "situate": """\
examples:
  situate ingest data/sample/corpus --collection sample      # the sample corpus, offline
  situate evaluate data/sample/eval.jsonl --collection sample
  situate search "How is the retry delay computed?" --collection sample --k 5

Run `situate COMMAND --help` for a command's options and examples.""",
    "ingest": """\
examples:
  # the sample corpus: structural contexts and MiniLM, offline, about a minute
  situate ingest data/sample/corpus --collection sample
  # the codebase benchmark (pre-chunked JSON), read in place
  situate ingest ../shared/datasets/codebase/codebase_chunks.json --collection codebase
  # Claude contexts (ANTHROPIC_API_KEY): see the requests and the bill first, then run
  situate ingest data/sample/corpus --collection sample_claude --context anthropic --dry-run
  situate ingest data/sample/corpus --collection sample_claude --context anthropic""",
    "evaluate": """\
examples:
  # Pass@k of the sample corpus (after `situate ingest data/sample/corpus --collection sample`)
  situate evaluate data/sample/eval.jsonl --collection sample
  # the codebase benchmark (after ingesting its codebase_chunks.json)
  situate evaluate ../shared/datasets/codebase/evaluation_set.jsonl --collection codebase
  # hybrid only, at k = 1 and 5, the results also as JSON
  situate evaluate data/sample/eval.jsonl --collection sample --modes hybrid --k 1,5 --json r.json""",
    "search": """\
examples:
  situate search "How is the retry delay computed?" --collection sample --k 5
  situate search "dead letter queue" --collection sample --mode bm25
  situate search "how does the differential executor run both executors" --collection codebase""",
    "serve": """\
examples:
  # a Prefect server first (`prefect server start`), then:
  export PREFECT_API_URL=http://127.0.0.1:4200/api
  situate serve data/sample/corpus --collection sample --eval-set data/sample/eval.jsonl
  # registered paused: runs only when triggered (`prefect deployment run ingest/situate`)
  situate serve data/sample/corpus --collection sample --paused""",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("situate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    helped = {"formatter_class": argparse.RawDescriptionHelpFormatter}
    p = argparse.ArgumentParser(prog="situate", description="Contextual retrieval, offline batch "
                                "pipeline:\ningest a corpus into Milvus, evaluate Pass@k, search.",
                                epilog=EXAMPLES["situate"], **helped)
    p.add_argument("--version", action="version", version=f"situate {_version()}")
    verbose_help = ("show Prefect's line for every task run too (on the console; the run's logs "
                    "always have them)")
    p.add_argument("-v", "--verbose", action="store_true", help=verbose_help)
    sub = p.add_subparsers(dest="command", required=True)

    def add_command(name: str, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=textwrap.fill(
            help[0].upper() + help[1:] + ".", 79), epilog=EXAMPLES[name], **helped)
        if name in ("ingest", "evaluate"):  # the commands that run a flow in this process
            # Also after the command; SUPPRESS keeps a `situate -v ingest ...` from being undone.
            sp.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                            help=verbose_help)
        return sp

    def store_flags(sp: argparse.ArgumentParser, collection: str = "Milvus collection name") -> None:
        sp.add_argument("--collection", required=True, help=collection)
        sp.add_argument("--milvus-uri", help="Milvus Lite file or http(s)://host:port "
                        "[SITUATE_MILVUS_URI, default data/milvus.db]")
        sp.add_argument("--milvus-token", help="token for a Milvus server or Zilliz Cloud "
                        "[SITUATE_MILVUS_TOKEN]; prefer the variable, flags show in `ps`")

    ing = add_command("ingest", "load, situate, embed and index a corpus")
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
    ing.add_argument("--dry-run", action="store_true", help="plan the run against the "
                     "collection and print what it would do and cost; writes and calls nothing")
    ing.add_argument("--json", dest="json_out", metavar="OUT", help="write the run's summary (or "
                     "with --dry-run, the plan) as JSON")
    ing.add_argument("--chars-per-token", type=float, help="--dry-run's token estimate: characters "
                     "per token (default 3.5; about 3 for code); calibrate on a real bill")
    ing.add_argument("--context-tokens", type=int, help="--dry-run's output estimate: tokens per "
                     "context (default 100)")
    ing.add_argument("--dask-address", help="scheduler of an existing Dask cluster, e.g. "
                     "tcp://10.0.0.5:8786 (default with dask: a LocalCluster for this run)")

    ev = add_command("evaluate", "measure Pass@k of a collection on an evaluation set")
    ev.add_argument("eval_set", help="evaluation JSONL (the codebase evaluation_set.jsonl format)")
    store_flags(ev, "Milvus collection; several, comma-separated (a,b), are each evaluated "
                "and compared in one chart")
    ev.add_argument("--k", default="5,10,20", help="cut-offs, comma-separated (default 5,10,20)")
    ev.add_argument("--modes", help="retrieval modes to compare: dense, bm25, hybrid, rerank "
                    "(default: all but rerank; rerank too with a local --rerank st:... or when "
                    "COHERE_API_KEY is set)")
    ev.add_argument("--rerank", dest="reranker", metavar="RERANKER", help="reranker of the rerank mode: "
                    "cohere[:model] or st:NAME_OR_PATH, a sentence-transformers CrossEncoder "
                    "[SITUATE_RERANKER, default cohere]")
    ev.add_argument("--json", dest="json_out", metavar="OUT", help="write the results as JSON")
    ev.add_argument("--results-dir", help="history of evaluations [SITUATE_RESULTS_DIR, default "
                    "data/results]")

    sv = add_command("serve", "serve the ingest and evaluate deployments on cron schedules "
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

    se = add_command("search", "print the top chunks for a query")
    se.add_argument("query")
    store_flags(se)
    se.add_argument("--k", type=int, default=10, help="number of hits (default 10)")
    se.add_argument("--mode", default="hybrid", help="dense | bm25 | hybrid | rerank (hybrid reranked "
                    "by --rerank) (default hybrid)")
    se.add_argument("--rerank", dest="reranker", metavar="RERANKER", help="cohere[:model] (needs "
                    "COHERE_API_KEY) or st:NAME_OR_PATH [SITUATE_RERANKER, default cohere]")
    return p


def _print_table(rows: list[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")


def cmd_ingest(args: argparse.Namespace) -> int:
    summary = startup.launch_ingest(
        args.corpus, args.collection, task_runner=args.task_runner, dask_address=args.dask_address,
        context=args.context, embedder=args.embedder, milvus_uri=args.milvus_uri,
        cache_dir=args.cache_dir, model=args.model, concurrency=args.concurrency,
        group_chunks=args.group_chunks, batch=args.batch, chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap, prune=args.prune, force=args.force,
        dry_run=args.dry_run, json_out=args.json_out, chars_per_token=args.chars_per_token,
        context_tokens=args.context_tokens)
    if args.dry_run:
        from situate.flows.plan import plan_text

        print(plan_text(summary))
    else:
        print(f"ingested {args.corpus} into {args.collection}:")
        _print_table([(k, v) for k, v in summary.items() if k != "seconds"]
                     + [(f"seconds {k}", v) for k, v in summary["seconds"].items()])
    if args.json_out:
        print(f"wrote {args.json_out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    result = startup.launch_evaluate(args.eval_set, args.collection, k=args.k, modes=args.modes,
                                     milvus_uri=args.milvus_uri, json_out=args.json_out,
                                     reranker=args.reranker)
    from situate.flows.evaluate import summary_text

    print(summary_text(result))
    if args.json_out:
        print(f"wrote {args.json_out}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from situate.flows.deploy import ServeConfig, serve_deployments

    stopped = serve_deployments(ServeConfig(
        corpus=args.corpus, collection=args.collection, eval_set=args.eval_set,
        context=args.context, embedder=args.embedder, milvus_uri=args.milvus_uri, prune=args.prune,
        ingest_cron=args.ingest_cron, evaluate_cron=args.evaluate_cron, name=args.name,
        paused=args.paused))
    if stopped is not None:
        runs = ("no run was in progress" if not stopped.runs else
                f"{stopped.runs} run(s) in progress cancelled; what they did is kept, and the "
                "next run goes on from there")
        print(f"situate serve: stopped ({stopped.signal}); {runs}", file=sys.stderr)
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from situate.flows.evaluate import search

    hits = search(args.query, args.collection, mode=args.mode, k=args.k, milvus_uri=args.milvus_uri,
                  reranker=args.reranker)
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


COMMANDS = {"ingest": cmd_ingest, "evaluate": cmd_evaluate, "search": cmd_search, "serve": cmd_serve}


def main(argv: list[str] | None = None) -> int:
    startup.prepare_process()
    args = _parser().parse_args(argv)
    from situate.core.errors import SituateError

    startup.settings_from_flags(getattr(args, "milvus_token", None),
                                getattr(args, "results_dir", None), getattr(args, "cache_dir", None))
    startup.install_log_filter(verbose=args.verbose)
    # `situate serve` stops on its own terms (flows.deploy.serve: cancels its runs, exits 0).
    restore = startup.install_stop_handlers(args.command) if args.command != "serve" else None
    try:
        return COMMANDS[args.command](args)
    except SituateError as e:
        from situate.flows.messages import user_message

        print(f"situate {args.command}: error: {user_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"situate {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        startup.stop_models()
        if restore is not None:
            restore()


if __name__ == "__main__":
    sys.exit(main())
