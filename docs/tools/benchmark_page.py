"""docs/benchmarks/index.md: the current figures, each read from the result file its benchmark
wrote under benchmarks/results/ and printed with the command that wrote it, the date and the
machine. One function per benchmark gives its section; `benchmarks_page` puts them in order.
Written by `python -m docs.tools.generate` (docs/tools/generate.py).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

from docs.tools.common import NOTE, RESULTS


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text())  # type: ignore[no-any-return]


def _machine(value: Any) -> str:
    if isinstance(value, dict):
        return (f"{value.get('cpus', '?')} CPUs, {value.get('platform', 'Linux x86_64')}, "
                f"Python {value.get('python', '?')}")
    return str(value)


def _f(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def _venv_python(command: str) -> str:
    return f"`.venv/bin/python {' '.join(command.split()).removeprefix('.venv/bin/python ')}`"


def _source(name: str, command: str, date: str, machine: str) -> list[str]:
    return [f"- Result file: `benchmarks/results/{name}`",
            f"- Command: `{' '.join(command.split())}`",
            f"- Date: {date}", f"- Machine: {machine}", ""]


def _pass_row(label: str, scores: dict[str, float], intervals: dict[str, list[float]] | None = None
              ) -> str:
    cells = []
    for k in ("5", "10", "20"):
        cell = _f(scores[k])
        if intervals:
            low, high = intervals[k]
            cell += f" [{low:.1f}, {high:.1f}]"
        cells.append(cell)
    return f"| {label} | " + " | ".join(cells) + " |"


def _diff(d: dict[str, Any]) -> str:
    sign = "+" if d["difference"] >= 0 else "−"
    low, high = d["low"], d["high"]
    p = "p < 0.001" if d["p"] < 0.001 else f"p = {d['p']:.2f}"
    ns = " (n.s.)" if low <= 0 <= high else ""
    return f"{sign}{abs(d['difference']):.2f} [{low:+.2f}, {high:+.2f}], {p}{ns}"


def bench_quality() -> list[str]:
    d = _load("synth.json")
    labelled = d["labelled"]
    out = ["## Quality on the codebase benchmark", "",
           "The public codebase benchmark of Anthropic's contextual-retrieval guide (90 source "
           f"files, 737 chunks, {labelled['queries']} questions with golden chunks), ingested "
           "and evaluated by `situate ingest` and `situate evaluate` with the defaults: MiniLM, "
           "structural contexts, `cdbsf` fusion. Pass@k in percent with its 95% bootstrap "
           "interval over queries:", "",
           "| mode | Pass@5 | Pass@10 | Pass@20 | MRR@20 | nDCG@20 |", "|---|---|---|---|---|---|"]
    for mode, label in (("dense", "dense"), ("bm25", "BM25"), ("hybrid", "hybrid")):
        row = _pass_row(label, labelled["pass_at_k"][mode], labelled["intervals"][mode])
        metrics = labelled["metrics"][mode]
        out.append(f"{row} {metrics['mrr@20']:.3f} | {metrics['ndcg@20']:.3f} |")
    diffs = d["hybrid_minus_bm25"]["codebase_labelled"]
    out += ["", "Hybrid against BM25, paired over the same queries (difference in points, 95% "
            "interval, randomization p): " + "; ".join(f"@{k} {_diff(diffs[k])}"
                                                         for k in ("5", "10", "20")) +
            ". On these questions hybrid and BM25 cannot be told apart; both are far above "
            "dense. For scale, the guide publishes voyage-2 dense embeddings at 80.92 / 87.15 / "
            "90.06 and Claude contexts with a BM25 hybrid at 86.43 / 93.21 / 94.99 (Pass@5 / 10 "
            "/ 20; not measured here).", ""]
    out += _source("synth.json", ".venv/bin/python " + d["command"], d["started"],
                   _machine(d["machine"]) + " (shared with other work: Pass@k does not "
                   "depend on load)")
    return out


def bench_heldout() -> list[str]:
    d = _load("synth.json")
    out = ["## Evaluation sets made from the corpus (`situate synth`)", "",
           "Does the free held-out set (`situate synth --generator held-out`) rank the search "
           "modes as a labelled set does? Hybrid Pass@k of the held-out set beside the labelled "
           "reference, and the order of the three modes:", "",
           "| corpus | k | labelled: dense / BM25 / hybrid | held-out: dense / BM25 / hybrid | "
           "same order |", "|---|---|---|---|---|"]
    for row in d["orders"]:
        ref, held = row["reference_scores"], row["held_out_scores"]
        out.append(f"| {row['corpus']} | {row['k']} | "
                   f"{_f(ref['dense'])} / {_f(ref['bm25'])} / {_f(ref['hybrid'])} | "
                   f"{_f(held['dense'])} / {_f(held['bm25'])} / {_f(held['hybrid'])} | "
                   f"{'yes' if row['same'] else 'no'} |")
    out += ["", "Use a held-out set to compare configurations on your own documents; it measures "
            "how well a passage is found from its author's one-line summary, not how your users "
            "ask.", ""]
    out += _source("synth.json", ".venv/bin/python " + d["command"], d["started"],
                   _machine(d["machine"]))
    return out


def bench_code_chunks() -> list[str]:
    d = _load("code-synth.json")
    out = ["## Code cut along its syntax", "",
           "Source code cut along its syntax tree (`--code-chunks syntax`, the default) against "
           "line-based cutting (`text`), on two code corpora, with held-out queries from "
           "`situate synth` (MiniLM, structural contexts):", "",
           "| corpus | chunker | chunks | hybrid Pass@5 | @10 | @20 |", "|---|---|---|---|---|---|"]
    for run in d["runs"]:
        corpus = d["corpora"][run["corpus"]]
        label = (f"{run['corpus']} ({', '.join(corpus['packages'])}; {corpus['files']} files)"
                 if run["chunker"] == "text" else "")
        scores = run["pass_at_k"]["hybrid"]
        out.append(f"| {label} | {run['chunker']} | {run['ingest']['chunks_written']:,} | "
                   f"{_f(scores['5'])} | {_f(scores['10'])} | {_f(scores['20'])} |")
    ahead = all(v["syntax_not_below_at_every_k"] for v in d["verdict"].values())
    out += ["", ("Syntax is not below text at any k on either corpus"
                 if ahead else "Syntax is below text at some k") +
            "; no single difference is significant on its own (every paired interval reaches 0).",
            ""]
    out += _source("code-synth.json", ".venv/bin/python " + d["command"].removeprefix("python "),
                   d["started"].replace("T", " ").replace("Z", " UTC"), _machine(d["machine"]))
    return out


FORMAT_NAMES = {"md": "Markdown", "html": "HTML", "html-sections": "HTML (nested sections)",
                "docx": "DOCX", "pdf": "PDF", "epub": "EPUB"}


FORMAT_SETS = (
    ("formats-nodejs.json", "Node.js's API reference",
     "Debian's `/usr/share/doc/nodejs/api`; the set the readers were changed against"),
    ("formats-jest.json", "Jest's documentation",
     "jestjs/jest's `docs/` (MIT); held out: measured before the readers were "
     "changed, and again only at the end"),
    ("formats-jest-rebuilt.json", "Jest's documentation, rebuilt",
     "jestjs/jest's `docs/` at 52db46e504 (MIT), 24 pages chosen by seed 22 from that "
     "checkout (the 33 pages above came from a checkout with other files); a second set for "
     "the cutting diagnostic"))


def _format_set(name: str, label: str, about: str) -> list[str]:
    d = _load(name)
    build, paired = d["build"], d["paired"]["structural"]
    diffs = {(c["b"].split(" · ")[1], str(c["k"])): c for c in paired["comparisons"]
             if c["a"] == "hybrid · formats_md_structural"}
    out = [f"### {label}: {len(build['files'])} pages, {build['queries']} quotes", "",
           f"Pages: {about}.", "",
           "| format | chunks | against Markdown | Markdown's heading cuts kept | characters mean / "
           "median | quotes in a chunk | hybrid Pass@5 | @10 | @20 | Pass@5 − Markdown [95%] | "
           "Pass@10 − Markdown [95%] |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    cuts = d.get("cuts", {})
    for r in d["runs"]:
        collection = f"formats_{r['format'].replace('-', '_')}_structural"
        if r["context"] != "structural" or collection not in paired["collections"]:
            continue
        cov, scores = r["coverage"], paired["pass_at_k"][collection]["hybrid"]
        cells = []
        for k in ("5", "10"):
            c = diffs.get((collection, k))
            cells.append(f"{c['difference']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}]" if c else "—")
        cut = cuts.get(r["format"])
        against = (f"{cut['chunks_vs_md']:+.1f}% | {cut['heading_cuts_kept']} / {cut['heading_cuts']} "
                   f"({cut['heading_cuts_kept_pct']:.1f}%)" if cut else "— | —")
        out.append(f"| {FORMAT_NAMES[r['format']]} | {r['chunks']:,} | {against} | {cov['chars_mean']:.0f} / "
                   f"{cov['chars_median']} | {cov['covered']} / {build['queries']} | "
                   f"{scores['5']:.1f} | {scores['10']:.1f} | {scores['20']:.1f} | "
                   + " | ".join(cells) + " |")
    if cuts:
        out += ["", "A heading cut is a Markdown chunk that begins with the heading its context "
                "names; it is kept where the same heading begins a chunk of the same page in the "
                "other format (`bench_formats.py --cuts-only` measures it without an ingest). "
                "Chunks against Markdown count each reader's chunks (`load_corpus`, as ingest cuts "
                "them)."]
    out += ["", f"- Result file: `benchmarks/results/{name}`",
            f"- Commands: {_venv_python(d['build_command'].removeprefix('python '))} (the set "
            "and every format), then " + "; ".join(
                _venv_python(c.removeprefix("python ")) for c in d.get("commands", [d["command"]])),
            (f"- Date: {paired['finished']} UTC (the paired evaluation; each format's own run "
             "shortly before)" if "how" not in paired else
             f"- Date: {max(r['finished'] for r in d['runs'])} UTC (the last format's run; formats "
             "measured side by side in stores of their own, each paired with the Markdown from "
             "the per-query ranks of its own evaluation by the function `situate evaluate` pairs "
             "collections with)"),
            f"- Machine: {d['machine']}, Python 3.11.7 (shared with other work: Pass@k does not "
            "depend on load)", ""]
    return out


def bench_formats() -> list[str]:
    out = ["## The same documents in every format", "",
           "Sets of documentation pages written in Markdown by others, each converted to HTML "
           "(inside a docs site's navigation, banners and footer), DOCX, PDF (printed by Chromium, "
           "with its running header and footer) and EPUB by pandoc and Chromium; one evaluation "
           "set per set for all its formats, made by `situate synth`'s held-out generator on the "
           "Markdown (MiniLM, structural contexts). Chunks and their sizes stand beside Pass@k, so "
           "a gap shows whether it is ranking or cutting; each format's difference from the "
           "Markdown is paired, query by query, with its 95% bootstrap interval, as `situate "
           "evaluate --collection md,html,...` reports it.", ""]
    for name, label, about in FORMAT_SETS:
        out += _format_set(name, label, about)
    return out


def bench_ingest() -> list[str]:
    d = _load("ingest-refactor.json")
    out = ["## Ingest speed against embedding alone", "",
           f"`situate ingest` of the codebase corpus ({d['chunks']} chunks, {d['context']} "
           "contexts, MiniLM) as a whole command (Prefect's temporary server, reading, contexts, "
           "embedding, writing) against a bare process that only loads MiniLM and embeds the "
           "same texts, alternating:", "",
           "| | run 1 | run 2 | run 3 |", "|---|---|---|---|",
           "| embedding alone, s | " + " | ".join(_f(x) for x in d["all_embed_alone"]) + " |",
           "| `situate ingest`, s | " + " | ".join(_f(x) for x in d["all_ingest"]) + " |",
           "| ratio of the pair | " + " | ".join(f"{x:.3f}" for x in d["pair_ratios"]) + " |",
           "", f"Best against best {d['ratio']:.3f}, median pair {d['median_pair_ratio']:.3f}: "
           f"the whole command takes {(d['median_pair_ratio'] - 1):.0%} longer than embedding "
           "alone.", ""]
    out += _source("ingest-refactor.json",
                   ".venv/bin/python benchmarks/bench_ingest.py --repeat 3 --out "
                   "benchmarks/results/ingest-refactor.json", "2026-11-24", d["machine"])
    return out


def bench_scale() -> list[str]:
    runs = [_load("scale-10k-384.json"), _load("scale-100k-384.json"), _load("scale-1m-384.json")]
    out = ["## Ingest at scale", "",
           "A generated corpus (JSONL documents of 8 chunks of ~760 characters), `situate ingest "
           "--context structural` with 384-d vectors from a loopback embeddings service (so the "
           "figures are situate's and the store's, not a model's), into a `milvus-lite server`. "
           "Memory is the peak resident size of situate's process tree (the flow and Prefect's "
           "temporary server) and, apart, of the Milvus server:", "",
           "| chunks | seconds | chunks/s | situate's tree, peak | Milvus server, peak |",
           "|---|---|---|---|---|"]
    for d in runs:
        r = d["runs"][0]
        out.append(f"| {r['chunks']:,} | {_f(r['seconds'], 1)} | {_f(r['chunks_per_second'], 1)} "
                   f"| {_f(r['peak_rss_mib'], 0)} MiB | {_f(r['milvus_server_peak_rss_mib'], 0)} "
                   "MiB |")
    flat = all(d["runs"][0]["peak_rss_mib"] < 1024 for d in runs)
    out += ["", f"situate's side stays {'under' if flat else 'over'} 1 GiB at every size; the "
            "store's grows with the rows "
            "(see [Lite or a server](../how-to/sizing.md)). The machine was shared with other "
            "work (load average 11-18): the seconds are loose upper bounds, memory is not "
            "affected.", ""]
    out += ["- Result files: `benchmarks/results/scale-10k-384.json`, `scale-100k-384.json`, "
            "`scale-1m-384.json`",
            "- Commands: " + "; ".join(_venv_python(d["command"]) for d in runs),
            "- Date: 2026-11-25", f"- Machine: {runs[2]['machine'].split(';')[0]}", ""]
    return out


def bench_search_latency() -> list[str]:
    quiet = [_load("eval-hybrid-100k-384-quiet.json"), _load("eval-hybrid-1m-384-quiet.json")]
    dense = _load("eval-scale-100k-384-quiet.json")
    out = ["## Search latency by collection size (Milvus Lite)", "",
           "`situate evaluate` against a `milvus-lite server` holding the collections written "
           "above, restarted on their data, nothing else running; one query at a time, as a "
           "user's (embedding included):", "",
           "| chunks | mode | queries | p50 | p95 | evaluate's tree, peak | server, peak |",
           "|---|---|---|---|---|---|---|"]
    rows = [(100_000, dense["runs"][1]), (100_000, quiet[0]["runs"][0]),
            (1_000_000, quiet[1]["runs"][0])]
    for size, r in rows:
        (mode, lat), = r["latency_ms"].items()
        out.append(f"| {size:,} | {mode} | {r['queries']:,} | {_f(lat['median'], 0)} ms | "
                   f"{_f(lat['p95'], 0)} ms | {_f(r['peak_rss_mib'], 0)} MiB | "
                   f"{_f(r['server_peak_rss_mib'], 0)} MiB |")
    first, last = dense["runs"][0], dense["runs"][2]
    out += ["", "These were measured while Milvus Lite computed BM25 itself, in Python, so hybrid "
            "search grew with the rows; BM25 now comes from the lexical index beside Lite (the "
            "section above). Evaluating 5,000 "
            f"queries took {dense['runs'][1]['seconds_per_query'] * 1000:.1f} ms a query against "
            f"{first['seconds_per_query'] * 1000:.1f} and {last['seconds_per_query'] * 1000:.1f} "
            "ms for 200 before and after, in flat memory.", ""]
    out += ["- Result files: `benchmarks/results/eval-scale-100k-384-quiet.json`, "
            "`eval-hybrid-100k-384-quiet.json`, `eval-hybrid-1m-384-quiet.json`",
            "- Commands: " + "; ".join(f"`.venv/bin/python {' '.join(d['command'].split())}`"
                                       for d in (dense, *quiet)),
            "- Date: 2026-11-25 (quiet machine)", f"- Machine: {dense['machine']}", ""]
    return out


def bench_faces() -> list[str]:
    d = _load("search-faces.json")
    out = ["## Search from an app: every face against `situate evaluate`", "",
           "Each way of searching from an app runs the same queries in each mode; the figure is "
           "its median latency over `situate evaluate`'s in the same round (1.00: the same; the "
           "median of two rounds). `situate evaluate`'s own p50 is in milliseconds.", ""]
    for target in d["targets"]:
        ref = [r["evaluate"] for r in target["rounds"]]
        out += [f"**{target['collection']}** ({target['rows']:,} chunks, {target['embedder']}, "
                f"{target['queries']} queries, {len(ref)} rounds):", "",
                "| mode | evaluate p50 (ms, per round) | " + " | ".join(
                    f for f in target["ratios"]) + " |",
                "|---|---|" + "---|" * len(target["ratios"])]
        for mode in ("dense", "bm25", "hybrid"):
            evaluate = " / ".join(f"{r[mode]['median']:.0f}" for r in ref)
            cells = " | ".join(f"{faces[mode]['median_ratio']:.2f}x"
                               for faces in target["ratios"].values())
            out.append(f"| {mode} | {evaluate} | {cells} |")
        c = target["concurrent_http"]
        out += ["", f"`situate api` with {c['clients']} concurrent clients (hybrid, "
                f"{c['seconds']:.0f} s): {c['qps']} queries/s, {c['errors']} errors, p50 "
                f"{_f(c['latency_ms']['median'], 0)} ms.", ""]
    out += ["`situate search` starts a process per query (the store, the model): seconds a "
            "query. That is what the warm faces are for. On a collection this small a BM25 "
            "search takes 8-10 ms, so a face's own milliseconds (a socket, a JSON-RPC message) "
            "show as a ratio; on a real query they vanish into it.", ""]
    out += _source("search-faces.json",
                   ".venv/bin/python benchmarks/bench_search_faces.py --target "
                   "codebase,http://127.0.0.1:19634,data/benchmarks/codebase/evaluation_set.jsonl"
                   " --target scale,http://127.0.0.1:19635,EVAL100K.jsonl,bow --queries 16 "
                   "--rounds 2 --cli-queries 1 --concurrent-seconds 30",
                   "2026-11-27 02:27-02:49 UTC (quiet machine)", _machine(d["machine"]))
    return out


def bench_updates() -> list[str]:
    d = _load("update-100k.json")
    new = d["runs"][0]["codes"]["new"]
    fresh = new["fresh"]["wall_seconds"]
    out = ["## A scheduled run pays for what changed", "",
           "100,000 chunks (12,500 documents) on a `milvus-lite server`; then the same corpus with "
           "1% of the documents rewritten; then again with nothing changed. Each step is `situate "
           "ingest ... --prune` in a fresh process with the default settings; after each, the "
           "stored rows were checked whole against the corpus (exact every time):", "",
           "| step | wall s | of the fresh ingest | chunks written | rebuilt |", "|---|---|---|---|---|"]
    for step in ("fresh", "update", "noop"):
        s = new[step]
        label = {"fresh": "fresh ingest", "update": "1% update", "noop": "nothing changed"}[step]
        out.append(f"| {label} | {_f(s['wall_seconds'], 1)} | {s['wall_seconds'] / fresh:.3f}x | "
                   f"{s['summary']['chunks_written']:,} | "
                   f"{'yes' if s['summary']['rebuilt'] else 'no'} |")
    out += [""] + _source("update-100k.json", ".venv/bin/python " + d["command"], d["started"],
                          d["machine"] + " (shared with other jobs, load 8-20)")
    return out


def bench_drift() -> list[str]:
    d = _load("drift-codebase.json")
    out = ["## Kept up to date, searched like a fresh ingest", "",
           "The codebase corpus ingested from a drifted copy (documents edited, missing and "
           "stray), then brought back to the true corpus with `--prune`: rebuilt by default "
           "(`kept`), or not (`stale`, `--rebuild-at inf`), beside a fresh ingest:", "",
           "| collection | dense Pass@5 / 10 / 20 | BM25 | hybrid |", "|---|---|---|---|"]
    for name in ("fresh", "kept", "stale"):
        p = d["pass_at_k"][name]
        out.append(f"| {name} | " + " | ".join(" / ".join(_f(p[m][k]) for k in ("5", "10", "20"))
                                            for m in ("dense", "bm25", "hybrid")) + " |")
    differ = d["bm25_golden_ranks_differing_from_fresh"]
    out += ["", f"BM25 golden ranks unlike the fresh collection's: kept {differ['kept']}, stale "
            f"{differ['stale']} of 248 queries.", ""]
    out += _source("drift-codebase.json", ".venv/bin/python " + d["command"],
                   "2026-11-24 16:30-16:52 UTC", "x86_64, 2 cores, Python 3.11.7")
    return out


def bench_providers() -> list[str]:
    d = _load("providers.json")
    c = d["corpus"]
    out = ["## What contexts cost, per LLM provider", "",
           f"The codebase corpus ({c['documents']} documents, {c['chunks']} chunks, "
           f"{c['document_tokens']:,} document tokens at {c['tokenizer'].split(': ')[-1]}, "
           f"{c['output_tokens']}-token contexts) through loopback fakes of each provider's API "
           "that report usage as the real ones do (prompt caches, Message Batches), priced at "
           "the list prices. The floor is each document paid once plus the output; the plan is "
           "`--dry-run`'s estimate:", "",
           "| provider | mode | flags | requests | bill $ | floor $ | plan $ | plan / bill |",
           "|---|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        ratio = f"{r['plan_over_bill']:.4f}" if r["plan_over_bill"] else "-"
        flags = f"`{r['flags']}`" if r["flags"] else "(none)"
        out.append(f"| {r['provider']} {r['model']} | {r['mode']} | {flags} | {r['requests']} | "
                   f"{r['cost_usd']:.4f} | {r['floor_usd']:.4f} | {r['planned_usd']:.4f} | {ratio} |")
    claude = [r["cost_over_floor"] for r in d["rows"] if r["provider"] == "anthropic"
              and r["mode"] == "per-chunk"]
    grouped = [r["cost_over_floor"] for r in d["rows"] if r["mode"].startswith("grouped")
               and r["cost_over_floor"]]
    out += ["", "Per chunk, every request reads its whole document (the method of the "
            f"contextual-retrieval guide): {claude[0]:.1f}x the floor on Claude even with the "
            f"prompt cache; `--group-chunks` comes within {min(grouped) - 1:.0%} to "
            f"{max(grouped) - 1:.0%} of it.", ""]
    out += _source("providers.json", ".venv/bin/python " + d["command"], "2026-11-25",
                   _machine(d["machine"]))
    return out


def bench_reading() -> list[str]:
    d = _load("reading.json")
    i, long = d["ingest"], d["long_pdf"][0]
    out = ["## Reading documents", "",
           f"A generated corpus of {i['documents']:,} files (PDF, HTML, DOCX, PPTX, XLSX, EPUB, "
           f"notebooks) through `situate ingest` with MiniLM: {i['chunks']:,} chunks in "
           f"{_f(i['wall_seconds'], 1)} s, of which reading every file twice (the plan's pass "
           f"and the run's) took {_f(i['reading_seconds'], 1)} s, **{i['reading_share']:.1%}** of "
           f"the wall time ({i['reading_cpu_share']:.1%} of the CPU time). Embedding is the rest. "
           f"A {long['pages']:,}-page PDF is read in {_f(long['seconds'], 1)} s "
           f"({_f(long['pages_per_cpu_second'], 0)} pages per CPU second), its reader "
           f"{_f(long['growth_mib'], 1)} MiB above the interpreter's baseline: one page at a "
           "time.", ""]
    out += _source("reading.json", "; ".join(".venv/bin/" + c.split(" --out")[0]
                                             for c in d["commands"][1:3]),
                   "2026-11-25", d["machine"])
    return out


def bench_capacity() -> list[str]:
    d = _load("capacity-lite.json")
    out = ["## Store memory: the dry run's estimate against a Milvus Lite server", "",
           "What `situate ingest --dry-run` prints as \"store memory\" for a corpus, against the "
           "resident memory a `milvus-lite server` took to hold the same rows:", "",
           "| chunks | dimension | measured peak | estimate | estimate / peak |",
           "|---|---|---|---|---|"]
    for r in d["runs"]:
        out.append(f"| {r['chunks']:,} | {r['dim']} | {_f(r['peak_mib'], 0)} MiB | "
                   f"{_f(r['estimate_mib'], 0)} MiB | {r['estimate_over_peak']:.2f} |")
    out += [""] + _source("capacity-lite.json", "; ".join(c.split(" (")[0] for c in d["commands"]),
                          "2026-11-25", d["machine"].split(";")[0])
    return out


def _rounds(target: dict[str, Any]) -> list[dict[str, Any]]:
    """A bench_throughput target's cells, one per mode, clients and variant: with several rounds
    (`--rounds`), the median of each figure over them, and their queries a second as a range."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for c in target["cells"]:
        groups.setdefault((c["mode"], c["clients"], c["variant"]), []).append(c)
    modes = list(dict.fromkeys(c["mode"] for c in target["cells"]))
    variants = list(dict.fromkeys(c["variant"] for c in target["cells"]))
    out = []
    for (mode, clients, variant), cells in sorted(groups.items(), key=lambda g: (
            modes.index(g[0][0]), g[0][1], variants.index(g[0][2]))):
        def med(get: Callable[[dict[str, Any]], float], cells: list[dict[str, Any]] = cells) -> float:
            return statistics.median(get(c) for c in cells)

        cpu = {k: med(lambda c, k=k: c["cpu_ms_per_query"][k]) for k in cells[0]["cpu_ms_per_query"]}
        out.append({"mode": mode, "clients": clients, "variant": variant, "rounds": len(cells),
                    "qps": med(lambda c: c["qps"]), "qps_range": (min(c["qps"] for c in cells),
                                                                 max(c["qps"] for c in cells)),
                    "p50_ms": med(lambda c: c["p50_ms"]), "p95_ms": med(lambda c: c["p95_ms"]),
                    "cpu_ms_per_query": cpu,
                    # runs from before `situate api` counted its server processes had one
                    "server_processes": max(c.get("server_processes", 1) for c in cells),
                    "cpu_share_of_the_cores": med(lambda c: c["cpu_share_of_the_cores"]),
                    "others_share_of_the_cores": med(lambda c: c["others_share_of_the_cores"])})
    return out


