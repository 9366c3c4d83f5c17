"""reStructuredText as sections: section titles (underlined, or over- and underlined) as the
structure, literal blocks (`::`) and code directives verbatim, tables as written, and the text as a
reader sees it: inline markup (``code``, *emphasis*, `links <url>`_, :role:`text`) by its text,
without what a page never shows (comments, hyperlink targets, substitution definitions, directive
options), so that a chunk under a section title is situated by its section as Markdown's is.

A title's level is its adornment's rank in the order the document first uses each style (a
character, underlined alone or also overlined), as docutils ranks them. The document's title is its
first section title.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from situate.tasks.corpus.readers.base import FileReader, Limits, Reading, Section, read_utf8_text

# Characters that may adorn a title: printable ASCII that is not a letter, a digit or a space.
_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.[ \t]+([\w][\w:.+-]*)[ \t]*::(?:[ \t]+(.*))?$")
_EXPLICIT = re.compile(r"^(\s*)\.\.(?:[ \t]+(.*))?$")
_FOOTNOTE = re.compile(r"^\[([^\]\s]+)\][ \t]*(.*)$")
_OPTION = re.compile(r"^\s*:[^:\s][^:]*:(?:\s|$)")
_GRID_BORDER = re.compile(r"^\s*\+(?:[-=]+\+)+\s*$")
_SIMPLE_BORDER = re.compile(r"^\s*=+(?:[ \t]+=+)+\s*$")
_CODE_DIRECTIVES = frozenset({"code", "code-block", "sourcecode"})
_HIDDEN_DIRECTIVES = frozenset({"image", "include", "raw", "highlight", "literalinclude", "meta",
                                "contents", "sectnum", "target-notes", "default-role", "role",
                                "title", "header", "footer", "index", "tabularcolumns"})
_NO_ARGUMENT = frozenset({"figure"})  # its argument is a file name; its content, the caption

# Inline markup, taken out in this order: literals first (nothing inside them is markup).
_LITERAL = re.compile(r"``(?=\S)(.+?)(?<=\S)``", re.DOTALL)
_ROLE_TITLED = re.compile(r":[\w:+.-]+:`([^`<]*?)\s*<[^`>]*>`")
_ROLE = re.compile(r":[\w:+.-]+:`([^`]*)`")
_LINK_TITLED = re.compile(r"`([^`<]*?)\s*<[^`>]*>`__?")
_REFERENCE = re.compile(r"`([^`]+)`(?:__?|(?=[\s.,;:!?)\]'\"-]|$))")
_NAMED = re.compile(r"(?<![\w`])([A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?)__?(?=[\s.,;:!?)\]'\"]|$)")
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.DOTALL)
_EMPHASIS = re.compile(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])")
_FOOTNOTE_REF = re.compile(r"\s?\[(?:#[\w-]*|\*|\d+)\]_")


def read(path: Path, *, fmt: str = "rst", max_bytes: int) -> Reading:
    """Read `path` as reStructuredText: UTF-8 text (a BOM allowed), its sections lazily made."""
    text = read_utf8_text(path, max_bytes, "not reStructuredText")
    sections = list(rst_sections(text))
    title = next((s.text for s in sections if s.kind == "heading"), "")
    return Reading(fmt, iter(sections), title=title)


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes)


READERS = (FileReader("rst", "reStructuredText", (".rst", ".rest"), _read),)


def clean_inline(text: str) -> str:
    """Text as rendered: literals, roles, links and references by their text, emphasis and strong
    emphasis without their asterisks, footnote references gone."""
    spans: list[str] = []

    def hide(m: re.Match[str]) -> str:
        spans.append(m.group(1))
        return f"\x00{len(spans) - 1}\x00"

    text = _LITERAL.sub(hide, text)
    for pattern in (_ROLE_TITLED, _ROLE, _LINK_TITLED, _REFERENCE, _STRONG, _EMPHASIS):
        text = pattern.sub(r"\1", text)
    text = _NAMED.sub(r"\1", text)
    text = _FOOTNOTE_REF.sub("", text)
    text = text.replace("\\", "")  # an escape shows the character after it
    return re.sub("\x00(\\d+)\x00", lambda m: spans[int(m.group(1))], text) if spans else text


def title_text(text: str) -> str:
    """A title as every format shows it: one line, its inline markup by its text."""
    return " ".join(clean_inline(text).split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _dedent(lines: list[str]) -> list[str]:
    """`lines` without the indent they all share (blank lines aside)."""
    cut = min((_indent(line) for line in lines if line.strip()), default=0)
    return [line[cut:] for line in lines]


def _indented_end(lines: list[str], i: int) -> int:
    """Where the indented block from line `i` ends: at the first line that is not blank and not
    indented, its trailing blank lines left out."""
    j = i
    while j < len(lines) and (not lines[j].strip() or lines[j][:1].isspace()):
        j += 1
    while j > i and not lines[j - 1].strip():
        j -= 1
    return j


def _is_adornment(line: str) -> bool:
    return not line[:1].isspace() and bool(_ADORNMENT.match(line.rstrip()))


def _title_at(lines: list[str], i: int) -> tuple[str, str, int] | None:
    """(title, style, lines it takes) when a section title starts at line `i`, else None. The
    style is the adornment's character, twice when it is also overlined."""
    line = lines[i].rstrip()
    following = lines[i + 1].rstrip() if i + 1 < len(lines) else ""
    if _is_adornment(line):  # overline, title, underline the same as the overline
        if i + 2 < len(lines) and lines[i + 1].strip() and not _is_adornment(lines[i + 1]) \
                and lines[i + 2].rstrip() == line:
            return lines[i + 1].strip(), line[0] * 2, 3
        return None
    if line[:1].isspace() or not _is_adornment(following):
        return None
    if len(following) < len(line) and len(following) < 4:
        return None  # too short for a title: docutils reads it as text
    return line.strip(), following[0], 2


