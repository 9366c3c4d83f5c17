"""The offline evaluation set (`situate synth --generator held-out`): the inverse-cloze task, as
BENCHMARKS.md's held-out sets were built (`benchmarks/heldout.py`), on any corpus.

A sentence is taken out of its place and becomes the query; the rest of its place is the golden:
- in source code, the first sentence of the doc comment or docstring of a definition (`///`,
  `//`, `#`, `/** */`, triple quotes; it may wrap over lines), at least five words; the query names
  the definition as a question about code does ("`next_delay`: Computes the delay before ..."),
  and the golden quote is the definition's own line (`pub fn next_delay(...)`, `def lease(...)`).
  A comment above a statement (not a definition with a name) gives no query;
- in prose, the first sentence of a paragraph (at least six words); the golden quote is the
  paragraph's next words (up to eight), so the golden chunk is the one that held the sentence.

The query text must not stay in the index (it would match itself), so the corpus is written
again under `DIR/corpus` with exactly those sentences removed (the span of characters from the
sentence's first to its last, and the blanks after it on its line) and nothing else changed:
every other file is copied byte for byte. Each line of `eval.jsonl` records what was removed
(`removed`: document, offsets in the original text, the text), so anyone can check it.

What this proxy measures: whether a configuration finds a passage from a paraphrase-free
description of it (the author's own summary sentence), on the user's own documents, for free.
What it does not: the words real users ask with (questions, other vocabulary); it favours
lexical overlap less than copied text would, but a docstring's words are still the code's words.

Why code queries carry the definition's name: people ask about code by its names ("What does the
`OomObserver` struct do?"; of the codebase benchmark's 248 labelled questions, two thirds name an
identifier), and a doc comment does not repeat the name written on the line below it. Without
the name, the proxy asked what no user asks (a description of an unnamed function) and rated
BM25, which matches names literally, below what a labelled set finds (BENCHMARKS.md, issue 24).

Forms: a directory (text, Markdown and source files give queries; documents of other formats are
copied unchanged and give none), a single text or source file, or a pre-chunked JSON (its
documents' content and chunks edited alike). A JSONL corpus is refused with what to do.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from situate.core.errors import InputError
from situate.tasks.corpus.files import inside, is_system_file
from situate.tasks.corpus.filetypes import CODE_SUFFIXES, PROSE_SUFFIXES, TEXT_SUFFIXES
from situate.tasks.corpus.load import load_corpus
from situate.tasks.retrieval.metrics import normalize_quote

MIN_CODE_WORDS = 5
MIN_PROSE_WORDS = 6
QUOTE_WORDS = 8
MIN_QUOTE_CHARS = 8

_SENTENCE_END = re.compile(r"[.!?](?=\s|$|\"\"\"|\'\'\'|\*/)")  # or where a docstring or comment ends
_COMMENT = re.compile(r"^(\s*)(///?!?|#(?![!\[]|include|define|if|else|endif|pragma)|--|/\*\*?"
                      r"|\*(?!/)|;+)\s?")
_C_COMMENT_LINE = re.compile(r"^\s*(?://|/\*)|^\s+\*(?:\s|/|$)")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")  # a Markdown link, read as its text
_HEADING = re.compile(r"^\s{0,3}(#{1,6}\s|=+\s*$|-+\s*$)")
# The name a definition line defines: after a definition keyword (Go's receiver and Rust's
# generics skipped), a function bound to a name (JavaScript), a Rust constant, or a signature's
# name (C, C++, Java, a JavaScript class method).
_KEYWORD_DEFINITION = re.compile(
    r"\b(?:fn|def|class|struct|enum|trait|union|interface|type|function\*?|func|mod|module|"
    r"namespace|macro_rules!)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")
_IMPL = re.compile(r"\bimpl\b(?:\s*<[^{]*?>)?\s+(?:[\w:]+(?:<[^{]*?>)?\s+for\s+)?([A-Za-z_]\w*)")
_BOUND_FUNCTION = re.compile(
    r"^(?:export\s+)?(?:(?:const|let|var)\s+)?([A-Za-z_$][\w$.]*)\s*[:=]\s*(?:async\s+)?"
    r"(?:function\b|\([^)]*\)\s*=>|[A-Za-z_$][\w$]*\s*=>)")
_RUST_CONSTANT = re.compile(r"^(?:pub(?:\([^)]*\))?\s+)?(?:const|static)\s+(?:mut\s+)?([A-Za-z_]\w*)\s*:")
_SIGNATURE_NAME = re.compile(r"([A-Za-z_$~][\w$]*)\s*\(")
_METHOD = re.compile(r"[A-Za-z_$][\w$]*\s*\([^()]*\)\s*\{$")  # `render(props) {`
_NOT_A_DEFINITION = frozenset(
    "if for while switch return else do try catch match loop case throw await yield new delete "
    "goto break continue sizeof typeof assert elif with except raise".split())


@dataclass(frozen=True)
class Candidate:
    """A sentence that can be taken out (`start`..`end` in the document's source text; `cut` is
    that span plus the blanks after it on its line) and the quote of what stays."""

    doc_id: str
    start: int
    end: int
    cut: int
    sentence: str  # what is taken out, whitespace collapsed
    quote: str
    kind: str  # "code" or "prose"
    name: str = ""  # code: the name the definition defines

    @property
    def query(self) -> str:
        """The sentence; for code, after the definition's name, as people ask about code."""
        return f"`{self.name}`: {self.sentence}" if self.name else self.sentence


