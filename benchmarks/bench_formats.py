"""Quality holds across formats: one evaluation set over the same documents as Markdown, HTML,
DOCX and PDF, through the real commands.

Why: situate reads PDF, HTML and DOCX with readers of their own (tasks/corpus/readers/) and cuts
them along their structure. A reader that loses text, keeps a site's menus and cookie banners, or
leaves a PDF's running headers in the text makes retrieval worse than on the Markdown the
documents were written in. This benchmark measures that difference, and checks first that every
golden quote can be found at all in each format's chunks (a quote missing from a format's chunks is
a reader bug, whatever retrieval does).

The corpus: Markdown documentation that is not ours (default: Node.js's API reference as Debian
installs it, /usr/share/doc/nodejs/api; `--source DIR` for any other Markdown tree), a seeded
choice of files. Each file is made into

- (a) the Markdown itself;
- (b) HTML: `pandoc -s`, wrapped in the boilerplate real sites repeat on every page (a header with
  a search box, a <nav> menu, a cookie-consent banner, an <aside> sidebar listing every page, a
  <footer>), the content in a plain <div> (no <main>: many sites have none);
- (b') html-sections: the same with `pandoc -s --section-divs` (every heading's content in nested
  <section> elements, as pandoc's EPUBs and many static sites have it);
- (c) DOCX: `pandoc`;
- (d) PDF: Chromium's headless print of pandoc's HTML (without the boilerplate, as someone prints
  docs: every <details> open), with Chromium's default running header (date, title) and footer
  (file URL, page/pages);
- (e) EPUB: `pandoc -t epub3` (a book of one chapter per file, its sections nested).

Each format is a corpus directory of its own with the same relative paths and stems, so one
evaluation set serves all of them (a golden quote's `doc_id` is the .md path; `Golden.matches`
accepts the same path with another extension).

The evaluation set is inverse cloze: a prose sentence of a paragraph (40-200 characters, at least
six words, mostly not code) is the query; the golden quote is its neighbour in the paragraph (the
next sentence, or the one before for a paragraph's last sentence; two sentences when one is
shorter than 60 characters); the query sentence is removed from the Markdown before any format is
made, so no format's index holds the query's words verbatim. Sentences are taken where the
Markdown's own text (inline code, links and emphasis stripped) equals what `pandoc -t plain`
shows, so the quote is the text every format shows; each is checked again on the edited file
(the query gone, the quote there once).

Then, per format and `--context`: a fresh `situate ingest` (MiniLM by default), `situate evaluate
--json` (dense, BM25, hybrid at k = 5, 10, 20), and the coverage check in-process
(`load_corpus` as ingest reads it, `Golden.matches` as evaluate matches).

    .venv/bin/python benchmarks/bench_formats.py [--source DIR] [--files 40] [--queries 200]
        [--contexts structural none] [--formats md html html-sections docx pdf epub] [--keep DIR]

`--keep DIR --reuse --cuts-only` gives each format's chunk count and the Markdown's heading cuts it
keeps without an ingest; `--rerender` first makes the formats again from the kept Markdown.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_reading import code_version  # the script's folder is on sys.path
from formats_corpus import (  # the script's folder is on sys.path
    _render,
    build,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = Path("/usr/share/doc/nodejs/api")
FORMATS = ("md", "html", "html-sections", "docx", "pdf", "epub")
MODES = ("dense", "bm25", "hybrid")
KS = ("5", "10", "20")

# --- measuring ----------------------------------------------------------------------------------

def run(args: list[str], env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-m", "situate.cli.main", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"situate {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


COVERAGE = """
import json, sys
from situate.tasks.corpus.load import load_corpus
from situate.tasks.retrieval.metrics import _stem, load_eval_set, normalize_quote
corpus = load_corpus(sys.argv[1])
by_stem = {_stem(d.id): d for d in corpus.documents}
out = {"documents": len(corpus.documents), "chunks": corpus.chunk_count,
       "formats": dict(corpus.formats), "units": dict(corpus.units), "skipped": dict(corpus.skipped),
       "covered": 0, "missing": []}
