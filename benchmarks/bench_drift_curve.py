"""How far BM25 (and hybrid) Pass@k of a collection kept up to date without a rebuild moves from a
fresh ingest of the same corpus, as its drift grows (issue 35's rebuild policy).

For each corpus and each drift share (0.5%, 1%, 5%, 10%, 25% of the rows) and seed: a copy of
the corpus in which documents holding about that share of the chunks are edited (a fifth of
their lines dropped, a line of words added: `benchmarks/drift.py`), ingested into a collection
of its own; then the true corpus ingested into it with `--rebuild-at inf`, so the edited
documents' rows are rewritten (the drift) and nothing is rebuilt. A fresh ingest of the true
corpus is the reference (`--default-policy`: the update with the default rebuild settings, the
collection as a scheduled run leaves it). Every step is a `situate` command in a fresh process,
one Milvus Lite file; `situate evaluate` of every collection on the corpus's evaluation set in one run gives
Pass@k, and situate's own paired statistics (`situate.tasks.retrieval.stats.compare`: the
difference to the fresh collection in points, its 95% bootstrap interval over queries, the
randomization p) are computed from its per-query ranks.

Corpora: the codebase benchmark (pre-chunked JSON, 248 queries) and a held-out directory corpus
built by `benchmarks/heldout.py` (three installed packages, 275 queries). Embeddings: MiniLM by
default; `--embedder openai --dim 384` uses the loopback OpenAI fake (fast; BM25 is the same
either way, dense and hybrid then mean nothing).

    .venv/bin/python benchmarks/bench_drift_curve.py [--shares 0.005 0.01 0.05 0.1 0.25]
        [--seeds 1 2 3] [--corpora codebase heldout] [--modes bm25,hybrid]
        [--out benchmarks/results/drift-curve.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import situate_command  # noqa: E402
from benchmarks.drift import drifted_share, edit_text, pick_share  # noqa: E402

CODEBASE = ROOT / "data" / "benchmarks" / "codebase"
SHARES = (0.005, 0.01, 0.05, 0.1, 0.25)


def run(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd[-8:])} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t


def codebase(work: Path) -> tuple[Path, Path, Any]:
    """(true corpus, evaluation set, maker of a drifted copy at a share and seed)."""
    true = json.loads((CODEBASE / "codebase_chunks.json").read_text())
    path = work / "codebase" / "true.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(true))

    def make(share: float, seed: int) -> tuple[Path, list[str]]:
        data, edited = drifted_share(true, share, seed)
        out = work / "codebase" / f"drift-{share:g}-{seed}.json"
        out.write_text(json.dumps(data))
        return out, edited

    return path, CODEBASE / "evaluation_set.jsonl", make


def heldout(work: Path) -> tuple[Path, Path, Any]:
    """The held-out directory corpus of `benchmarks/heldout.py`, and its drifted copies."""
    from situate.tasks.corpus.load import load_corpus

    base = work / "heldout"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "heldout.py"), str(base)],
                   check=True, capture_output=True)
    true = base / "corpus"
    sizes = {d.id: len(d.chunks) for d in load_corpus(true).documents}
    files = sorted(sizes)
    words = sorted({w for f in files for w in (true / f).read_text().split() if w.isidentifier()})

    def make(share: float, seed: int) -> tuple[Path, list[str]]:
        out = base / f"drift-{share:g}-{seed}"
        shutil.copytree(true, out)
        edited = pick_share(sizes, share, seed)
        rng = random.Random(seed)
        for f in edited:
            (out / f).write_text(edit_text((true / f).read_text(), rng, words))
        return out, edited

    return true, base / "eval.jsonl", make


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shares", nargs="*", type=float, default=list(SHARES))
    p.add_argument("--seeds", nargs="*", type=int, default=[1, 2, 3])
    p.add_argument("--corpora", nargs="*", default=["codebase", "heldout"])
    p.add_argument("--embedder", default="minilm", help="minilm, or openai (the loopback fake)")
    p.add_argument("--dim", type=int, default=384, help="with --embedder openai")
    p.add_argument("--modes", default="bm25,hybrid")
    p.add_argument("--default-policy", action="store_true",
                   help="update with the default rebuild settings instead of --rebuild-at inf "
                        "(the kept collection as a scheduled run leaves it)")
    p.add_argument("--keep", help="keep the work directory here")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "drift-curve.json"))
    args = p.parse_args()
    from situate.tasks.retrieval.stats import compare

    fake = None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "ANTHROPIC_"))}
    command, embedder = [str(Path(sys.executable).with_name("situate"))], args.embedder
    if args.embedder == "openai":
        from tests.fakes.openai_server import FakeOpenAI

        fake = FakeOpenAI(api_key="sk-drift-curve")
        fake.__enter__()
        env.update(OPENAI_API_KEY=fake.api_key, OPENAI_BASE_URL=fake.base_url + "/v1")
        command, embedder = situate_command(args.dim)
    result: dict[str, Any] = {
        "command": "benchmarks/bench_drift_curve.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "corpora": {}}
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="drift-curve-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        for name in args.corpora:
            true, eval_set, make = {"codebase": codebase, "heldout": heldout}[name](tmp)
            run_env = {**env, "SITUATE_MILVUS_URI": str(tmp / f"{name}.db"),
                       "SITUATE_CACHE_DIR": str(tmp / "cache"),
                       "SITUATE_RESULTS_DIR": str(tmp / "results"),
                       "PREFECT_HOME": str(tmp / "prefect")}
            common = ["--embedder", embedder, "--context", "structural"]
            run([*command, "ingest", str(true), "--collection", "fresh", *common], run_env)
            collections: dict[str, dict[str, Any]] = {}
            for share in args.shares:
                for seed in args.seeds:
                    drifted, edited = make(share, seed)
                    c = f"d{str(share).replace('.', '_')}_s{seed}"
                    run([*command, "ingest", str(drifted), "--collection", c, *common], run_env)
                    summary = tmp / f"{name}-{c}.json"
                    policy = [] if args.default_policy else ["--rebuild-at", "inf"]
                    run([*command, "ingest", str(true), "--collection", c, *common, "--prune",
                         *policy, "--json", str(summary)], run_env)
                    s = json.loads(summary.read_text())
                    collections[c] = {"share": share, "seed": seed, "edited_documents": len(edited),
                                      "drift_rows": s["drift_rows"], "drift_share": s["drift_share"],
                                      "rows": s["rows"], "rebuilt": s["rebuilt"]}
                    print(name, c, collections[c], flush=True)
            out_json = tmp / f"{name}-eval.json"
            names = ["fresh", *collections]
            run([*command, "evaluate", str(eval_set), "--collection", ",".join(names),
                 "--modes", args.modes, "--json", str(out_json)], run_env)
            evaluation = json.loads(out_json.read_text())["collections"]
            fresh = evaluation["fresh"]
            for c, info in collections.items():
                mine = evaluation[c]
                info["pass_at_k"] = mine["pass_at_k"]
                info["vs_fresh"] = {}
                for mode in args.modes.split(","):
                    a = [q["ranks"][mode] for q in fresh["per_query"]]
                    b = [q["ranks"][mode] for q in mine["per_query"]]
                    info["vs_fresh"][mode] = {}
                    for k in fresh["pass_at_k"][mode]:
                        d = compare(a, b, int(k))
                        info["vs_fresh"][mode][k] = {
                            "points": round(d.mean, 2), "interval": [round(d.low, 2), round(d.high, 2)],
                            "p": round(d.p, 4)}
                    info.setdefault("golden_ranks_differing", {})[mode] = sum(
                        x != y for x, y in zip(a, b, strict=True))
            result["corpora"][name] = {"queries": len(fresh["per_query"]),
                                       "rows": fresh.get("rows"),
                                       "fresh": fresh["pass_at_k"], "drifted": collections}
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    finally:
        if fake is not None:
            fake.__exit__(None, None, None)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    for name, c in result["corpora"].items():
        print(f"{name}: fresh {c['fresh']}")
        for cname, info in c["drifted"].items():
            worst = {m: max(abs(v["points"]) for v in ks.values()) for m, ks in info["vs_fresh"].items()}
            print(f"  {cname}: drift {info['drift_share']:.2%}, worst |Δ| {worst}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
