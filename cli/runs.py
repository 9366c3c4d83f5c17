"""The commands that run a pipeline: `situate ingest` and `situate evaluate` (a Prefect flow,
started through `situate.flows.launch`), `situate serve` (the deployments) and `situate synth`.
Each imports what runs it only when it runs."""

from __future__ import annotations

import sys

from situate.cli.commands import command
from situate.pipeline.options import EvaluateOptions, IngestOptions, ServeOptions, SynthOptions


@command("load, situate, embed and index a corpus",
         """\
  # the sample corpus: structural contexts and MiniLM, offline, about a minute
  situate ingest data/sample/corpus --collection sample
  # the codebase benchmark (pre-chunked JSON, committed under data/benchmarks)
  situate ingest data/benchmarks/codebase/codebase_chunks.json --collection codebase
  # Claude contexts (ANTHROPIC_API_KEY): see the requests and the bill first, then run
  situate ingest data/sample/corpus --collection sample_claude --context anthropic --dry-run
  situate ingest data/sample/corpus --collection sample_claude --context anthropic""", verbose=True)
def cmd_ingest(options: IngestOptions) -> int:
    from situate.flows import launch

    result = launch.launch_ingest(options)
    print(result.text())
    if options.json_out:
        print(f"wrote {options.json_out}")
    return 0


@command("measure Pass@k of a collection on an evaluation set",
         """\
  # Pass@k of the sample corpus (after `situate ingest data/sample/corpus --collection sample`)
  situate evaluate data/sample/eval.jsonl --collection sample
  # the codebase benchmark (after ingesting its codebase_chunks.json)
  situate evaluate data/benchmarks/codebase/evaluation_set.jsonl --collection codebase
  # hybrid only, at k = 1 and 5, the results also as JSON
  situate evaluate data/sample/eval.jsonl --collection sample --modes hybrid --k 1,5 --json r.json""",
         verbose=True)
def cmd_evaluate(options: EvaluateOptions) -> int:
    from situate.flows import launch

    result = launch.launch_evaluate(options)
    print(launch.evaluation_text(result))
    if options.json_out:
        print(f"wrote {options.json_out}")
    return 0


@command("serve the ingest and evaluate deployments on cron schedules (needs a Prefect server: "
         "PREFECT_API_URL)",
         """\
  # a Prefect server first (`prefect server start`), then:
  export PREFECT_API_URL=http://127.0.0.1:4200/api
  situate serve data/sample/corpus --collection sample --eval-set data/sample/eval.jsonl
  # registered paused: runs only when triggered (`prefect deployment run ingest/situate`)
  situate serve data/sample/corpus --collection sample --paused""", own_stop=True)
def cmd_serve(options: ServeOptions) -> int:
    from situate.flows.deploy import serve_deployments

    stopped = serve_deployments(options)
    if stopped is not None:
        runs = ("no run was in progress" if not stopped.runs else
                f"{stopped.runs} run(s) in progress cancelled; what they did is kept, and the "
                "next run goes on from there")
        print(f"situate serve: stopped ({stopped.signal}); {runs}", file=sys.stderr)
    return 0


@command("make an evaluation set from a corpus: held-out sentences (offline) or an LLM's questions",
         """\
  # offline and free: held-out sentences become queries, removed from out/corpus
  situate synth data/sample/corpus --out heldout --generator held-out
  situate ingest heldout/corpus --collection heldout
  situate evaluate heldout/eval.jsonl --collection heldout
  # an LLM's questions (see the plan and the price first, then run; resumable)
  situate synth data/sample/corpus --out synth --generator openai --n 100 --dry-run
  situate synth data/sample/corpus --out synth --generator openai --n 100""")
def cmd_synth(options: SynthOptions) -> int:
    from situate.pipeline.synth import run_synth

    summary = run_synth(options)
    summary.write_json(options.json_out)
    print(summary.text())
    if options.json_out:
        print(f"wrote {options.json_out}")
    return 0
