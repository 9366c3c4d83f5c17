"""Round 2 of issue 12 (BENCHMARKS.md): every fusion candidate computed from the same two legs.

`dump` saves, for each query of an evaluation set, the dense and BM25 top 100 (id, score) of a
collection already ingested by `situate ingest`, and which candidate ids match each golden chunk;
`score` prints Pass@5/10/20 and the worst margin over the best half of each candidate. `cdbsf` and
`dbsf` are situate's own (`situate.core.fusion`); `minmax` and `rrf` (k = 60) are the references.
Round 3: the dump also keeps each leg's own scores of the other leg's candidates it did not return
(`MilvusStore.leg_scores`), and `xcdbsf` / `xdbsf` fuse with them instead of the lowest z.

    .venv/bin/python benchmarks/fusion_offline.py dump EVAL COLLECTION OUT.json [--embedder minilm]
    .venv/bin/python benchmarks/fusion_offline.py score OUT.json
"""

from __future__ import annotations

import argparse
import json

from situate.core.fusion import RRF_K, cdbsf, dbsf
from situate.tasks.retrieval.metrics import pass_at_k_of_ranks

KS = (5, 10, 20)


def _minmax(legs):
    fused: dict[str, float] = {}
    for leg in legs:
        lo, hi = min(s for _, s in leg), max(s for _, s in leg)
        for i, s in leg:
            fused[i] = fused.get(i, 0.0) + ((s - lo) / (hi - lo) if hi > lo else 0.0)
    return sorted(fused.items(), key=lambda t: -t[1])


def _rrf(legs):
    fused: dict[str, float] = {}
    for leg in legs:
        for rank, (i, _) in enumerate(leg, start=1):
            fused[i] = fused.get(i, 0.0) + 1 / (RRF_K + rank)
    return sorted(fused.items(), key=lambda t: -t[1])


CANDIDATES = {"dense": lambda legs, x: legs[0], "bm25": lambda legs, x: legs[1],
              "dbsf": lambda legs, x: dbsf(legs), "cdbsf": lambda legs, x: cdbsf(legs),
              "minmax": lambda legs, x: _minmax(legs), "rrf": lambda legs, x: _rrf(legs),
              # round 3: the candidates a leg did not return scored by that leg (dumps with extras)
              "xdbsf": dbsf, "xcdbsf": cdbsf}


def dump(eval_set: str, collection: str, out: str, embedder: str) -> None:
    from situate.core.settings import get_settings
    from situate.storage.milvus import MilvusStore
    from situate.tasks.embedders.base import Embedders
    from situate.tasks.retrieval.metrics import load_eval_set

    store = MilvusStore(get_settings().milvus_uri)
    store.load(collection)
    model = Embedders().get(embedder)
    rows = []
    queries = load_eval_set(eval_set)
    vectors = model.embed_queries([q.query for q in queries])  # one batch, not one call a query
    for q, vector in zip(queries, vectors, strict=True):
        legs = {m: store.leg_search(collection, m, q.query, vector, 100) for m in ("dense", "bm25")}
        hits = {h.id: h for leg in legs.values() for h in leg}
        # round 3: each leg's own scores of the other leg's candidates it did not return
        returned = {m: {h.id for h in leg} for m, leg in legs.items()}
        extras = {m: store.leg_scores(collection, m, q.query, vector,
                                      [i for i in hits if i not in returned[m]])
                  for m in ("dense", "bm25")}
        rows.append({"dense": [(h.id, h.score) for h in legs["dense"]],
                     "bm25": [(h.id, h.score) for h in legs["bm25"]],
                     "extra_dense": extras["dense"], "extra_bm25": extras["bm25"],
                     "golden": [[i for i, h in hits.items() if g.matches(h.doc_id, h.text)]
                                for g in q.golden]})
    with open(out, "w") as f:
        json.dump(rows, f)


def score(path: str) -> dict[str, dict[int, float]]:
    with open(path) as f:
        rows = json.load(f)
    results = {}
    for name, fuse in CANDIDATES.items():
        if name.startswith("x") and "extra_dense" not in rows[0]:
            continue
        ranks = []
        for r in rows:
            extras = [r.get("extra_dense", {}), r.get("extra_bm25", {})]
            order = {i: n for n, (i, _) in enumerate(fuse([r["dense"], r["bm25"]], extras),
                                                     start=1)}
            ranks.append([min((order[i] for i in ids if i in order), default=None)
                          for ids in r["golden"]])
        results[name] = {k: pass_at_k_of_ranks(ranks, k) for k in KS}
    for name, p in results.items():
        margin = min(p[k] - max(results["dense"][k], results["bm25"][k]) for k in KS)
        print(f"{name:8s} " + " / ".join(f"{p[k]:.2f}" for k in KS) + f"   margin {margin:+.2f}")
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("eval_set")
    d.add_argument("collection")
    d.add_argument("out")
    d.add_argument("--embedder", default="minilm")
    sub.add_parser("score").add_argument("path")
    args = ap.parse_args()
    if args.command == "dump":
        dump(args.eval_set, args.collection, args.out, args.embedder)
    else:
        score(args.path)


if __name__ == "__main__":
    main()
