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
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_reading import code_version  # the script's folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = Path("/usr/share/doc/nodejs/api")
FORMATS = ("md", "html", "html-sections", "docx", "pdf", "epub")
MODES = ("dense", "bm25", "hybrid")
KS = ("5", "10", "20")

# --- choosing the sentences ---------------------------------------------------------------------

# A sentence ends at . ! or ? followed by space and a capital, a backtick or a link's bracket.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\[])")
_LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|\[[^\]]*\])*)\](?:\([^)\s]*(?:\s+\"[^\"]*\")?\)|\[[^\]]*\])?")
_CODE = re.compile(r"(`+)(.+?)\1")
_ABBREVIATION = re.compile(r"\b(?:e\.g|i\.e|etc|vs|cf|approx|Mr|Dr|No)\.$")


def _outside_code(text: str, pos: int) -> bool:
    return text.count("`", 0, pos) % 2 == 0


def split_sentences(paragraph: str) -> list[str]:
    """A Markdown paragraph (one line) cut into sentences, never inside inline code or after an
    abbreviation; each piece keeps its Markdown."""
    pieces: list[str] = []
    start = 0
    for m in _SENTENCE_END.finditer(paragraph):
        head = paragraph[start:m.start()]
        if not _outside_code(paragraph, m.start()) or _ABBREVIATION.search(head):
            continue
        if head.count("[") != head.count("]") or head.count("(") != head.count(")"):
            continue  # inside a link's text or target
        pieces.append(head)
        start = m.end()
    pieces.append(paragraph[start:])
    return [p.strip() for p in pieces if p.strip()]


def plain(markdown: str) -> str | None:
    """What a sentence shows once rendered: links as their text, inline code as its text. None
    for a sentence with other markup (emphasis, raw HTML, escapes, images, footnotes), whose
    rendering this does not predict: such sentences are not used."""
    text = _LINK.sub(lambda m: m.group(1), markdown)
    code: list[str] = []

    def keep(m: re.Match[str]) -> str:
        code.append(m.group(2).strip() if m.group(2).strip() else m.group(2))
        return f"\x00{len(code) - 1}\x00"

    text = _CODE.sub(keep, text)
    if re.search(r"[*_<>\\|~`\[\]]|!\[|\^", text):
        return None
    return re.sub(r"\x00(\d+)\x00", lambda m: code[int(m.group(1))], text)


def squash(text: str) -> str:
    return " ".join(text.split())


def code_share(markdown: str) -> float:
    inside = sum(len(m.group(2)) for m in _CODE.finditer(markdown))
    return inside / max(1, len(markdown))


@dataclass
class Candidate:
    rel: str  # the .md path, relative to the source
    line: int  # the paragraph's first line in the file
    end: int  # one past its last line
    sentence_md: str  # the query's Markdown (removed from the file)
    query: str
    quote: str


_BLOCK_START = re.compile(r"^(?:[*+\->|#<\[!]|\d+[.)]\s|\s{4}|\t|:::|\{)")


def paragraphs(lines: list[str]) -> list[tuple[int, int]]:
    """(first line, end) of each plain prose paragraph: top-level text lines after a blank line,
    outside code fences and HTML comments; lists, tables, quotes, headings and raw HTML are not
    paragraphs here."""
    found = []
    fence = comment = False
    i = 0
    while i < len(lines):
        bare = lines[i].strip()
        if bare.startswith(("```", "~~~")):
            fence = not fence
            i += 1
            continue
        if fence:
            i += 1
            continue
        if comment or bare.startswith("<!--"):
            comment = "-->" not in bare
            i += 1
            continue
        previous_blank = i == 0 or not lines[i - 1].strip()
        if bare and previous_blank and not _BLOCK_START.match(lines[i]):
            end = i
            while end < len(lines) and lines[end].strip() and not lines[end].strip().startswith(
                    ("```", "~~~", "<!--", "#", "* ", "- ", "> ", "|")):
                end += 1
            if end == len(lines) or not lines[end].strip():  # the paragraph ends at a blank line
                found.append((i, end))
            i = end
            continue
        i += 1
    return found


def candidates(rel: str, text: str, rendered: str) -> list[Candidate]:
    """At most one query per paragraph of a file: its sentences whose plain text pandoc shows
    as is, the query and its quote both at most once in the file's plain text."""
    lines = text.splitlines()
    out = []
    for first, end in paragraphs(lines):
        paragraph = " ".join(line.strip() for line in lines[first:end])
        sentences = split_sentences(paragraph)
        if len(sentences) < 2:
            continue
        shown = [plain(s) for s in sentences]
        options = []
        for k, (md, q) in enumerate(zip(sentences, shown, strict=True)):
            if q is None or not 40 <= len(q) <= 200 or len(q.split()) < 6 or code_share(md) > 0.3:
                continue
            # the neighbour: the next sentence(s), or for the last one the one(s) before
            step = 1 if k + 1 < len(sentences) else -1
            parts: list[str] = []
            j = k + step
            # the quote's Markdown is its plain text (no inline code, link or emphasis): the same
            # characters in the .md file and in what every other format shows
            while 0 <= j < len(sentences) and shown[j] == sentences[j] and len(" ".join(parts)) < 60:
                parts = parts + [shown[j]] if step > 0 else [shown[j]] + parts  # type: ignore[list-item]
                j += step
            quote = " ".join(parts)
            if not 60 <= len(quote) <= 240:
                continue
            if rendered.count(squash(q)) != 1 or rendered.count(squash(quote)) != 1:
                continue
            options.append(Candidate(rel, first, end, md, squash(q), squash(quote)))
        if options:
            out.append(options[len(options) // 2])  # a middle sentence: not always the first
    return out


def pandoc(args: list[str], stdin: str | None = None) -> str:
    r = subprocess.run(["pandoc", *args], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"pandoc {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return r.stdout


def render_plain(markdown: str) -> str:
    return squash(pandoc(["-f", "gfm", "-t", "plain", "--wrap=none"], markdown))


def prose_sentences(markdown: str) -> list[str]:
    """Every sentence of the file's prose paragraphs as pandoc shows them (inline code and links
    included): what a reader of any format should give back verbatim. Lists, tables and code
    blocks are left out (their layout differs by format)."""
    out = []
    for line in pandoc(["-f", "gfm", "-t", "plain", "--wrap=none"], markdown).splitlines():
        if not line.strip() or line[0].isspace() or re.match(r"^(?:[-+|*>]|\d+[.)]\s)", line):
            continue
        for x in re.split(r"(?<=[.!?])\s+(?=[A-Z])", line.strip()):
            if 40 <= len(x) <= 300 and x[0].isupper() and x[-1] in ".!?:" and len(x.split()) >= 6:
                out.append(x)
    return out


def remove(text: str, chosen: list[Candidate]) -> str:
    """The file without the chosen sentences: each paragraph joined on one line without its
    query sentence (the lines it took left blank-free)."""
    lines = text.splitlines()
    for c in sorted(chosen, key=lambda c: -c.line):
        paragraph = " ".join(line.strip() for line in lines[c.line:c.end])
        kept = " ".join(s for s in split_sentences(paragraph) if s != c.sentence_md)
        lines[c.line:c.end] = [kept]
    return "\n".join(lines) + "\n"


# --- making the formats --------------------------------------------------------------------------

def boilerplate(pages: list[str]) -> tuple[str, str]:
    """What a documentation site puts around every page: before the content and after it."""
    toc = "\n".join(f'      <li><a href="/docs/{html.escape(Path(p).with_suffix(".html").as_posix())}">'
                    f"{html.escape(Path(p).stem.replace('_', ' ').title())}</a></li>" for p in pages)
    before = f"""
<header class="site-header">
  <a class="logo" href="/">Project Docs</a>
  <span class="tagline">Reference documentation for the current release</span>
  <form class="search" role="search" action="/search"><input type="search" name="q"
    placeholder="Search the documentation"><button type="submit">Search</button></form>
</header>
<nav class="main-menu" aria-label="Main">
  <ul>
    <li><a href="/">Home</a></li><li><a href="/about/">About</a></li>
    <li><a href="/download/">Downloads</a></li><li><a href="/docs/">Documentation</a></li>
    <li><a href="/community/">Get involved</a></li><li><a href="/security/">Security</a></li>
    <li><a href="/blog/">News</a></li><li><a href="/certification/">Certification</a></li>
  </ul>
</nav>
<div class="cookie-consent" role="dialog" aria-label="Cookie consent">
  <p>We use cookies and similar technologies to remember your preferences, to measure how the
  documentation is used and to improve it. By clicking "Accept all" you agree to the storing of
  cookies on your device. You can change your choice at any time in the cookie settings.
  <a href="/privacy/">Privacy policy</a></p>
  <button class="accept">Accept all</button> <button class="reject">Reject non-essential</button>
  <button class="settings">Cookie settings</button>
</div>
<aside class="sidebar">
  <h2>In this documentation</h2>
  <ul>
{toc}
  </ul>
  <p class="edit"><a href="https://example.org/edit">Edit this page</a> ·
  <a href="https://example.org/issues/new">Report a problem with this page</a></p>
</aside>
<div id="content" class="content">
"""
    after = """
</div>
<footer class="site-footer">
  <p>Copyright the project's contributors. All rights reserved. The project's name and logo are
  trademarks; for the list of trademarks and the policy on their use, see the trademark policy.
  Documentation licensed under the terms in the repository.</p>
  <ul class="footer-links">
    <li><a href="/terms/">Terms of use</a></li><li><a href="/privacy/">Privacy policy</a></li>
    <li><a href="/code-of-conduct/">Code of conduct</a></li><li><a href="/security/">Security
    reporting</a></li><li><a href="/contact/">Contact</a></li>
  </ul>
  <p class="social">Follow us on Mastodon, GitHub and YouTube. Subscribe to the newsletter for
  release announcements.</p>
</footer>
"""
    return before, after


def wrap(page: str, before: str, after: str) -> str:
    head, body = page.split("<body>", 1)
    body, tail = body.rsplit("</body>", 1)
    return f"{head}<body>{before}{body}{after}</body>{tail}"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("chromium not found: apt-get install -y -qq chromium")


_DETAILS = re.compile(r"<details(?![^>]*\sopen)(?=[\s>])", re.IGNORECASE)


def opened(page: str) -> str:
    """The page as someone prints docs: every <details> open (a browser prints a closed one's
    summary alone, so the PDF would lack text the other formats show)."""
    return _DETAILS.sub("<details open", page)


def print_pdf(browser: str, page: Path, out: Path) -> None:
    """Chromium's headless print with its default settings: a header (date, title) and a footer
    (the file's URL, page/pages) on every page."""
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--print-to-pdf={out}", page.as_uri()], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0 or not out.exists():
        sys.exit(f"chromium could not print {page}:\n{r.stderr[-2000:]}")


def build(out: Path, source: Path, files: int, queries: int, seed: int, max_bytes: int,
          formats: tuple[str, ...], queries_from: str = "cloze", min_bytes: int = 3_000) -> dict:
    """The corpora and the evaluation set under `out`; what was chosen."""
    for tool in ("pandoc",):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install -y -qq {tool}")
    rng = random.Random(seed)
    pool = sorted(f for f in source.rglob("*.md") if min_bytes <= f.stat().st_size <= max_bytes)
    chosen_files = sorted(rng.sample(pool, min(files, len(pool))))
    rels = [f.relative_to(source).as_posix() for f in chosen_files]
    texts = {rel: f.read_text(encoding="utf-8") for rel, f in zip(rels, chosen_files, strict=True)}
    if queries_from == "heldout":
        edited, lines, made = heldout_set(out, texts, queries, seed)
    else:
        edited, lines, made = cloze_set(texts, queries, rng)
    _render(out, rels, edited, formats)
    (out / "eval.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    sentences = [{"doc_id": rel, "sentence": x} for rel in rels for x in prose_sentences(edited[rel])]
    (out / "sentences.jsonl").write_text("".join(json.dumps(x) + "\n" for x in sentences))
    return {"source": str(source), "seed": seed, "queries_from": queries_from, "files": rels,
            "sentences": len(sentences), "bytes": sum(len(t.encode()) for t in texts.values()),
            **made, "queries": len(lines)}


def cloze_set(texts: dict[str, str], queries: int,
              rng: random.Random) -> tuple[dict[str, str], list[dict], dict]:
    """The inverse-cloze set (this benchmark's own): a middle sentence of a paragraph is the query,
    its neighbour the quote, both as every format shows them."""
    rels = list(texts)
    pool_c: list[Candidate] = []
    for rel in rels:
        pool_c += candidates(rel, texts[rel], render_plain(texts[rel]))
    rng.shuffle(pool_c)
    cap = max(2, 2 * queries // max(1, len(rels)))  # no file gives more than twice its share
    per_file: dict[str, list[Candidate]] = {rel: [] for rel in rels}
    taken = 0
    for c in pool_c:
        if taken >= queries or len(per_file[c.rel]) >= cap:
            continue
        per_file[c.rel].append(c)
        taken += 1
    edited: dict[str, str] = {}
    kept: list[Candidate] = []
    for rel in rels:
        edited[rel] = remove(texts[rel], per_file[rel])
        shown = render_plain(edited[rel])
        for c in per_file[rel]:  # checked on the edited file: the query gone, the quote there once
            if c.query not in shown and shown.count(c.quote) == 1:
                kept.append(c)
    kept.sort(key=lambda c: (c.rel, c.line))
    lines = [{"query": c.query, "golden_quotes": [{"doc_id": c.rel, "quote": c.quote}]} for c in kept]
    return edited, lines, {"candidates": len(pool_c), "dropped_after_edit": taken - len(kept)}


def heldout_set(out: Path, texts: dict[str, str], queries: int,
                seed: int) -> tuple[dict[str, str], list[dict], dict]:
    """The set `situate synth --generator held-out` makes of the Markdown (a paragraph's first
    sentence is the query, its next eight words of Markdown the quote, the sentence removed from
    the file), kept where the quote is text every format shows: the quote, normalized as
    evaluate matches it, in `pandoc -t plain` of the edited file. A quote holding markup that
    renders away (emphasis, a link cut by the eight words) is left out, counted, before any
    format is read."""
    from situate.tasks.retrieval.metrics import normalize_quote
    from situate.tasks.synth.heldout import build_heldout

    src = out / "source"
    for rel, text in texts.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text, encoding="utf-8")
    stats = build_heldout(src, out / "heldout", queries, seed)
    edited = {rel: (out / "heldout" / "corpus" / rel).read_text(encoding="utf-8") for rel in texts}
    shown = {rel: normalize_quote(render_plain(text)) for rel, text in edited.items()}
    made = [json.loads(line) for line in (out / "heldout" / "eval.jsonl").read_text().splitlines()]
    lines = []
    for x in made:
        g = x["golden_quotes"][0]
        if normalize_quote(g["quote"]) in shown[g["doc_id"]]:
            lines.append({"query": x["query"], "golden_quotes": [g]})
    return edited, lines, {"candidates": stats.candidates, "synth_queries": stats.queries,
                           "dropped_markup_quote": stats.queries - len(lines)}


def _no_images(out: Path) -> Path:
    path = out / "no-images.lua"
    if not path.exists():
        path.write_text("function Image(el) return {} end\n")
    return path


def _render(out: Path, rels: list[str], edited: dict[str, str], formats: tuple[str, ...]) -> None:
    """Each edited Markdown file in every format asked for."""
    before, after = boilerplate(rels)
    browser = chromium() if "pdf" in formats else ""
    printable = out / "printable"  # pandoc's HTML without the site's boilerplate, for printing
    for rel in rels:
        stem = Path(rel).with_suffix("")
        title = Path(rel).stem
        for fmt in formats:
            (out / fmt / rel).parent.mkdir(parents=True, exist_ok=True)
        if "md" in formats:
            (out / "md" / rel).write_text(edited[rel], encoding="utf-8")
        page = pandoc(["-f", "gfm", "-s", "--metadata", f"pagetitle={title}"], edited[rel])
        if "html" in formats:
            (out / "html" / stem.with_suffix(".html")).write_text(wrap(page, before, after),
                                                                  encoding="utf-8")
        if "html-sections" in formats:
            sectioned = pandoc(["-f", "gfm", "-s", "--section-divs", "--metadata", f"pagetitle={title}"],
                               edited[rel])
            (out / "html-sections" / stem.with_suffix(".html")).write_text(wrap(sectioned, before, after),
                                                                           encoding="utf-8")
        if "docx" in formats:
            docx = ["-f", "gfm", "-o", str(out / "docx" / stem.with_suffix(".docx"))]
            r = subprocess.run(["pandoc", *docx], input=edited[rel], capture_output=True, text=True)
            if r.returncode != 0:
                # pandoc's DOCX writer embeds every image and fails on one it cannot open (a docs
                # tree's site-absolute /img/... paths), fetching them before any filter runs: then
                # the images go first, in a pass of their own, as they give no text anyway
                ast = pandoc(["-f", "gfm", "-t", "json", "--lua-filter", str(_no_images(out))], edited[rel])
                pandoc(["-f", "json", *docx[2:]], ast)
        if "epub" in formats:
            pandoc(["-f", "gfm", "-t", "epub3", "--metadata", f"title={title}", "-o",
                    str(out / "epub" / stem.with_suffix(".epub"))], edited[rel])
        if "pdf" in formats:
            (printable / rel).parent.mkdir(parents=True, exist_ok=True)
            printed = printable / stem.with_suffix(".html")
            printed.write_text(opened(page), encoding="utf-8")
            print_pdf(browser, printed, out / "pdf" / stem.with_suffix(".pdf"))


# --- measuring ----------------------------------------------------------------------------------

def run(args: list[str], env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-m", "situate.flows.cli", *args], cwd=ROOT, env=env,
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
    r = subprocess.run([sys.executable, "-m", "situate.flows.cli", "evaluate", str(eval_set),
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
    ap.add_argument("--coverage-only", action="store_true",
                    help="measure only the coverage of --formats and store it in --out's rows for them "
                         "(the same set; no ingest): for formats whose reader did not change")
    args = ap.parse_args()
    if args.render:
        rendered = json.loads(Path(args.render).read_text())
        print(markdown_tables(rendered), end="")
        if rendered.get("paired"):
            print("\n" + paired_table(rendered), end="")
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp) / "formats"
        if args.reuse and args.keep and (work / "built.json").exists():
            built = json.loads((work / "built.json").read_text())
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
                    "chunks": summary["chunks_written"], "formats": summary.get("formats"),
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


if __name__ == "__main__":
    main()
