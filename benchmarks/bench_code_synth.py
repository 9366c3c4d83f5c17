"""Syntax-aware against text chunking of source code, measured the way a user would measure it on
their own code: the product's evaluation set (`situate synth --generator held-out`, which takes a
definition's doc comment out of the code and asks with its first sentence and the definition's
name), ingested twice (`--code-chunks text` and `--code-chunks syntax`), evaluated with the
defaults. Round 2 of benchmarks/CODE_RESULTS.md: its rule was written before this ran.

    .venv/bin/python benchmarks/bench_code_synth.py --scratch /tmp/code-synth \
        [--corpora py-d js-e] [--json benchmarks/results/code-synth.json]

Corpora: `py-d` (httpx, click, jinja2 as installed), `js-e` (commander, express, ws, async, winston,
axios from the npm registry, installed into the scratch directory: the packages' own sources,
without bundles, minified files, tests or declarations); round 1's `py-a` (rich, markdown), `js-b`
(the packages npm bundles that round 1 chose) and `py-c` (griffe, websockets), for the record.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("dense", "bm25", "hybrid")
KS = ("5", "10", "20")
PYTHON = {"py-d": ("httpx", "click", "jinja2"), "py-a": ("rich", "markdown"),
          "py-c": ("griffe", "websockets")}
JS_E = ("commander", "express", "ws", "async", "winston", "axios")
NPM = Path("/usr/lib/node_modules/npm")
# The packages round 1 chose for js-b (benchmarks/results/code-heldout.json).
JS_B = ("node_modules/@npmcli/redact", "node_modules/@sigstore/sign", "node_modules/@tufjs/models",
        "node_modules/debug", "node_modules/diff", "node_modules/glob",
        "node_modules/http-cache-semantics", "node_modules/ip-address", "node_modules/lru-cache",
        "node_modules/minipass", "node_modules/path-scurry", "node_modules/postcss-selector-parser",
        "node_modules/smart-buffer", "node_modules/socks", "node_modules/tinyglobby")
JS_SUFFIXES = (".js", ".cjs", ".mjs")
MAX_FILE_BYTES = 300_000


def _js_file(f: Path, rel: str) -> bool:
    """A package's own source: not a bundle (`dist/`), minified, test or declaration file; the ESM
    copy of a CommonJS build is left out too (round 1's rule: a second copy makes queries
    ambiguous)."""
    if f.suffix not in JS_SUFFIXES or not f.is_file() or ".min." in f.name or ".d." in f.name:
        return False
    if "/test/" in f"/{rel}" or "/dist/" in f"/{rel}" and "/dist/commonjs/" not in f"/{rel}":
        return False
    return f.stat().st_size <= MAX_FILE_BYTES


def build(name: str, src: Path, scratch: Path) -> dict[str, Any]:
    """Copy corpus `name`'s source files into `src`; what it holds."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    info: dict[str, Any] = {}
    if name in PYTHON:
        for package in PYTHON[name]:
            root = Path(importlib.import_module(package).__file__ or "").parent
            info[package] = importlib.metadata.version(package)
            for f in sorted(root.rglob("*.py")):
                target = src / package / f.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
    else:
        if name == "js-e":
            npm = scratch / "npm"
            npm.mkdir(exist_ok=True)
            subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(npm),
                            *JS_E], check=True, capture_output=True)
            roots = {p: npm / "node_modules" / p for p in JS_E}
        else:
            roots = {p.split("/", 1)[1]: NPM / p for p in JS_B}
        for package, root in roots.items():
            info[package] = json.loads((root / "package.json").read_text())["version"]
            for f in sorted(root.rglob("*")):
                rel = f.relative_to(root).as_posix()
                if "node_modules/" in rel or not _js_file(f, rel):
                    continue
                target = src / package / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
    files = [f for f in src.rglob("*") if f.is_file()]
    return {"packages": info, "files": len(files),
            "chars": sum(len(f.read_text(encoding="utf-8", errors="replace")) for f in files)}