def rst_sections(text: str) -> Iterator[Section]:
    """Headings, text blocks, tables and code blocks of a reStructuredText text, in order."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").expandtabs(8).split("\n")
    return _blocks(lines, styles=[])


def _blocks(lines: list[str], styles: list[str] | None) -> Iterator[Section]:
    """The sections of `lines` (not indented as a whole). `styles`: the title styles seen so far,
    in order; None inside a directive or an indented block, where there are no titles."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        title = _title_at(lines, i) if styles is not None else None
        if title is not None and styles is not None:
            name, style, taken = title
            if style not in styles:
                styles.append(style)
            heading = title_text(name)
            if heading:
                yield Section(heading, kind="heading", level=min(6, styles.index(style) + 1))
            i += taken
            continue
        if _is_adornment(line) and (i + 1 == len(lines) or not lines[i + 1].strip()):
            i += 1  # a transition (or a lone line of punctuation): no text
            continue
        if line[:1].isspace():  # a block quote
            end = _indented_end(lines, i)
            yield from _blocks(_dedent(lines[i:end]), None)
            i = end
            continue
        if _EXPLICIT.match(line):
            end = _indented_end(lines, i + 1)
            yield from _explicit(lines[i], _dedent(lines[i + 1:end]))
            i = end
            continue
        end = i + 1
        if _GRID_BORDER.match(line) or _SIMPLE_BORDER.match(line):
            end = _table_end(lines, i)
            if end > i:
                yield Section("\n".join(row.rstrip() for row in lines[i:end]), kind="table")
                i = end
                continue
            end = i + 1
        while end < len(lines) and lines[end].strip():
            end += 1
        yield from _paragraph(lines[i:end])
        i = end
        if lines[end - 1].rstrip().endswith("::"):
            following = i
            while following < len(lines) and not lines[following].strip():
                following += 1
            if following < len(lines) and lines[following][:1].isspace():
                i = _indented_end(lines, following)
                code = "\n".join(_dedent(lines[following:i])).rstrip()
                if code.strip():
                    yield Section(code, kind="code")


def _table_end(lines: list[str], i: int) -> int:
    """Where a grid table (to its first blank line) or a simple table (to the border a blank line
    or the end follows) from line `i` ends; `i` when it is no table."""
    if _GRID_BORDER.match(lines[i]):
        end = i
        while end < len(lines) and lines[end].strip():
            end += 1
        return end
    for j in range(i + 1, len(lines)):
        if _SIMPLE_BORDER.match(lines[j]) and (j + 1 == len(lines) or not lines[j + 1].strip()):
            return j + 1
    return i


def _paragraph(lines: list[str]) -> Iterator[Section]:
    """A paragraph (or list, definition, field list) as text, a closing `::` (a literal block
    follows) shown as docutils shows it: "Example::" as "Example:", a lone "::" not at all."""
    text = "\n".join(line.rstrip() for line in lines)
    if text.endswith("::"):
        text = text[:-2].rstrip() if text[:-2].endswith((" ", "\n")) or text == "::" else text[:-1]
    body = clean_inline(text).strip("\n")
    if body.strip():
        yield Section(body)


def _explicit(first: str, body: list[str]) -> Iterator[Section]:
    """An explicit markup block: a directive, a footnote or citation (their text kept); a
    hyperlink target, a substitution definition or a comment (nothing a reader sees)."""
    directive = _DIRECTIVE.match(first)
    if directive is None:
        explicit = _EXPLICIT.match(first)
        note = _FOOTNOTE.match((explicit.group(2) if explicit else "") or "")
        if note:
            yield from _paragraph([f"[{note.group(1)}] {note.group(2)}".rstrip()])
            yield from _blocks(body, None)
        return  # a target (`.. _name: url`, `__ url`), a substitution, a comment
    name, argument = directive.group(2).lower(), (directive.group(3) or "").strip()
    start = 0
    if name not in _CODE_DIRECTIVES and not _OPTION.match(body[0] if body else ""):
        while start < len(body) and body[start].strip():  # the argument, over more lines
            argument = f"{argument} {body[start].strip()}".strip()
            start += 1
    options = _options_end(body, start)
    content = _dedent(body[options:])
    if name in _CODE_DIRECTIVES:
        code = "\n".join(content).strip("\n").rstrip()
        if code.strip():
            yield Section(code, kind="code")
        return
    if name.split(":")[-1] in _HIDDEN_DIRECTIVES:
        return
    if argument and name not in _NO_ARGUMENT:
        yield from _paragraph([argument])
    yield from _blocks(content, None)


def _options_end(body: list[str], i: int) -> int:
    """Where a directive's options (`:name: value` lines, a value going on over more indented
    lines) from line `i` end."""
    while i < len(body) and body[i].strip() and (_OPTION.match(body[i]) or body[i][:1].isspace()):
        i += 1
    return i
