"""Markdown as sections: headings (ATX and setext) as the structure, fenced code verbatim, the
text as written minus what a reader never sees (HTML comments, link targets and reference
definitions, YAML front matter), so that a Markdown file is cut and situated like the HTML, Word
or PDF made from it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from situate.tasks.corpus.readers.base import Reading, Section, Unreadable

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]+\S+.*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\([^)\n]*\)")
_INLINE_LINK = re.compile(r"\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\([^)\n]*\)")
_REFERENCE_LINK = re.compile(r"\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\[[^\]\n]*\]")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*\n", re.DOTALL)


def read(path: Path, *, fmt: str, max_bytes: int) -> Reading:
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)  # bounded by what is read, whatever size the file claimed
    if len(raw) > max_bytes:
        raise Unreadable("too large", f"over the limit of {max_bytes} bytes (SITUATE_MAX_DOCUMENT_BYTES)")
    if b"\x00" in raw[:4096]:
        raise Unreadable("not Markdown", "the file is binary")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Unreadable("not Markdown", f"byte {e.start} is not UTF-8: convert the file to UTF-8"
                         ) from None
    sections = list(markdown_sections(text))
    title = next((s.text for s in sections if s.kind == "heading"), "")
    metadata: dict[str, Any] = {}
    return Reading(fmt, iter(sections), title=title, metadata=metadata)


def clean_inline(text: str) -> str:
    """Text as rendered: images by their alt text, links by their text."""
    text = _IMAGE.sub(r"\1", text)
    text = _INLINE_LINK.sub(r"\1", text)
    return _REFERENCE_LINK.sub(r"\1", text)


def markdown_sections(text: str) -> Iterator[Section]:
    """Headings, text blocks and code blocks of a Markdown text, in order."""
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
            title = clean_inline((atx.group(2) or "").strip())
            if title:
                yield Section(title, kind="heading", level=len(atx.group(1)))
            i += 1
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and not block and _SETEXT.match(following) and not line.startswith(
                ("    ", "\t", "-", "*", ">")):
            yield from flush()
            yield Section(clean_inline(line.strip()), kind="heading",
                          level=1 if following.strip().startswith("=") else 2)
            i += 2
            continue
        if not line.strip():
            yield from flush()
        else:
            block.append(line)
        i += 1
    yield from flush()
