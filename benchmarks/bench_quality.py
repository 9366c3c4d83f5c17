"""Pass@k with and without contexts, on the codebase benchmark and on a held-out corpus.

For each corpus and each `--context` (none, structural), a fresh `situate ingest` into a new Milvus
Lite file, then `situate evaluate --json`: the same commands a user runs. The held-out corpus is
built by `benchmarks/heldout.py` from installed packages (docstring -> definition search).

    .venv/bin/python benchmarks/bench_quality.py [--contexts none structural] [--only codebase|heldout]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODEBASE = ROOT.parent / "shared" / "datasets" / "codebase"


def run(args: list[str], env: dict[str, str]) -> None:
    r = subprocess.run([sys.executable, "-m", "situate.flows.cli", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"situate {' '.join(args)} failed:\n{r.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", nargs="+", default=["none", "structural"])
    ap.add_argument("--only", choices=["codebase", "heldout"])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "quality.json"))
    args = ap.parse_args()
    results: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {}
        if args.only in (None, "codebase"):
            corpora["codebase"] = (CODEBASE / "codebase_chunks.json", CODEBASE / "evaluation_set.jsonl")
        if args.only in (None, "heldout"):
            held = Path(tmp) / "heldout"
            r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "heldout.py"), str(held)],
                               capture_output=True, text=True, check=True)
            results["heldout"] = json.loads(r.stdout)
            corpora["heldout"] = (held / "corpus", held / "eval.jsonl")
        env = {**os.environ, "SITUATE_MILVUS_URI": f"{tmp}/milvus.db", "SITUATE_CACHE_DIR": f"{tmp}/c",
               "SITUATE_RESULTS_DIR": f"{tmp}/r"}
        env.pop("ANTHROPIC_API_KEY", None)
        for name, (corpus, eval_set) in corpora.items():
            for context in args.contexts:
                collection = f"{name}_{context}"
                run(["ingest", str(corpus), "--collection", collection, "--context", context], env)
                out = Path(tmp) / f"{collection}.json"
                run(["evaluate", str(eval_set), "--collection", collection, "--json", str(out)], env)
                scores = json.loads(out.read_text())
                results["runs"].append({"corpus": name, "context": context, **scores})
                print(name, context, json.dumps(scores["pass_at_k"]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
