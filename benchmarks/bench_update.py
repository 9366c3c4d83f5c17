"""A scheduled run pays for what changed (issue 35): a fresh ingest, then the same corpus with 1% of
its documents rewritten, then with nothing changed, each as a ratio to the fresh ingest.

For each size (chunks): the generated corpus of `bench_scale.py` (JSONL documents of 8 chunks,
seeded), and a copy of it in which 1% of the documents (seeded) have their words drawn again
(same ids, same paragraph and word counts). Into a `milvus-lite server` started for the run, the
real command in a fresh process, each step with `--prune` and default settings otherwise:

    situate ingest corpus.jsonl  --collection update --context structural --embedder openai384
    situate ingest updated.jsonl ...   (the 1% update)
    situate ingest updated.jsonl ...   (nothing changed: a no-op)

Embeddings come from the loopback OpenAI fake (`tests/fakes/openai_server.py`, answered at once,
384-d as the default embedder's), so the figures measure situate and the store, not a model.
After every step the stored rows are checked against the corpus: every document's chunk ids,
chunk hashes and fingerprint (`--check full`, the default up to 200,000 chunks), or the row count,
every rewritten document and a seeded sample of 2,000 others, by primary key (`--check sample`).
Reported per step: wall seconds and the ratio to the fresh ingest, the summary's seconds per phase
and counts, the peak RSS of situate's process tree and of the server.

`--reference PKG` runs the same three steps with another checkout of situate (PKG is a folder
holding `situate/` with `core`, `storage`, `tasks` and `flows` linked from it, put first on
PYTHONPATH), each step interleaved with the same step of this checkout, on a server of its own:
today's code against the new in the same run, on the same machine state.

    .venv/bin/python benchmarks/bench_update.py 100000 [1000000] [--reference /tmp/ref35pkg]
        [--out benchmarks/results/update.json]
"""

from __future__ import annotations

import argparse
import json
import math
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

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import (  # noqa: E402
    _VOCABULARY,
    TreeMemory,
    milvus,
    situate_command,
    write_corpus,
)
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402

COLLECTION = "update"


def write_updated(corpus: Path, out: Path, share: float, seed: int = 35) -> list[str]:
    """The corpus with `share` of its documents' words drawn again (same ids, same paragraphs
    and word counts); returns the rewritten ids."""
    lines = corpus.read_text().splitlines()
    rng = random.Random(seed)
    picked = set(rng.sample(range(len(lines)), max(1, round(share * len(lines)))))
    rewritten = []
    with out.open("w") as f:
        for i, line in enumerate(lines):
            if i in picked:
                doc = json.loads(line)
                doc["text"] = "\n\n".join(" ".join(rng.choice(_VOCABULARY) for _ in p.split()) + "."
                                          for p in doc["text"].split("\n\n"))
                rewritten.append(doc["id"])
                line = json.dumps(doc)
            f.write(line + "\n")
    return sorted(rewritten)


def expected_rows(corpus: Path, pipeline: str) -> dict[str, tuple[str, str]]:
    """chunk id -> (chunk hash, fingerprint) the collection must hold for the corpus."""
    from situate.core.records import sha256
    from situate.tasks.corpus.load import stream_corpus

    out: dict[str, tuple[str, str]] = {}
    for doc in stream_corpus(corpus):
        fp = sha256(f"{doc.hash}\x1f{pipeline}")
        for c in doc.chunks:
            out[c.id] = (c.hash, fp)
    return out


def check_rows(uri: str, expected: dict[str, tuple[str, str]], mode: str,
               rewritten: list[str], seed: int = 7) -> dict[str, Any]:
    """The stored rows against `expected`: all of them (one pass over the collection), or the
    count, the rewritten documents and a sample, by primary key."""
    from pymilvus import MilvusClient

    from situate.core.records import chunk_id

    t = time.perf_counter()
    client = MilvusClient(uri=uri, timeout=3600)
    try:
        count = int(client.query(COLLECTION, filter="", output_fields=["count(*)"])[0]["count(*)"])
        fields = ["id", "chunk_hash", "doc_hash"]
        if mode == "full":
            it = client.query_iterator(COLLECTION, batch_size=16384, filter="",
                                       output_fields=fields)
            stored = {}
            while batch := it.next():
                stored.update((r["id"], (r["chunk_hash"], r["doc_hash"])) for r in batch)
            it.close()
            exact = stored == expected
            checked = len(stored)
        else:
            rng = random.Random(seed)
            ids = sorted(expected)
            sample = set(rng.sample(ids, min(len(ids), 2000 * 8)))
            sample |= {chunk_id(d, i) for d in rewritten for i in range(8)} & set(expected)
            wanted = sorted(sample)
            got: dict[str, tuple[str, str]] = {}
            for k in range(0, len(wanted), 1000):
                for r in client.get(COLLECTION, ids=wanted[k:k + 1000], output_fields=fields):
                    got[r["id"]] = (r["chunk_hash"], r["doc_hash"])
            exact = count == len(expected) and got == {i: expected[i] for i in wanted}
            checked = len(got)
    finally:
        client.close()
    return {"mode": mode, "exact": exact, "rows": count, "expected_rows": len(expected),
            "rows_checked": checked, "seconds": round(time.perf_counter() - t, 1)}


