"""The structural contextualizer, the registry, and the cache-aware driver."""

from __future__ import annotations

import random

import pytest

from situate.core.errors import InputError, ProviderError
from situate.core.records import Chunk, Document, Situated, Usage
from situate.storage.cache import DiskContextCache
from situate.tasks.contexts.base import (
    ContextConfig,
    ContextResult,
    Contextualizer,
    get_contextualizer,
)
from situate.tasks.contexts.cache import context_key, situate_document
from situate.tasks.contexts.structural import StructuralContextualizer, leading_comment, outline
from situate.tasks.corpus.load import load_corpus, make_chunks
from tests.conftest import CODEBASE

RUST = '''//! Executor for differential fuzzing.
//! It wraps two executors.
use core::ptr;

/// A wrapper
pub struct DiffExecutor<A, B> {
    primary: A,
}

impl<A, B> Executor for DiffExecutor<A, B>
where
    A: Executor,
{
    fn run_target(&mut self) -> Result<ExitKind, Error> {
        let ret1 = self.primary.run_target()?;
        Ok(ret1)
    }
}

pub fn helper() {}
'''

PYTHON = '''"""Durable job queue on SQLite."""

import json


class JobQueue:
    """A queue."""

    def lease(self):
        now = 1
        return now

    def ack(self, job):
        self.db.execute("DELETE")


def main():
    pass
'''

MARKDOWN = """# Harbor

Intro text.

## Retries

Retries grow exponentially.

### Jitter

Full jitter spreads retries.

## Configuration

Variables.
"""


def _doc(doc_id: str, text: str, size: int = 10_000) -> Document:
    return Document(doc_id, text, make_chunks(doc_id, text, size, 0), doc_id, {"path": doc_id})


def _context_at(doc: Document, needle: str, max_names: int = 12) -> str:
    start = doc.text.index(needle)
    chunk = Chunk(doc.id, 99, doc.text[start:start + 40], start)
    return StructuralContextualizer(max_names=max_names).situate(doc, [chunk]).situated[0].context


def test_leading_comment_rust_and_python_docstring():
    assert leading_comment(RUST) == "Executor for differential fuzzing. It wraps two executors."
    assert leading_comment(PYTHON) == "Durable job queue on SQLite."
    assert leading_comment("import os\n") == ""


def test_outline_names_and_impl_for_type():
    names = [(d.kind, d.name) for d in outline(RUST)]
    assert ("struct", "DiffExecutor") in names
    assert ("impl", "DiffExecutor") in names
    assert ("fn", "run_target") in names


def test_context_names_the_enclosing_definitions():
    rust = _doc("diff.rs", RUST)
    ctx = _context_at(rust, "let ret1")
    assert "From diff.rs (Rust)." in ctx
    assert "Executor for differential fuzzing." in ctx
    assert "Defines DiffExecutor, helper." in ctx
    assert "Inside: impl<A, B> Executor for DiffExecutor<A, B> > fn run_target" in ctx
    # After the impl block closes, nothing encloses the chunk any more.
    assert "Inside" not in _context_at(rust, "pub fn helper")
    # The default leaves the names list out.
    default = _context_at(rust, "let ret1", max_names=0)
    assert "Defines" not in default and "Inside: impl<A, B> Executor" in default


def test_context_python_methods_and_markdown_headings():
    py = _doc("queue.py", PYTHON)
    assert "Inside: class JobQueue > def ack(self, job)" in _context_at(py, 'self.db.execute("DELETE")')
    assert "Inside" not in _context_at(py, "def main")
    md = _doc("guide.md", MARKDOWN)
    assert "Inside: Harbor > Retries > Jitter." in _context_at(md, "Full jitter")
    assert "Inside: Harbor > Configuration." in _context_at(md, "Variables.")


def test_structural_contexts_on_the_codebase_are_short_and_deterministic():
    corpus = load_corpus(CODEBASE / "codebase_chunks.json")
    s = StructuralContextualizer()
    first = [x.context for d in corpus.documents for x in s.situate(d, d.chunks).situated]
    second = [x.context for d in corpus.documents for x in s.situate(d, d.chunks).situated]
    assert first == second
    assert len(first) == 737
    assert max(len(c) for c in first) < 800
    # No path in this format: a chunk gets a context from a docstring or an enclosing definition.
    assert sum(1 for c in first if c) > 0.7 * 737


