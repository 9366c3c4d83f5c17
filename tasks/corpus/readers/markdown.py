"""Markdown as sections: headings (ATX and setext) as the structure, fenced code verbatim, the
text as written minus what a reader never sees (HTML comments, link targets and reference
definitions, YAML front matter), so that a Markdown file is cut and situated like the HTML, Word
or PDF made from it.

The front matter's `title` is the document's title, and its top heading when the text opens
without a level-1 heading of its own: what pandoc (its title block), Docusaurus, Jekyll and Hugo
show above such a page, and what the HTML, Word, EPUB or PDF made from it carries."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from situate.tasks.corpus.readers.base import FileReader, Limits, Reading, Section, read_utf8_text

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]+\S+.*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\([^)\n]*\)")
_INLINE_LINK = re.compile(r"\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\([^)\n]*\)")
_REFERENCE_LINK = re.compile(r"\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\[[^\]\n]*\]")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*\n", re.DOTALL)
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_DELIMITER_ROW = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_TITLE = re.compile(r"^title:[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def read(path: Path, *, fmt: str, max_bytes: int) -> Reading:
    text = read_utf8_text(path, max_bytes, "not Markdown")
    sections = list(markdown_sections(text))
    title = front_matter_title(text)
    if title and not (sections and sections[0].kind == "heading" and sections[0].level == 1):
        sections.insert(0, Section(title, kind="heading", level=1))
    title = title or next((s.text for s in sections if s.kind == "heading"), "")
    metadata: dict[str, Any] = {}
    return Reading(fmt, iter(sections), title=title, metadata=metadata)


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes)


READERS = (FileReader("md", "Markdown", (".md", ".markdown"), _read),)


def front_matter_title(text: str) -> str:
    """The `title:` of a YAML front matter block, a one-line scalar (quotes removed), or ""."""
    front = _FRONT_MATTER.match(text.lstrip("\ufeff").replace("\r\n", "\n"))
    found = _TITLE.search(front.group(0)) if front else None
    if found is None:
        return ""
    value = found.group(1)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    elif value[:1] in ("|", ">", "[", "{", "&", "*", "!"):
        return ""  # a block, a list, a mapping or a tag: not a title read here
    return heading_text(value)


def clean_inline(text: str) -> str:
    """Text as rendered: images by their alt text, links by their text. A code span is code, its
    brackets no link (`setLocalAddress([ipv4][, ipv6])` once read as a reference link, "[, ipv6]"
    lost), as CommonMark gives code spans precedence."""
    spans: list[str] = []

    def hide(m: re.Match[str]) -> str:
        spans.append(m.group(2))
        return f"{m.group(1)}\x00{len(spans) - 1}\x00{m.group(1)}"

    text = _CODE_SPAN.sub(hide, text)
    text = _IMAGE.sub(r"\1", text)
    text = _INLINE_LINK.sub(r"\1", text)
    text = _REFERENCE_LINK.sub(r"\1", text)
    return re.sub("\x00(\\d+)\x00", lambda m: spans[int(m.group(1))], text) if spans else text


def heading_text(text: str) -> str:
    """A heading's title as every format shows it: inline code as its text, without the
    backticks (the heading path a chunk's context names is the same in every format)."""
    return " ".join(_CODE_SPAN.sub(lambda m: m.group(2), clean_inline(text)).split())


def _cells(row: str) -> list[str]:
    """A GFM table row's cells: split at every pipe not escaped (in code spans too, as GFM
    does), the outer pipes and the cells' padding dropped, an escaped pipe read as a pipe."""
    cells = [c.replace("\x00", "|") for c in row.strip().replace("\\|", "\x00").split("|")]
    if len(cells) > 1 and not cells[0].strip():
        cells = cells[1:]
    if len(cells) > 1 and not cells[-1].strip():
        cells = cells[:-1]
    return [" ".join(c.split()) for c in cells]


def markdown_sections(text: str) -> Iterator[Section]:
    """Headings, text blocks, tables and code blocks of a Markdown text, in order. A GFM table
    reads as every other format's table does: a row a line, its cells by " | ", the delimiter
    row and the cells' padding gone."""
    text = text.replace("\r\n", "\n")
    text = _FRONT_MATTER.sub("", text, count=1)
    text = _COMMENT.sub("", text)
    text = _REFERENCE.sub("", text)
    lines = text.split("\n")
    block: list[str] = []

    def flush() -> Iterator[Section]:
        body = clean_inline("\n".join(block)).strip("\n")
        block.clear()
        if body.strip():
            yield Section(body)

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            yield from flush()
            marker = fence.group(1)
            code: list[str] = []
            i += 1
            while i < len(lines) and not (lines[i].lstrip().startswith(marker[0] * len(marker))
                                          and not lines[i].strip().strip(marker[0])):
                code.append(lines[i])
                i += 1
            if "\n".join(code).strip():
                yield Section("\n".join(code), kind="code")
            i += 1
            continue
        atx = _ATX.match(line)
        if atx:
            yield from flush()
            title = heading_text((atx.group(2) or "").strip())
            if title:
                yield Section(title, kind="heading", level=len(atx.group(1)))
            i += 1
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if "|" in line and _DELIMITER_ROW.match(following) and len(_cells(line)) == len(_cells(following)):
            yield from flush()
            rows = [line]
            i += 2
            while i < len(lines) and lines[i].strip() and "|" in lines[i]:
                rows.append(lines[i])
                i += 1
            table = "\n".join(" | ".join(clean_inline(c) for c in _cells(r)) for r in rows)
            yield Section(table, kind="table")
            continue
        if line.strip() and not block and _SETEXT.match(following) and not line.startswith(
                ("    ", "\t", "-", "*", ">")):
            yield from flush()
            yield Section(heading_text(line.strip()), kind="heading",
                          level=1 if following.strip().startswith("=") else 2)
            i += 2
            continue
        if not line.strip():
            yield from flush()
        else:
            block.append(line)
        i += 1
    yield from flush()
