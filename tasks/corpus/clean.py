"""Cleaning what a corpus brings that Milvus cannot store (NUL bytes, lone surrogates), and the
tally of what a load cleaned and skipped, said in the `situate.load` log as it happens."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("situate.load")

# Milvus's VARCHAR limit, in bytes: a longer chunk could never be stored.
MAX_CHUNK_BYTES = 65_535
# Skipped files and chunks named one by one in the log; beyond these only the total is said.
LOG_EACH = 20

# The reason a link out of a directory corpus is counted under.
LINK_OUT = "link out of the corpus"

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def clean_text(text: str) -> tuple[str, int]:
    """`text` with NUL bytes removed and lone surrogates replaced by U+FFFD, and how many
    characters that changed.

    Both reach Python through JSON escapes (`\\u0000`, `\\ud800`) or files, and Milvus refuses both
    (a lone surrogate cannot even be encoded as UTF-8, so the text could not be hashed). The JSON
    decoder joins valid surrogate pairs, so any surrogate left in a str is a lone one.
    """
    if text.isascii() and "\x00" not in text:
        return text, 0
    return _UNSTORABLE.subn(lambda m: "" if m.group() == "\x00" else "\ufffd", text)


def clean_value(value: Any) -> tuple[Any, int]:
    """`clean_text` over every string in a JSON value (keys included)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        total = 0
        for k, v in value.items():
            k, a = clean_value(k)
            v, b = clean_value(v)
            out[k] = v
            total += a + b
        return out, total
    if isinstance(value, list):
        items = [clean_value(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    return value, 0


def id_problem(doc_id: str) -> str:
    """What makes a document id unstorable, or ''. Ids are never cleaned: an id must be exact."""
    if "\x00" in doc_id:
        return "a NUL byte"
    if not doc_id.isascii() and any("\ud800" <= ch <= "\udfff" for ch in doc_id):
        return "a lone surrogate"
    return ""


@dataclass(frozen=True)
class LoadOptions:
    """How one load reads its corpus: `path` (what its log lines name), `limit` (bytes of one text
    file, SITUATE_MAX_FILE_BYTES), `document_limit` (bytes of a document format's file, PDF,
    Office, EPUB, notebooks, and what a zip-based one may inflate to), `code_chunks` (how source
    files are cut: "syntax" or "text"), `follow_links` (whether links out of a directory corpus are
    read), each document's CPU budget (`read_seconds`), the reader process's memory
    (`read_memory`), a PDF's pages (`max_pages`). `quiet`: a second pass over a corpus already
    checked (the ingest flow's streaming pass) counts without saying anything again. `wanted`: a
    second pass that wants only these documents (those a plan processes): the loaders pass over
    the others without reading, cleaning or cutting them; None: every document."""

    path: str
    limit: int
    document_limit: int
    code_chunks: str
    follow_links: bool
    read_seconds: float
    read_memory: int
    max_pages: int
    quiet: bool = False
    wanted: Collection[str] | None = None


@dataclass
class Tally:
    """What one load (read as its `options` say) cleaned, skipped and dropped; each said in the
    log as it happens."""

    options: LoadOptions
    form: str = ""
    empty: int = 0
    skipped_files: int = 0
    large_files: int = 0
    skipped_chunks: int = 0
    cleaned_chars: int = 0
    cleaned_docs: int = 0
    links_out: int = 0
    # Documents read per format ("pdf": 3), the units read ("pages": 120), and files of document
    # formats skipped, by reason ("encrypted PDF": 1).
    formats: Counter[str] = field(default_factory=Counter)
    units: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def passes_over(self, doc_id: str) -> bool:
        return self.options.wanted is not None and doc_id not in self.options.wanted

    def large_file(self, f: Path, size: int | None, document: bool = False) -> None:
        """A file over its limit: by the size it claims, or (`size` None) by the bytes read."""
        self.large_files += 1
        limit, variable = ((self.options.document_limit, "SITUATE_MAX_DOCUMENT_BYTES") if document
                           else (self.options.limit, "SITUATE_MAX_FILE_BYTES"))
        said = f"{size} bytes" if size is not None else "more bytes than it claimed"
        if self.large_files <= LOG_EACH and not self.options.quiet:
            log.warning(f"skipped {f}: {said}, over the {limit}-byte limit for one file "
                        f"({variable})")

    def link_out(self, f: Path, target: str) -> None:
        """A link whose target is outside the corpus: never read (unless `follow_links`)."""
        self.links_out += 1
        self.skipped_files += 1
        self.reasons[LINK_OUT] += 1
        if self.links_out <= LOG_EACH and not self.options.quiet:
            log.warning(f"skipped {f}: a link out of the corpus, to {target} (--follow-links "
                        "reads such links)")

    def skip(self, f: Path, kind: str, detail: str) -> None:
        """A file that cannot be read (a document refused by its reader, a file the system will
        not give): counted by reason, said once."""
        self.skipped_files += 1
        self.reasons[kind] += 1
        detail = detail.replace(f"{f}: ", "").replace(str(f), "the file")  # said once, first
        if sum(self.reasons.values()) <= LOG_EACH and not self.options.quiet:
            log.warning(f"skipped {f}: {kind}" + (f" ({detail})" if detail else ""))

    def oversize_chunk(self, doc_id: str, index: int, size: int) -> None:
        self.skipped_chunks += 1
        if self.skipped_chunks <= LOG_EACH and not self.options.quiet:
            log.warning(f"skipped document {doc_id!r}, chunk {index} of {self.options.path}: {size} bytes, "
                        f"more than the {MAX_CHUNK_BYTES} a stored chunk can hold")

    def cleaned(self, doc_id: str, count: int) -> None:
        if not count:
            return
        self.cleaned_chars += count
        self.cleaned_docs += 1
        if self.cleaned_docs <= LOG_EACH and not self.options.quiet:
            log.warning(f"document {doc_id!r} of {self.options.path}: removed or replaced {count} NUL "
                        "byte(s) and lone surrogate(s)")

    def summarize(self) -> None:
        if self.options.quiet:
            return
        if self.large_files:
            log.warning(f"skipped {self.large_files} file(s) over {self.options.limit} "
                        f"bytes in {self.options.path} (SITUATE_MAX_FILE_BYTES; "
                        f"SITUATE_MAX_DOCUMENT_BYTES, {self.options.document_limit}, for documents)")
        if self.links_out:
            log.warning(f"skipped {self.links_out} link{'s' if self.links_out > 1 else ''} out of "
                        f"the corpus in {self.options.path} (--follow-links or SITUATE_FOLLOW_LINKS reads "
                        "them)")
        others = [(kind, n) for kind, n in self.reasons.most_common() if kind != LINK_OUT]
        if others:
            said = ", ".join(f"{n} {kind}" for kind, n in others)
            log.warning(f"skipped files in {self.options.path}: {said}")
        if self.skipped_chunks:
            log.warning(f"skipped {self.skipped_chunks} chunk(s) over {MAX_CHUNK_BYTES} bytes in "
                        f"{self.options.path}; the other chunks are ingested")
        if self.cleaned_chars:
            log.warning(f"cleaned {self.cleaned_chars} character(s) in {self.cleaned_docs} "
                        f"document(s) of {self.options.path}: NUL bytes removed, lone surrogates replaced "
                        "with U+FFFD")
