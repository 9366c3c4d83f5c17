"""The evaluation's failure analysis, latency, chart and multi-collection comparison: hand-made
cases with known ranks, a PNG decoded back, and the sample corpus evaluated as two collections."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import pytest

from situate.core.errors import InputError
from situate.core.records import Hit
from situate.tasks.retrieval.metrics import EvalQuery, Golden, golden_ranks, latency_ms, miss_sources
from situate.tasks.retrieval.report import summary_text
from tests.conftest import SAMPLE_CORPUS, SAMPLE_EVAL

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def hit(doc_id: str, text: str, path: str = "") -> Hit:
    return Hit(id=f"{doc_id}:{text}", doc_id=doc_id, index=0, text=text, context="", score=1.0,
               metadata={"relative_path": path} if path else {})


def _decode(png: bytes) -> tuple[int, int, int]:
    """(width, height, distinct colours) of a PNG, read back with matplotlib's own reader."""
    from matplotlib.image import imread

    pixels = imread(io.BytesIO(png), format="png")
    flat = {tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::97].tolist()}
    return pixels.shape[1], pixels.shape[0], len(flat)


def test_golden_ranks_are_one_based_and_none_past_the_list():
    golden = [Golden(content="b"), Golden(content="z"), Golden(doc_id="d2", quote="needle")]
    retrieved = [("d1", "a"), ("d1", "b "), ("d2", "hay needle"), ("d1", "b")]
    assert golden_ranks(golden, retrieved) == [2, None, 3]
    assert golden_ranks(golden, []) == [None, None, None]


def test_miss_sources_count_golden_chunks_by_the_retriever_that_lost_them():
    dense = [[1, None], [None], [None, 4], [2]]
    bm25 = [[None, 3], [None], [5, None], [1]]
    # chunk by chunk: (1,None) bm25 only; (None,3) dense only; (None,None) both;
    # (None,5) dense only; (4,None) bm25 only; (2,1) found by both.
    assert miss_sources(dense, bm25) == {"golden_chunks": 6, "dense_only": 2, "bm25_only": 2, "both": 1}


def test_latency_median_and_nearest_rank_p95_in_milliseconds():
    assert latency_ms([0.001 * i for i in range(1, 21)]) == {"median": 10.5, "p95": 19.0}
    assert latency_ms([0.004, 0.002, 0.003]) == {"median": 3.0, "p95": 4.0}
    assert latency_ms([]) == {"median": 0.0, "p95": 0.0}


def _case():
    """Three queries, two modes with known ranks: q0 found by both, q1 by BM25 only, q2 by none."""
    queries = [EvalQuery("where is alpha", (Golden(content="alpha", doc_id="a.py", source="src/a.py"),)),
               EvalQuery("where is beta", (Golden(content="beta", doc_id="b.py"),)),
               EvalQuery("where | is gamma", (Golden(content="gamma", doc_id="g.py"),
                                              Golden(content="gamma2", doc_id="g.py")))]
    ranks = {"dense": [[1], [None], [None, None]], "bm25": [[2], [1], [None, None]]}
    firsts = {"dense": [hit("a.py", "alpha"), hit("x.py", "wrong"), hit("y.py", "decoy | pipe")],
              "bm25": [hit("z.py", "z"), hit("b.py", "beta"),
                       hit("w.py", "fn wrong_one() { " + "x" * 300 + " }", path="lib/w.rs")]}
    return queries, ranks, firsts


