"""Jupyter notebooks (.ipynb), read as plain JSON: nbformat 4 (`cells`) and 3 (`worksheets`).

Each cell is a section that knows its number and type; a markdown cell's headings are heading
sections of their own, so the heading path runs on into the code cells below them. Outputs are
dropped entirely: they are base64 images, HTML tables and tracebacks, large and not what a person
wrote; a data: URI pasted into markdown is dropped the same way. Raw cells are kept as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from situate.tasks.corpus.readers.base import FileReader, Limits, Place, Reading, Section, Unreadable

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_BLOCK_START = re.compile(r"^\s*(?:[-*+][ \t]|\d+[.)][ \t]|>|\||<)")  # a list item, quote, table, HTML
# An embedded image or file in markdown or HTML: its bytes are never text worth reading.
_DATA_URI = re.compile(r"data:[\w.+-]+/[\w.+-]+(?:;[\w=.+-]+)*;base64,[A-Za-z0-9+/=\s]*")


def read(path: Path, *, fmt: str = "ipynb", max_bytes: int) -> Reading:
    """Read a notebook. `Unreadable("not a notebook")` for anything that is not notebook JSON."""
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise Unreadable("too large", f"{path} is over the limit of {max_bytes} bytes "
                                      "(SITUATE_MAX_DOCUMENT_BYTES)")
    try:
        nb = json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise Unreadable("not a notebook", f"not JSON: {' '.join(str(e).split())[:200]}") from None
    cells = _cells(nb)
    if cells is None:
        raise Unreadable("not a notebook", "JSON, but with no `cells` (nbformat 4) or `worksheets` "
                                           "(nbformat 3)")
    metadata = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    language = _language(metadata, cells)
    title = str(metadata.get("title") or "").strip() or _first_heading(cells)
    return Reading(format="ipynb", sections=_guarded(_sections(cells)), title=title,
                   metadata={"language": language} if language else {}, unit="cells", units=len(cells))


def _cells(nb: object) -> list[dict[str, Any]] | None:
    if not isinstance(nb, dict):
        return None
    if isinstance(nb.get("cells"), list):
        found = nb["cells"]
    elif isinstance(nb.get("worksheets"), list):
        found = [c for ws in nb["worksheets"] if isinstance(ws, dict) and isinstance(ws.get("cells"), list)
                 for c in ws["cells"]]
    else:
        return None
    return [c if isinstance(c, dict) else {} for c in found]


def _source(cell: dict[str, Any]) -> str:
    """A cell's text: `source` (v4, and v3 markdown) or `input` (v3 code), a string or a list of
    lines."""
    value = cell.get("source", cell.get("input", ""))
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def _language(metadata: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        entry = metadata.get(key)
        if isinstance(entry, dict) and isinstance(entry.get(field), str) and entry[field].strip():
            return str(entry[field]).strip().lower()
    if isinstance(metadata.get("language"), str):
        return str(metadata["language"]).strip().lower()
    for cell in cells:  # nbformat 3 says it on each code cell
        if cell.get("cell_type") == "code" and isinstance(cell.get("language"), str):
            return str(cell["language"]).strip().lower()
    return ""


def _first_heading(cells: list[dict[str, Any]]) -> str:
    for cell in cells:
        if cell.get("cell_type") == "heading":
            return " ".join(_source(cell).split())
        if cell.get("cell_type") == "markdown":
            for kind, _, text in _markdown_parts(_source(cell)):
                if kind == "heading":
                    return text
    return ""


def _markdown_parts(text: str) -> Iterator[tuple[str, int, str]]:
    """("heading", level, title) and ("text", 0, paragraphs) in order: ATX ("## x") and setext
    (a line underlined with === or ---) headings, none inside a fenced code block."""
    text = _DATA_URI.sub("data:(embedded file omitted)", text)
    lines = text.splitlines()
    buffer: list[str] = []
    fence = ""

    def flush() -> Iterator[tuple[str, int, str]]:
        body = "\n".join(buffer).strip("\n")
        buffer.clear()
        if body.strip():
            yield "text", 0, body

    for line in lines:
        if fence:
            buffer.append(line)
            if line.strip().startswith(fence):
                fence = ""
            continue
        m = _FENCE.match(line)
        if m:
            fence = m.group(1)[:3]
            buffer.append(line)
            continue
        m = _ATX.match(line)
        if m and m.group(2):
            yield from flush()
            yield "heading", len(m.group(1)), " ".join(m.group(2).split())
            continue
        m = _SETEXT.match(line)
        if m and buffer and buffer[-1].strip() and not _BLOCK_START.match(buffer[-1]) \
                and (len(buffer) == 1 or not buffer[-2].strip()):
            title = buffer.pop()
            yield from flush()
            yield "heading", 1 if m.group(1)[0] == "=" else 2, " ".join(title.split())
            continue
        buffer.append(line)
    yield from flush()


def _sections(cells: list[dict[str, Any]]) -> Iterator[Section]:
    path: list[tuple[int, str]] = []

    def place(n: int, cell_type: str) -> Place:
        return Place(cell=n, cell_type=cell_type,
                     heading_path=tuple(t for _, t in path) if path else None)

    def heading(level: int, title: str) -> None:
        nonlocal path
        path = [h for h in path if h[0] < level] + [(level, title)]

    for n, cell in enumerate(cells, 1):
        kind = cell.get("cell_type")
        source = _source(cell)
        if not source.strip():
            continue
        if kind == "code":
            yield Section(source.strip("\n"), place(n, "code"), kind="code")
        elif kind == "heading":  # nbformat 3's own heading cells
            level = cell.get("level")
            level = min(max(level, 1), 6) if isinstance(level, int) else 1
            title = " ".join(source.split())
            heading(level, title)
            yield Section(title, place(n, "markdown"), kind="heading", level=level)
        elif kind == "markdown":
            for part, level, text in _markdown_parts(source):
                if part == "heading":
                    heading(level, text)
                    yield Section(text, place(n, "markdown"), kind="heading", level=level)
                else:
                    yield Section(text, place(n, "markdown"))
        else:  # raw cells (and unknown types): text as written
            yield Section(source.strip("\n"), place(n, "raw"))


def _guarded(sections: Iterator[Section]) -> Iterator[Section]:
    """Anything odd in a cell found while reading becomes `Unreadable`, never a crash."""
    try:
        yield from sections
    except Unreadable:
        raise
    except Exception as e:  # noqa: BLE001 - a malformed cell midway
        raise Unreadable("corrupt notebook", f"{type(e).__name__}: {e}") from None


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes)


READERS = (FileReader("ipynb", "Jupyter notebook", (".ipynb",), _read),)
