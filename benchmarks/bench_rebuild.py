"""The rebuild that keeps a collection searching like a fresh one (issue 21): its time at 10k and
100k rows against the time of the ingest that triggered it.

For each size, a generated corpus (`bench_scale.write_corpus`: JSONL documents of 8 chunks) and a
drifted copy of it (every third document's text drawn again, 5 documents missing, 8 stray ones),
then the real commands, each in a fresh process, with embeddings from the loopback OpenAI fake
(1536-d, answered at once) so the figures measure situate and Milvus, not a model:

    situate ingest drifted.jsonl --collection drift --context structural --embedder openai
    situate ingest corpus.jsonl  --collection drift --context structural --embedder openai --prune

The second command is the scheduled update: it rewrites the changed third, adds and prunes, and
rebuilds the collection from its own rows (no context, no embedding). Reported: the update's wall
time, its write phase and its rebuild (from its `--json` summary), and the rebuild's share of
the update (`--rebuild-at 0`: every update rebuilt, as before issue 35's policy). The store is a
Milvus Lite file inside the command, or with `--server` a
`milvus-lite server` process.

    .venv/bin/python benchmarks/bench_rebuild.py 10000 100000 [--server] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import _VOCABULARY, milvus, write_corpus  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402


def write_drifted(corpus: Path, out: Path, seed: int = 21) -> dict[str, int]:
    """The drifted copy of a `write_corpus` file: every third document's words drawn again (same
    length and paragraphs), 5 missing, 8 strays (other documents' text under new ids)."""
    rng = random.Random(seed)
    docs = [json.loads(line) for line in corpus.read_text().splitlines()]
    missing = set(rng.sample([d["id"] for i, d in enumerate(docs) if i % 3], 5))
    edited = 0
    with out.open("w") as f:
        for i, doc in enumerate(docs):
            if doc["id"] in missing:
                continue
            if i % 3 == 0:
                doc = {**doc, "text": "\n\n".join(
                    " ".join(rng.choice(_VOCABULARY) for _ in p.split()) + "."
                    for p in doc["text"].split("\n\n"))}
                edited += 1
            f.write(json.dumps(doc) + "\n")
        for k, source in enumerate(rng.sample(docs, 8)):
            f.write(json.dumps({"id": f"stray-{k}", "text": source["text"],
                                "metadata": {"title": f"stray {k}"}}) + "\n")
    return {"edited": edited, "missing": len(missing), "stray": 8}


def ingest(corpus: Path, work: Path, env: dict[str, str], uri: str | None, *extra: str) -> dict:
    """One `situate ingest` in a fresh process; its wall time and its JSON summary."""
    situate = Path(sys.executable).with_name("situate")
    summary = work / f"summary-{time.monotonic_ns()}.json"
    cmd = [str(situate), "ingest", str(corpus), "--collection", "drift", "--context", "structural",
           "--embedder", "openai", "--json", str(summary), *extra]
    run_env = {**env, "SITUATE_MILVUS_URI": uri or str(work / "milvus.db"),
               "SITUATE_CACHE_DIR": str(work / "cache"), "PREFECT_HOME": str(work / "prefect")}
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=run_env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"situate ingest failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(summary.read_text())
    out["wall_seconds"] = round(seconds, 2)
    out["tracebacks_in_output"] = (proc.stdout + proc.stderr).count("Traceback")
    return out


def measure(size: int, tmp: Path, env: dict[str, str], server: bool) -> dict:
    work = tmp / f"rebuild-{size}"
    work.mkdir()
    corpus, drifted = work / "corpus.jsonl", work / "drifted.jsonl"
    documents = write_corpus(corpus, size)
    drift = write_drifted(corpus, drifted)
    with milvus(work / "server", server) as (uri, _):
        first = ingest(drifted, work, env, uri)
        update = ingest(corpus, work, env, uri, "--prune", "--rebuild-at", "0")
    rebuild = update["seconds"].get("rebuild", 0.0)
    return {
        "size": size, "documents": documents, "store": "server" if server else "lite-file",
        "drifted_copy": drift, "first_ingest_seconds": first["wall_seconds"],
        "update_seconds": update["wall_seconds"],
        "update_write_seconds": update["seconds"].get("situate+embed+write"),  # before issue 35
        "update_phase_seconds": update["seconds"],
        "rebuild_seconds": rebuild, "rebuild_share_of_update": round(rebuild / update["wall_seconds"], 3),
        "rows": update["rows"], "chunks_written": update["chunks_written"],
        "chunks_deleted": update["chunks_deleted"], "drift_rows": update["drift_rows"],
        "drift_share": update["drift_share"], "rebuilt": update["rebuilt"],
        "tracebacks_in_output": first["tracebacks_in_output"] + update["tracebacks_in_output"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    p.add_argument("--server", action="store_true", help="a `milvus-lite server` process as store")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rebuild.json"))
    args = p.parse_args()
    runs = []
    with FakeOpenAI(api_key="sk-bench-rebuild") as fake, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OPENAI_API_KEY": fake.api_key,
               "OPENAI_BASE_URL": fake.base_url + "/v1"}
        env.pop("ANTHROPIC_API_KEY", None)
        for size in sorted(args.sizes):
            run = measure(size, Path(tmp), env, args.server)
            print(json.dumps(run), flush=True)
            runs.append(run)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}",
              "command": " ".join(["benchmarks/bench_rebuild.py", *map(str, args.sizes),
                                   *(["--server"] if args.server else [])]),
              "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
