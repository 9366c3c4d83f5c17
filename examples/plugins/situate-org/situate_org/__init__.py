"""An example situate plugin, installed beside situate and found through its entry points
(pyproject.toml): a reader of Emacs Org files (`.org`: `*` headings, the text under them) and
the memory store under the URI scheme `orgmem://NAME`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from situate.storage.kinds import MemoryKind
from situate.tasks.corpus.readers.base import (
    FileReader,
    Limits,
    Place,
    Reading,
    Section,
    read_utf8_text,
)

_HEADING = re.compile(r"^(\*+)\s+(.*?)\s*$")


def org_sections(text: str) -> Iterator[Section]:
    """Headings (`*`, `**`, ...) as the structure, each paragraph under them as text, placed by
    the line it starts on: a place of the reader's own (`Place.own`), said "Line N" in a chunk's
    context. The buffer settings (`#+TITLE:` and the like) are left out."""
    paragraph: list[str] = []
    start = 0
    for number, line in enumerate([*text.splitlines(), ""], 1):
        heading = _HEADING.match(line)
        if heading or not line.strip() or line.startswith("#+"):
            if paragraph:
                yield Section(" ".join(paragraph), Place(own=(("line", start),), said=f"Line {start}"))
                paragraph = []
            if heading:
                yield Section(heading.group(2), kind="heading", level=len(heading.group(1)))
            continue
        start = start if paragraph else number
        paragraph.append(line.strip())


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    text = read_utf8_text(path, limits.max_bytes, "not Org")
    title = next((m.group(1) for m in re.finditer(r"(?m)^#\+TITLE:\s*(.*?)\s*$", text)), "")
    return Reading(fmt, org_sections(text), title=title)


READERS = (FileReader("org", "Org document", (".org",), _read),)
STORE = MemoryKind()  # situate's memory store, opened here on orgmem://NAME
