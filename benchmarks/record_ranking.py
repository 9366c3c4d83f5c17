"""Record what a checkout ranks on the codebase benchmark, for `tests/test_nothing_moves.py`.

Ingests the codebase (data/benchmarks/codebase) with the default settings into a Lite file of
its own, then writes, as JSON: the stored rows' ids, sorted, a sha256 over every row's fields but
its vectors (in that order), each dense vector's sum (a change of model, backend or normalisation moves it;
the last bits of a float that another CPU's kernels round otherwise do not), and for each of the
248 queries and each mode (dense, bm25, hybrid) the top 20 hits' ids and scores, as `Retriever`
ranks them (the ranking `situate evaluate` measures: tests/test_search_faces.py), each hit as
its row's place in the ids.

Run it with the interpreter of the checkout to record (its .venv), from anywhere:

    /path/to/checkout/.venv/bin/python benchmarks/record_ranking.py --out tests/data/codebase_ranking.json

`--uri` reads an ingested collection instead of ingesting one (the test passes its own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CODEBASE = Path(__file__).resolve().parents[1] / "data" / "benchmarks" / "codebase"
MODES = ("dense", "bm25", "hybrid")
K = 20
ROW_FIELDS = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash", "chunk_hash",
              "metadata")


def ranking(uri: str, collection: str) -> dict[str, Any]:
    """The rows and the hits of every query in every mode, of `collection` at `uri`."""
    from situate.api import Retriever
    from situate.tasks.retrieval.metrics import load_eval_set

    queries = [q.query for q in load_eval_set(CODEBASE / "evaluation_set.jsonl")]
    with Retriever(collection, uri) as retriever:
        hits = {mode: [[[h.id, round(h.score, 6)] for h in retriever.search(q, K, mode)]
                       for q in queries] for mode in MODES}
        store = retriever._store
        rows = sorted(store.rows(collection, fields=ROW_FIELDS), key=lambda r: r["id"])
        sums = {r["id"]: round(float(sum(r["dense"])), 4)
                for r in store.rows(collection, fields=("id", "dense"))}
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps([row[f] for f in ROW_FIELDS], sort_keys=True,
                                 ensure_ascii=False).encode())
    ids = [row["id"] for row in rows]
    where = {id_: i for i, id_ in enumerate(ids)}
    return {"rows": len(rows), "rows_sha256": digest.hexdigest(), "ids": ids,
            "vector_sums": [sums[i] for i in ids],
            "hits": {mode: [[[where[id_], score] for id_, score in query] for query in queries]
                     for mode, queries in hits.items()}}


def ingest(uri: str, cache: str, collection: str) -> None:
    situate = str(Path(sys.executable).with_name("situate"))
    subprocess.run([situate, "ingest", str(CODEBASE / "codebase_chunks.json"), "--collection",
                    collection, "--milvus-uri", uri, "--cache-dir", cache], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--uri", help="an ingested collection's Milvus URI (default: ingest one)")
    parser.add_argument("--collection", default="codebase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        uri = args.uri
        if uri is None:
            uri = str(Path(scratch) / "milvus.db")
            ingest(uri, str(Path(scratch) / "cache"), args.collection)
        recorded = ranking(uri, args.collection)
    Path(args.out).write_text(json.dumps(recorded, separators=(",", ":")) + "\n")
    print(f"{args.out}: {recorded['rows']} rows, {len(recorded['hits']['hybrid'])} queries")


if __name__ == "__main__":
    main()
