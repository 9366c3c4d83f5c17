"""An evaluation in words: the Pass@k table (polars), the console summary, and the Markdown
reports (one collection, with the change since its previous run, its chart and its failures; or
several collections compared). Views of `situate.tasks.retrieval.evaluation`."""

from __future__ import annotations

import base64

import polars as pl

from situate.tasks.retrieval.evaluation import (
    CollectionEvaluation,
    Comparison,
    DocRef,
    Evaluation,
    Failures,
    MissSources,
)


def pass_at_k_table(result: CollectionEvaluation) -> pl.DataFrame:
    """One row per mode, one `pass@k` column per k."""
    rows = [{"mode": mode, **{f"pass@{k}": v for k, v in scores.items()}}
            for mode, scores in result.pass_at_k.items()]
    return pl.DataFrame(rows)


def summary_text(evaluation: Evaluation) -> str:
    """What `situate evaluate` prints: Pass@k and latency per mode (and collection), then how many
    queries every mode missed and where the missed golden chunks were lost."""
    rows = []
    for r in evaluation.collections:
        for mode, scores in r.pass_at_k.items():
            latency = r.latency_ms.get(mode)
            rows.append({"collection": r.collection, "mode": mode,
                         **{f"pass@{k}": v for k, v in scores.items()},
                         "median ms": latency.median if latency else None,
                         "p95 ms": latency.p95 if latency else None})
    table = pl.DataFrame(rows)
    if not evaluation.several:
        table = table.drop("collection")
    with pl.Config(tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=2, tbl_rows=-1):
        lines = [f"Pass@k (%) on {evaluation.collection}, {evaluation.queries} queries; latency "
                 f"per query (embed + search):\n{table}"]
    lines += uncertainty_text(evaluation)
    for r in evaluation.collections:
        f = r.failures
        where = f"{r.collection}: " if evaluation.several else ""
        line = (f"{where}{f.queries_missed} of {r.queries} queries missed by every mode "
                f"(no golden chunk in any top {f.k})")
        if f.sources:
            s = f.sources
            line += (f"; of {s.golden_chunks} golden chunks, never retrieved by dense only "
                     f"{s.dense_only}, by BM25 only {s.bm25_only}, by both {s.both}")
        lines.append(line)
        lines += missed_lines(f)
    if evaluation.chart:
        lines.append(f"chart: {evaluation.chart}")
    return "\n".join(lines)


# Queries every mode missed that the console lists; the rest are counted ("and N more").
CONSOLE_LISTED = 10


def missed_lines(f: Failures, listed: int = CONSOLE_LISTED) -> list[str]:
    """The queries every mode missed, as the console lists them: the first `listed`, each with its
    golden document, then how many more and where every one is."""
    shown = f.listed[:listed]
    lines = [f"  - {_clipped(e.query, 100)} (golden: "
             f"{', '.join(dict.fromkeys(g.source or g.doc_id for g in e.golden))})" for e in shown]
    more = f.queries_missed - len(shown)
    if more > 0:
        lines.append(f"  … and {more} more (the JSON report lists every query, under "
                     "`per_query`; the Prefect report the first "
                     f"{len(f.listed)})")
    return lines