def test_failure_analysis_lists_the_queries_every_mode_missed():
    from situate.tasks.retrieval.failures import failure_analysis

    queries, ranks, firsts = _case()
    f = failure_analysis(queries, ranks, firsts, k=10)
    assert f.k == 10 and f.queries_missed == 1
    [e] = f.listed
    assert e.query == "where | is gamma"
    assert [g.doc_id for g in e.golden] == ["g.py", "g.py"]
    # No hybrid ran, so the first mode's top hit is what ranked first instead.
    assert e.first_mode == "dense" and e.first.doc_id == "y.py"
    # Golden chunks: alpha found by both; beta missed by dense only; gamma, gamma2 missed by both.
    assert f.sources.model_dump() == {"golden_chunks": 4, "dense_only": 1, "bm25_only": 0, "both": 2}

    ranks["hybrid"] = [[1], [1], [None, None]]
    firsts["hybrid"] = firsts["bm25"]
    f = failure_analysis(queries, ranks, firsts, k=10)
    e = f.listed[0]
    assert e.first_mode == "hybrid" and e.first.source == "lib/w.rs"
    assert len(e.first.snippet) <= 160 and e.first.snippet.endswith("...")

    # A hit from the golden document under another id (the corpus kept the benchmark's uuid):
    # the same document, its path taken from the evaluation set.
    firsts["hybrid"] = firsts["hybrid"][:2] + [
        Hit(id="h", doc_id="doc_7", index=3, text="gamma3", context="", score=1.0,
            metadata={"original_uuid": "a.py"})]
    e = failure_analysis(queries, ranks, firsts, k=10).listed[0]
    assert e.first.same_document is False and e.first.source == "src/a.py"
    queries[2] = EvalQuery("where | is gamma", (Golden(content="gamma", doc_id="a.py", source="src/a.py"),))
    e = failure_analysis(queries, ranks, firsts, k=10).listed[0]
    assert e.first.same_document is True and e.first.source == "src/a.py"
    assert e.first.doc_id == "doc_7"

    no_bm25 = failure_analysis(queries, {"dense": ranks["dense"]}, {"dense": firsts["dense"]}, k=10)
    assert no_bm25.queries_missed == 2 and no_bm25.sources is None


def test_failure_listing_is_bounded_and_says_how_many_more():
    from situate.tasks.retrieval.failures import failure_analysis
    from situate.tasks.retrieval.report import failures_markdown

    queries = [EvalQuery(f"q{i}", (Golden(content=f"c{i}", doc_id=f"d{i}"),)) for i in range(30)]
    ranks = {"dense": [[None]] * 30, "bm25": [[None]] * 29 + [[3]]}
    firsts = {"dense": [hit("x", "x")] * 30, "bm25": [None] * 30}
    f = failure_analysis(queries, ranks, firsts, k=5, listed=4)
    assert f.queries_missed == 29 and len(f.listed) == 4
    text = "\n".join(failures_markdown(f, 30))
    assert "29 of 30 queries" in text and "25 more" in text
    assert re.findall(r"^\| (q\d+) \|", text, re.M) == ["q0", "q1", "q2", "q3"]


def test_the_console_lists_the_missed_queries_bounded():
    """`situate evaluate` prints the queries every mode missed, each with its golden document: the
    first CONSOLE_LISTED, then how many more and where every one is."""
    from situate.tasks.retrieval.failures import failure_analysis
    from situate.tasks.retrieval.report import CONSOLE_LISTED, missed_lines

    queries = [EvalQuery(f"query  number\n{i}", (Golden(content=f"c{i}", doc_id=f"d{i}",
                                                       source=f"src/d{i}.py"),)) for i in range(30)]
    ranks = {"dense": [[None]] * 30, "bm25": [[None]] * 29 + [[3]]}
    firsts = {"dense": [hit("x", "x")] * 30, "bm25": [None] * 30}
    lines = missed_lines(failure_analysis(queries, ranks, firsts, k=5))
    assert lines[:2] == ["  - query number 0 (golden: src/d0.py)",
                         "  - query number 1 (golden: src/d1.py)"]
    assert len(lines) == CONSOLE_LISTED + 1
    assert lines[-1].startswith(f"  … and {29 - CONSOLE_LISTED} more (the JSON report lists")
    few = failure_analysis(queries[:3], {"dense": [[None]] * 3}, {"dense": [None] * 3}, k=5)
    assert len(missed_lines(few)) == 3  # all of them, nothing more to say
    none = failure_analysis(queries[:1], {"dense": [[1]]}, {"dense": [None]}, k=5)
    assert missed_lines(none) == []


def test_benchmark_golden_chunks_know_their_document_and_path():
    from situate.tasks.retrieval.metrics import load_eval_set
    from tests.conftest import CODEBASE

    first = load_eval_set(CODEBASE / "evaluation_set.jsonl")[0]
    assert first.golden[0].doc_id == "5e4c01057a10732d34784af2a97bee9d173863f043b9901de8ef7f57bc590145"
    assert first.golden[0].source == "/libafl/src/executors/differential.rs"