def situate(*args: str, env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        out.write("$ situate " + " ".join(args) + "\n")
        out.flush()
        subprocess.run([str(ROOT / ".venv" / "bin" / "situate"), *args], cwd=ROOT, env=env,
                       stdout=out, stderr=subprocess.STDOUT, check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/code-synth"))
    ap.add_argument("--corpora", nargs="+", default=["py-d", "js-e"],
                    choices=["py-d", "js-e", "py-a", "js-b", "py-c"])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" /
                    "code-synth.json")
    args = ap.parse_args()
    scratch = args.scratch
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / "commands.log"
    env = {**os.environ, "SITUATE_MILVUS_URI": str(scratch / "m.db"),
           "SITUATE_CACHE_DIR": str(scratch / "cache"),
           "SITUATE_RESULTS_DIR": str(scratch / "results"), "PREFECT_HOME": str(scratch / "prefect")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
        "command": "python benchmarks/bench_code_synth.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "corpora": {}, "runs": [], "verdict": {}}
    if args.json.exists():  # another corpus's runs, kept
        earlier = json.loads(args.json.read_text())
        result["corpora"] = {k: v for k, v in earlier.get("corpora", {}).items()
                             if k not in args.corpora}
        result["runs"] = [r for r in earlier.get("runs", []) if r["corpus"] not in args.corpora]
    for name in args.corpora:
        src, out = scratch / name / "src", scratch / name / "synth"
        info = build(name, src, scratch)
        synth_json = scratch / name / "synth.json"
        situate("synth", str(src), "--out", str(out), "--generator", "held-out", "--n",
                str(args.n), "--seed", "0", "--json", str(synth_json), env=env, log=log)
        info["synth"] = {k: v for k, v in json.loads(synth_json.read_text()).items()
                         if k in ("documents", "sampled", "queries", "dropped")}
        result["corpora"][name] = info
        print(name, json.dumps(info), flush=True)
        collections = {c: f"{name.replace('-', '_')}_{c}" for c in ("text", "syntax")}
        seconds = {}
        for chunker, collection in collections.items():
            started = time.perf_counter()
            situate("ingest", str(out / "corpus"), "--collection", collection, "--code-chunks",
                    chunker, "--json", str(scratch / name / f"ingest-{chunker}.json"), env=env,
                    log=log)
            seconds[chunker] = round(time.perf_counter() - started, 1)
        # One evaluation of both collections: each alone, and syntax against text query by query.
        report_json = scratch / name / "evaluate.json"
        situate("evaluate", str(out / "eval.jsonl"), "--collection",
                f"{collections['text']},{collections['syntax']}", "--modes", ",".join(MODES),
                "--json", str(report_json), env=env, log=log)
        report = json.loads(report_json.read_text())
        for chunker, collection in collections.items():
            one = report["collections"][collection]
            ingested = json.loads((scratch / name / f"ingest-{chunker}.json").read_text())
            run = {"corpus": name, "chunker": chunker, "collection": collection,
                   "ingest_seconds": seconds[chunker], "ingest": ingested,
                   "queries": one["queries"], "pass_at_k": one["pass_at_k"],
                   "intervals": one["intervals"], "per_query": one["per_query"]}
            result["runs"].append(run)
            print(name, chunker, json.dumps(run["pass_at_k"]["hybrid"]), flush=True)
        result["corpora"][name]["syntax_minus_text"] = report["comparisons"]
    by = {(r["corpus"], r["chunker"]): r for r in result["runs"]}
    for name in result["corpora"]:
        text, syntax = by[(name, "text")], by[(name, "syntax")]
        result["verdict"][name] = {
            mode: {k: round(syntax["pass_at_k"][mode][k] - text["pass_at_k"][mode][k], 2)
                   for k in KS} for mode in MODES}
        result["verdict"][name]["syntax_not_below_at_every_k"] = all(
            syntax["pass_at_k"]["hybrid"][k] >= text["pass_at_k"]["hybrid"][k] for k in KS)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    for name, v in result["verdict"].items():
        print(name, "hybrid syntax - text:", v["hybrid"], "rule holds:",
              v["syntax_not_below_at_every_k"])


if __name__ == "__main__":
    main()