def definition_name(line: str) -> str | None:
    """The name `line` defines (`pub fn next_delay(attempt: u32) {` -> "next_delay"), or None when
    it is not a definition's first line (a statement, a call, an assignment)."""
    s = line.strip()
    for pattern in (_IMPL, _KEYWORD_DEFINITION):
        m = pattern.search(s)
        if m:
            return m.group(1)
    for pattern in (_BOUND_FUNCTION, _RUST_CONSTANT):
        m = pattern.match(s)
        if m:
            return m.group(1).rsplit(".", 1)[-1]
    m = _SIGNATURE_NAME.search(s)
    if m is None:
        return None
    head, name = s[: m.start()], m.group(1)
    if "=" in head or any(t in head for t in (".", "->", "::", "#")) or name in _NOT_A_DEFINITION \
            or any(w in _NOT_A_DEFINITION for w in head.split()):
        return None
    if s.endswith(";") and not re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?(?:override\s*)?;$", s):
        return None  # a statement; a declaration `size_t Size() const override;` stays
    if not head and not _METHOD.match(s):
        return None  # `Ok(Passwd {`, `close(fd);`: a call, not a signature
    return name


def _first_sentence(text: str, start: int, limit: int) -> tuple[int, int] | None:
    """The span of the sentence starting at `start` and ending before `limit` with . ! or ?."""
    m = _SENTENCE_END.search(text, start, limit)
    return (start, m.end()) if m else None


def _after(text: str, end: int) -> int:
    """`end` moved past the spaces and tabs that follow it on its line."""
    while end < len(text) and text[end] in " \t":
        end += 1
    return end


def _is_code(doc_id: str, text: str) -> bool:
    suffix = Path(doc_id).suffix.lower()
    if suffix in CODE_SUFFIXES:
        return True
    if suffix and suffix in PROSE_SUFFIXES:
        return False
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    # A line of code ends like one; a C-style comment line (`//`, `/*`, ` * `, ` */`) is code's
    # too: a header that is mostly comments (a licence, an API's documentation) is still code.
    codey = sum(1 for line in lines if line.rstrip().endswith((";", "{", "}", ")", ":", ","))
                or _C_COMMENT_LINE.match(line))
    return codey / len(lines) > 0.3


def _python_candidates(doc_id: str, text: str) -> list[Candidate] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    lines = text.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if not node.body or len(node.body) < 2 or node.name.startswith("__"):
            continue
        expr = node.body[0]
        if not (isinstance(expr, ast.Expr) and isinstance(expr.value, ast.Constant)
                and isinstance(expr.value.value, str)):
            continue
        line = lines[expr.lineno - 1]
        opening = re.match(r'\s*[rRbBuU]?("""|\'\'\')', line)
        if not opening:
            continue
        start = offsets[expr.lineno - 1] + opening.end()
        # The first sentence may wrap over lines, within the docstring's first paragraph.
        limit = offsets[(expr.end_lineno or expr.lineno) - 1] + (expr.end_col_offset or 0)
        paragraph = _PARAGRAPH_BREAK.search(text, start, limit)
        limit = paragraph.start() if paragraph else limit
        while start < limit and text[start] in " \t\r\n":
            start += 1
        span = _first_sentence(text, start, limit)
        if span is None:
            continue
        out.append(Candidate(doc_id, span[0], span[1], _after(text, span[1]),
                             " ".join(text[span[0]:span[1]].split()),
                             lines[node.lineno - 1].strip(), "code", node.name))
    return out


