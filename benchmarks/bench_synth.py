"""Is the offline held-out set a useful proxy? `situate synth --generator held-out` on the codebase
corpus and on a prose corpus, each written corpus ingested and evaluated with the defaults, and
the order of dense, BM25 and hybrid at k = 5, 10, 20 compared with the order a labelled set gives
on the same corpus: the codebase's own evaluation_set.jsonl (labelled by an LLM, checked), and for
the prose corpus the set `benchmarks/heldout.py --markdown` built for BENCHMARKS.md (measured
there with the same defaults: MiniLM, structural contexts, cdbsf).

Everything runs through the product's commands, state under a scratch directory; the codebase
corpus is read in place (the held-out corpus written from it stays in the scratch directory).

    .venv/bin/python benchmarks/bench_synth.py --scratch /tmp/bs24 \
        [--labelled-json /tmp/cq24/eval.json] --json benchmarks/results/synth.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODEBASE = ROOT / "data" / "benchmarks" / "codebase"
NODE_API = Path("/usr/share/doc/nodejs/api")
MODES = ("dense", "bm25", "hybrid")
KS = ("5", "10", "20")
# BENCHMARKS.md, "sealed" prose set (heldout.py --markdown /usr/share/doc/nodejs/api, 33 files of
# at most 40,000 bytes): MiniLM, structural, cdbsf.
PROSE_REFERENCE = {"dense": {"5": 58.70, "10": 73.91, "20": 83.09},
                   "bm25": {"5": 63.29, "10": 77.54, "20": 85.99},
                   "hybrid": {"5": 69.81, "10": 83.57, "20": 91.79}}


def situate(*args: str, env: dict[str, str], log: Path) -> float:
    started = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ situate {' '.join(args)}\n")
        f.flush()
        subprocess.run([str(ROOT / ".venv" / "bin" / "situate"), *args], cwd=ROOT, env=env,
                       stdout=f, stderr=f, check=True)
    return round(time.perf_counter() - started, 1)


def order(scores: dict[str, dict[str, float]], k: str) -> str:
    """'hybrid > bm25 > dense' (ties as '=')."""
    ranked = sorted(MODES, key=lambda m: -scores[m][k])
    out = ranked[0]
    for a, b in zip(ranked, ranked[1:], strict=False):
        out += (" = " if scores[a][k] == scores[b][k] else " > ") + b
    return out


def held_out(name: str, corpus: Path, scratch: Path, n: int, env: dict[str, str],
             log: Path) -> dict:
    """Synth, ingest and evaluate one held-out set; each corpus has its own Milvus Lite file and
    Prefect home (so two can run at once), and a step already done (its report written) is read
    back, not run again."""
    out = scratch / name
    env = {**env, "SITUATE_MILVUS_URI": str(scratch / f"{name}.db"),
           "PREFECT_HOME": str(scratch / f"prefect-{name}")}
    report = scratch / f"{name}-eval.json"
    synth_json = scratch / f"{name}-synth.json"
    seconds_json = scratch / f"{name}-seconds.json"
    seconds = json.loads(seconds_json.read_text()) if seconds_json.exists() else {}
    if not synth_json.exists():
        seconds["synth"] = situate("synth", str(corpus), "--out", str(out), "--generator",
                                   "held-out", "--n", str(n), "--seed", "0", "--json",
                                   str(synth_json), env=env, log=log)
    if not report.exists():
        target = json.loads(synth_json.read_text()).get("ingest_path") or str(out / "corpus")
        seconds["ingest"] = situate("ingest", target, "--collection", name, env=env, log=log)
        seconds["evaluate"] = situate("evaluate", str(out / "eval.jsonl"), "--collection", name,
                                      "--modes", ",".join(MODES), "--json", str(report), env=env,
                                      log=log)
    seconds_json.write_text(json.dumps(seconds))
    result = json.loads(report.read_text())
    result["synth"] = json.loads(synth_json.read_text())
    result["seconds"] = seconds
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/bench-synth"))
    ap.add_argument("--labelled-json", type=Path, help="an existing `situate evaluate --json` of "
                    "the codebase set with the defaults (else it is measured here)")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--only", choices=("codebase", "prose"), help="run one corpus's held-out "
                    "set and stop (two can run at once; a last run without --only reads both)")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "synth.json")
    args = ap.parse_args()
    scratch = args.scratch
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SITUATE_MILVUS_URI": str(scratch / "m.db"),
           "SITUATE_CACHE_DIR": str(scratch / "cache"),
           "SITUATE_RESULTS_DIR": str(scratch / "results"), "PREFECT_HOME": str(scratch / "prefect")}
    log = scratch / "commands.log"
    prose = scratch / "nodejs-api"
    prose.mkdir(exist_ok=True)
    for f in sorted(NODE_API.glob("*.md")):
        if f.stat().st_size <= 40_000 and not (prose / f.name).exists():
            shutil.copyfile(f, prose / f.name)  # a corpus holds its files: links out are skipped
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if args.only != "prose":
        code = held_out("codebase_heldout", CODEBASE / "codebase_chunks.json", scratch, args.n,
                        env, log)
    if args.only != "codebase":
        docs = held_out("nodejs_heldout", prose, scratch, args.n, env, log)
    if args.only:
        return
    if args.labelled_json:  # another run may still be writing it (compare_quality.sh)
        deadline = time.monotonic() + 3600
        while not args.labelled_json.exists() and time.monotonic() < deadline:
            time.sleep(10)
        labelled = json.loads(args.labelled_json.read_text())
    else:
        situate("ingest", str(CODEBASE / "codebase_chunks.json"), "--collection", "codebase",
                env=env, log=log)
        report = scratch / "codebase-labelled.json"
        situate("evaluate", str(CODEBASE / "evaluation_set.jsonl"), "--collection", "codebase",
                "--modes", ",".join(MODES), "--json", str(report), env=env, log=log)
        labelled = json.loads(report.read_text())
    rows = []
    for corpus, reference, proxy, reference_name in (
            ("codebase", labelled["pass_at_k"], code["pass_at_k"], "evaluation_set.jsonl (248 q)"),
            ("nodejs-api (33 .md)", PROSE_REFERENCE, docs["pass_at_k"],
             "heldout.py --markdown (BENCHMARKS.md)")):
        for k in KS:
            rows.append({"corpus": corpus, "k": int(k), "reference": reference_name,
                         "reference_order": order(reference, k), "held_out_order": order(proxy, k),
                         "same": order(reference, k) == order(proxy, k),
                         "reference_scores": {m: reference[m][k] for m in MODES},
                         "held_out_scores": {m: proxy[m][k] for m in MODES}})

    def difference(report: dict, k: int) -> dict | None:
        return next((d for d in report.get("differences", [])
                     if d["a"] == "bm25" and d["b"] == "hybrid" and d["k"] == k), None)

    result = {
        "started": started, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                        "python": sys.version.split()[0]},
        "command": " ".join(sys.argv), "orders": rows,
        "hybrid_minus_bm25": {
            "codebase_labelled": {str(k): difference(labelled, k) for k in (5, 10, 20)},
            "codebase_held_out": {str(k): difference(code, k) for k in (5, 10, 20)},
            "nodejs_held_out": {str(k): difference(docs, k) for k in (5, 10, 20)}},
        "labelled": {k: labelled[k] for k in ("pass_at_k", "intervals", "metrics", "queries")
                     if k in labelled},
        "codebase_held_out": {k: code[k] for k in ("pass_at_k", "intervals", "metrics", "queries",
                                                   "synth", "seconds") if k in code},
        "nodejs_held_out": {k: docs[k] for k in ("pass_at_k", "intervals", "metrics", "queries",
                                                 "synth", "seconds") if k in docs},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    for r in rows:
        print(f"{r['corpus']:<20} @{r['k']:<3} reference {r['reference_order']:<26} held-out "
              f"{r['held_out_order']:<26} {'same' if r['same'] else 'DIFFERENT'}")
    print(json.dumps(result["hybrid_minus_bm25"], indent=1))


if __name__ == "__main__":
    main()