def _clipped(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _span(span: list[float] | None) -> str:
    return f"[{span[0]:.1f}, {span[1]:.1f}]" if span else ""


def difference_row(d: Comparison) -> str:
    """One paired difference in words: `hybrid − bm25 @5: -0.86 [-3.2, +1.5] p=0.52 n.s.`."""
    return (f"{d.label} @{d.k}: {d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}] p={d.p:.3f}"
            + ("" if d.significant else " n.s."))


def uncertainty_text(evaluation: Evaluation) -> list[str]:
    """The console's intervals, the library metrics and the paired differences."""
    rows = []
    for r in evaluation.collections:
        for mode, spans in r.intervals.items():
            row = {"collection": r.collection, "mode": mode}
            row.update({f"95% CI @{k}": _span(spans.get(k)) for k in spans})
            metrics = r.metrics.get(mode, {})
            k = str(r.ks[-1]) if r.ks else ""
            if metrics and k:
                row.update({f"MRR@{k}": f"{metrics.get(f'mrr@{k}', 0):.3f}",
                            f"nDCG@{k}": f"{metrics.get(f'ndcg@{k}', 0):.3f}"})
            rows.append(row)
    if not rows:
        return []
    table = pl.DataFrame(rows)
    if not evaluation.several:
        table = table.drop("collection")
    with pl.Config(tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True, tbl_rows=-1,
                   fmt_str_lengths=40):
        lines = [f"95% bootstrap intervals of Pass@k over queries; MRR and nDCG (ir-measures):\n"
                 f"{table}"]
    differences = [(r.collection, d) for r in evaluation.collections for d in r.differences]
    differences += [("", d) for d in evaluation.comparisons]
    if differences:
        lines.append("paired differences (points of Pass@k, 95% interval, randomization p; "
                     "n.s.: the interval covers 0):")
        for where, d in differences:
            prefix = f"{where}: " if where and evaluation.several else ""
            lines.append(f"  {prefix}{difference_row(d)}")
    return lines


def differences_markdown(differences: list[Comparison], title: str) -> list[str]:
    if not differences:
        return []
    lines = ["", f"## {title}", "",
             "Paired on the same queries: mean difference in points of Pass@k, its 95% bootstrap "
             "interval (queries resampled) and a paired randomization test's p-value. An interval "
             "that covers 0 is *not significant*: these queries cannot tell the two apart.", "",
             "| difference | k | points | 95% interval | p | |", "|---|---|---|---|---|---|"]
    for d in differences:
        lines.append(f"| {d.label} | {d.k} | {d.difference:+.2f} | [{d.low:+.2f}, {d.high:+.2f}] "
                     f"| {d.p:.3f} | {'' if d.significant else 'not significant'} |")
    return lines


def intervals_markdown(result: CollectionEvaluation) -> list[str]:
    if not result.intervals:
        return []
    ks = [str(k) for k in result.ks]
    lines = ["", "## How sure: 95% intervals and the metrics IR tools report", "",
             "Pass@k's 95% bootstrap interval over queries (seeded); Recall, MRR and nDCG at the "
             "largest k computed by ir-measures (trec_eval), 0 to 1.", "",
             "| mode | " + " | ".join(f"pass@{k} 95% CI" for k in ks)
             + f" | recall@{ks[-1]} | MRR@{ks[-1]} | nDCG@{ks[-1]} |",
             "|" + "---|" * (len(ks) + 4)]
    for mode, spans in result.intervals.items():
        m = result.metrics.get(mode, {})
        lines.append(f"| {mode} | " + " | ".join(_span(spans.get(k)) for k in ks)
                     + f" | {m.get(f'recall@{ks[-1]}', 0):.3f} | {m.get(f'mrr@{ks[-1]}', 0):.3f}"
                     f" | {m.get(f'ndcg@{ks[-1]}', 0):.3f} |")
    return lines


def log_line(r: CollectionEvaluation) -> str:
    """One line of the flow's log per collection evaluated."""
    k = str(r.ks[-1])
    return (f"{r.collection}: " + ", ".join(
        f"{m} pass@{k}={v[k]:.2f} ({r.latency_ms[m].median:.0f} ms)" for m, v in r.pass_at_k.items())
        + f"; {r.failures.queries_missed} queries missed by every mode")


def _doc_label(doc: DocRef) -> str:
    doc_id = doc.doc_id if len(doc.doc_id) <= 24 else doc.doc_id[:12] + "…"
    if doc.source and doc.source != doc.doc_id:
        return f"`{doc.source}` ({doc_id})"
    return f"`{doc_id}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def failures_markdown(f: Failures, queries: int) -> list[str]:
    lines = ["", f"## Queries every mode missed at k = {f.k}", ""]
    if not f.queries_missed:
        return lines + [f"None: every query has a golden chunk in some mode's top {f.k}."]
    lines += [f"{f.queries_missed} of {queries} queries have no golden chunk in the top {f.k} "
              "of any mode.", "",
              f"| query | golden document | ranked first instead ({f.listed[0].first_mode}) |",
              "|---|---|---|"]
    for e in f.listed:
        golden = ", ".join(dict.fromkeys(_doc_label(g) for g in e.golden))
        first = ("nothing" if e.first is None
                 else _doc_label(e.first) + (" (same document)" if e.first.same_document else "")
                 + f": {_cell(e.first.snippet)}")
        lines.append(f"| {_cell(e.query)} | {golden} | {first} |")
    more = f.queries_missed - len(f.listed)
    if more > 0:
        lines += ["", f"… and {more} more (every rank is in the JSON report, under `per_query`)."]
    return lines


def sources_markdown(s: MissSources | None, k: int) -> list[str]:
    if not s:
        return []
    return ["", f"## Where golden chunks are lost (top {k})", "",
            "Counted on golden chunks, not queries: which retriever never ranked each one in its "
            f"top {k}.", "",
            "| golden chunk | count |", "|---|---|",
            f"| found by both dense and BM25 | {s.found_by_both} |",
            f"| missed by dense only (BM25 found it) | {s.dense_only} |",
            f"| missed by BM25 only (dense found it) | {s.bm25_only} |",
            f"| missed by both | {s.both} |",
            f"| all golden chunks | {s.golden_chunks} |"]


def _image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def markdown_report(result: CollectionEvaluation, previous: CollectionEvaluation | None,
                    chart: bytes | None = None) -> str:
    """The `evaluation-report-<collection>` artifact."""
    table = pass_at_k_table(result)
    lines = [f"# Pass@k on `{result.collection}`", "",
             f"{result.queries} queries from `{result.eval_set}`, embedder "
             f"`{result.embedder}`, {result.seconds:.1f} s.", ""]
    header = "| mode | " + " | ".join(c for c in table.columns if c != "mode") + " |"
    latency = result.latency_ms
    if latency:
        header += " median ms | p95 ms |"
    lines += [header, "|" + "---|" * (len(table.columns) + (2 if latency else 0))]
    for row in table.iter_rows(named=True):
        cells = []
        for col in table.columns[1:]:
            k = col.split("@")[1]
            cell = f"{row[col]:.2f}"
            before = previous.pass_at_k.get(row["mode"], {}).get(k) if previous else None
            if before is not None:
                cell += f" ({row[col] - before:+.2f})"
            cells.append(cell)
        if latency:
            ms = latency.get(row["mode"])
            cells += [f"{ms.median if ms else 0:.1f}", f"{ms.p95 if ms else 0:.1f}"]
        lines.append(f"| {row['mode']} | " + " | ".join(cells) + " |")
    if previous:
        lines += ["", f"In brackets: change since the previous run ({previous.finished or '?'})."]
    else:
        lines += ["", "First evaluation of this collection: nothing to compare with yet."]
    if latency:
        lines += ["", "Latency: wall time per query, each embedded alone as a user's would be, "
                  "then searched (and reranked); median and 95th percentile."]
    lines += intervals_markdown(result)
    lines += differences_markdown(result.differences, "Modes compared")
    if chart:
        lines += ["", _image(chart, f"Pass@k of {result.collection} per mode and k")]
    lines += failures_markdown(result.failures, result.queries)
    lines += sources_markdown(result.failures.sources, result.failures.k)
    return "\n".join(lines)


def comparison_markdown(evaluation: Evaluation, chart: bytes) -> str:
    """The Markdown artifact of a multi-collection evaluation: one table, one chart."""
    first = evaluation.collections[0]
    ks = [str(k) for k in first.ks]
    names = ", ".join(f"`{r.collection}`" for r in evaluation.collections)
    lines = [f"# Pass@k compared: {names}", "",
             f"{evaluation.queries} queries from `{evaluation.eval_set}`.", "",
             "| collection | mode | " + " | ".join(f"pass@{k}" for k in ks) + " | median ms | p95 ms |",
             "|" + "---|" * (len(ks) + 4)]
    for r in evaluation.collections:
        for mode, scores in r.pass_at_k.items():
            ms = r.latency_ms[mode]
            lines.append(f"| {r.collection} | {mode} | "
                         + " | ".join(f"{scores[k]:.2f}" for k in ks)
                         + f" | {ms.median:.1f} | {ms.p95:.1f} |")
    for r in evaluation.collections:
        spans = intervals_markdown(r)
        if spans:  # the table under a heading per collection
            lines += ["", f"### `{r.collection}`: 95% intervals and IR metrics", *spans[3:]]
    lines += differences_markdown(evaluation.comparisons, "Collections compared (same mode, "
                                                          "same queries)")
    lines += ["", _image(chart, "Pass@k per mode and collection")]
    return "\n".join(lines)