sizes = sorted(len(c.text) for d in corpus.documents for c in d.chunks)
out["chars_mean"] = round(sum(sizes) / max(1, len(sizes)), 1)
out["chars_median"] = sizes[len(sizes) // 2] if sizes else 0
# Where each chunk begins: its first line, and the heading its context names (the last of its
# heading path), per document, for the heading cuts measured against the Markdown (`cuts_kept`).
def line(text):
    return " ".join(text.strip().split("\\n", 1)[0].split()).casefold()
out["starts"] = {_stem(d.id): [[line(c.text), line(str((c.where.get("heading_path") or [""])[-1]))]
                               for c in d.chunks] for d in corpus.documents}
for q in load_eval_set(sys.argv[2]):
    g = q.golden[0]
    doc = by_stem.get(_stem(g.doc_id))
    if doc is not None and any(g.matches(doc.id, c.text) for c in doc.chunks):
        out["covered"] += 1
        continue
    quote = normalize_quote(g.quote)
    text = normalize_quote(doc.text) if doc is not None else ""
    if doc is None:
        why = "document not read"
    elif quote in text or quote.replace("-", "") in text.replace("-", ""):
        why = "across a chunk boundary"
    else:
        why = "not in the document's text"
    # the reader's text where the quote should be: around its first words, or its last
    place = -1
    for probe in (quote[:30], quote[-30:], quote[:15]):
        place = text.find(probe)
        if place >= 0:
            break
    around = text[max(0, place - 80):place + len(quote) + 80] if place >= 0 else ""
    out["missing"].append({"query": q.query, "doc_id": g.doc_id, "quote": g.quote, "why": why,
                           "reader_text": around})
# Fidelity: every prose sentence of the documents (not only the golden quotes), looked for in the
# document's text as the reader gave it (chunk boundaries aside). Markdown keeps its markup, so
# its figure says nothing: only the other formats are checked.
if sys.argv[3] != "md":
    sentences = [json.loads(line) for line in open(sys.argv[4])]
    texts = {k: normalize_quote(d.text) for k, d in by_stem.items()}
    bare = {k: t.replace("-", "") for k, t in texts.items()}
    chunked = {k: [normalize_quote(c.text) for c in d.chunks] for k, d in by_stem.items()}
    lost = []
    out["sentences_in_chunks"] = 0
    for x in sentences:
        key, want = _stem(x["doc_id"]), normalize_quote(x["sentence"])
        if any(want in c or want.replace("-", "") in c.replace("-", "") for c in chunked.get(key, ())):
            out["sentences_in_chunks"] += 1
        if want in texts.get(key, "") or want.replace("-", "") in bare.get(key, ""):
            continue
        text = texts.get(key, "")
        place = next((p for p in (text.find(want[:25]), text.find(want[-25:])) if p >= 0), -1)
        lost.append({"doc_id": x["doc_id"], "sentence": x["sentence"],
                     "reader_text": text[max(0, place - 40):place + len(want) + 40] if place >= 0 else ""})
    out["sentences"] = len(sentences)
    out["sentences_found"] = len(sentences) - len(lost)
    out["sentences_lost"] = lost
print(json.dumps(out))
"""


def coverage(corpus: Path, eval_set: Path, env: dict[str, str]) -> dict:
    """Load the corpus as ingest does and count the queries whose golden quote is in some chunk,
    and the prose sentences the reader gave back verbatim."""
    r = subprocess.run([sys.executable, "-c", COVERAGE, str(corpus), str(eval_set), corpus.name,
                        str(eval_set.parent / "sentences.jsonl")], cwd=ROOT,
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"coverage of {corpus} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cuts_kept(md: dict, other: dict) -> dict:
    """The Markdown's heading cuts (a chunk that begins with the heading its context names) and
    how many another format keeps (the same heading begins a chunk of the same document there),
    from two `coverage` results; and the other format's chunk count against the Markdown's."""
    cuts = kept = 0
    for stem, starts in md["starts"].items():
        want = Counter(first for first, named in starts if first and first == named)
        have = Counter(first for first, _ in other["starts"].get(stem, ()))
        cuts += sum(want.values())
        kept += sum(min(n, have[h]) for h, n in want.items())
    return {"chunks": other["chunks"], "md_chunks": md["chunks"],
            "chunks_vs_md": round(100 * (other["chunks"] - md["chunks"]) / max(1, md["chunks"]), 1),
            "heading_cuts": cuts, "heading_cuts_kept": kept,
            "heading_cuts_kept_pct": round(100 * kept / max(1, cuts), 1)}


def cuts_table(cuts: dict[str, dict]) -> str:
    """Per format: its chunks against the Markdown's, and the Markdown's heading cuts it keeps."""
    lines = ["| format | chunks | against Markdown | Markdown's heading cuts kept |", "|---|---|---|---|"]
    for fmt, c in cuts.items():
        lines.append(f"| {fmt} | {c['chunks']:,} | {c['chunks_vs_md']:+.1f}% | "
                     f"{c['heading_cuts_kept']}/{c['heading_cuts']} ({c['heading_cuts_kept_pct']:.1f}%) |")
    return "\n".join(lines) + "\n"


def verbatim(cov: dict, key: str = "sentences_found") -> str:
    if not cov.get("sentences"):
        return "n/a (markup)"
    if key not in cov:
        return "n/a"
    return f"{cov[key]}/{cov['sentences']} ({100 * cov[key] / cov['sentences']:.1f}%)"


def paired(results: dict, context: str, formats: list[str], eval_set: Path, env: dict[str, str],
           store: Path) -> dict:
    """Every format against the Markdown on the same queries: one `situate evaluate --collection
    md,html,...` over the collections of this context in the store, hybrid mode (the paired
    differences with their bootstrap intervals, as the product reports them; each format's own
    evaluation above has every mode); {} without a Markdown collection."""
    names = [f"formats_{fmt.replace('-', '_')}_{context}" for fmt in FORMATS
             if fmt in formats or any(r["format"] == fmt and r["context"] == context
                                      for r in results["runs"])]
    if f"formats_md_{context}" not in names or len(names) < 2:
        return {}
    out = store / f"paired-{context}.json"
    r = subprocess.run([sys.executable, "-m", "situate.cli.main", "evaluate", str(eval_set),
                        "--collection", ",".join(names), "--k", ",".join(KS), "--modes",
                        "hybrid", "--json", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:  # a format measured in another store: the table says so
        print(f"paired evaluation of {','.join(names)} failed: {r.stderr[-500:]}", flush=True)
        return {}
    report = json.loads(out.read_text())
    return {"collections": names, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            "pass_at_k": {name: c["pass_at_k"] for name, c in report["collections"].items()},
            "comparisons": report["comparisons"]}


def paired_table(results: dict) -> str:
    """Hybrid Pass@k of every format beside its chunks, and its paired difference from the
    Markdown (mean, 95% bootstrap interval) as `situate evaluate --collection md,...` gave it."""
    lines = ["| format | chunks | chars mean / median | quotes in a chunk | hybrid P@5 / 10 / 20 | "
             "P@5 − Markdown [95%] | P@10 − Markdown [95%] | P@20 − Markdown [95%] |",
             "|---|---|---|---|---|---|---|---|"]
    queries = results["build"]["queries"]
    for context, paired in results.get("paired", {}).items():
        diffs = {(c["b"].split(" · ")[1], c["k"]): c for c in paired["comparisons"]
                 if c["a"].startswith("hybrid")}
        for name in paired["collections"]:
            run = next((r for r in results["runs"] if r["context"] == context
                        and f"formats_{r['format'].replace('-', '_')}_{context}" == name), None)
            if run is None:
                continue
            cov, p = run["coverage"], paired["pass_at_k"][name]["hybrid"]
            cells = []
            for k in KS:
                d = diffs.get((name, int(k)))
                cells.append(f"{d['difference']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}]" if d else "")
            lines.append(f"| {run['format']} ({context}) | {run['chunks']} | "
                         f"{cov.get('chars_mean', '')} / {cov.get('chars_median', '')} | "
                         f"{cov['covered']}/{queries} | " + " / ".join(f"{p[k]:.1f}" for k in KS)
                         + " | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_tables(results: dict) -> str:
    lines = ["| format | context | documents | chunks | quotes findable | prose sentences verbatim | "
             "in the chunks | dense P@5/10/20 | BM25 P@5/10/20 | hybrid P@5/10/20 | hybrid P@10 − Markdown |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {r["context"]: r["pass_at_k"]["hybrid"]["10"] for r in results["runs"] if r["format"] == "md"}
    for r in results["runs"]:
        p = r["pass_at_k"]
        cov = r["coverage"]
        cells = [" / ".join(f"{p[m][k]:.1f}" for k in KS) for m in MODES]
        delta = (f"{p['hybrid']['10'] - base[r['context']]:+.1f}" if r["context"] in base else "")
        lines.append(f"| {r['format']} | {r['context']} | {cov['documents']} | {r['chunks']} | "
                     f"{cov['covered']}/{results['build']['queries']} "
                     f"({100 * cov['covered'] / max(1, results['build']['queries']):.1f}%) | "
                     f"{verbatim(cov)} | {verbatim(cov, 'sentences_in_chunks')} | "
                     + " | ".join(cells) + f" | {delta} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a Markdown tree")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--max-bytes", type=int, default=60_000, help="skip larger Markdown files")
    ap.add_argument("--min-bytes", type=int, default=3_000, help="skip smaller Markdown files")
    ap.add_argument("--queries-from", choices=("cloze", "heldout"), default="cloze",
                    help="cloze: this benchmark's inverse cloze (a middle sentence, its neighbour); "
                         "heldout: `situate synth --generator held-out` on the chosen Markdown")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    ap.add_argument("--contexts", nargs="+", default=["structural", "none"])
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--keep", type=Path, help="build the corpora here and keep them (default: a temp dir)")
    ap.add_argument("--build-only", action="store_true", help="make the corpora and the set, then stop")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "formats.json")
    ap.add_argument("--render", metavar="JSON", help="print the table of an earlier --out and stop")
    ap.add_argument("--store", type=Path,
                    help="keep the collections in DIR/milvus.db (default: a temp dir), so that a later "
                         "--update run compares its formats with the Markdown's collection there")
    ap.add_argument("--update", action="store_true",
                    help="replace only this run's (format, context) rows in --out (the same set)")
    ap.add_argument("--reuse", action="store_true",
                    help="use the corpora and set already built in --keep (by --build-only) as they are")
    ap.add_argument("--rerender", action="store_true",
                    help="with --reuse: make --formats (other than md) again from the kept Markdown, "
                         "as formats_corpus renders them now (the same pages and evaluation set)")
    ap.add_argument("--coverage-only", action="store_true",
                    help="measure only the coverage of --formats and store it in --out's rows for them "
                         "(the same set; no ingest): for formats whose reader did not change")
    ap.add_argument("--cuts-only", action="store_true",
                    help="measure each format's chunks, the Markdown's heading cuts it keeps and its "
                         "coverage, print them and stop (no ingest; nothing written)")
    args = ap.parse_args()
    if args.render:
        rendered = json.loads(Path(args.render).read_text())
        print(markdown_tables(rendered), end="")
        if rendered.get("cuts"):
            print("\n" + cuts_table(rendered["cuts"]), end="")
        if rendered.get("paired"):
            print("\n" + paired_table(rendered), end="")
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp) / "formats"
        if args.reuse and args.keep and (work / "built.json").exists():
            built = json.loads((work / "built.json").read_text())
            if args.rerender:
                _render(work, built["files"], {rel: (work / "md" / rel).read_text(encoding="utf-8")
                                               for rel in built["files"]},
                        tuple(f for f in args.formats if f != "md"))
        else:
            if work.exists():
                shutil.rmtree(work)
            t = time.perf_counter()
            built = build(work, args.source, args.files, args.queries, args.seed, args.max_bytes,
                          tuple(args.formats), args.queries_from, args.min_bytes)
            built["build_seconds"] = round(time.perf_counter() - t, 1)
            (work / "built.json").write_text(json.dumps(built))
        print(json.dumps({k: v for k, v in built.items() if k != "files"}), flush=True)
        if args.build_only:
            return
        built["eval_sha256"] = hashlib.sha256((work / "eval.jsonl").read_bytes()).hexdigest()
        results: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                         "command": " ".join([Path(sys.executable).name, *sys.argv]),
                         "embedder": args.embedder, "build": built, "runs": []}
        if args.update and args.out.exists():
            earlier = json.loads(args.out.read_text())
            if earlier["build"].get("eval_sha256") != built["eval_sha256"]:
                sys.exit(f"{args.out} was measured on another evaluation set: run without --update")
            results["runs"] = [r for r in earlier["runs"]
                               if not (r["format"] in args.formats and r["context"] in args.contexts)]
            results["commands"] = earlier.get("commands", [earlier.get("command")]) + [results["command"]]
            results["cuts"] = earlier.get("cuts", {})
        store = args.store or Path(tmp)
        store.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SITUATE_MILVUS_URI": f"{store}/milvus.db", "SITUATE_CACHE_DIR": f"{tmp}/c",
               "SITUATE_RESULTS_DIR": f"{tmp}/r"}
        env.pop("ANTHROPIC_API_KEY", None)
        eval_set = work / "eval.jsonl"
        covered = {fmt: coverage(work / fmt, eval_set, env) for fmt in args.formats}
        for fmt, cov in covered.items():
            print(fmt, "documents", cov["documents"], "chunks", cov["chunks"], "covered",
                  cov["covered"], "missing", len(cov["missing"]), "sentences found",
                  cov.get("sentences_found"), "of", cov.get("sentences"), flush=True)
        md_cov = covered["md"] if "md" in covered else coverage(work / "md", eval_set, env)
        cuts = {fmt: cuts_kept(md_cov, cov) for fmt, cov in covered.items() if fmt != "md"}
        for cov in covered.values():
            cov.pop("starts")
        print(cuts_table(cuts), end="", flush=True)
        results["cuts"] = {**results.get("cuts", {}), **cuts}
        if args.cuts_only:
            print(json.dumps({fmt: {"chunks": cov["chunks"], "covered": cov["covered"],
                                    "queries": built["queries"]} for fmt, cov in covered.items()}))
            return
        if args.coverage_only:
            earlier = json.loads(args.out.read_text())
            if earlier["build"].get("eval_sha256") != built["eval_sha256"]:
                sys.exit(f"{args.out} was measured on another evaluation set")
            for r in earlier["runs"]:
                if r["format"] in covered:
                    r["coverage"] = covered[r["format"]]
                    r["coverage_measured"] = time.strftime("%Y-%m-%d %H:%M:%S")
            earlier["commands"] = earlier.get("commands", [earlier.get("command")]) + [results["command"]]
            args.out.write_text(json.dumps(earlier, indent=2) + "\n")
            print(markdown_tables(earlier), end="")
            return
        for context in args.contexts:
            for fmt in args.formats:
                collection = f"formats_{fmt.replace('-', '_')}_{context}"
                summary_json = Path(tmp) / f"{collection}-ingest.json"
                t = time.perf_counter()
                run(["ingest", str(work / fmt), "--collection", collection, "--context", context,
                     "--embedder", args.embedder, "--json", str(summary_json)], env)
                ingest_s = time.perf_counter() - t
                summary = json.loads(summary_json.read_text())
                report_json = Path(tmp) / f"{collection}-eval.json"
                run(["evaluate", str(eval_set), "--collection", collection, "--k", ",".join(KS),
                     "--modes", ",".join(MODES), "--json", str(report_json)], env)
                report = json.loads(report_json.read_text())
                missed = [{"query": q["query"], "ranks": q["ranks"]} for q in report["per_query"]
                          if (q["ranks"]["hybrid"][0] or 99) > 10]
                ranks = {m: [q["ranks"][m][0] for q in report["per_query"]] for m in MODES}
                results["runs"].append({
                    "format": fmt, "context": context, "documents": summary["documents"],
                    # the collection's rows: an --update into a kept --store writes only the
                    # chunks that changed
                    "chunks": summary.get("rows") or summary["chunks_written"],
                    "formats": summary.get("formats"),
                    "units": summary.get("units"), "skipped": summary.get("skipped"),
                    "ingest_seconds": round(ingest_s, 1), "pass_at_k": report["pass_at_k"],
                    "coverage": {k: v for k, v in covered[fmt].items()},
                    "hybrid_missed_at_10": missed, "ranks": ranks,
                    "code": code_version(("tasks/corpus", "tasks/retrieval", "tasks/contexts")),
                    "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
                print(fmt, context, json.dumps(report["pass_at_k"]), flush=True)
                order = {f: i for i, f in enumerate(FORMATS)}
                results["runs"].sort(key=lambda r: (r["context"] != "structural", r["context"],
                                                    order[r["format"]]))
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=2) + "\n")  # after every run
            compared = paired(results, context, args.formats, eval_set, env, store)
            if compared:
                results.setdefault("paired", {})[context] = compared
                args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(markdown_tables(results), end="")
        print("\n" + cuts_table(results["cuts"]), end="")


if __name__ == "__main__":
    main()