def _big_module(classes: int) -> str:
    lines = ['"""A generated module."""', ""]
    for c in range(classes):
        lines.append(f"class C{c}:")
        for m in range(4):
            lines += [f"    def m{m}(self, x):", *[f"        y{k} = x + {k}" for k in range(6)], ""]
    return "\n".join(lines)


def test_a_documents_contexts_take_one_pass_over_its_lines(monkeypatch):
    """Where each chunk sits is found in one walk down the document for all its chunks: the lines
    visited grow with the document, not with its lines times its chunks."""
    from situate.tasks.contexts import structural

    visits = 0
    apply = structural._Enclosing._apply

    def counted(self, stack, number, d):
        nonlocal visits
        visits += 1
        return apply(self, stack, number, d)

    monkeypatch.setattr(structural._Enclosing, "_apply", counted)
    for classes in (20, 200):
        visits = 0
        doc = _doc("big.py", _big_module(classes), size=300)
        contexts = [x.context for x in StructuralContextualizer().situate(doc, doc.chunks).situated]
        lines = len(doc.text.splitlines())
        assert len(doc.chunks) > classes / 2
        assert visits <= lines + len(doc.chunks)
        assert f"Inside: class C{classes - 1}" in contexts[-1]


def test_where_a_chunk_sits_does_not_depend_on_the_order_chunks_are_asked_in():
    from situate.tasks.contexts.structural import _Enclosing

    text = _big_module(6) + "\n" + PYTHON
    lines = text.splitlines()
    defs = outline(text)
    alone = [_Enclosing(defs, lines).at(n) for n in range(len(lines) + 2)]
    walker = _Enclosing(defs, lines)
    order = list(range(len(lines) + 2))
    random.Random(7).shuffle(order)
    assert {n: walker.at(n) for n in order} == dict(enumerate(alone))
    assert any(len(path) == 2 for path in alone)  # class > def: the test sees nesting


def test_registry_knows_names_and_rejects_unknown():
    assert get_contextualizer(ContextConfig(name="structural")).name == "structural"
    assert get_contextualizer(ContextConfig(name="none")).name == "none"
    with pytest.raises(InputError, match="unknown context provider 'gpt'.*none, ollama, openai, structural"):
        get_contextualizer(ContextConfig(name="gpt"))


class Scripted(Contextualizer):
    """A paid provider stand-in: counts what it is asked for, keeps each context as it is
    "answered" (unless `keeps` is off), and fails at answer number `fail_at` when set."""

    name = "scripted"

    def __init__(self, keeps: bool = True, fail_at: int | None = None) -> None:
        self.asked: list[int] = []
        self.keeps = keeps
        self.fail_at = fail_at

    def cache_identity(self):
        return {"provider": "scripted", "model": "m1", "prompt": "v1", "max_tokens": 100}

    def situate(self, doc, chunks, keep=None):
        situated = []
        for n, c in enumerate(chunks):
            if n == self.fail_at:
                raise ProviderError("the service went away")
            self.asked.append(c.index)
            situated.append(Situated(c, f"ctx {c.index}"))
            if keep is not None and self.keeps:
                keep(doc, c, f"ctx {c.index}")
        usage = Usage(requests=len(chunks), contexts_generated=len(chunks))
        return ContextResult(situated, usage)


class CountingCache(DiskContextCache):
    """The disk cache, counting writes."""

    def __init__(self, directory) -> None:
        super().__init__(directory)
        self.puts = 0

    def put(self, key: str, context: str) -> None:
        self.puts += 1
        super().put(key, context)


