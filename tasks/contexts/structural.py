"""The structural contextualizer: a free, deterministic context for each chunk from its
document's own structure (title and language, opening comment, enclosing definitions/headings)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from situate.core.records import Chunk, Document, Situated
from situate.tasks.contexts.base import ContextResult, Contextualizer, Keep
from situate.tasks.corpus.filetypes import FILE_TYPES, LANGUAGES
from situate.tasks.corpus.readers import format_label, place_text

_DEFINITION = re.compile(
    r"""^(?P<indent>[ \t]*)
    (?:(?:pub(?:\([^)]*\))?|export|default|public|private|protected|internal|static|abstract|final|
          async|unsafe|const|extern(?:\s+"[^"]*")?|open|override|sealed|partial|inline|virtual)\s+)*
    (?P<kind>class|def|fn|struct|enum|trait|impl|interface|type|func|function|module|mod|object|
             namespace|macro_rules!|union|record|protocol|extension|package)\b
    \s*(?P<rest>[^\n]*)""",
    re.VERBOSE,
)
# Keyword-less definitions: C, C++, Java, C# functions and methods (`int main(int argc) {`), and
# JavaScript/TypeScript functions bound to names (`const load = async (x) =>`).
_C_FUNCTION = re.compile(
    r"^(?P<indent>[ \t]*)(?!(?:if|for|while|switch|return|else|do|case|catch|sizeof|new|delete|throw)\b)"
    r"(?:[\w:<>,\[\]]+[\s*&]+)+(?P<name>[A-Za-z_~][\w:~]*)\s*\([^;]*\)\s*(?:const\s*)?"
    r"(?:noexcept\s*)?(?:override\s*)?(?:->\s*[\w:<>]+\s*)?(?:throws [\w., ]+)?\{?\s*$")
# A top-level C/C++ definition whose signature runs over several lines, or whose return type sits on
# the line above: `createCodeSec(std::vector<X> In) {`, `Foo::Foo() :`, `void Foo::format(`.
_C_TOP_LEVEL = re.compile(
    r"^(?!(?:if|for|while|switch|return|else|do|case|using|typedef|namespace|template)\b)"
    r"(?:[\w:<>,\[\]]+[\s*&]+)*(?P<name>[A-Za-z_~][\w~]*(?:::[A-Za-z_~][\w~]*)*)\s*\("
    r"[^;]*$")
_JS_FUNCTION = re.compile(
    r"^(?P<indent>[ \t]*)(?:export\s+)?(?:const|let|var)\s+(?P<name>[A-Za-z_$][\w$]*)\s*(?::[^=]+)?="
    r"\s*(?:async\s+)?(?:function\b|\([^)]*\)\s*(?::[^=]+)?=>|[A-Za-z_$][\w$]*\s*=>)")
_MD_HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<title>.+?)\s*#*\s*$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMENT_LINE = re.compile(r"^\s*(?://[/!]?|#(?!\[|!|include|define)|--|;+|\*|/\*\*?|%)\s?(.*)$")
_DOCSTRING = re.compile(r'^\s*(?:[rRuU]?)("""|\'\'\')(.*?)\1', re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")

# Words that follow a definition keyword but are not the name being defined.
_NOT_A_NAME = {"for", "where", "self", "mut", "const", "unsafe", "async", "extends", "implements"}

# The languages read as prose (a `#` line may be a Markdown heading).
_PROSE = {t.language for t in FILE_TYPES.values() if t.kind == "prose" and t.language}


@dataclass(frozen=True)
class _Definition:
    line: int
    indent: int
    kind: str
    name: str
    signature: str


def _definition_name(kind: str, rest: str) -> str:
    """The defined name: for `impl Trait for Type` the type, else the first identifier."""
    rest = re.sub(r"<[^<>]*(?:<[^<>]*>[^<>]*)*>", " ", rest)  # drop generic parameters
    if kind == "impl":
        m = re.search(r"\bfor\s+([A-Za-z_]\w*)", rest)
        if m:
            return m.group(1)
    for name in _NAME.findall(rest):
        if name not in _NOT_A_NAME:
            return str(name)
    return ""


def _indent_width(indent: str) -> int:
    return len(indent.expandtabs(4))


def outline(text: str, prose: bool | None = None) -> list[_Definition]:
    """Definitions and Markdown headings of a document, in order, with their nesting depth.

    `prose` says whether `#` lines are headings (Markdown, text) or comments (code); None decides
    per line: a heading then needs a blank line (or the document's edge) before and after it.
    """
    defs: list[_Definition] = []
    in_fence = False
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        heading = None if in_fence or prose is False else _MD_HEADING.match(line)
        if heading and prose is None:
            before = number == 0 or not lines[number - 1].strip()
            after = number + 1 >= len(lines) or not lines[number + 1].strip()
            heading = heading if before and after else None
        if heading:
            title = heading.group("title").strip()
            # Heading depth is its level, so "## A" nests under "# B" like an indented block.
            defs.append(_Definition(number, len(heading.group("hashes")) - 1, "heading", title, title))
            continue
        m = _DEFINITION.match(line)
        if m:
            kind, name = m.group("kind"), _definition_name(m.group("kind"), m.group("rest"))
        else:
            # Both C patterns need a "(" and the JavaScript one an "=": a line without is not
            # tried (the C patterns are slow on long lines).
            call = "(" in line
            m = _C_FUNCTION.match(line) if call else None
            if not m and "=" in line:
                m = _JS_FUNCTION.match(line)
            if not m and call and not (prose or line[:1].isspace() or ". " in line
                                       or line.rstrip().endswith(".")):
                m = _C_TOP_LEVEL.match(line)
            if not m:
                continue
            kind, name = "function", m.group("name").split("::")[-1]
        if not name:
            continue
        signature = line.strip().rstrip("{:").strip()
        if len(signature) > 100:
            signature = signature[:97] + "..."
        indent = m.groupdict().get("indent") or ""
        defs.append(_Definition(number, _indent_width(indent), kind, name, signature))
    return defs


class _Enclosing:
    """The definitions and headings still open at a line, for the lines of one document asked in
    ascending order: one pass over the document for all its chunks (a line asked before the last
    one asked starts the pass again).

    Indentation decides: a code line at or left of a definition's indent closes it (so do `}` and
    `end`), except lines that continue a signature. Headings close only under a heading of the same
    or a higher level.
    """

    def __init__(self, defs: Sequence[_Definition], lines: Sequence[str]) -> None:
        self.by_line = {d.line: d for d in defs}
        self.lines = lines
        self._restart()

    def _restart(self) -> None:
        self.stack: list[_Definition] = []
        self.next = 0  # the lines before it are applied, their definitions opened

    def at(self, first_line: int) -> list[str]:
        """Signatures of the definitions and headings open at `first_line` (outermost first): those
        opened before it and not closed by the lines up to it, itself included (a definition on
        `first_line` is the chunk's own, not one it sits inside)."""
        if first_line < self.next:
            self._restart()
        end = min(first_line, len(self.lines))
        while self.next < end:
            self.stack = self._apply(self.stack, self.next, self.by_line.get(self.next))
            self.next += 1
        stack = self._apply(self.stack, first_line, None) if first_line < len(self.lines) else \
            self.stack
        return [d.signature for d in stack]

    def _apply(self, stack: list[_Definition], number: int,
               d: _Definition | None) -> list[_Definition]:
        """The stack after line `number`, which opens `d` (if given)."""
        line = self.lines[number]
        stripped = line.strip()
        if not stripped:
            return stack
        stack = list(stack)
        if d is not None and d.kind == "heading":
            stack = [s for s in stack if s.kind == "heading" and s.indent < d.indent]
        else:
            width = d.indent if d else _indent_width(line[: len(line) - len(line.lstrip())])
            if d is not None or not _continues(stripped):
                while stack and stack[-1].kind != "heading" and stack[-1].indent >= width:
                    stack.pop()
        if d is not None:
            stack.append(d)
        return stack


def _continues(stripped: str) -> bool:
    """Lines at a definition's own indent that still belong to it (signature tails, attributes)."""
    return stripped.startswith(("where", "@", ")", "{", "#[", "//", "#", "/*", "*", "-->"))


_BOILERPLATE = re.compile(r"copyright|licen[sc]e|spdx|all rights reserved|-\*- coding|generated by",
                          re.IGNORECASE)


def _comment_blocks(text: str) -> Iterator[str]:
    """The opening docstrings and comment blocks of a document, in order, each as one line."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or (i == 0 and line.startswith("#!")):
            i += 1
            continue
        m = _DOCSTRING.match("\n".join(lines[i:i + 200]))
        if m:
            yield " ".join(m.group(2).split())
            i += m.group(0).count("\n") + 1
            continue
        block: list[str] = []
        while i < len(lines) and lines[i].strip():
            cm = _COMMENT_LINE.match(lines[i])
            if not cm or lines[i].strip().startswith("#["):
                break
            block.append(cm.group(1).strip().rstrip("*/").strip())
            i += 1
        if not block:
            return  # code: the preamble is over
        yield " ".join(x for x in block if x)


def leading_comment(text: str, limit: int = 200) -> str:
    """What the document says it is: its first docstring or comment block that is not a license
    or other boilerplate, cut to whole sentences within `limit` characters."""
    body = next((b for b in _comment_blocks(text) if b and not _BOILERPLATE.search(b)), "")
    body = re.sub(r"\s+", " ", body).strip()
    if len(body) <= limit:
        return body
    cut = body[:limit]
    ends = [m.start() for m in _SENTENCE_END.finditer(cut)]
    return cut[: ends[-1]].strip() if ends else cut.rsplit(" ", 1)[0] + " ..."


def _language(doc: Document) -> str:
    path = str(doc.metadata.get("path") or doc.metadata.get("relative_path") or doc.title or "")
    for suffix, language in LANGUAGES.items():
        if path.lower().endswith(suffix):
            return language
    return ""


class StructuralContextualizer(Contextualizer):
    """A free, deterministic context from the document's own structure.

    For each chunk: where it comes from (title or path, language), what the document is about (its
    opening comment or docstring, licenses skipped), and where in it the chunk sits (the
    definitions or headings still open where the chunk starts). No model, no network.

    The list of names the document defines (`max_names`) is off by default: repeated on every
    chunk of a file, it helped the codebase benchmark (+3.9 hybrid Pass@10) but hurt a held-out
    corpus (-2.9), so it does not generalize (BENCHMARKS.md, "what goes into a context").
    """

    name = "structural"

    def __init__(self, max_names: int = 0, summary: bool = True) -> None:
        self.max_names = max_names
        self.summary = summary

    def situate(self, doc: Document, chunks: Sequence[Chunk],
                keep: Keep | None = None) -> ContextResult:
        language = _language(doc)
        prose = None if not language else language in _PROSE
        defs = outline(doc.text, prose)
        lines = doc.text.splitlines()
        header = self._header(doc, defs)
        line_starts = _line_offsets(doc.text)
        enclosing = _Enclosing(defs, lines)
        signatures: dict[int, set[str]] = {}
        for d in defs:
            signatures.setdefault(d.line, set()).add(d.signature)
        out: list[Situated] = []
        for chunk in chunks:
            parts = list(header)
            place = place_text(chunk.where)
            if place:
                parts.append(place)
                out.append(Situated(chunk, " ".join(parts), "generated"))
                continue
            start = chunk.start if chunk.start >= 0 else doc.text.find(chunk.text)
            if start >= 0:
                first_line = _line_of(line_starts, start + _leading_blank(chunk.text))
                own = signatures.get(first_line, set())
                path = [p for p in enclosing.at(first_line) if p not in own]
                if path:
                    parts.append("Inside: " + " > ".join(path[-3:]) + ".")
            out.append(Situated(chunk, " ".join(parts), "generated"))
        return ContextResult(out)

    def _header(self, doc: Document, defs: Sequence[_Definition]) -> list[str]:
        parts: list[str] = []
        title = doc.title or str(doc.metadata.get("path") or "")
        language = format_label(str(doc.metadata.get("format"))) or _language(doc)
        named = " ".join(str(doc.metadata.get("document_title") or "").split())[:120]
        if named and named != title:
            language = f"{language}: {named}" if language else named
        if title:
            parts.append(f"From {title}" + (f" ({language})." if language else "."))
        summary = leading_comment(doc.text) if self.summary else ""
        if summary:
            parts.append(summary if summary.endswith((".", "!", "?")) else summary + ".")
        if defs and self.max_names:
            top = min(d.indent for d in defs)
            names: list[str] = []
            for d in defs:
                if d.indent == top and d.kind != "heading" and d.name not in names:
                    names.append(d.name)
            if names:
                shown = names[: self.max_names]
                more = "" if len(names) <= self.max_names else f" and {len(names) - len(shown)} more"
                parts.append("Defines " + ", ".join(shown) + more + ".")
        return parts


def _line_offsets(text: str) -> list[int]:
    offsets = [0]
    for m in re.finditer("\n", text):
        offsets.append(m.end())
    return offsets


def _line_of(offsets: Sequence[int], position: int) -> int:
    import bisect

    return max(0, bisect.bisect_right(offsets, position) - 1)


def _leading_blank(text: str) -> int:
    return len(text) - len(text.lstrip("\n"))


def from_config(config: object) -> StructuralContextualizer:
    """The registry's constructor: the structural contextualizer takes no settings."""
    return StructuralContextualizer()
