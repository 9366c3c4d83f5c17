"""The one table of the text file types situate knows: what each suffix holds (prose, data or
code), the language a chunk's context names, and the grammar that cuts it along its syntax.

Documents (PDF, Office, EPUB, HTML, Markdown, notebooks, ...) are claimed by their readers
(situate.tasks.corpus.readers, each declaring its suffixes); a suffix can be both, as Markdown is:
text by its type here, read by its structure there. Every other set of suffixes (what a directory
walk reads, what is prose, what is code) is derived from this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class FileType:
    """`kind`: "prose" (read as text, `#` lines may be headings), "data" (configuration, tables)
    or "code". `language`: the name a chunk's context gives it ("" for none). `grammar`: the
    tree-sitter grammar that cuts it (situate.tasks.corpus.code), "" for none. `walked`: whether a
    directory's walk reads such files (a few suffixes only have a grammar)."""

    kind: Literal["prose", "data", "code"]
    language: str = ""
    grammar: str = ""
    walked: bool = True


def _code(language: str = "", grammar: str = "", walked: bool = True) -> FileType:
    return FileType("code", language, grammar, walked)


FILE_TYPES: dict[str, FileType] = {
    # prose
    ".txt": FileType("prose", "text"), ".md": FileType("prose", "Markdown"),
    ".markdown": FileType("prose"), ".rst": FileType("prose", "reStructuredText"),
    ".adoc": FileType("prose"), ".org": FileType("prose"), ".tex": FileType("prose"),
    # data
    ".csv": FileType("data"), ".tsv": FileType("data"), ".json": FileType("data"),
    ".yaml": FileType("data"), ".yml": FileType("data"), ".toml": FileType("data"),
    ".ini": FileType("data"), ".cfg": FileType("data"), ".xml": FileType("data"),
    # code
    ".css": _code(),
    ".py": _code("Python", "python"), ".pyi": _code("", "python"),
    ".pyw": _code("", "python", walked=False),
    ".rs": _code("Rust", "rust"), ".go": _code("Go", "go"),
    ".js": _code("JavaScript", "javascript"), ".mjs": _code("", "javascript"),
    ".cjs": _code("", "javascript"), ".jsx": _code("JavaScript", "javascript"),
    ".ts": _code("TypeScript", "typescript"), ".tsx": _code("TypeScript", "tsx"),
    ".mts": _code("", "typescript", walked=False), ".cts": _code("", "typescript", walked=False),
    ".java": _code("Java", "java"), ".kt": _code("Kotlin"), ".kts": _code(),
    ".scala": _code("Scala"),
    # `.h` is parsed as C++: the C++ grammar reads C headers, the C grammar fails on C++ classes.
    ".c": _code("C", "c"), ".h": _code("C", "cpp"), ".cc": _code("C++", "cpp"),
    ".cpp": _code("C++", "cpp"), ".cxx": _code("", "cpp"), ".hpp": _code("C++", "cpp"),
    ".hh": _code("", "cpp"), ".c++": _code("", "cpp", walked=False),
    ".hxx": _code("", "cpp", walked=False), ".h++": _code("", "cpp", walked=False),
    ".ipp": _code("", "cpp", walked=False), ".inl": _code("", "cpp", walked=False),
    ".cs": _code("C#"), ".rb": _code("Ruby"), ".php": _code("PHP"), ".swift": _code("Swift"),
    ".m": _code(), ".mm": _code(), ".sh": _code("shell"), ".bash": _code(), ".zsh": _code(),
    ".sql": _code("SQL"), ".lua": _code("Lua"), ".pl": _code(), ".pm": _code(), ".r": _code(),
    ".jl": _code(), ".ex": _code("Elixir"), ".exs": _code(), ".erl": _code(), ".hs": _code(),
    ".ml": _code(), ".clj": _code(), ".dart": _code(), ".vue": _code(), ".svelte": _code(),
    ".proto": _code(), ".graphql": _code(), ".gradle": _code(), ".cmake": _code(),
    ".dockerfile": _code(), ".tf": _code(),
}

# What a directory's walk reads as text (documents aside), and which of it is prose.
TEXT_SUFFIXES = frozenset(s for s, t in FILE_TYPES.items() if t.walked)
PROSE_SUFFIXES = frozenset(s for s, t in FILE_TYPES.items() if t.kind == "prose")
CODE_SUFFIXES = frozenset(s for s, t in FILE_TYPES.items() if t.kind == "code" and t.walked)
# suffix -> the language a chunk's context names
LANGUAGES = {s: t.language for s, t in FILE_TYPES.items() if t.language}
# suffix -> tree-sitter grammar
GRAMMARS = {s: t.grammar for s, t in FILE_TYPES.items() if t.grammar}


def file_type(suffix: str) -> FileType | None:
    """The type of a suffix (".py", "PY"), or None for one not in the table."""
    s = suffix.strip().lower()
    if s and not s.startswith("."):
        s = "." + s
    return FILE_TYPES.get(s)