def test_driver_pays_only_for_chunks_not_in_the_cache(tmp_path):
    text = "".join(f"def step_{i}(x):\n    return x * {i}\n\n" for i in range(60))
    doc = _doc("q.py", text, size=200)
    assert len({c.text for c in doc.chunks}) == len(doc.chunks) > 3
    cache = DiskContextCache(tmp_path / "cache")
    p = Scripted()
    first = situate_document(p, doc, cache)
    assert [s.source for s in first.situated] == ["generated"] * len(doc.chunks)
    assert p.asked == [c.index for c in doc.chunks]
    p.asked.clear()
    again = situate_document(p, doc, cache)
    assert p.asked == []
    assert [s.context for s in again.situated] == [s.context for s in first.situated]
    assert again.usage.contexts_from_cache == len(doc.chunks)
    # A changed document is a new cache key for every chunk.
    changed = _doc("q.py", doc.text + "\n# edit\n", size=200)
    situate_document(p, changed, cache)
    assert len(p.asked) == len(changed.chunks)


def test_each_context_is_kept_as_it_arrives_so_a_failed_document_pays_only_the_rest(tmp_path):
    """A document that fails (or a run killed) half-way keeps every context already answered:
    the next run pays only for the chunks that had no answer, and counts the rest as cached."""
    doc = _doc("q.py", "".join(f"def step_{i}(x):\n    return x * {i}\n\n" for i in range(60)),
               size=200)
    n = len(doc.chunks)
    cache = CountingCache(tmp_path / "cache")
    with pytest.raises(ProviderError):
        situate_document(Scripted(fail_at=3), doc, cache)
    assert len(cache) == cache.puts == 3
    again = Scripted()
    result = situate_document(again, doc, cache)
    assert again.asked == [c.index for c in doc.chunks[3:]]
    assert (result.usage.contexts_generated, result.usage.contexts_from_cache) == (n - 3, 3)
    assert result.usage.requests == n - 3
    assert [s.context for s in result.situated] == [f"ctx {c.index}" for c in doc.chunks]
    assert [s.source for s in result.situated] == ["cache"] * 3 + ["generated"] * (n - 3)
    assert len(cache) == cache.puts == n  # each context written once


def test_the_driver_keeps_what_a_provider_returns_without_keeping(tmp_path):
    doc = _doc("q.py", "".join(f"def step_{i}(x):\n    return x * {i}\n\n" for i in range(30)),
               size=200)
    cache = CountingCache(tmp_path / "cache")
    situate_document(Scripted(keeps=False), doc, cache)
    assert len(cache) == cache.puts == len(doc.chunks)
    again = Scripted()
    assert situate_document(again, doc, cache).usage.contexts_from_cache == len(doc.chunks)
    assert again.asked == []


def test_free_providers_are_never_cached(tmp_path):
    doc = _doc("r.rs", RUST, size=200)
    cache = CountingCache(tmp_path / "cache")
    for provider in (StructuralContextualizer(), get_contextualizer(ContextConfig(name="none"))):
        result = situate_document(provider, doc, cache)
        assert len(result.situated) == len(doc.chunks)
        assert result.usage.contexts_from_cache == 0
    assert cache.puts == 0 and len(cache) == 0


def test_the_cache_key_covers_every_identity_field_and_nothing_else():
    identity = {"provider": "anthropic", "model": "m", "prompt": "v1", "max_tokens": 100}
    key = context_key(identity, "doc", "chunk")
    assert context_key(dict(reversed(list(identity.items()))), "doc", "chunk") == key  # order-free
    for field, other in (("provider", "x"), ("model", "m2"), ("prompt", "v2"), ("max_tokens", 101)):
        assert context_key({**identity, field: other}, "doc", "chunk") != key, field
    assert context_key({**identity, "group_size": 4}, "doc", "chunk") != key
    assert context_key(identity, "doc2", "chunk") != key
    assert context_key(identity, "doc", "chunk2") != key



def test_the_default_provider_follows_the_anthropic_key(monkeypatch):
    # Decided through situate.core.secrets (the one place keys are read): a blank key is no key.
    from situate.core.settings import Settings

    monkeypatch.delenv("SITUATE_CONTEXT", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert Settings(_env_file=None).default_context() == "structural"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "   ")
    assert Settings(_env_file=None).default_context() == "structural"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert Settings(_env_file=None).default_context() == "anthropic"
    assert Settings(_env_file=None, context="none").default_context() == "none"
