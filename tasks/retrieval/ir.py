"""The metrics people know (Recall@k, MRR@k, nDCG@k) computed by ir-measures (trec_eval's own
code, through pytrec_eval), and the run and qrels in TREC format so any IR tool can read them.

Both come from each golden chunk's rank (`metrics.golden_ranks`), the raw data Pass@k is made
of, so every metric is about the same matches: query `q{i}`'s golden chunk j is document
`q{i}-g{j}` (relevance 1); the run ranks it at its rank, and fills every other rank up to the
largest k with a non-relevant `q{i}-r{rank}`. Recall@k is then Pass@k (as a share, not percent);
MRR@k and nDCG@k (binary gains) add where in the top k the golden chunks are. A chunk that matches
two golden chunks of one query puts both at its rank (trec_eval breaks the tie by id, so the
second takes the next position: only then can Recall@k fall below Pass@k).

Why ir-measures rather than ranx: ir-measures needs only pytrec-eval-terrier (a small C wheel)
beside numpy and scipy, which situate already installs; ranx pulls numba, pandas, seaborn,
ir-datasets and more. ir-measures is maintained by the Terrier team and runs trec_eval's code,
the reference IR tools agree with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MEASURES = ("recall", "mrr", "ndcg")


def _measures(ks: Sequence[int]) -> dict[str, Any]:
    from ir_measures import RR, R, nDCG

    named: dict[str, Any] = {}
    for k in ks:
        named[f"recall@{k}"] = R @ k
        named[f"mrr@{k}"] = RR @ k
        named[f"ndcg@{k}"] = nDCG @ k
    return named


def qrels_and_run(ranks: Sequence[Sequence[int | None]], depth: int
                  ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int, float]]]:
    """(qrels, run) of one mode's ranks: qrels as (query, doc, relevance), the run as
    (query, doc, rank, score), `depth` ranks per query."""
    qrels: list[tuple[str, str, int]] = []
    run: list[tuple[str, str, int, float]] = []
    for i, golden in enumerate(ranks):
        qid = f"q{i}"
        at: dict[int, list[str]] = {}
        for j, r in enumerate(golden):
            qrels.append((qid, f"{qid}-g{j}", 1))
            if r is not None and r <= depth:
                at.setdefault(r, []).append(f"{qid}-g{j}")
        for rank in range(1, depth + 1):
            for doc in at.get(rank, [f"{qid}-r{rank}"]):
                run.append((qid, doc, rank, float(depth + 1 - rank)))
    return qrels, run


def ir_metrics(ranks: Sequence[Sequence[int | None]], ks: Sequence[int]) -> dict[str, float]:
    """Recall@k, MRR@k and nDCG@k (0..1) of one mode, averaged over every query (a query with
    no golden chunk counts 0, as in Pass@k)."""
    import ir_measures

    if not ranks:
        return {name: 0.0 for name in _measures(ks)}
    named = _measures(ks)
    qrels, run = qrels_and_run(ranks, max(ks))
    totals = dict.fromkeys(named, 0.0)
    by_measure = {m: name for name, m in named.items()}
    for metric in ir_measures.iter_calc(
            list(named.values()),
            [ir_measures.Qrel(q, d, rel) for q, d, rel in qrels],
            [ir_measures.ScoredDoc(q, d, score) for q, d, _, score in run]):
        totals[by_measure[metric.measure]] += metric.value
    return {name: round(total / len(ranks), 4) for name, total in totals.items()}


def write_trec(directory: str | Path, collection: str,
               ranks: Mapping[str, Sequence[Sequence[int | None]]],
               depth: int) -> list[Path]:
    """`DIR/qrels.txt` (`qid 0 docid rel`) and `DIR/run-<collection>-<mode>.txt` (`qid Q0 docid
    rank score tag`), the formats trec_eval, ir-measures and ranx read."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    qrels_lines: list[str] = []
    for mode, mode_ranks in ranks.items():
        qrels, run = qrels_and_run(mode_ranks, depth)
        if not qrels_lines:
            qrels_lines = [f"{q} 0 {d} {rel}\n" for q, d, rel in qrels]
        path = out / f"run-{collection}-{mode}.txt"
        path.write_text("".join(f"{q} Q0 {d} {rank} {score:g} situate-{mode}\n"
                                for q, d, rank, score in run))
        written.append(path)
    qrels_path = out / "qrels.txt"
    qrels_path.write_text("".join(qrels_lines))
    return [qrels_path, *written]