def test_golden_document_paths_are_optional_and_odd_shapes_are_ignored(tmp_path):
    from situate.tasks.retrieval.metrics import load_eval_set

    p = tmp_path / "e.jsonl"
    lines = [{"query": "q1", "golden_chunks": [{"content": "c", "doc_uuid": "u"}], "golden_documents": 5},
             {"query": "q2", "golden_chunks": [{"content": "c", "doc_uuid": "u"}],
              "golden_documents": ["junk", {"uuid": "v", "meta": "m"},
                                   {"uuid": "u", "meta": {"relative_path": "/x.py"}}]}]
    p.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second = load_eval_set(p)
    assert first.golden[0] == Golden(content="c", doc_id="u")
    assert second.golden[0] == Golden(content="c", doc_id="u", source="/x.py")


def test_markdown_report_embeds_the_chart_and_the_failure_tables():
    from situate.tasks.retrieval.chart import pass_at_k_chart
    from situate.tasks.retrieval.evaluation import CollectionEvaluation
    from situate.tasks.retrieval.failures import failure_analysis
    from situate.tasks.retrieval.report import markdown_report

    queries, ranks, firsts = _case()
    result = CollectionEvaluation.model_validate(
        {"collection": "c", "queries": 3, "eval_set": "e.jsonl", "embedder": "hash",
         "seconds": 1.0, "pass_at_k": {"dense": {"1": 33.33, "10": 33.33},
                                       "bm25": {"1": 33.33, "10": 66.67}},
         "latency_ms": {"dense": {"median": 4.26, "p95": 9.5}, "bm25": {"median": 1.0, "p95": 2.0}},
         "failures": failure_analysis(queries, ranks, firsts, k=10)})
    chart = pass_at_k_chart({"c": result.pass_at_k}, [1, 10], "t")
    text = markdown_report(result, None, chart)
    uri = re.search(r"!\[[^\]]*\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", text)
    assert uri and base64.b64decode(uri.group(1)) == chart
    assert "| dense | 33.33 | 33.33 | 4.3 | 9.5 |" in text  # latencies to a tenth of a ms
    # The query's pipe is escaped so that the table keeps three columns.
    assert "| where \\| is gamma | `g.py` | `y.py`: decoy \\| pipe |" in text
    assert "| missed by dense only (BM25 found it) | 1 |" in text
    assert "| missed by both | 2 |" in text and "| all golden chunks | 4 |" in text


def test_chart_is_a_png_with_bars_and_grows_with_the_collections():
    from situate.tasks.retrieval.chart import pass_at_k_chart

    scores = {"dense": {"5": 60.0, "10": 70.0}, "bm25": {"5": 80.0, "10": 85.0},
              "hybrid": {"5": 82.0, "10": 90.0}}
    one = pass_at_k_chart({"a": scores}, [5, 10], "Pass@k on a")
    assert one[:8] == PNG_MAGIC
    width, height, colours = _decode(one)
    assert width >= 600 and height >= 400 and colours > 5  # not a blank canvas
    three = pass_at_k_chart({"a": scores, "b": scores, "c": scores}, [5, 10], "compared")
    assert three[:8] == PNG_MAGIC and _decode(three)[0] > width


