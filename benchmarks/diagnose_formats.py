"""Why one document ranks differently in two formats: per format, how its text is cut and
situated, beside the queries that flip between the Markdown and that format.

Reads a corpus built by `bench_formats.py --keep DIR` (one directory per format, the same stems)
as ingest reads it (`load_corpus`, default chunk size and overlap), situates every chunk with the
structural contextualizer as ingest does, and reports per format:

- chunks per document and their sizes (characters: mean, median, 10th and 90th percentile);
- cuts where the Markdown's are: each chunk's end mapped into the Markdown's text of the same
  document (the two texts' words aligned, `difflib`), counted as at a Markdown cut when it lands
  within 3 words of one;
- the heading path each chunk's context names (the `heading_path` of its place), and how often a
  golden chunk's path equals the Markdown's golden chunk's;
- the golden chunks: how many chunks hold each query's quote, and their sizes;
- with `--paired JSON` (a `situate evaluate --collection md,html,... --json` report, e.g. the one
  `bench_formats.py --store DIR` writes as DIR/paired-structural.json): the queries whose hybrid
  golden rank crosses 10 between the Markdown and the format, and for each what differs in the
  golden chunk (size, path, the quote's offset in it) and the chunk that won.

    .venv/bin/python benchmarks/diagnose_formats.py --keep DIR [--paired JSON]
        [--formats md html docx pdf epub] [--out diagnosis.json] [--show 8]
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from situate.core.records import chunk_id
from situate.tasks.contexts.structural import StructuralContextualizer
from situate.tasks.corpus.load import load_corpus
from situate.tasks.retrieval.metrics import _stem, load_eval_set, normalize_quote

_WORD = re.compile(r"\w+")
NEAR = 3  # words: a cut this close to one of the Markdown's is at it


def words(text: str) -> list[tuple[int, str]]:
    """(offset, lowercased word) of every word of `text`."""
    return [(m.start(), m.group().lower()) for m in _WORD.finditer(text)]


def percentile(values: list[int], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


class Aligned:
    """One document's words in a format mapped onto its Markdown's words."""

    def __init__(self, md_text: str, text: str) -> None:
        self.md = words(md_text)
        self.fmt = words(text)
        self.md_offsets = [o for o, _ in self.md]
        self.fmt_offsets = [o for o, _ in self.fmt]
        matcher = difflib.SequenceMatcher(None, [w for _, w in self.fmt], [w for _, w in self.md],
                                          autojunk=False)
        self.blocks = matcher.get_matching_blocks()

    def word_at(self, offsets: list[int], position: int) -> int:
        import bisect

        return bisect.bisect_left(offsets, position)

    def to_md(self, position: int) -> int | None:
        """The Markdown word index of the format's word at or after `position`, or None when it
        falls outside every matching block."""
        i = self.word_at(self.fmt_offsets, position)
        best = None
        for a, b, size in self.blocks:
            if a <= i < a + size:
                return b + (i - a)
            if a > i:
                best = b  # the next matched word
                break
        return best


def load(path: Path) -> dict[str, Any]:
    corpus = load_corpus(path)
    return {_stem(d.id): d for d in corpus.documents}


def situated(docs: dict[str, Any]) -> dict[str, str]:
    """chunk id -> its structural context, as ingest computes it."""
    ctx = StructuralContextualizer()
    out = {}
    for doc in docs.values():
        for s in ctx.situate(doc, doc.chunks).situated:
            out[chunk_id(doc.id, s.chunk.index)] = s.context
    return out


def heading_path(chunk: Any) -> str:
    path = chunk.where.get("heading_path") if chunk.where else None
    return " > ".join(path) if isinstance(path, list) else ""


def golden_chunks(doc: Any, quote: str) -> list[Any]:
    want = normalize_quote(quote)
    return [c for c in doc.chunks if want in normalize_quote(c.text)
            or want.replace("-", "") in normalize_quote(c.text).replace("-", "")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, required=True)
    ap.add_argument("--formats", nargs="+", default=["md", "html", "docx", "pdf", "epub"])
    ap.add_argument("--paired", type=Path, help="situate evaluate --collection md,... --json report")
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--show", type=int, default=6, help="flips printed per format")
    args = ap.parse_args()
    queries = load_eval_set(args.keep / "eval.jsonl")
    corpora = {fmt: load(args.keep / fmt) for fmt in args.formats}
    contexts = {fmt: situated(docs) for fmt, docs in corpora.items()}
    by_id = {fmt: {chunk_id(d.id, c.index): (d, c) for d in docs.values() for c in d.chunks}
             for fmt, docs in corpora.items()}
    md = corpora["md"]
    report: dict[str, Any] = {"keep": str(args.keep), "queries": len(queries), "formats": {}}
    golden: dict[str, list[list[Any]]] = {}
    for fmt, docs in corpora.items():
        sizes = [len(c.text) for d in docs.values() for c in d.chunks]
        per_doc = [len(d.chunks) for d in docs.values()]
        cuts = at_md = 0
        for stem, doc in docs.items():
            base = md.get(stem)
            if base is None or fmt == "md":
                continue
            aligned = Aligned(base.text, doc.text)
            md_cuts = set()
            for c in base.chunks[:-1]:
                end = aligned.word_at(aligned.md_offsets, c.start + len(c.text))
                md_cuts.add(end)
            for c in doc.chunks[:-1]:
                mapped = aligned.to_md(c.start + len(c.text))
                cuts += 1
                if mapped is not None and any(abs(mapped - m) <= NEAR for m in md_cuts):
                    at_md += 1
        paths = Counter(bool(heading_path(c)) for d in docs.values() for c in d.chunks)
        golden[fmt] = [golden_chunks(docs[_stem(q.golden[0].doc_id)], q.golden[0].quote)
                       if _stem(q.golden[0].doc_id) in docs else [] for q in queries]
        held = [g for g in golden[fmt] if g]
        row = {
            "documents": len(docs), "chunks": len(sizes),
            "chunks_per_document": round(statistics.mean(per_doc), 2) if per_doc else 0,
            "chars_mean": round(statistics.mean(sizes), 1) if sizes else 0,
            "chars_median": statistics.median(sizes) if sizes else 0,
            "chars_p10": percentile(sizes, 0.1), "chars_p90": percentile(sizes, 0.9),
            "chunks_under_200": sum(1 for s in sizes if s < 200),
            "cuts": cuts, "cuts_at_markdown": at_md,
            "chunks_with_heading_path": paths[True],
            "quotes_in_a_chunk": len(held), "chunks_per_quote": round(
                statistics.mean(len(g) for g in held), 2) if held else 0,
            "golden_chars_mean": round(statistics.mean(len(g[0].text) for g in held), 1) if held else 0,
        }
        if fmt != "md":
            same = [heading_path(g[0]) == heading_path(m[0])
                    for g, m in zip(golden[fmt], golden["md"], strict=True) if g and m]
            row["golden_path_as_markdown"] = f"{sum(same)}/{len(same)}"
        report["formats"][fmt] = row
    if args.paired:
        paired = json.loads(args.paired.read_text())
        by_collection = paired["collections"]  # name -> that collection's evaluation
        md_name = next(n for n in by_collection if n.startswith("formats_md_"))
        for fmt in args.formats:
            if fmt == "md":
                continue
            name = md_name.replace("_md_", f"_{fmt.replace('-', '_')}_")
            if name not in by_collection:
                continue
            report["formats"][fmt]["flips"] = flips(
                queries, by_collection[md_name]["per_query"], by_collection[name]["per_query"],
                args.mode, args.k, golden["md"], golden[fmt], by_id["md"], by_id[fmt],
                contexts["md"], contexts[fmt])
    print(render(report, args.show))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")


def chunk_summary(chunk: Any, contexts: dict[str, str], quote: str = "") -> dict[str, Any]:
    cid = chunk_id(chunk.doc_id, chunk.index)
    out = {"doc": chunk.doc_id, "index": chunk.index, "chars": len(chunk.text),
           "path": heading_path(chunk), "context": contexts.get(cid, ""),
           "head": " ".join(chunk.text.split())[:90]}
    if quote:
        out["quote_at"] = normalize_quote(chunk.text).find(normalize_quote(quote))
    return out


def flips(queries: list[Any], md_ranks: list[dict], fmt_ranks: list[dict], mode: str, k: int,
          md_golden: list[list[Any]], fmt_golden: list[list[Any]], md_ids: dict, fmt_ids: dict,
          md_ctx: dict[str, str], fmt_ctx: dict[str, str]) -> dict[str, Any]:
    """The queries found in the top k in one of the two and not the other, with their chunks."""
    out: dict[str, Any] = {"lost": [], "gained": []}
    for i, q in enumerate(queries):
        a, b = md_ranks[i]["ranks"][mode][0], fmt_ranks[i]["ranks"][mode][0]
        in_a, in_b = a is not None and a <= k, b is not None and b <= k
        if in_a == in_b:
            continue
        quote = q.golden[0].quote
        winner_ids = (fmt_ranks if in_a else md_ranks)[i]["hits"][mode]
        loser = fmt_ids if in_a else md_ids
        loser_ctx = fmt_ctx if in_a else md_ctx
        top = loser.get(winner_ids[0]) if winner_ids else None
        entry = {
            "query": q.query, "quote": quote, "md_rank": a, "rank": b,
            "md_golden": [chunk_summary(c, md_ctx, quote) for c in md_golden[i][:2]],
            "golden": [chunk_summary(c, fmt_ctx, quote) for c in fmt_golden[i][:2]],
            "top_where_lost": chunk_summary(top[1], loser_ctx) if top else None,
            "top_same_document": bool(top) and _stem(top[0].id) == _stem(q.golden[0].doc_id),
        }
        out["lost" if in_a else "gained"].append(entry)
    return out


def render(report: dict[str, Any], show: int) -> str:
    lines = ["| format | docs | chunks | per doc | chars mean / median / p10 / p90 | < 200 chars | "
             "cuts at the Markdown's | chunks with a heading path | quotes in a chunk | chunks per "
             "quote | golden chars | golden path as Markdown | lost / gained |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fmt, r in report["formats"].items():
        flips_ = r.get("flips")
        lines.append(
            f"| {fmt} | {r['documents']} | {r['chunks']} | {r['chunks_per_document']} | "
            f"{r['chars_mean']} / {r['chars_median']} / {r['chars_p10']:.0f} / {r['chars_p90']:.0f} | "
            f"{r['chunks_under_200']} | "
            + (f"{r['cuts_at_markdown']}/{r['cuts']} ({100 * r['cuts_at_markdown'] / max(1, r['cuts']):.0f}%)"
               if fmt != "md" else "") +
            f" | {r['chunks_with_heading_path']} | {r['quotes_in_a_chunk']}/{report['queries']} | "
            f"{r['chunks_per_quote']} | {r['golden_chars_mean']} | {r.get('golden_path_as_markdown', '')} | "
            + (f"{len(flips_['lost'])} / {len(flips_['gained'])}" if flips_ else "") + " |")
    for fmt, r in report["formats"].items():
        for kind in ("lost", "gained"):
            for e in (r.get("flips") or {}).get(kind, [])[:show]:
                lines.append(f"\n{fmt} {kind}: md rank {e['md_rank']} -> {e['rank']}: {e['query'][:100]}")
                for label, gs in (("md golden", e["md_golden"]), (f"{fmt} golden", e["golden"])):
                    for g in gs[:1]:
                        lines.append(f"  {label}: #{g['index']} {g['chars']} chars, quote at "
                                     f"{g['quote_at']}, ctx: {g['context'][:140]}")
                t = e["top_where_lost"]
                if t:
                    lines.append(f"  top where lost: {t['doc']} #{t['index']} {t['chars']} chars, "
                                 f"ctx: {t['context'][:120]} | {t['head'][:80]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
