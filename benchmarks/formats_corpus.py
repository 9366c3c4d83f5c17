"""The corpus of benchmarks/bench_formats.py: prose sentences chosen from Markdown documentation
(the inverse-cloze evaluation set), then the same documents made into HTML (with a site's
boilerplate), DOCX, PDF (Chromium's print) and EPUB by pandoc and Chromium."""

from __future__ import annotations

import html
import json
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def _raw_html(out: Path) -> Path:
    """A filter parsing the Markdown's raw HTML blocks (a `<table>` written as HTML, as Node.js's
    docs have) as HTML: pandoc's DOCX writer leaves raw HTML out, so the Word file would lack the
    tables every other format shows; a Word author's tables are Word tables."""
    path = out / "raw-html.lua"
    if not path.exists():
        path.write_text('function RawBlock(el)\n  if el.format == "html" then\n'
                        '    return pandoc.read(el.text, "html").blocks\n  end\nend\n')
    return path


# The Markdown's own line breaks kept in the HTML and EPUB pages, as a CommonMark renderer
# (markdown-it, goldmark, commonmark.js, Python-Markdown: what static sites are built with) writes
# a soft line break: a newline. pandoc's default rewraps every paragraph at 72 columns, which no
# site generator does.
PRESERVE = ("--wrap=preserve",)


def _render(out: Path, rels: list[str], edited: dict[str, str], formats: tuple[str, ...]) -> None:
    """Each edited Markdown file in every format asked for."""
    from situate.tasks.corpus.readers.markdown import front_matter_title

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
        page = pandoc(["-f", "gfm", "-s", *PRESERVE, "--metadata", f"pagetitle={title}"], edited[rel])
        if "html" in formats:
            (out / "html" / stem.with_suffix(".html")).write_text(wrap(page, before, after),
                                                                  encoding="utf-8")
        if "html-sections" in formats:
            sectioned = pandoc(["-f", "gfm", "-s", *PRESERVE, "--section-divs", "--metadata",
                                f"pagetitle={title}"],
                               edited[rel])
            (out / "html-sections" / stem.with_suffix(".html")).write_text(wrap(sectioned, before, after),
                                                                           encoding="utf-8")
        if "docx" in formats:
            docx = ["-f", "gfm", "--lua-filter", str(_raw_html(out)), "-o",
                    str(out / "docx" / stem.with_suffix(".docx"))]
            r = subprocess.run(["pandoc", *docx], input=edited[rel], capture_output=True, text=True)
            if r.returncode != 0:
                # pandoc's DOCX writer embeds every image and fails on one it cannot open (a docs
                # tree's site-absolute /img/... paths), fetching them before any filter runs: then
                # the images go first, in a pass of their own, as they give no text anyway
                ast = pandoc(["-f", "gfm", "-t", "json", *docx[2:4], "--lua-filter",
                              str(_no_images(out))], edited[rel])
                pandoc(["-f", "json", *docx[4:]], ast)
        if "epub" in formats:
            # a book needs a title: the page's own (its front matter's, which pandoc shows as the
            # HTML's title and puts on the Word file), else its file's name
            book = front_matter_title(edited[rel]) or title
            pandoc(["-f", "gfm", "-t", "epub3", *PRESERVE, "--metadata", f"title={book}", "-o",
                    str(out / "epub" / stem.with_suffix(".epub"))], edited[rel])
        if "pdf" in formats:
            (printable / rel).parent.mkdir(parents=True, exist_ok=True)
            printed = printable / stem.with_suffix(".html")
            printed.write_text(opened(page), encoding="utf-8")
            print_pdf(browser, printed, out / "pdf" / stem.with_suffix(".pdf"))
