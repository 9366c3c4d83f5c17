"""What an evaluation reports, as types: per collection, Pass@k and latency per mode, each query's
golden ranks and the failure analysis; across collections, the set of them. The JSON report, the
history, the table and Markdown artifacts, the console print and the chart are views of these
(`situate.tasks.retrieval.report`, `situate.tasks.retrieval.chart`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from situate.core.output import write_json
from situate.tasks.retrieval.interval import Significance


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")  # history files of older releases still read


class Latency(_Record):
    """Per-query wall time, milliseconds."""

    median: float = 0.0
    p95: float = 0.0


class DocRef(_Record):
    doc_id: str = ""
    source: str = ""


class FirstHit(DocRef):
    """What ranked first for a query every mode missed."""

    original_id: str = ""
    same_document: bool = False
    snippet: str = ""


class Missed(_Record):
    """A query every mode missed at k, and what ranked first instead."""

    query: str
    golden: list[DocRef]
    first_mode: str
    first: FirstHit | None = None


class MissSources(_Record):
    """Golden chunks (not queries) by which retriever never ranked them in its top k."""

    golden_chunks: int = 0
    dense_only: int = 0
    bm25_only: int = 0
    both: int = 0

    @property
    def found_by_both(self) -> int:
        return self.golden_chunks - self.dense_only - self.bm25_only - self.both


class Failures(_Record):
    """Where retrieval fails at the largest k: the queries every mode missed (the first few
    listed) and, when dense and BM25 both ran, where the golden chunks were lost."""

    k: int
    queries_missed: int = 0
    listed: list[Missed] = []
    sources: MissSources | None = None


class QueryRanks(_Record):
    """One query: its golden documents, each golden chunk's rank per mode (None: not in the top
    of the largest k), the document each mode ranked first, and the ids of the chunks each mode
    returned, in order (what every face of search returns for the same query)."""

    query: str
    golden: list[str]
    ranks: dict[str, list[int | None]]
    first: dict[str, str | None]
    hits: dict[str, list[str]] = {}


class Comparison(_Record, Significance):
    """`b` minus `a` in points of Pass@k at `k` on the same queries (two modes of a collection, or
    one mode of two collections): the mean paired difference, its 95% bootstrap interval and a
    paired randomization test's p-value (`situate.tasks.retrieval.stats`)."""

    a: str
    b: str
    k: int
    difference: float
    low: float
    high: float
    p: float

    @property
    def label(self) -> str:
        return f"{self.b} − {self.a}"


PUBLIC_KEYS = ("collection", "queries", "pass_at_k", "intervals", "metrics", "differences",
               "latency_ms", "failures", "per_query")


class CollectionEvaluation(_Record):
    """Every mode over one collection."""

    collection: str
    queries: int
    pass_at_k: dict[str, dict[str, float]]  # mode -> str(k) -> percent
    latency_ms: dict[str, Latency]
    # mode -> str(k) -> [low, high]: the 95% bootstrap interval of Pass@k over queries (percent)
    intervals: dict[str, dict[str, list[float]]] = {}
    # mode -> "recall@k" | "mrr@k" | "ndcg@k" -> 0..1, by ir-measures (`situate.tasks.retrieval.ir`)
    metrics: dict[str, dict[str, float]] = {}
    differences: list[Comparison] = []  # each pair of modes, at each k
    failures: Failures
    eval_set: str = ""
    embedder: str = ""
    reranker: str | None = None
    seconds: float = 0.0
    finished: str = ""
    per_query: list[QueryRanks] = []
    chart: str = ""  # the PNG kept beside the history JSON

    @property
    def ks(self) -> list[int]:
        return [int(k) for k in next(iter(self.pass_at_k.values()), {})]

    def public(self) -> dict[str, object]:
        """The `--json` report of one collection."""
        return self.model_dump(mode="json", include=set(PUBLIC_KEYS))

    def write_history(self, stem: Path) -> None:
        stem.with_suffix(".json").write_text(self.model_dump_json(indent=2))

    @staticmethod
    def previous(results_dir: Path, collection: str) -> CollectionEvaluation | None:
        """The last evaluation of `collection` kept in `results_dir`, if readable."""
        history = sorted(results_dir.glob(f"evaluate-{collection}-*.json"))
        if not history:
            return None
        try:
            return CollectionEvaluation.model_validate_json(history[-1].read_text())
        except (OSError, ValueError):
            return None


class Evaluation(_Record):
    """One evaluation run: one or several collections on the same evaluation set."""

    eval_set: str
    queries: int
    collections: list[CollectionEvaluation]
    chart: str = ""  # the run's chart: one collection's own, or the comparison
    comparisons: list[Comparison] = []  # each later collection against the first, per mode and k

    @property
    def several(self) -> bool:
        return len(self.collections) > 1

    @property
    def collection(self) -> str:
        return ",".join(c.collection for c in self.collections)

    def only(self) -> CollectionEvaluation:
        """The one collection evaluated (an error to ask when there were several)."""
        if self.several:
            raise ValueError(f"{len(self.collections)} collections were evaluated")
        return self.collections[0]

    def public(self) -> dict[str, object]:
        """What `--json OUT` writes: one collection's report, or {collections: {name: report},
        queries} for several."""
        if not self.several:
            return self.only().public()
        return {"collections": {c.collection: c.public() for c in self.collections},
                "queries": self.queries,
                "comparisons": [c.model_dump(mode="json") for c in self.comparisons]}

    def write_json(self, out: str | None, chart: bytes) -> None:
        """The public report at `out` and the chart beside it (`OUT.png`), when `out` is given."""
        target = write_json(self.public(), out)
        if target is not None:
            target.with_suffix(".png").write_bytes(chart)