def _comment_candidates(doc_id: str, text: str) -> list[Candidate]:
    """Doc comments of definitions in any language: a block of comment lines followed by a code
    line; its first sentence (wrapped over lines or not, within the block's first paragraph) is the
    query, without the comment markers of the lines it wraps over."""
    out = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    i = 0
    while i < len(lines):
        m = _COMMENT.match(lines[i])
        if not m:
            i += 1
            continue
        first = i
        while i < len(lines) and _COMMENT.match(lines[i]):
            i += 1
        # the definition: the next line that is neither blank, a comment's closing `*/`, an
        # attribute nor a decorator
        j = i
        while j < len(lines) and (not lines[j].strip() or lines[j].strip() == "*/"
                                  or lines[j].lstrip().startswith(("#[", "@"))):
            if not lines[j].strip():
                j = len(lines)  # a blank line: the comment is not the definition's
                break
            j += 1
        if j >= len(lines):
            continue
        definition = lines[j].strip()
        if len(definition) < MIN_QUOTE_CHARS or _COMMENT.match(lines[j]):
            continue
        name = definition_name(definition)
        if name is None:
            continue
        # The first paragraph: up to the first comment line with nothing after its marker
        # (`///`, ` *`) or starting a block tag (`@param`: the description has ended), skipping
        # empty lines before it (a Javadoc's `/**` line).
        start, k = offsets[first] + m.end(), first
        while k < i and not _comment_words(lines[k]):
            k += 1
            start = offsets[k]
        stop = k + 1 if k < i else k
        while stop < i and (words := _comment_words(lines[stop])) and not words.startswith("@"):
            stop += 1
        limit = offsets[stop] - 1 if stop > k else start
        start = _past_marker(text, start, limit)
        span = _first_sentence(text, start, limit)
        if span is None:
            continue
        sentence = " ".join(" ".join(_comment_words(line) for line in
                                     text[span[0]:span[1]].splitlines()).split())
        out.append(Candidate(doc_id, span[0], span[1], _after(text, span[1]), sentence,
                             definition, "code", name))
    return out


def _comment_words(line: str) -> str:
    """A comment line's text after its marker (`/// `, ` * `, `# `), stripped; a line that is
    not a comment (the first line of a span, which starts after its marker) as it is."""
    m = _COMMENT.match(line)
    rest = line[m.end():] if m else line
    return rest.strip().strip("*/").strip() if m else rest.strip()


def _past_marker(text: str, start: int, limit: int) -> int:
    """`start` moved past the comment marker and blanks at the head of a comment line."""
    if start == 0 or text[start - 1] == "\n":
        m = _COMMENT.match(text[start:limit])
        start += m.end() if m else 0
    while start < limit and text[start] in " \t*/":
        start += 1
    return start


def _prose_candidates(doc_id: str, text: str) -> list[Candidate]:
    """The first sentence of each plain paragraph (not a heading, list, table, quote, code fence
    or markup line); the quote is the paragraph's next words."""
    out = []
    fence = False
    previous_blank = True
    pos = 0
    for line in text.splitlines(keepends=True):
        bare = line.strip()
        here = pos
        pos += len(line)
        if bare.startswith(("```", "~~~")):
            fence = not fence
            previous_blank = False
            continue
        if fence:
            continue
        if not bare:
            previous_blank = True
            continue
        starts_paragraph = previous_blank
        previous_blank = False
        if not starts_paragraph or _HEADING.match(line) or bare[0] in "*->|#<[!:.+=`{}()\\/" \
                or bare[0].isdigit() or line.startswith(("    ", "\t")):
            continue
        start = here + (len(line) - len(line.lstrip()))
        end_of_paragraph = text.find("\n\n", start)
        end_of_paragraph = len(text) if end_of_paragraph < 0 else end_of_paragraph
        span = _first_sentence(text, start, end_of_paragraph)
        if span is None:
            continue
        query = _LINK.sub(r"\1", " ".join(text[span[0]:span[1]].split()))
        rest = text[span[1]:end_of_paragraph].split()
        if len(query.split()) < MIN_PROSE_WORDS or len(rest) < 4:
            continue
        out.append(Candidate(doc_id, span[0], span[1], _after(text, span[1]), query,
                             " ".join(rest[:QUOTE_WORDS]), "prose"))
    return out


