"""What a held-out set can take out of a document (situate.tasks.synth.heldout): in source code, the
first sentence of a definition's doc comment or docstring, with the definition's name for the
query and its own line for the golden quote; in prose, the first sentence of a paragraph, with
the paragraph's next words for the golden quote; and a seeded draw of them spread over the
documents.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from pathlib import Path

from situate.tasks.corpus.filetypes import CODE_SUFFIXES, PROSE_SUFFIXES

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
