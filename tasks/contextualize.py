"""Contextualizers: given a document and some of its chunks, write a short context for each chunk.

One small interface (`Contextualizer.situate`), a registry by name, and a cache-aware driver
(`situate_document`) that every provider goes through, so no provider re-implements caching.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prefect import task

from storage.cache import ContextCache, context_key
from tasks.errors import InputError
from tasks.records import Chunk, Document, Situated, Usage


@dataclass(frozen=True)
class ContextConfig:
    """Everything a contextualizer may be configured with; built by the flow from settings."""

    name: str = "structural"
    model: str = ""
    concurrency: int = 8
    max_attempts: int = 8
    group_chunks: bool = False
    batch: bool = False
    # Where a provider may persist its own state (a batch id); the cache dir by default.
    state_dir: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class ContextResult:
    """What situating one document returns: one Situated per chunk, in chunk order, and the bill."""

    situated: list[Situated]
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)


class Contextualizer:
    """Base of all contextualizers.

    `situate` is the one method a provider must implement. `cache_identity` names what, besides the
    document and chunk, changes the output (provider, model, prompt version); None means the
    provider is free and deterministic and its output is not worth caching.
    """

    name: str = "base"

    def situate(self, doc: Document, chunks: Sequence[Chunk]) -> ContextResult:
        raise NotImplementedError

    def cache_identity(self) -> tuple[str, str, str] | None:
        return None

    def situate_corpus(
        self, items: Sequence[tuple[Document, Sequence[Chunk]]]
    ) -> list[ContextResult] | None:
        """Situate many documents in one go (a Message Batch); None when not supported.

        Providers that only work per document leave this alone and the flow fans out per document.
        """
        return None

    def abort(self) -> None:
        """Another document failed and the run stops: end the work still going on quickly (every
        later call may fail at once). Called by the flow before it waits for its tasks to end."""

    def close(self) -> None:
        """Release clients; called once by the flow at the end of a run."""


class NoContext(Contextualizer):
    """Index chunks as they are: the baseline of every comparison."""

    name = "none"

    def situate(self, doc: Document, chunks: Sequence[Chunk]) -> ContextResult:
        return ContextResult([Situated(c, "", "none") for c in chunks])


# --- the structural contextualizer ---------------------------------------------------------------

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

_PROSE = {"Markdown", "reStructuredText", "text"}
_LANGUAGES = {
    ".py": "Python", ".rs": "Rust", ".go": "Go", ".js": "JavaScript", ".ts": "TypeScript",
    ".tsx": "TypeScript", ".jsx": "JavaScript", ".java": "Java", ".kt": "Kotlin", ".c": "C",
    ".h": "C", ".cc": "C++", ".cpp": "C++", ".hpp": "C++", ".cs": "C#", ".rb": "Ruby",
    ".swift": "Swift", ".scala": "Scala", ".php": "PHP", ".sh": "shell", ".md": "Markdown",
    ".rst": "reStructuredText", ".txt": "text", ".sql": "SQL", ".lua": "Lua", ".ex": "Elixir",
}


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
            return name
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
            m = _C_FUNCTION.match(line) or _JS_FUNCTION.match(line) or (
                None if prose or line[:1].isspace() or ". " in line or line.rstrip().endswith(".")
                else _C_TOP_LEVEL.match(line))
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


def _enclosing(defs: Sequence[_Definition], lines: Sequence[str], first_line: int) -> list[str]:
    """Signatures of the definitions and headings still open at `first_line` (outermost first).

    Indentation decides: a code line at or left of a definition's indent closes it (so do `}` and
    `end`), except lines that continue a signature. Headings close only under a heading of the same
    or a higher level.
    """
    by_line = {d.line: d for d in defs}
    stack: list[_Definition] = []
    for number in range(min(first_line + 1, len(lines))):
        line = lines[number]
        stripped = line.strip()
        if not stripped:
            continue
        d = by_line.get(number) if number < first_line else None
        if d is not None and d.kind == "heading":
            stack = [s for s in stack if s.kind == "heading" and s.indent < d.indent]
        else:
            width = d.indent if d else _indent_width(line[: len(line) - len(line.lstrip())])
            if d is not None or not _continues(stripped):
                while stack and stack[-1].kind != "heading" and stack[-1].indent >= width:
                    stack.pop()
        if d is not None:
            stack.append(d)
    return [d.signature for d in stack]


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
    for suffix, language in _LANGUAGES.items():
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

    def situate(self, doc: Document, chunks: Sequence[Chunk]) -> ContextResult:
        language = _language(doc)
        prose = None if not language else language in _PROSE
        defs = outline(doc.text, prose)
        lines = doc.text.splitlines()
        header = self._header(doc, defs)
        line_starts = _line_offsets(doc.text)
        out: list[Situated] = []
        for chunk in chunks:
            parts = list(header)
            start = chunk.start if chunk.start >= 0 else doc.text.find(chunk.text)
            if start >= 0:
                first_line = _line_of(line_starts, start + _leading_blank(chunk.text))
                path = _enclosing(defs, lines, first_line)
                own = {d.signature for d in defs if d.line == first_line}
                path = [p for p in path if p not in own]
                if path:
                    parts.append("Inside: " + " > ".join(path[-3:]) + ".")
            out.append(Situated(chunk, " ".join(parts), "generated"))
        return ContextResult(out)

    def _header(self, doc: Document, defs: Sequence[_Definition]) -> list[str]:
        parts: list[str] = []
        title = doc.title or str(doc.metadata.get("path") or "")
        language = _language(doc)
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


# --- registry and the cache-aware driver ---------------------------------------------------------

_REGISTRY: dict[str, str | Callable[[ContextConfig], Contextualizer]] = {
    "none": lambda config: NoContext(),
    "structural": lambda config: StructuralContextualizer(),
    # Imported on demand so that the offline default never imports the anthropic SDK.
    "anthropic": "tasks.claude:from_config",
}


def known_contextualizers() -> list[str]:
    return sorted(_REGISTRY)


def get_contextualizer(config: ContextConfig) -> Contextualizer:
    """The contextualizer named by `config.name`; an InputError lists the known names."""
    entry = _REGISTRY.get(config.name)
    if entry is None:
        raise InputError(
            f"unknown context provider {config.name!r}: use one of {', '.join(known_contextualizers())}"
        )
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
    return entry(config)


def situate_document(
    contextualizer: Contextualizer, doc: Document, cache: ContextCache | None
) -> ContextResult:
    """Contexts for all chunks of `doc`: cached ones read, the rest generated and then cached."""
    identity = contextualizer.cache_identity()
    if identity is None or cache is None:
        return contextualizer.situate(doc, doc.chunks)
    keys = [_key(identity, doc, c) for c in doc.chunks]
    found: dict[int, Situated] = {}
    missing: list[Chunk] = []
    for chunk, key in zip(doc.chunks, keys, strict=True):
        hit = cache.get(key)
        if hit is None:
            missing.append(chunk)
        else:
            found[chunk.index] = Situated(chunk, hit, "cache")
    result = ContextResult([], Usage())
    if missing:
        result = contextualizer.situate(doc, missing)
        for s in result.situated:
            if s.source == "generated":
                cache.put(_key(identity, doc, s.chunk), s.context)
            found[s.chunk.index] = s
    result.usage.contexts_from_cache += sum(1 for s in found.values() if s.source == "cache")
    result.situated = [found[c.index] for c in doc.chunks if c.index in found]
    return result


def _key(identity: tuple[str, str, str], doc: Document, chunk: Chunk) -> str:
    provider, model, prompt_version = identity
    return context_key(provider=provider, model=model, prompt_version=prompt_version,
                       doc_hash=doc.hash, chunk_hash=chunk.hash)


@task(task_run_name="situate-{doc.id}", persist_result=False)
def situate_task(contextualizer: Contextualizer, doc: Document,
                 cache: ContextCache | None) -> ContextResult:
    """Prefect task over `situate_document`: one per document, mapped by the ingest flow."""
    return situate_document(contextualizer, doc, cache)


def situate_corpus_cached(
    contextualizer: Contextualizer, docs: Sequence[Document], cache: ContextCache | None
) -> list[ContextResult] | None:
    """Like `situate_document` over all `docs` at once, for providers that batch a whole corpus.

    Cached chunks are read; the missing ones go to `situate_corpus` in one call; what it generates
    is cached. None when the provider does not batch: the flow then maps `situate_document`.
    """
    if contextualizer.situate_corpus([]) is None:  # asks "do you batch?" without any work
        return None
    identity = contextualizer.cache_identity()
    found: list[dict[int, Situated]] = []
    items: list[tuple[Document, list[Chunk]]] = []
    for doc in docs:
        hits: dict[int, Situated] = {}
        if identity is not None and cache is not None:
            for chunk in doc.chunks:
                hit = cache.get(_key(identity, doc, chunk))
                if hit is not None:
                    hits[chunk.index] = Situated(chunk, hit, "cache")
        found.append(hits)
        items.append((doc, [c for c in doc.chunks if c.index not in hits]))
    todo = [n for n, (_, missing) in enumerate(items) if missing]
    generated = (contextualizer.situate_corpus([items[n] for n in todo]) or []) if todo else []
    results = [ContextResult([], Usage()) for _ in docs]
    for n, result in zip(todo, generated, strict=True):
        for s in result.situated:
            if s.source == "generated" and identity is not None and cache is not None:
                cache.put(_key(identity, docs[n], s.chunk), s.context)
            found[n][s.chunk.index] = s
        results[n] = result
    for doc, hits, result in zip(docs, found, results, strict=True):
        result.usage.contexts_from_cache += sum(1 for s in hits.values() if s.source == "cache")
        result.situated = [hits[c.index] for c in doc.chunks if c.index in hits]
    return results