def candidates(doc_id: str, text: str) -> list[Candidate]:
    """Every sentence of one document's source text that can be taken out, in text order; a
    sentence that occurs twice in the document is left (removing one would leave the other)."""
    if _is_code(doc_id, text):
        suffix = Path(doc_id).suffix.lower()
        # Python by its name, or (a pre-chunked document has none) because it parses as Python.
        found = _python_candidates(doc_id, text) if suffix in (".py", ".pyi", "") else None
        found = found if found else _comment_candidates(doc_id, text)
        found = [c for c in found if len(c.sentence.split()) >= MIN_CODE_WORDS]
    else:
        found = _prose_candidates(doc_id, text)
    return sorted((c for c in found if text.count(text[c.start:c.end]) == 1),
                  key=lambda c: c.start)


def stratified(by_doc: dict[str, list[Candidate]], n: int, seed: int) -> list[Candidate]:
    """Up to `n` candidates spread over the documents: documents in a seeded random order, one
    candidate each per round (a seeded random one), until `n` or none are left."""
    rng = random.Random(seed)
    pools = {d: rng.sample(cs, len(cs)) for d, cs in sorted(by_doc.items()) if cs}
    order = rng.sample(sorted(pools), len(pools))
    picked: list[Candidate] = []
    while len(picked) < n and any(pools.values()):
        for d in order:
            if pools[d] and len(picked) < n:
                picked.append(pools[d].pop())
    return picked


def _remove(text: str, spans: Sequence[Candidate]) -> str:
    out, cursor = [], 0
    for c in sorted(spans, key=lambda c: c.start):
        out.append(text[cursor:c.start])
        cursor = c.cut
    out.append(text[cursor:])
    return "".join(out)


@dataclass
class HeldOut:
    """What the held-out generator wrote, and what it left out and why."""

    documents: int = 0
    documents_with_candidates: int = 0
    candidates: int = 0
    queries: int = 0
    # the quote is not once in its document once cut, or not in the document as situate reads it
    dropped_ambiguous_quote: int = 0
    dropped_repeated_query: int = 0  # the same sentence taken from two places
    # pre-chunked: the sentence runs over two of the given chunks (neither could lose it whole)
    dropped_across_chunks: int = 0
    files_copied: int = 0
    files_edited: int = 0
    # What to ingest: `out/corpus`, or the file in it when the corpus was one file (a pre-chunked
    # JSON must be given as that file: a directory holding it reads it as text).
    ingest_path: str = ""


def _sources(path: Path, form: str, ids: set[str]) -> Iterator[tuple[str, str]]:
    """(doc_id, source text) of every document a held-out set can edit, in corpus order: those
    the loader read (`ids`), and no other file is opened."""
    if form == "prechunked-json":
        for item in json.loads(path.read_text(encoding="utf-8")):
            doc_id = item.get("doc_id", item.get("original_uuid"))
            yield str(doc_id), item["content"]
        return
    if form == "file":
        if path.suffix.lower() in TEXT_SUFFIXES or path.suffix == "":
            yield path.name, path.read_text(encoding="utf-8")
        return
    for f in sorted(p for p in path.rglob("*") if p.relative_to(path).as_posix() in ids):
        if f.suffix.lower() in TEXT_SUFFIXES or f.suffix == "":
            try:
                yield f.relative_to(path).as_posix(), f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue


def _given_chunks(path: Path) -> dict[str, list[str]]:
    """A pre-chunked JSON's chunks' texts by document."""
    return {str(item.get("doc_id", item.get("original_uuid"))):
            [chunk["content"] for chunk in item["chunks"]]
            for item in json.loads(path.read_text(encoding="utf-8"))}