def run_step(corpus: Path, work: Path, env: dict[str, str], uri: str, server_pid: int | None,
             dim: int, label: str, limit: int | None, reserve: int) -> dict[str, Any]:
    command, embedder = situate_command(dim)
    summary = work / f"summary-{label}.json"
    cmd = [*command, "ingest", str(corpus), "--collection", COLLECTION, "--context", "structural",
           "--embedder", embedder, "--prune", "--json", str(summary)]
    run_env = {**env, "SITUATE_MILVUS_URI": uri, "SITUATE_CACHE_DIR": str(work / "cache"),
               "SITUATE_RESULTS_DIR": str(work / "results"), "PREFECT_HOME": str(work / "prefect")}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)

    def stop(reason: str) -> None:
        print(f"stopping {label}: {reason}", flush=True)
        os.killpg(proc.pid, 15)

    with (TreeMemory(proc.pid) as memory,
          TreeMemory(server_pid, limit=limit, reserve=reserve, on_limit=stop) as server):
        out, err = proc.communicate()
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"{label} failed ({proc.returncode}):\n{err[-3000:]}")
    s = json.loads(summary.read_text())
    return {"step": label, "wall_seconds": round(seconds, 1),
            "summary": {k: s[k] for k in ("new", "changed", "unchanged", "deleted_documents",
                                          "chunks_written", "chunks_deleted", "rows",
                                          "drift_rows", "drift_share", "rebuilt",
                                          "contexts_generated", "seconds")},
            "peak_rss_mib": round(memory.peak / 2**20, 1),
            "server_peak_rss_mib": round(server.peak / 2**20, 1),
            "tracebacks_in_output": (out + err).count("Traceback"),
            **({"stopped": server.stopped} if server.stopped else {})}


def pipeline_of(dim: int, reference: str | None) -> str:
    """The pipeline id the runs fingerprint with (structural contexts, default chunking)."""
    code = ("from situate.pipeline.plan import pipeline_id; "
            "from situate.tasks.contexts.base import get_contextualizer, ContextConfig; "
            "print(pipeline_id(get_contextualizer(ContextConfig(name='structural', model='')), "
            "800, 100))")
    env = {**os.environ, **({"PYTHONPATH": reference} if reference else {})}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sizes", nargs="*", type=int, default=[100_000])
    p.add_argument("--share", type=float, default=0.01, help="share of documents rewritten")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--reference", help="a folder holding another checkout's situate/ package")
    p.add_argument("--new", help="the same for the code measured (default: this checkout)")
    p.add_argument("--check", choices=["auto", "full", "sample"], default="auto")
    p.add_argument("--server-limit-gib", type=float, default=14.0)
    p.add_argument("--reserve-gib", type=float, default=2.5)
    p.add_argument("--keep", help="keep the work directories under this folder")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "update.json"))
    args = p.parse_args()
    result: dict[str, Any] = {
        "command": "benchmarks/bench_update.py " + " ".join(sys.argv[1:]),
        "machine": (f"{platform.machine()}, {os.cpu_count()} cores, "
                    f"{psutil.virtual_memory().total / 2**30:.0f} GiB, "
                    f"Python {platform.python_version()}"),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": []}
    codes = {"new": args.new, **({"reference": args.reference} if args.reference else {})}
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-update-"))
    limit, reserve = int(args.server_limit_gib * 2**30), int(args.reserve_gib * 2**30)
    try:
        with FakeOpenAI(api_key="sk-bench-update") as fake:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("SITUATE_", "ANTHROPIC_", "PYTHONPATH"))}
            env.update(OPENAI_API_KEY=fake.api_key, OPENAI_BASE_URL=fake.base_url + "/v1")
            for size in sorted(args.sizes):
                work = base / f"update-{size}"
                work.mkdir(parents=True)
                corpus, updated = work / "corpus.jsonl", work / "updated.jsonl"
                documents = write_corpus(corpus, size)
                rewritten = write_updated(corpus, updated, args.share)
                mode = args.check if args.check != "auto" else (
                    "full" if size <= 200_000 else "sample")
                pipeline = pipeline_of(args.dim, args.new)
                expected = {"fresh": expected_rows(corpus, pipeline),
                            "update": expected_rows(updated, pipeline)}
                expected["noop"] = expected["update"]
                run: dict[str, Any] = {"size": size, "documents": documents,
                                       "rewritten_documents": len(rewritten), "check": mode,
                                       "codes": {}}
                result["runs"].append(run)
                servers = {}
                try:
                    for name in codes:
                        (work / name).mkdir()
                        ctx = milvus(work / name / "server", True)
                        servers[name] = (ctx, *ctx.__enter__())
                    for step, source in (("fresh", corpus), ("update", updated),
                                         ("noop", updated)):
                        for name, reference in codes.items():
                            _, uri, pid = servers[name]
                            step_env = {**env, **({"PYTHONPATH": reference} if reference else {})}
                            r = run_step(source, work / name, step_env, uri, pid, args.dim,
                                         step, limit, reserve)
                            if name == "new" or mode == "full":
                                r["rows_check"] = check_rows(uri, expected[step], mode, rewritten)
                            print(name, json.dumps(r), flush=True)
                            run["codes"].setdefault(name, {})[step] = r
                            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
                finally:
                    for ctx, _, _ in servers.values():
                        ctx.__exit__(None, None, None)
                for steps in run["codes"].values():
                    fresh = steps["fresh"]["wall_seconds"]
                    for step in steps.values():
                        step["ratio_to_fresh"] = round(step["wall_seconds"] / fresh, 4)
                    steps["fresh"]["chunks_per_second"] = round(
                        steps["fresh"]["summary"]["chunks_written"] / fresh, 1)
                Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
                if not args.keep:
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    for run in result["runs"]:
        for name, steps in run["codes"].items():
            print(f"{run['size']:>9} {name:>9}: " + ", ".join(
                f"{k} {v['wall_seconds']:.1f} s (x{v.get('ratio_to_fresh', math.nan):.3f})"
                for k, v in steps.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