def _throughput_cells(target: dict[str, Any]) -> list[str]:
    """A bench_throughput target's table (medians over its rounds, if several), how the queries a
    second grew with the clients round by round, and how much of a core Lite's process used."""
    cells = _rounds(target)
    rounds = max(c["rounds"] for c in cells)
    qps = "q/s, median (range)" if rounds > 1 else "q/s"
    out = [f"| mode | clients | variant | {qps} | p50 ms | p95 ms | CPU ms/query: api, model, "
           "milvus, clients | our processes' share of the cores | others |",
           "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        cpu = c["cpu_ms_per_query"]
        low, high = c["qps_range"]
        spread = f" ({_f(low, 1)}–{_f(high, 1)})" if rounds > 1 else ""
        out.append(f"| {c['mode']} | {c['clients']} | {c['variant']} | {_f(c['qps'], 1)}{spread} | "
                   f"{_f(c['p50_ms'], 0)} | {_f(c['p95_ms'], 0)} | {_f(cpu['api'], 1)}, "
                   f"{_f(cpu['model'], 1)}, {_f(cpu['milvus'], 1)}, "
                   f"{_f(cpu['bench_clients'], 1)} | {c['cpu_share_of_the_cores'] * 100:.0f}% | "
                   f"{c['others_share_of_the_cores'] * 100:.0f}% |")
    if rounds > 1 and target.get("scaling"):
        out += ["", f"Queries a second against one client's in the same round ({rounds} rounds, "
                "each sweeping the clients back to back):", "",
                "| mode | clients | variant | median | each round |", "|---|---|---|---|---|"]
        variants = list(dict.fromkeys(c["variant"] for c in target["cells"]))
        for g in sorted(target["scaling"], key=lambda g: (g["mode"] != "hybrid", g["mode"],
                                                           variants.index(g["variant"]),
                                                           g["clients"])):
            out.append(f"| {g['mode']} | {g['clients']} | {g['variant']} | {g['median']:.2f}x | "
                       + ", ".join(f"{x:.2f}" for x in g["ratios"]) + " |")
    busiest = max(cells, key=lambda c: c["qps"] * c["cpu_ms_per_query"]["milvus"])
    lite = busiest["qps"] * busiest["cpu_ms_per_query"]["milvus"] / 1000
    return out + ["", f"The Milvus server's process used at most {lite:.2f} of a core "
                  f"({busiest['mode']}, {busiest['clients']} clients) while the machine had two.", ""]


def _cell(d: dict[str, Any], mode: str, clients: int, variant: str = "") -> dict[str, Any]:
    """A run's first target's cell (its median over the rounds) of one mode and clients, of
    `variant` (default: the run's first)."""
    variant = variant or d["variants"][0]["name"]
    return next(c for c in _rounds(d["targets"][0])
                if (c["mode"], c["clients"], c["variant"]) == (mode, clients, variant))


def _ratios(d: dict[str, Any], mode: str, clients: int, variant: str = "") -> list[float]:
    """A run's per-round ratios of `clients`' queries a second over one client's, of `variant`
    (default: the run's first); [] where the run has no `scaling` for it."""
    variant = variant or d["variants"][0]["name"]
    return next((g["ratios"] for g in d["targets"][0].get("scaling") or []
                 if (g["mode"], g["clients"], g["variant"]) == (mode, clients, variant)), [])


def _eight_clients(d: dict[str, Any], name: str) -> tuple[dict[str, Any], float, str]:
    """Variant `name`'s hybrid cell at eight clients, its queries a second over one client's,
    and the rounds' ratios written out."""
    ratios = _ratios(d, "hybrid", 8, name)
    return (_cell(d, "hybrid", 8, name), _scaling(d, "hybrid", 8, name),
            ", ".join(f"{x:.2f}" for x in ratios))


def _processes_note(d: dict[str, Any]) -> str:
    """What a run's variant with `--processes N` got beside the first variant (hybrid, eight
    clients), if it has one."""
    v = _processes_variant(d)
    if v is None:
        return ""
    args = v["args"]
    n = int(args[args.index("--processes") + 1])
    eight, scaling, rounds = _eight_clients(d, v["name"])
    return (f" With `--processes {n}` (`{v['name']}`: {_processes(n)} on the one port) "
            f"eight clients kept {eight['cpu_share_of_the_cores'] * 100:.0f}% of the cores "
            f"busy and got {scaling:.2f}x one client's hybrid queries a second "
            f"({_f(eight['qps'], 1)}; rounds {rounds}).")


def _processes_variant(d: dict[str, Any]) -> dict[str, Any] | None:
    """A run's variant (not its first) that asked for `--processes N`, if it has one."""
    return next((v for v in d["variants"][1:] if "--processes" in (v.get("args") or [])), None)


def _one_process(d: dict[str, Any]) -> list[str]:
    """Why a run's collection is served from one process by default: what its variant with
    `--processes N` got beside the first (hybrid, eight clients), if it has one."""
    other = _processes_variant(d)
    if other is None:
        return []
    first, more = _cell(d, "hybrid", 8), _cell(d, "hybrid", 8, other["name"])
    return [f"At {d['chunks']:,} chunks on a `milvus-lite server`, `situate api` answers from "
            f"{_processes(first['server_processes'])} by default: with "
            f"{_processes(more['server_processes'])} (`{other['name']}`) eight clients got "
            f"{more['qps'] / first['qps']:.2f}x its queries a second ({_f(more['qps'], 1)} "
            f"against {_f(first['qps'], 1)}), Lite spending "
            f"{_f(more['cpu_ms_per_query']['milvus'], 0)} ms of CPU a query against "
            f"{_f(first['cpu_ms_per_query']['milvus'], 0)}: each process sends its own dense "
            "searches (concurrent ones share a call only within a process), and Lite walks every "
            "row once a call.", ""]


def _processes(n: int) -> str:
    return f"{n} server process{'es' if n != 1 else ''}"


def _variant_note(d: dict[str, Any], name: str) -> str:
    """What a run's variant `name` (another checkout) got beside the first variant (hybrid, eight
    clients), if the run has it, with the server processes it ran."""
    v = next((v for v in d["variants"][1:] if v["name"] == name), None)
    if v is None:
        return ""
    eight, scaling, rounds = _eight_clients(d, name)
    return (f" Commit {v['commit']} (`{name}`), with {_processes(eight['server_processes'])} by "
            f"default, kept {eight['cpu_share_of_the_cores'] * 100:.0f}% of the cores busy under "
            f"eight clients and got {scaling:.2f}x one client's hybrid queries a second "
            f"(rounds {rounds}).")


def _scaling(d: dict[str, Any], mode: str, clients: int, variant: str = "") -> float:
    """A run's queries a second at `clients` over one client's: the median of the rounds' ratios
    where it has several, else the one cell's over the other."""
    ratios = _ratios(d, mode, clients, variant)
    if len(ratios) > 1:
        return float(statistics.median(ratios))
    return float(_cell(d, mode, clients, variant)["qps"] / _cell(d, mode, 1, variant)["qps"])


def bench_throughput() -> list[str]:
    d = _load("throughput.json")
    variants = {v["name"]: v for v in d["variants"]}
    out = ["## Concurrent queries: `situate api` under 1, 8 and 64 clients", "",
           "Clients send the evaluation set's queries over keep-alive connections for a fixed "
           "time; each variant is a `situate api` of its own checkout against the same Milvus "
           "server, the variants taking turns cell by cell. CPU time per query is user + system "
           "time of each process over the cell, divided by the queries it answered (*api*: "
           "`situate api`, BM25 from the lexical index included; *model*: its embedding "
           "process; *milvus*: the `milvus-lite server`); *our processes' share* is theirs and "
           "the clients' CPU time over both cores' time, *others* the share that processes "
           "outside the benchmark used meanwhile. This shared host's speed drifts from minute to "
           "minute (the same query's CPU time moved by half from one cell to the next), so a "
           "run of several rounds sweeps each mode's clients back to back a round and compares "
           "each number of clients with one client's in the same round.", ""]
    files = [f"throughput-{size}.json" for size in ("codebase", "100k", "1m")]
    sized = [_load(name) for name in files]
    for run in sized:
        target = run["targets"][0]
        first = _cell(run, "hybrid", 1)
        out += [f"**{run['chunks']:,} chunks**, BM25 from the lexical index ({run['served']}; "
                f"{target['seconds_per_cell']:.0f} s a cell; `after`: commit "
                f"{run['variants'][0]['commit']}, {_processes(first['server_processes'])}):", "",
                *_throughput_cells(target)]
    big, small = sized[-1], sized[0]
    one, eight = _cell(big, "hybrid", 1), _cell(big, "hybrid", 8)
    s1, s8 = _cell(small, "hybrid", 1), _cell(small, "hybrid", 8)
    median = "; medians of the rounds" if s1["rounds"] > 1 else ""
    out += [f"On the {small['chunks']} chunks of the codebase collection a hybrid query costs about "
            f"{_f(sum(s1['cpu_ms_per_query'].values()), 0)} ms of CPU in all, spread over the API's "
            "process, the model's and Lite's, so one client keeps about one core busy "
            f"({s1['cpu_share_of_the_cores'] * 100:.0f}% of the two). On a Milvus server "
            "`situate api` answers from one server process per core by default (at most 4; on "
            "a `milvus-lite server` while the collection has at most 10,000 chunks; "
            f"{_processes(s8['server_processes'])} here), each with its own model process: eight "
            f"clients got {_scaling(small, 'hybrid', 8):.2f}x one client's hybrid queries a "
            f"second ({_f(s8['qps'], 1)} against {_f(s1['qps'], 1)}{median}), using "
            f"{s8['cpu_share_of_the_cores'] * 100:.0f}% of the two cores.{_processes_note(small)} "
            "In one server process, each of the three processes does one thing at a time (the "
            "API's event loop and search threads take turns at one interpreter lock; the model "
            "embeds one batch; Lite answers one call), so the cores idle whenever the queries "
            "under way all wait at one of them; and sharing a call saves them little (the model "
            "spends about as much CPU on a query in a batch as alone, and Lite's dense search "
            "builds every hit it returns, whatever the queries in its call), so the queries a "
            "second grow only as the share of the cores kept busy does. Two batches are under "
            "way at once to each model process, so that it does not wait while the API's "
            "process hands out one batch's vectors and sends the next (Lite gets one call of a "
            "kind at a time: a second paid its pass over every row twice as often at 100,000 "
            f"chunks).{_variant_note(small, 'before')}",
            "",
            f"At {big['chunks']:,} chunks Lite's dense search is the bound of every mode but BM25: "
            f"{_f(one['cpu_ms_per_query']['milvus'], 0)} ms of Lite's CPU a hybrid query with one "
            f"client, {_f(eight['cpu_ms_per_query']['milvus'], 0)} ms with eight, because "
            "concurrent searches of one kind go to Lite as one call (`situate.storage.coalesce`) "
            "and Lite walks every row once a call, whatever the number of queries in it; eight "
            f"clients get {_scaling(big, 'hybrid', 8):.2f}x one client's hybrid queries a second. "
            "BM25 alone never reaches Lite but to read the hits.", "", *_one_process(sized[1])]
    for name, run in zip(files, sized, strict=True):
        out += _source(name, run["command"], f"{run['started']} to {run['finished']}",
                       _machine(run["machine"]))
    out += ["### Before the lexical index: Lite's own BM25", "",
            "; ".join(f"`{name}`: commit {v['commit']}"
                      + (f", `--workers {v['workers']}`" if v.get("workers") else "")
                      for name, v in variants.items()) + ".", ""]
    for target in d["targets"]:
        r = target["rankings"]
        checked = [f"{name}: {v['ids_or_order_differ']} of {v['searches']} differ"
                   for name, v in r.items() if isinstance(v, dict)]
        out += [f"**{target['name']}** ({target['embedder']}, {target['seconds_per_cell']:.0f} s "
                f"a cell; rankings of {r['queries']} queries in every mode against the first "
                f"variant's: {'; '.join(checked)}):", "", *_throughput_cells(target)]
    out += ["Milvus Lite does not spread the store's calls over the cores, so a mode's queries "
            "per second stop growing once its calls fill one core, whatever the clients and "
            "`--workers`.", ""]
    out += _source("throughput.json", d["command"], f"{d['started']} to {d['finished']}",
                   _machine(d["machine"]))
    return out


def bench_door() -> list[str]:
    d = _load("door.json")
    rounds = len(d["unauthenticated"])
    out = ["## The server's door: a flood of huge unauthenticated bodies", "",
           f"{d['clients']} clients at once each start a POST of {d['bytes'] / 1e6:.0f} MB to "
           "`situate api` (a token set), half with a Content-Length and half chunked; "
           f"{rounds} rounds. The time is from a client's first byte to the server's status "
           "line; the memory is the server's whole process tree, peak RSS over the round "
           "against before it.", "",
           "| request | status | slowest reply (ms, per round) | body sent before it, at most "
           "| tree RSS growth (MB, per round) |", "|---|---|---|---|---|"]
    for label, key in (("without the token", "unauthenticated"),
                       ("with the token, over the limit", "oversized_with_token")):
        rs = d[key]
        statuses = sorted({s.split(" ", 1)[1] for r in rs for s in r["statuses"]})
        out.append(f"| {label} | {', '.join(statuses)} | "
                   + " / ".join(_f(r["ms_max"], 1) for r in rs) + " | "
                   + f"{max(r['sent_max_bytes'] for r in rs) / 1e6:.1f} MB | "
                   + " / ".join(_f(r["tree_rss_growth_mb"], 1) for r in rs) + " |")
    load = ", ".join(f"{x:.1f}" for x in d["load_before"])
    out += ["", f"Load average before: {load} (the machine was shared).", ""]
    out += _source("door.json", ".venv/bin/python benchmarks/bench_door.py --collection codebase "
                   "--milvus-uri data/milvus.db --clients 10 --megabytes 100 "
                   "--out benchmarks/results/door.json", d["started"], _machine(d["machine"]))
    return out


def _backend_bounds(quality: dict[str, Any], name: str) -> tuple[float, float] | None:
    """The largest drop below torch fp32 over the corpora measured and k = 5, 10, 20: (dense,
    hybrid); None when no corpus measured `name`."""
    worst = {"dense": 0.0, "hybrid": 0.0}
    measured = [c["backends"] for c in quality["corpora"].values() if name in c["backends"]]
    for backends in measured:
        ref, got = backends["torch"]["pass_at_k"], backends[name]["pass_at_k"]
        for mode in worst:
            for k in ("5", "10", "20"):
                worst[mode] = max(worst[mode], ref[mode][k] - got[mode][k])
    return (worst["dense"], worst["hybrid"]) if measured else None


def bench_backends() -> list[str]:
    d = _load("backends.json")
    speed, quality, e2e, tune = d.get("speed"), d.get("quality"), d.get("e2e"), d.get("tune")
    isa = ", ".join(d["machine"].get("isa", [])) or "not recorded"
    out = ["## Embedding backends: speed against Pass@k", "",
           "MiniLM (all-MiniLM-L6-v2, the packaged weights) on each backend situate offers, on "
           f"this {d['machine']['cores']}-core CPU (instruction sets: {isa}; no GPU). chunks/s: "
           + (f"one in {speed['every']} of the codebase's chunks ({speed['texts']} texts)"
              if speed and speed.get("every", 1) > 1 else "the codebase's chunks") +
           ", each with its structural context, embedded in the backend's model process as an "
           "ingest embeds a window (longest first, calls of 64), backends interleaved in rounds "
           "(median round). × torch: over `torch (before)`, torch fp32 as situate embedded until "
           "now (texts in corpus order, calls of 64); × sorted: over torch given the same sorted "
           "calls. Peak RSS: the model process's own high-water mark. Pass@k: `situate ingest "
           "--backend B` then `situate evaluate --modes dense,hybrid` on the codebase and on a "
           "documentation corpus (19 Node.js API pages, eval set by `situate synth --generator "
           "held-out`); Δ is the largest drop below torch fp32 over both corpora and k = 5, 10, "
           "20 (negative: a gain).", ""]
    if speed and quality:
        corpora = list(quality["corpora"])
        scale = d.get("speed_10k", {}).get("backends", {})
        head = "| backend | what | chunks/s | × torch | × sorted | peak RSS |"
        rule = "|---|---|---:|---:|---:|---:|"
        if scale:
            head += " chunks/s 10k | × torch 10k |"
            rule += "---:|---:|"
        for c in corpora:
            head += f" {c} dense 5/10/20 | {c} hybrid 5/10/20 |"
            rule += "---|---|"
        out += [head + " worst Δ dense / hybrid |", rule + "---|"]
        for name, b in speed["backends"].items():
            sorted_ratio = b.get("ratio_to_torch_sorted")
            row = (f"| `{name}` | {b['description']} | {_f(b['chunks_per_second'], 1)} | "
                   f"{b['ratio_to_torch']:.2f} | "
                   f"{'—' if sorted_ratio is None else f'{sorted_ratio:.2f}'} | "
                   f"{_f(b['peak_rss_mib'], 0)} MiB |")
            if scale:
                at = scale.get(name)
                row += (f" {_f(at['chunks_per_second'], 1)} | {at['ratio_to_torch']:.2f} |"
                        if at else " — | — |")
            measured_name = "torch" if name.startswith("torch") else name
            for c in corpora:
                measured = quality["corpora"][c]["backends"].get(measured_name)
                for mode in ("dense", "hybrid"):
                    row += (" " + " / ".join(_f(measured["pass_at_k"][mode][k])
                                             for k in ("5", "10", "20")) + " |"
                            if measured else " — |")
            bounds = _backend_bounds(quality, measured_name)
            out.append(row + (f" {bounds[0]:.2f} / {bounds[1]:.2f} |" if bounds else " — |"))
        out += ["", "— : not measured in this run: `onnx-plain` and `onnx-basic` run the same fp32 "
                "export as `onnx` without its fusions (their vectors match torch's to 3e-7)."]
        default = d.get("default", {})
        if default:
            out += ["", default["text"], ""]
    if tune:
        out += ["", "Texts per forward pass, per backend (`bench_backends.py tune`: the model in "
                f"the benchmark's own process, {tune['texts']} codebase texts longest first, "
                "settings interleaved, median of rounds; chunks/s):", ""]
        rows: dict[str, dict[str, float]] = {}
        for key, v in tune["settings"].items():
            name, _, batch = key.partition(" batch ")
            rows.setdefault(name + (" THROUGHPUT" if batch.endswith("THROUGHPUT") else ""),
                            {})[batch.split()[0]] = v["chunks_per_second"]
        sizes = sorted({b for r in rows.values() for b in r}, key=int)
        out += ["| backend | " + " | ".join(sizes) + " |", "|---|" + "---:|" * len(sizes)]
        for name, r in rows.items():
            best = max(r.values())
            out.append(f"| `{name}` | " + " | ".join(
                "—" if s not in r else (f"**{_f(r[s], 1)}**" if r[s] == best else _f(r[s], 1))
                for s in sizes) + " |")
    if e2e:
        default_name = e2e.get("default", "openvino")
        ref = e2e.get("embed_only_torch_before", {})
        new = e2e.get(f"embed_only_{default_name}_now", {})
        ingest = e2e.get(f"ingest_{default_name}", {})
        before = e2e.get("ingest_torch", {})
        rounds = e2e.get("rounds", 1)
        out += ["", f"End to end on the generated {e2e['chunks']:,}-chunk corpus (bench_scale's): "
                "a process that only embeds the texts (`before`: torch fp32 as situate did until "
                "now; `now`: as an ingest embeds a window), against `situate ingest --context "
                "structural` with the default backend and with torch; process-tree peak RSS"
                + (f"; the runs interleaved in {rounds} rounds, each figure the median round's"
                   if rounds > 1 else "") + ":", "",
                "| run | seconds | chunks/s | peak RSS |", "|---|---:|---:|---:|"]
        for key, v in e2e.items():
            if isinstance(v, dict) and "wall_seconds" in v:
                rate = v.get("chunks_per_second") or round(e2e["chunks"] / v["wall_seconds"], 1)
                out.append(f"| {key.replace('_', ' ')} | {_f(v['wall_seconds'], 1)} | "
                           f"{_f(rate, 1)} | {_f(v['peak_rss_mib'], 0)} MiB |")
        ratios = e2e.get("ratios", {})
        if ref and new and ingest and ratios.get("over_embed_only"):
            def each(r: list[float]) -> str:
                return ", ".join(f"{x:.3f}×" for x in r)
            out += ["", "The ingest takes "
                    f"{statistics.median(ratios['over_reference']):.3f}× the torch fp32 "
                    f"embed-only reference (rounds: {each(ratios['over_reference'])}) and "
                    f"{statistics.median(ratios['over_embed_only']):.3f}× embedding alone with "
                    f"the default backend (rounds: {each(ratios['over_embed_only'])})"
                    + (f"; its process tree peaked at {_f(ingest['peak_rss_mib'], 0)} MiB against "
                       f"{_f(before['peak_rss_mib'], 0)} MiB for the torch ingest" if before
                       else "") + "."]
            home = e2e.get("prefect_home")
            if home:
                out += [f"Every timed ingest found Prefect's database made: the first run with a "
                        f"new PREFECT_HOME makes it, once, which took {_f(home['database_seconds'], 1)} s "
                        f"more here ({_f(home['first_run_seconds'], 1)} s against "
                        f"{_f(home['second_run_seconds'], 1)} s for the same small ingest after it)."]
        elif ref and new and ingest:
            out += ["", f"The ingest takes {ingest['wall_seconds'] / ref['wall_seconds']:.2f}× "
                    "the torch fp32 embed-only reference and "
                    f"{ingest['wall_seconds'] / new['wall_seconds']:.2f}× embedding alone with the "
                    "default backend"
                    + (f" (its flow itself took {_f(ingest['seconds']['total'], 1)} s, "
                       f"{ingest['seconds']['total'] / new['wall_seconds']:.2f}×; the rest is "
                       "starting Python, Prefect's temporary server and the store, and stopping "
                       "them)" if "total" in ingest.get("seconds", {}) else "")
                    + (f"; its process tree peaked at {_f(ingest['peak_rss_mib'], 0)} MiB against "
                       f"{_f(before['peak_rss_mib'], 0)} MiB for the torch ingest." if before
                       else "."), ""]
    later = d.get("e2e_default")
    if later and later.get("ratios", {}).get("over_embed_only"):
        name = later.get("default", "openvino")
        runs = [later[f"ingest_{name}"], later[f"embed_only_{name}_now"]]
        walls = [", ".join(_f(x, 1) for x in r["wall_seconds_rounds"]) for r in runs]
        out += ["", f"A later run of the default alone ({later['started']}, {later['rounds']} "
                "rounds; its entry kept as `e2e_default`): the ingest takes "
                f"{statistics.median(later['ratios']['over_embed_only']):.3f}× embedding alone "
                "(rounds: " + ", ".join(f"{x:.3f}×" for x in later["ratios"]["over_embed_only"])
                + f"; ingest {walls[0]} s against embedding alone {walls[1]} s); its process tree "
                f"peaked at {_f(runs[0]['peak_rss_mib'], 0)} MiB in the median round."]
    parts = [p for p in (speed, d.get("speed_10k"), quality, tune, e2e, later) if p]
    out += ["", "- Result file: `benchmarks/results/backends.json`",
            "- Commands: " + "; ".join(_venv_python(p["command"]) for p in parts),
            "- Date: " + ", ".join(sorted({p["started"][:10] for p in parts})),
            f"- Machine: {d['machine']['cpu']}, {d['machine']['cores']} cores, Python "
            f"{d['machine']['python']}; load average "
            + "; ".join(f"{p.get('load_before')} → {p.get('load_after', 'not recorded')}" for p in parts
                        if p.get("load_before"))]
    older = _load("backends-avx2.json")
    if older:
        o = older["speed"]["backends"]
        out += ["- The same benchmark earlier on a 2-core AMD EPYC with AVX2 only (no AVX-512, VNNI "
                "or bfloat16), before OpenVINO was offered and before an ingest sorted its texts: "
                f"`benchmarks/results/backends-avx2.json` (`onnx` {o['onnx']['ratio_to_torch']:.2f}× "
                f"torch fp32, `onnx-int8` {o['onnx-int8']['ratio_to_torch']:.2f}×; "
                f"{older['speed']['started'][:10]})"]
    return out + [""]


def bench_gpu() -> list[str]:
    """The GPU run (benchmarks/bench_gpu.py), or a plain statement that there is none."""
    out = ["## On a GPU", ""]
    if not (RESULTS / "gpu.json").exists():
        return out + ["Not measured: no machine with a GPU has run it yet, and no GPU figure is "
                      "estimated. `benchmarks/bench_gpu.py` measures, in one run, the default's "
                      "chunks/s on the GPU against the same machine's CPU cores and a 100,000-chunk "
                      "ingest end to end; `benchmarks/gpu/README.md` says how to run it on a GPU "
                      "machine without network access.", ""]
    d = _load("gpu.json")
    run, speed, ingest = d["run"], d.get("speed", {}), d.get("ingest", {})
    device = run["gpu"].get("device")
    if not device:
        return out + [f"The recorded run ({run['started'][:10]}) saw no GPU (torch "
                      f"{run['gpu'].get('torch')}): it holds no GPU figure.", ""]
    gpu, cpu = speed.get("default"), speed.get("cpu_default")
    if gpu and cpu:
        out += [f"The default (`--device auto`: {gpu['backend']} {gpu['precision']} on "
                f"{gpu['device']}, {gpu['forward_batch']} texts a forward pass) embedded "
                f"{_f(gpu['chunks_per_second'], 0)} chunks/s on {device}, against "
                f"{_f(cpu['chunks_per_second'], 0)} chunks/s for the CPU's default ({cpu['backend']} "
                f"{cpu['precision']}) on the same machine's {cpu['cores']} cores: "
                f"{speed['ratio_default_over_cpu_default']:.1f}× ({speed['texts']:,} texts of the "
                f"generated corpus with their structural contexts on the GPU, "
                f"{speed['cpu_texts']:,} on the CPU; GPU rounds "
                + ", ".join(_f(x, 0) for x in gpu["rounds"]) + ")."]
    if ingest.get("wall_seconds"):
        out += ["", f"`situate ingest` of a {ingest['chunks']:,}-chunk generated corpus with every "
                f"setting at its default ({ingest['backend']} {ingest['precision']} on "
                f"{ingest['device']}) took {_f(ingest['wall_seconds'], 1)} s, "
                f"{ingest['chunks'] / ingest['wall_seconds']:,.0f} chunks/s end to end; its process "
                f"tree peaked at {_f(ingest['peak_rss_mib'], 0)} MiB."
                + (f" Embedding the same texts alone took {_f(ingest['embed_only']['wall_seconds'], 1)}"
                   f" s: the ingest is {ingest['ratio_ingest_over_embed_only']:.2f}× that."
                   if ingest.get("embed_only") else "")]
    batch = d.get("batch")
    if batch:
        out += ["", "Texts per forward pass on the GPU: " + ", ".join(
            f"{k}: {_f(v['chunks_per_second'], 0)} chunks/s" for k, v in batch.items()) + "."]
    ref = d.get("reference")
    if ref and gpu:
        out += ["", f"torch fp32 on the CPU as situate ran it before backends: "
                f"{_f(ref['chunks_per_second'], 0)} chunks/s; the GPU default is "
                f"{gpu['chunks_per_second'] / ref['chunks_per_second']:.1f}× that."]
    failed = [k[:-len("_failed")] for k in d if k.endswith("_failed")]
    if failed:
        out += ["", "Parts that failed in this run (tracebacks in the result file): "
                + ", ".join(failed) + "."]
    return out + ["", "- Result file: `benchmarks/results/gpu.json`",
                  "- Command: " + _venv_python(run["command"]),
                  "- Date: " + run["started"][:10],
                  f"- Machine: {device}; {run['machine']['cpu']}, {run['machine']['cores']} cores, "
                  f"Python {run['machine']['python']}, torch {run['gpu'].get('torch')} (CUDA "
                  f"{run['gpu'].get('cuda')})", ""]


def bench_lexical() -> list[str]:
    d = _load("lexical.json")
    out = ["## Full-text engines for BM25 beside Milvus Lite", "",
           "The same texts for every engine (the scale benchmark's generated chunks, as situate "
           "stores them for BM25, cut into Milvus Lite's terms), one engine and size per process; "
           f"a query is a top {d['topk']} (a hybrid search's 100 candidates and 16 for ties), "
           f"{d['queries']} queries. *2 threads / 1*: queries per second from two threads over "
           "one (about 2 when the engine lets go of the GIL while it scores, on a quiet machine); "
           "*1% update*: 1% of the chunks replaced, then one search (a rebuild where the engine "
           "cannot update); *top 10 = Lite*: the share of queries whose top 10 is Milvus Lite's "
           "own BM25's (k1 1.5, b 0.75, its document lengths).", "",
           "| engine | chunks | build | p50 | p95 | q/s, 1 thread | 2 threads / 1 | 1% update "
           "| on disk | RSS growth | top 10 = Lite |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in d["results"]:
        if "failed" in r:
            out.append(f"| {r['engine']} | {r['chunks']:,} | failed | | | | | | | | |")
            continue
        update = f"{_f(r['update_1pct_s'], 2)} s" + ("" if r["incremental_update"]
                                                      else " (rebuild)")
        out.append(f"| {r['engine']} | {r['chunks']:,} | {_f(r['build_s'], 1)} s | "
                   f"{_f(r['p50_ms'], 2)} ms | {_f(r['p95_ms'], 1)} ms | "
                   f"{_f(r['qps_1_thread'], 0)} | {_f(r['threads_gain'], 2)} | {update} | "
                   f"{_f(r['disk_mib'], 1)} MiB | {_f(r['rss_growth_mib'], 0)} MiB | "
                   f"{r['top10_equal_to_lite_formula']:.0%} |")
    out += ["", "situate's own index (`situate.storage.lexical`: term frequencies in a scipy "
            "sparse matrix, scored with numpy at query time) is the one chosen: it gives Lite's "
            "scores to the bit on one segment, with statistics over the whole collection; it "
            "updates in place (bm25s precomputes every score, so any change rebuilds it); and "
            "tantivy and SQLite FTS5 fix k1 at 1.2 (tantivy also rounds document lengths to a "
            "byte), so neither gives Lite's ranking. These texts are the hard case for an "
            "inverted index (150 distinct words: every query term is in most chunks). 1M "
            "chunks was not measured here: the texts alone, tokenized for four engines, would "
            "hold several GiB beside the other work on this shared machine.", "",
            *_source("lexical.json", ".venv/bin/python " + d["command"], d["date"],
                     d["machine"])]
    if d.get("situate_rows"):
        out.insert(-1, f"- {d['situate_rows'][0].upper()}{d['situate_rows'][1:]}")
    return out


def _evaluation_seconds(serve: dict) -> str:
    """The search time of the evaluation's queries x 3 modes, as `situate evaluate` searches them
    (batched; with the one-at-a-time reference of the same run, scaled to as many queries)."""
    searched = serve["evaluation_search_s"]
    if not isinstance(searched, dict):
        return f"{_f(searched, 0)} s"
    return (f"{_f(searched['total'], 1)} s, {serve['evaluation_batch']} at a time "
            f"({_f(serve['evaluation_alone_s_scaled'], 0)} s one at a time)")


def bench_search_scale() -> list[str]:
    d = _load("search-scale.json")
    out = ["## Search by collection size, BM25 from the lexical index", "",
           "A `milvus-lite server` holding the scale benchmark's chunks, written by situate's "
           "store with random unit vectors (384-d, recorded as MiniLM on OpenVINO: only "
           "search is measured, the query embedded by the real model), searched through "
           f"`Retriever`, one query at a time, k 10, {d['queries']} queries. *parts*: the "
           "query's embedding, the lexical index's own top 116 and Lite's dense top 116 (ids "
           "and scores, as Lite answers it), each called directly; hybrid is over the sum of "
           "their p50s. The store's own dense top 116 also reads each hit's vector, to score it "
           "itself (the same to the bit in a shared call as alone).", "",
           "| chunks | hybrid p50 / p95 | dense p50 / p95 | BM25 p50 / p95 | embedding | index "
           "top 116 | Lite dense top 116 | the store's | hybrid / parts | Lite's own BM25 p50 |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in d["results"]:
        s = r["serve"]
        p50, p95 = s["p50_ms"], s["p95_ms"]
        out.append(f"| {r['chunks']:,} | {_f(p50['hybrid'], 0)} / {_f(p95['hybrid'], 0)} ms | "
                   f"{_f(p50['dense'], 0)} / {_f(p95['dense'], 0)} ms | "
                   f"{_f(p50['bm25'], 0)} / {_f(p95['bm25'], 0)} ms | {_f(p50['embed'], 0)} ms | "
                   f"{_f(p50['engine_bm25'], 1)} ms | {_f(p50['lite_dense'], 0)} ms | "
                   f"{_f(p50['store_dense'], 0) + ' ms' if 'store_dense' in p50 else '—'} | "
                   f"{_f(s['hybrid_over_parts'], 2)}x | {_f(s['lite_native_bm25_p50_ms'], 0)} ms |")
    steps = [(r["chunks"], r["serve"].get("hybrid_steps_p50_ms")) for r in d["results"]]
    if all(st for _, st in steps):
        names = [("query", "whole query"), ("embed", "embedding"),
                 ("ranking_dense", "dense top 116 (Lite)"), ("ranking_bm25", "BM25 top 116 (index)"),
                 ("prefetch_rows", "BM25 candidates' rows read (Lite)"),
                 ("leg_scores_dense", "their cosines"), ("leg_scores_bm25", "dense candidates' BM25"),
                 ("hits", "hits read (Lite)")]
        out += ["", "Where a hybrid query's time goes (p50 of each step, timed inside the query; "
                "BM25's leg and the read of its candidates' rows run in another thread while the "
                "query is embedded and the dense leg searched, so steps overlap):", "",
                "| step | " + " | ".join(f"{c:,} chunks" for c, _ in steps) + " |",
                "|---|" + "---:|" * len(steps)]
        for key, label in names:
            out.append(f"| {label} | " + " | ".join(
                f"{_f(st[key], 1)} ms" if key in st else "—" for _, st in steps) + " |")
    out += ["", "| chunks | write (rows, and the index as they go) | index at the write's end | on "
            "disk | built from the rows (memory it took) | 1% of documents rewritten: caught up "
            "| server restarted: first answer | "
            f"{d['results'][0]['serve']['evaluation_queries']} queries x 3 modes |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in d["results"]:
        w, u, s = r["write"], r["update"], r["serve"]
        out.append(f"| {r['chunks']:,} | {_f(w['write_s'], 0)} s | {_f(w['index_build_s'], 1)} s "
                   f"| {_f(w['index_disk_mib'], 1)} MiB | "
                   f"{_f(s['index_rebuilt_from_rows_s'], 1)} s "
                   f"(+{_f(s['index_rebuild_rss_growth_mib'], 0)} MiB) | "
                   f"{_f(u['catch_up_s'], 2)} s ({u['rows']:,} rows, {u['how']}) | "
                   f"{_f(r['after_update_and_restart']['first_answer_s'], 1)} s (index "
                   f"{r['after_update_and_restart']['index_was']}) | "
                   f"{_evaluation_seconds(s)} |")
    big = d["results"][-1]
    bp = big["serve"]["p50_ms"]
    rebuilt = ", ".join(f"{_f(r['serve']['index_rebuilt_from_rows_s'], 1)} s at {r['chunks']:,}"
                        for r in d["results"])
    out += ["", "The lexical index keeps each chunk's vector beside its terms: a hybrid query "
            "makes two calls to Lite, the dense top 116 by ids alone and the read of its hits; "
            "every candidate's dense score is computed from the index's vectors with Lite's "
            "arithmetic, the same rankings to the bit (0 of 744 codebase hybrid searches "
            f"differ). Lite's dense top 116 is then the bound: {_f(bp['lite_dense'], 0)} ms of "
            f"a hybrid query's {_f(bp['hybrid'], 0)} ms at {big['chunks']:,} chunks, because "
            "Lite's executor walks every row in Python on each call (the sizing page says what "
            "removes it: a Milvus server's HNSW). Concurrent clients: [below]"
            "(#concurrent-queries-situate-api-under-1-8-and-64-clients).", "",
            "An ingest does not build the index from the rows: the index follows the rows as "
            "they are written and the ingest's end saves it (the *index at the write's end* "
            "column). It is built from the rows only where it is missing or stale: a `.db` "
            "copied without it, a server reached at another address (as in each size's first "
            "answer in this run, which served collections written before on another port: "
            f"{_f(big['serve']['first_answer_s'], 0)} s at {big['chunks']:,} chunks). That build "
            "reads every row one query a slice of the primary keys (three quarters of 16,384 "
            "rows at most a slice), two slices asked for while the rows read are indexed "
            "([below](#the-lexical-index-built-from-the-rows-code-against-code), against the "
            "query iterator it replaced). Lite builds every field of every row it returns in "
            "Python and assembles the whole collection again on each call, so the build grows "
            f"faster than the rows: {rebuilt}. The rows read wait as flat arrays "
            "(term ids and counts, lengths, vector components: a few bytes a term) until one "
            "seal at the end; the memory column is what the process holds once it is sealed: "
            "the index's terms and vectors, and what the allocator keeps of the pages read.",
            "", "Before the index kept the vectors, a hybrid query made three calls to Lite "
            "and none for BM25: the rows of BM25's "
            "candidates, read by id with their vectors and a hit's fields while the query is "
            "embedded (they do not depend on its vector); the dense top 116 with each hit's "
            "vector; and the hits not read yet. Every dense score is computed here from the "
            "vectors: Lite's own cosines of a call carrying several queries differ in the last "
            "bits from a call carrying one (a matrix product against a matrix-vector one), so "
            "an evaluation's shared calls could otherwise rank a near tie otherwise than an "
            "app's lone query. Lite's cost is per row more than per call: reading 100 rows by "
            "id took 7 ms with their ids alone, 9.5 ms with their vectors, 12 ms with a hit's "
            "fields too (a call 0.8 ms; 10,000 chunks), because Lite builds every field of each "
            "row in Python whatever is asked for and encodes vectors float by float; its dense "
            "top 116 took 14 ms, 23 ms with the vectors. So reading only what fusion needs saves "
            "little, and the rows of about 200 candidates a query are what is left above the "
            "parts where the collection is small. Lite's dense search itself grows with the "
            "collection: it walks every row's primary key in Python on each call, whatever the "
            "number of query vectors in it, which the evaluation's batches share. The index "
            "follows the rows as the ingest writes them: its end saves it (and reads only "
            "documents the manifest says changed that this process did not write).", "",
            *_source("search-scale.json", ".venv/bin/python " + d["command"], d["date"],
                     d["machine"])]
    if d.get("serve_run"):  # the serving step run again on the same collections (--serve-only)
        run = d["serve_run"]
        out.insert(-1, "- The serving figures (latencies, parts and steps, first answer, built "
                       "from the rows, the evaluation's search time; not the write, the update "
                       "and the restart) from a later run on the same collections: "
                       f"`.venv/bin/python {run['command']}`, {run['date']}, {run['machine']}")
    if d.get("written_by"):  # a run that served collections an earlier run wrote (--reuse)
        out.insert(-1, "- The collections, and the write column, from the run just before that "
                       f"wrote them: `.venv/bin/python {d['written_by']['command']}` (its own "
                       "figures under `written_by`)")
    return out


def bench_lexical_rebuild() -> list[str]:
    d = _load("lexical-rebuild.json")
    out = ["## The lexical index built from the rows, code against code", "",
           "A process that finds the lexical index missing or stale builds it from the "
           "collection's rows. Each checkout builds it in a process of its own from the same "
           "`milvus-lite server` (the search-scale collection), the checkouts in turn; every "
           "build gave the same index (rows, terms, and the top 10 of four queries). *Held*: "
           "the process's RSS growth once the index is sealed; *peak*: the most during the "
           "build (sampled every 50 ms).", "",
           "| chunks | checkout | seconds | its CPU | held | peak |", "|---:|---|---:|---:|---:|---:|"]
    for r in d["results"]:
        for name in d["variants"]:
            for run in r["runs"][name]:
                out.append(f"| {r['chunks']:,} | {name} | {_f(run['seconds'], 1)} s | "
                           f"{_f(run['client_cpu_s'], 1)} s | {_f(run['held_mib'], 0)} MiB | "
                           f"{_f(run['peak_mib'], 0)} MiB |")
    notes = d.get("notes") or {}
    out += ["", *(f"- `{name}`: {notes[name]}" for name in d["variants"] if name in notes),
            "", "The time is Lite's and this process's together: Lite's server builds every row "
            "it returns in Python (every field, whatever is asked for), while the reading "
            "process indexes the rows it has; on two cores they share the machine.", "",
            *_source("lexical-rebuild.json", ".venv/bin/python " + d["command"], d["date"],
                     d["machine"]), ""]
    return out


BENCHMARK_SECTIONS: list[Callable[[], list[str]]] = [
    bench_quality, bench_backends, bench_gpu, bench_heldout, bench_code_chunks, bench_formats, bench_ingest,
    bench_updates, bench_drift, bench_scale, bench_lexical, bench_search_scale, bench_lexical_rebuild,
    bench_search_latency,
    bench_faces, bench_throughput,
    bench_door, bench_providers, bench_reading, bench_capacity]


def benchmarks_page() -> str:
    out = [NOTE.format(source="the result files under benchmarks/results/"), "",
           "# Benchmarks: the current figures", "",
           "Each figure below is read from the result file its benchmark wrote, and printed with "
           "the command that wrote it, the date and the machine. Every run but the GPU section's "
           "was on a 2-core x86_64 machine without a GPU, often shared with other work: Pass@k "
           "does not depend on load, times do (each section says how loaded it was). How the "
           "defaults were chosen, and "
           "every earlier measurement, is in the [archive](archive.md).", "",
           "![Pass@k of the codebase benchmark with 95% intervals, from situate evaluate]"
           "(evaluation-codebase-intervals.png)", ""]
    for section in BENCHMARK_SECTIONS:
        out += section()
    return "\n".join(out).rstrip() + "\n"