def build_heldout(corpus: str | Path, out: str | Path, n: int, seed: int,
                  follow_links: bool | None = None) -> HeldOut:
    """Write `out/eval.jsonl` (up to `n` queries, spread over the documents, seeded) and
    `out/corpus` (the corpus without those sentences; a link out of the corpus is not copied,
    unless `follow_links`, as the loader does not read it)."""
    src = Path(corpus)
    loaded = load_corpus(src, follow_links=follow_links)  # every check and format's rule, once
    if loaded.form == "jsonl":
        raise InputError(f"{src}: the held-out generator edits documents in place and cannot "
                         "rewrite a JSONL corpus; give a directory, a text or source file, or a "
                         "pre-chunked JSON (or use an LLM generator, which needs no edit)")
    ids = {d.id for d in loaded.documents}
    # The text as situate reads it (Markdown as rendered: link targets, comments dropped): a
    # quote must be found there, or no chunk could ever match it.
    read = {d.id: normalize_quote(d.text) for d in loaded.documents}
    texts = {doc_id: text for doc_id, text in _sources(src, loaded.form, ids) if doc_id in ids}
    given_chunks = _given_chunks(src) if loaded.form == "prechunked-json" else {}
    stats = HeldOut(documents=len(loaded.documents))
    by_doc = {doc_id: candidates(doc_id, text) for doc_id, text in texts.items()}
    stats.documents_with_candidates = sum(1 for cs in by_doc.values() if cs)
    stats.candidates = sum(len(cs) for cs in by_doc.values())
    chosen: dict[str, list[Candidate]] = {}
    seen: set[str] = set()
    for c in stratified(by_doc, stats.candidates, seed):
        if len(seen) >= n:
            break
        if c.query in seen:
            stats.dropped_repeated_query += 1
            continue
        if given_chunks and not any(texts[c.doc_id][c.start:c.cut] in chunk
                                    for chunk in given_chunks.get(c.doc_id, ())):
            stats.dropped_across_chunks += 1
            continue
        kept = _remove(texts[c.doc_id], [*chosen.get(c.doc_id, []), c])
        quote = normalize_quote(c.quote)
        if normalize_quote(kept).count(quote) != 1 or quote not in read[c.doc_id]:
            stats.dropped_ambiguous_quote += 1
            continue
        seen.add(c.query)
        chosen.setdefault(c.doc_id, []).append(c)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    corpus_out = target / "corpus"
    if corpus_out.exists():
        shutil.rmtree(corpus_out)  # written again whole: never a mix of two runs
    edited = {doc_id: _remove(texts[doc_id], cs) for doc_id, cs in chosen.items()}
    _write_corpus(src, loaded.form, corpus_out, edited, chosen, stats, bool(follow_links))
    lines = []
    for doc_id in sorted(chosen, key=list(texts).index):
        for c in sorted(chosen[doc_id], key=lambda c: c.start):
            lines.append({"query": c.query, "golden_quotes": [{"doc_id": doc_id, "quote": c.quote}],
                          "kind": c.kind,
                          "removed": {"doc_id": doc_id, "start": c.start, "end": c.cut,
                                      "text": texts[doc_id][c.start:c.cut]}})
    tmp = target / "eval.jsonl.tmp"
    tmp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                   encoding="utf-8")
    tmp.replace(target / "eval.jsonl")
    stats.queries = len(lines)
    stats.ingest_path = str(corpus_out / src.name if loaded.form != "directory" else corpus_out)
    return stats


def _own_file(f: Path, root: str, follow_links: bool) -> bool:
    """Whether `f` is a regular file of the corpus to copy: not a link out of it (unless
    `follow_links`), never a pipe, device or a file of /proc, /sys or /dev."""
    real = os.path.realpath(f)
    if not follow_links and not inside(real, root):  # the file or a directory above it links out
        return False
    try:
        st = os.stat(real)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and not is_system_file(st, real)


def _write_corpus(src: Path, form: str, dst: Path, edited: dict[str, str],
                  chosen: dict[str, list[Candidate]], stats: HeldOut,
                  follow_links: bool = False) -> None:
    if form == "prechunked-json":
        data = json.loads(src.read_text(encoding="utf-8"))
        for item in data:
            doc_id = str(item.get("doc_id", item.get("original_uuid")))
            if doc_id not in edited:
                continue
            removed = [item["content"][c.start:c.cut] for c in chosen[doc_id]]
            item["content"] = edited[doc_id]
            for chunk in item["chunks"]:
                for text in removed:
                    chunk["content"] = chunk["content"].replace(text, "", 1)
        dst.mkdir(parents=True)
        (dst / src.name).write_text(json.dumps(data, ensure_ascii=False, indent=1),
                                    encoding="utf-8")
        stats.files_edited = len(edited)
        return
    if form == "file":
        dst.mkdir(parents=True)
        if src.name in edited:
            (dst / src.name).write_text(edited[src.name], encoding="utf-8")
            stats.files_edited = 1
        else:
            shutil.copy2(src, dst / src.name)
            stats.files_copied = 1
        return
    root = os.path.realpath(src)
    for f in sorted(p for p in src.rglob("*") if _own_file(p, root, follow_links)):
        rel = f.relative_to(src).as_posix()
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in edited:
            target.write_bytes(edited[rel].encode("utf-8"))
            stats.files_edited += 1
        else:
            shutil.copy2(f, target)
            stats.files_copied += 1
