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
BM25, which matches names literally, below what a labelled set finds (docs/benchmarks).

Forms: a directory (text, Markdown and source files give queries; documents of other formats are
copied unchanged and give none), a single text or source file, or a pre-chunked JSON (its
documents' content and chunks edited alike). A JSONL corpus is refused with what to do.

What can be taken out of a document is found in situate.tasks.synth.candidates; here, the set is
drawn, checked against the corpus as situate reads it, and the corpus written again.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from situate.core.errors import InputError
from situate.core.text import normalize_quote
from situate.tasks.corpus.files import inside, is_system_file
from situate.tasks.corpus.filetypes import TEXT_SUFFIXES
from situate.tasks.corpus.forms import prechunked_items
from situate.tasks.corpus.load import load_corpus
from situate.tasks.synth.candidates import Candidate, candidates, stratified


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
        for item in prechunked_items(path):
            yield item.doc_id, item.content
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
    return {item.doc_id: [text for _, text in item.pieces] for item in prechunked_items(path)}


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
        items = list(prechunked_items(src))
        data = [given.item for given in items]
        for doc_id, item in ((given.doc_id, given.item) for given in items):
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
