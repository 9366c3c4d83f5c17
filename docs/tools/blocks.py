"""Every fenced code block of the README, CONTRIBUTING.md and the docs, and what the tests do with
it. A block is run as written (`bash`/`sh`/`shell` blocks by bash, `python` blocks by the
package's interpreter) unless the line just above its opening fence says otherwise:

    <!-- docs: not run: REASON -->             not runnable here, and why (a paid key, a server)
    <!-- docs: generated -->                   written by `python -m docs.tools.generate` from
                                               the code; `--check` fails when it differs
    <!-- docs: background, ready at URL -->    a server: started, waited for until URL answers,
                                               and stopped when the page's last block has run
    <!-- docs: replace "A" with "B" -->        run with A replaced by B (a placeholder such as
                                               path/to/your/folder, run against the sample)

A block of any other language (text, json, ...) must say which of these it is. Print the count of
each kind with `python -m docs.tools.blocks`.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*docs:\s*(?P<body>.*?)\s*-->\s*$")
REPLACE = re.compile(r'replace "(?P<old>[^"]+)" with "(?P<new>[^"]*)"')


@dataclass
class Block:
    """One fenced block: where it is, its language and text, and what the tests do with it."""

    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    kind: str  # "run", "background", "not run", "generated"
    reason: str = ""
    ready: str = ""  # a background block's URL
    replacements: list[tuple[str, str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def script(self) -> str:
        """The text run: the block with its replacements made."""
        text = self.text
        for old, new in self.replacements:
            text = text.replace(old, new)
        return text


class BlockError(ValueError):
    """A block the tests cannot place: unmarked and not runnable, or a marker it does not know."""


def pages() -> list[Path]:
    """The Markdown files whose blocks are counted: README, CONTRIBUTING and every docs page."""
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    found += sorted(p for p in (ROOT / "docs").rglob("*.md") if "tools" not in p.parts)
    return [p for p in found if p.exists()]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order, each placed by its marker."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            if _indented_code(lines, i):
                raise BlockError(f"{path.relative_to(ROOT)}:{i + 1}: an indented code block: fence "
                                 "it (```bash, or ```text with a docs marker)")
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        language = opening["info"].strip().split(" ")[0].lower() if opening["info"].strip() else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if closing and closing["fence"].startswith(fence[0]) and len(closing["fence"]) >= len(
                    fence) and not closing["info"].strip():
                break
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise BlockError(f"{path.relative_to(ROOT)}:{i + 1}: a fence that is never closed")
        found.append(_place(path, i + 1, language, "\n".join(body) + "\n", _marker(lines, i)))
        i = j + 1
    return found


LIST_ITEM = re.compile(r"^\s*([-*+]|\d+\.)\s")


def _indented_code(lines: list[str], i: int) -> bool:
    """Markdown's indented code block: four spaces after a blank line, outside a list."""
    if not lines[i].startswith("    ") or not lines[i].strip() or i == 0 or lines[i - 1].strip():
        return False
    before = next((line for line in reversed(lines[:i]) if line.strip()), "")
    return not (LIST_ITEM.match(before) or before.startswith("  "))


def _marker(lines: list[str], fence: int) -> str | None:
    """The `docs:` marker on the line above the fence (blank lines between are not allowed)."""
    if fence == 0:
        return None
    above = MARKER.match(lines[fence - 1])
    return above["body"] if above else None


def _place(path: Path, line: int, language: str, text: str, marker: str | None) -> Block:
    block = Block(path, line, language, text, "run")
    where = f"{path.relative_to(ROOT)}:{line}"
    if marker is not None:
        if marker.startswith("not run:"):
            block.kind, block.reason = "not run", marker.removeprefix("not run:").strip()
            if not block.reason:
                raise BlockError(f"{where}: 'not run' needs a reason")
        elif marker == "generated":
            block.kind = "generated"
        elif marker.startswith("background, ready at "):
            block.kind, block.ready = "background", marker.removeprefix("background, ready at ")
        elif REPLACE.match(marker):
            block.replacements = [(m["old"], m["new"]) for m in REPLACE.finditer(marker)]
        else:
            raise BlockError(f"{where}: unknown docs marker {marker!r}")
    if block.kind in ("run", "background") and language not in RUNNABLE:
        raise BlockError(f"{where}: a {language or 'plain'} block must be marked "
                         "'<!-- docs: not run: REASON -->' or '<!-- docs: generated -->'")
    return block


def inventory() -> list[Block]:
    return [b for p in pages() for b in blocks(p)]


def summary(found: list[Block]) -> str:
    """The count of each kind, per file, and every reason a block is not run."""
    lines = []
    kinds = Counter(b.kind for b in found)
    lines.append(f"{len(found)} code blocks: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    per_file: dict[str, Counter[str]] = {}
    for b in found:
        per_file.setdefault(str(b.path.relative_to(ROOT)), Counter())[b.kind] += 1
    for name, counts in per_file.items():
        lines.append(f"  {name}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    reasons = Counter(b.reason for b in found if b.kind == "not run")
    lines.append("not run, by reason:")
    lines += [f"  {n} x {reason}" for reason, n in reasons.most_common()]
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        print(summary(inventory()))
    except BlockError as e:
        sys.exit(f"docs.tools.blocks: {e}")
