"""Ingest wall time against embedding alone, measured in one run on the same machine.

Reference: a fresh Python process that loads the same model (the same builder the pipeline uses,
without Prefect or anything else imported) and embeds the same texts the pipeline embeds
(context + chunk), in the same batch size: the floor of any ingest. Pipeline: the
`situate ingest` command in a fresh process, into a new Milvus Lite file, whole wall time (imports,
the temporary Prefect server, loading, contexts, embedding, writes). Target: pipeline <= 1.3x.

    .venv/bin/python benchmarks/bench_ingest.py [--corpus PATH] [--context structural] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT / "data" / "benchmarks" / "codebase" / "codebase_chunks.json"

REFERENCE = r"""
import json, sys, time
t0 = time.perf_counter()
from situate.tasks.embedders.local import build_minilm
texts, batch = json.load(open(sys.argv[1])), int(sys.argv[2])
model = build_minilm("all-MiniLM-L6-v2", "")
vectors = [v for i in range(0, len(texts), batch) for v in model.encode_documents(texts[i:i + batch])]
assert len(vectors) == len(texts)
print(json.dumps({"inner_seconds": time.perf_counter() - t0, "texts": len(texts)}))
"""


def indexed_texts(corpus: str, context: str) -> list[str]:
    """The exact texts the pipeline embeds, from the same loader and contextualizer."""
    sys.path.insert(0, str(ROOT))
    from situate.core.settings import get_settings
    from situate.tasks.contexts.base import ContextConfig, get_contextualizer
    from situate.tasks.corpus.load import load_corpus

    s = get_settings()
    docs = load_corpus(corpus, s.chunk_size, s.chunk_overlap).documents
    c = get_contextualizer(ContextConfig(name=context))
    return [x.indexed_text for d in docs for x in c.situate(d, d.chunks).situated]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return elapsed, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--context", default="structural")
    ap.add_argument("--repeat", type=int, default=2, help="alternating runs of each; best is kept")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ingest.json"))
    args = ap.parse_args()

    texts = indexed_texts(args.corpus, args.context)
    from situate.core.settings import get_settings

    batch = get_settings().embed_batch
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        env = {**os.environ, "SITUATE_CACHE_DIR": f"{tmp}/cache", "SITUATE_RESULTS_DIR": f"{tmp}/r",
               "HF_HUB_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        env.pop("ANTHROPIC_API_KEY", None)
        reference, pipeline = [], []
        for i in range(args.repeat):
            t, _ = timed([sys.executable, "-c", REFERENCE, str(texts_file), str(batch)], env)
            reference.append(t)
            uri = f"{tmp}/milvus-{i}.db"
            t, out = timed([sys.executable, "-m", "situate.cli.main", "ingest", args.corpus, "--collection",
                            "bench", "--context", args.context, "--milvus-uri", uri], env)
            pipeline.append(t)
            assert " 737" in out or "rows" in out
    result = {
        "corpus": args.corpus,
        "chunks": len(texts),
        "context": args.context,
        "embed_alone_seconds": round(min(reference), 2),
        "ingest_seconds": round(min(pipeline), 2),
        "ratio": round(min(pipeline) / min(reference), 3),
        # Each ingest against the reference run just before it: how much the ratio moves.
        "pair_ratios": [round(p / r, 3) for p, r in zip(pipeline, reference, strict=True)],
        "median_pair_ratio": round(statistics.median(p / r for p, r in zip(pipeline, reference,
                                                                          strict=True)), 3),
        "all_embed_alone": [round(x, 2) for x in reference],
        "all_ingest": [round(x, 2) for x in pipeline],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"embedding alone: {result['embed_alone_seconds']:.1f} s   ingest: "
          f"{result['ingest_seconds']:.1f} s   ratio: {result['ratio']:.2f} (target <= 1.30); "
          f"median of the {args.repeat} pairs: {result['median_pair_ratio']:.2f}")


if __name__ == "__main__":
    main()