@pytest.mark.parametrize("high", [1.63, 20.0, 60.0])  # 20: the "n.s." row reaches furthest
def test_every_label_of_the_chart_is_inside_the_figure(high):
    """Every text the chart draws (titles, tick labels, bar labels, the legend, each difference's
    figures and "n.s.") lies inside the figure and inside or beside each panel, never across its
    frame, with a long interval too: the differences' figures, placed after an interval's end,
    ran over the panel's right edge."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from situate.tasks.retrieval.chart import pass_at_k_figure
    from situate.tasks.retrieval.evaluation import Comparison

    scores = {"codebase": {"dense": {"5": 68.41, "10": 74.13, "20": 83.37},
                           "bm25": {"5": 82.73, "10": 87.87, "20": 90.36},
                           "hybrid": {"5": 81.87, "10": 88.0, "20": 90.84}}}
    differences = [Comparison(a=a, b="hybrid", k=k, difference=d, low=lo, high=hi, p=p)
                   for a, d, lo, hi, p in (("bm25", -0.86, -3.48, high, 0.25),
                                           ("dense", 13.46, 9.02, 18.2, 0.0))
                   for k in (5, 10, 20)]
    fig = pass_at_k_figure(scores, [5, 10, 20], "Pass@k on codebase, 248 queries",
                           differences=differences)
    canvas = FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    drawn = []  # the Text artists the renderer is asked to draw (not ticks outside the view)
    draw_text = renderer.draw_text

    def record(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if mtext is not None and s.strip():
            drawn.append(mtext)
        return draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = record
    fig.draw(renderer)
    said = {t.get_text() for t in drawn}
    assert any("n.s." in s for s in said) and any("p=0.000" in s for s in said)
    box = fig.bbox
    extents = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn]
    outside = [(text, e.bounds) for text, e in extents
               if not (box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1)]
    assert outside == [], (box.bounds, outside)
    # Nor across a panel's frame: a label is in a panel or beside it (the differences' figures
    # were drawn from an interval's end on, over the panel's right edge).
    panels = [ax.get_window_extent(renderer) for ax in fig.axes]
    across = [(text, e.bounds) for text, e in extents for p in panels
              if e.overlaps(p) and not (p.x0 <= e.x0 and e.x1 <= p.x1 and p.y0 <= e.y0
                                        and e.y1 <= p.y1)]
    assert across == [], across


def test_split_collections_refuses_empty_and_repeated_names():
    from situate.pipeline.options import split_collections

    assert split_collections("a, b_2,c") == ["a", "b_2", "c"]
    with pytest.raises(InputError, match="empty name"):
        split_collections("a,,b")
    with pytest.raises(InputError, match="'a' twice"):
        split_collections("a,b,a")
    with pytest.raises(InputError, match="invalid collection name 'bad-name'"):
        split_collections("a,bad-name")


@pytest.mark.slow
def test_two_collections_are_evaluated_and_compared(prefect_harness, state):
    """The ablation a user runs: the sample corpus with structural contexts and without, one
    evaluation over both, one comparison chart."""
    from situate.tasks.retrieval.metrics import load_eval_set
    from tests.helpers import evaluate, ingest

    for name, context in (("with_ctx", "structural"), ("no_ctx", "none")):
        ingest(corpus=str(SAMPLE_CORPUS), collection=name, context=context, embedder="hash")
    out = Path(state["results_dir"]) / "out" / "both.json"
    result = evaluate(eval_set=str(SAMPLE_EVAL), collection="with_ctx,no_ctx", json_out=str(out))
    n = len(load_eval_set(SAMPLE_EVAL))

    assert result.collection == "with_ctx,no_ctx"
    assert [c.collection for c in result.collections] == ["with_ctx", "no_ctx"]
    by_name = {c.collection: c for c in result.collections}
    saved = json.loads(out.read_text())
    assert saved["queries"] == n and list(saved["collections"]) == ["with_ctx", "no_ctx"]
    for name, r in saved["collections"].items():
        assert r["collection"] == name and set(r["pass_at_k"]) == {"dense", "bm25", "hybrid"}
        assert r["pass_at_k"] == by_name[name].pass_at_k
        assert all(v["median"] > 0 and v["p95"] >= v["median"] for v in r["latency_ms"].values())
        assert len(r["per_query"]) == n
        # Pass@k recomputed from the stored ranks is the Pass@k reported.
        for mode, by_k in r["pass_at_k"].items():
            for k, value in by_k.items():
                share = [sum(1 for x in q["ranks"][mode] if x is not None and x <= int(k))
                         / len(q["ranks"][mode]) for q in r["per_query"]]
                assert value == pytest.approx(100 * sum(share) / n, abs=0.01)
    # The two collections differ only in their contexts, and the contexts change the ranking.
    assert saved["collections"]["with_ctx"]["per_query"] != saved["collections"]["no_ctx"]["per_query"]

    chart = out.with_suffix(".png").read_bytes()
    assert chart[:8] == PNG_MAGIC and chart == Path(result.chart).read_bytes()
    results = Path(state["results_dir"])
    for name in ("with_ctx", "no_ctx"):
        [history] = results.glob(f"evaluate-{name}-*.json")
        assert history.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC
        assert json.loads(history.read_text())["per_query"] == saved["collections"][name]["per_query"]
    text = summary_text(result)
    assert "with_ctx" in text and "no_ctx" in text and "median ms" in text

    from tests.test_flows import _artifact

    comparison = _artifact("evaluation-comparison-with-ctx-no-ctx")
    assert "data:image/png;base64," in comparison.data
    assert "| no_ctx | hybrid |" in comparison.data

    # A missing collection fails before any is evaluated: no new history for the first.
    from situate.core.errors import StoreError

    with pytest.raises(StoreError, match="'not_ingested' not found"):
        evaluate(eval_set=str(SAMPLE_EVAL), collection="with_ctx,not_ingested")
    assert len(list(results.glob("evaluate-with_ctx-*.json"))) == 1


class _RecordingStore:
    """A store that answers every search with one hit naming the query, and keeps what it got."""

    uri = "memory"

    def __init__(self) -> None:
        self.searches: list[tuple[str, str, list[float] | None, int]] = []

    def require(self, collection):
        pass

    def describe(self, collection):
        from situate.core.records import CollectionInfo

        return CollectionInfo(64, "hash:bow-64")

    def leg_search(self, collection, leg, query, vector, limit):
        self.searches.append((leg, query, vector, limit))
        return [hit(f"doc-{query}", query)]

    def leg_scores(self, collection, leg, query, vector, ids):
        return {}

    def ranking(self, collection, leg, query, vector, limit):
        found = self.leg_search(collection, leg, query, vector, limit)
        self.found = {**getattr(self, "found", {}), **{h.id: h for h in found}}
        return [(h.id, h.score) for h in found]

    def hits(self, collection, ranked):
        import dataclasses

        return [dataclasses.replace(self.found[i], score=s) for i, s in ranked]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_evaluation_handles_and_times_each_query_alone(mode, batch, embedders):
    """The evaluate flow's retrieval: each query searched through the Retriever as an app's is
    (`batch` at a time: 2 makes a batch of two and one of one), each query's hits in its place,
    timed, after the retriever's warm-up (which searches no user query)."""
    from situate.api.retriever import WARM_UP_QUERY, Retriever
    from situate.flows.evaluate import retrieve_task
    from tests.fakes.hash_embedding import HashEmbedding

    store = _RecordingStore()
    retriever = Retriever.over(store, "c", embedders=embedders, mode=mode)
    retriever.warm(mode)
    assert {q for _, q, _, _ in store.searches} == {WARM_UP_QUERY}
    store.searches.clear()
    queries = ["alpha beta", "gamma", "delta epsilon zeta"]
    advanced: list[int] = []
    hits, seconds = retrieve_task.fn(retriever, "c", queries, mode, 7, advanced.append,
                                     batch=batch)
    assert [[h.doc_id for h in hs] for hs in hits] == [[f"doc-{q}"] for q in queries]
    assert len(seconds) == 3 and all(0 < s < 60 for s in seconds)
    assert advanced == ([1, 1, 1] if batch == 1 else [2, 1])
    # hybrid: each leg searched to the fusion's depth, per query (queries of a batch, and a
    # query's two legs, at the same time: in any order)
    legs = [("dense", 100), ("bm25", 100)] if mode == "hybrid" else [(mode, 7)]
    assert sorted((m, q, limit) for m, q, _, limit in store.searches) == sorted(
        (m, q, limit) for q in queries for m, limit in legs)
    # Each dense search with its query's own vector, embedded as a query on its own; BM25 none.
    assert [v for _, _, v, _ in store.searches] == [
        None if m == "bm25" else HashEmbedding()._one(q) for m, q, _, _ in store.searches]
    from situate.core.errors import InputError

    for bad in (0, 257, True, "8"):
        with pytest.raises(InputError, match="not a number of queries"):
            retriever.search_many(queries, 7, mode, batch=bad)


@pytest.mark.slow
@pytest.mark.soak  # the soak tier (`make test-soak`): see README, Tests
def test_cli_compares_comma_separated_collections(tmp_path):
    """`situate evaluate --collection a,b` through the real CLI: both evaluated, one chart; a
    repeated name is one line before anything runs."""
    from tests.test_flows import _cli

    for name, context in (("a", "structural"), ("b", "none")):
        r = _cli("ingest", str(SAMPLE_CORPUS), "--collection", name, "--context", context,
                 cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    out = tmp_path / "both.json"
    r = _cli("evaluate", str(SAMPLE_EVAL), "--collection", "a,b", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(json.loads(out.read_text())["collections"]) == ["a", "b"]
    assert out.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC
    assert "Traceback" not in r.stderr
    r = _cli("evaluate", str(SAMPLE_EVAL), "--collection", "a,a", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == ("situate evaluate: error: --collection names 'a' twice: give each "
                                "collection once")
