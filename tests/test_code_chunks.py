"""Syntax-aware chunking of source code (situate.tasks.corpus.code): where the cuts fall, what each
piece says it is inside, and the properties every chunking must keep (bounded pieces, exact
offsets, nothing lost) on hand-written samples of each language and on generated files."""

from __future__ import annotations

import random
import time

import pytest

from situate.core.errors import InputError
from situate.tasks.corpus import code as code_module
from situate.tasks.corpus.code import CodePiece, chunk_code, language_for


def chunk_or_fall_back(text: str, suffix: str, size: int, overlap: int) -> list[CodePiece] | None:
    """`chunk_code`, where None (the caller falls back to plain text) is allowed only for its
    one reason: a syntax tree more than MAX_ERROR_SHARE errors."""
    pieces = chunk_code(text, suffix, size, overlap)
    if pieces is None:
        from tree_sitter import Parser

        data = text.encode("utf-8", "surrogatepass")
        name = language_for(suffix)
        assert name is not None, suffix
        root = Parser(code_module._language(name)).parse(data).root_node
        share = code_module._error_share(root, len(data))
        assert root.has_error and share > code_module.MAX_ERROR_SHARE, (suffix, share)
    return pieces


def check_pieces(text: str, pieces: list[CodePiece], size: int) -> None:
    """The invariants of any chunking: each piece at most `size`, found at its offset, in order;
    together they cover every character but runs of blank text between them; cuts fall at line
    starts unless the line being cut (with its line break) is longer than `size`."""
    assert pieces or not text.strip()
    covered = 0
    previous_start = -1
    for p in pieces:
        assert 0 < len(p.text) <= size
        assert text[p.start:p.start + len(p.text)] == p.text
        assert p.start > previous_start
        assert not text[covered:p.start].strip(), f"text lost before {p.start}"
        end = p.start + len(p.text)
        assert end > covered, "a piece that adds nothing new"
        covered = end
        previous_start = p.start
        if end < len(text) and text[end - 1] != "\n":
            line_start = text.rfind("\n", 0, end) + 1
            line_end = text.find("\n", end)
            line_end = len(text) if line_end < 0 else line_end
            assert line_end + 1 - line_start > size, f"cut mid-line at {end} in a short line"
        assert 0 <= p.enclosing <= len(p.symbols)
    assert not text[covered:].strip(), "text lost at the end"


def starts_with_line(pieces: list[CodePiece], line: str) -> CodePiece:
    """The piece whose first non-blank line is `line` (stripped)."""
    for p in pieces:
        if p.text.strip().splitlines()[0].strip() == line:
            return p
    raise AssertionError(f"no piece starts with {line!r}: "
                         f"{[p.text.strip().splitlines()[0] for p in pieces]}")


def holding(pieces: list[CodePiece], line: str) -> list[CodePiece]:
    return [p for p in pieces if any(x.strip() == line for x in p.text.splitlines())]


PYTHON_CLASS = '''"""Runs targets."""

import os
import sys


class Executor:
    """Runs build targets one after another."""

    def __init__(self, jobs: int) -> None:
        """Remember how many jobs may run at once."""
        self.jobs = jobs
        self.done: list[str] = []

    # Targets are run in the order given; a failure stops the run.
    @staticmethod
    def plan(targets: list[str]) -> list[str]:
        """Order the targets so that dependencies come first."""
        ordered = sorted(targets, key=len)
        return [t for t in ordered if t]

    def run_target(self, target: str) -> bool:
        """Run one target and record it when it succeeds."""
        code = os.system(f"make {target}")
        if code == 0:
            self.done.append(target)
        return code == 0


def main() -> int:
    """Entry point: run every target named on the command line."""
    ex = Executor(jobs=4)
    return 0 if all(ex.run_target(t) for t in ex.plan(sys.argv[1:])) else 1
'''


def test_python_class_split_into_methods_with_docstrings_comments_and_decorators() -> None:
    size = 300
    pieces = chunk_code(PYTHON_CLASS, ".py", size, 0)
    assert pieces is not None
    check_pieces(PYTHON_CLASS, pieces, size)
    # The comment and the decorator above `plan` start its piece; the method is whole in it.
    plan = starts_with_line(pieces, "# Targets are run in the order given; a failure stops the run.")
    assert "@staticmethod\n    def plan(" in plan.text and "return [t for t in ordered if t]" in plan.text
    assert plan.path == ("class Executor",)
    assert plan.defines[0] == "def plan"
    run = starts_with_line(pieces, "def run_target(self, target: str) -> bool:")
    assert run.symbols == ("class Executor", "def run_target") and run.enclosing == 1
    assert run.text.rstrip().endswith("return code == 0")
    main = starts_with_line(pieces, "def main() -> int:")
    assert main.symbols == ("def main",) and main.enclosing == 0
    # The class line, its docstring and its first method stay together.
    head = holding(pieces, "class Executor:")[0]
    assert '"""Runs build targets one after another."""' in head.text
    assert head.defines == ("class Executor",)


def test_python_small_file_is_one_piece_listing_its_definitions() -> None:
    pieces = chunk_code(PYTHON_CLASS, ".py", 5000, 100)
    assert pieces == [CodePiece(0, PYTHON_CLASS, ("class Executor", "def main"), 0)]


def test_huge_function_split_at_statements_with_whole_line_overlap() -> None:
    body = "".join(f"    total_{i} = compute_value({i}, factor={i * 7})\n" for i in range(120))
    text = f"import math\n\n\ndef huge(factor):\n    \"\"\"Sum it all.\"\"\"\n{body}    return total_0\n"
    size, overlap = 400, 100
    pieces = chunk_code(text, ".py", size, overlap)
    assert pieces is not None
    check_pieces(text, pieces, size)
    assert len(pieces) >= len(text) // size
    statements = {line for line in text.splitlines() if line.startswith("    total_")}
    for p in pieces[1:]:
        first = p.text.splitlines()[0]
        assert first in statements or first.strip().startswith("return")
        assert p.path == ("def huge",)
    # Consecutive pieces inside the function share whole lines, at most `overlap` characters.
    for a, b in zip(pieces[1:], pieces[2:], strict=False):
        shared = a.start + len(a.text) - b.start
        assert 0 < shared <= overlap
        assert a.text.endswith(b.text[:shared]) and b.text[:shared].endswith("\n")


def test_overlap_across_definitions_repeats_whole_definitions() -> None:
    """At a cut between definitions the next piece starts with whole definitions (those that fit
    in `overlap`), never with a partial one; without overlap, pieces just follow each other."""
    text = "".join(f"def f{i}(x):\n    y = x + {i}\n    return y * {i}\n\n\n" for i in range(40))
    for overlap in (0, 60, 100):
        pieces = chunk_code(text, ".py", 200, overlap)
        assert pieces is not None
        check_pieces(text, pieces, 200)
        for a, b in zip(pieces, pieces[1:], strict=False):
            shared = a.start + len(a.text) - b.start
            assert b.text.startswith("def f")
            assert 0 <= shared <= overlap
            if overlap >= 60:
                assert shared > 0  # one whole definition (about 45 characters) fits


SAMPLES = {
    ".js": ("""import { readFile } from 'node:fs/promises'

/**
 * Parse a manifest file into an object.
 */
export async function parseManifest (path) {
  const raw = await readFile(path, 'utf8')
  return JSON.parse(raw)
}

const double = (x) => x * 2

class Registry extends Base {
  /** Look a package up by name. */
  lookup (name) {
    return this.packages.get(name)
  }

  static create () {
    return new Registry()
  }
}

Registry.prototype.legacy = function (a) { return a }
""", {"function parseManifest", "function double", "class Registry", "method create",
      "function Registry.prototype.legacy"}),
    ".ts": ("""export interface Options {
  retries: number
  timeout?: number
}

export type Handler = (req: Request) => Promise<Response>

enum Color { Red, Green }

export abstract class Service<T> {
  private cache = new Map<string, T>()

  abstract fetch(id: string): Promise<T>

  async get(id: string): Promise<T> {
    const hit = this.cache.get(id)
    if (hit) return hit
    const value = await this.fetch(id)
    this.cache.set(id, value)
    return value
  }
}

namespace Util {
  export function clamp(x: number, lo: number, hi: number): number {
    return Math.min(hi, Math.max(lo, x))
  }
}
""", {"interface Options", "type Handler", "enum Color", "class Service", "method get",
      "namespace Util"}),
    ".tsx": ("""import React from 'react'

type Props = { name: string }

export function Greeting({ name }: Props) {
  return <div className="greeting">Hello, {name}!</div>
}

export const Farewell = ({ name }: Props) => <p>Bye {name}</p>
""", {"type Props", "function Greeting", "function Farewell"}),
    ".go": ("""package server

import "net/http"

// Server answers requests.
type Server struct {
\tAddr string
}

// Serve starts listening on the address.
func (s *Server) Serve() error {
\treturn http.ListenAndServe(s.Addr, nil)
}

// New makes a server for addr.
func New(addr string) *Server {
\treturn &Server{Addr: addr}
}
""", {"type Server", "func Server.Serve", "func New"}),
    ".rs": ("""use std::fmt;

/// A point in the plane.
#[derive(Debug, Clone)]
pub struct Point {
    x: f64,
    y: f64,
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "({}, {})", self.x, self.y)
    }
}

impl Point {
    /// Distance to the origin.
    pub fn norm(&self) -> f64 {
        (self.x * self.x + self.y * self.y).sqrt()
    }
}

pub trait Shape {
    fn area(&self) -> f64;
}
""", {"struct Point", "impl fmt::Display for Point", "impl Point", "trait Shape"}),
    ".java": ("""package demo;

import java.util.List;

/** Keeps accounts. */
public class Ledger {
    private final List<String> entries;

    /** Makes an empty ledger. */
    public Ledger(List<String> entries) {
        this.entries = entries;
    }

    @Override
    public String toString() {
        return String.join(",", entries);
    }

    interface Visitor { void visit(String entry); }
}
""", {"class Ledger", "constructor Ledger", "method toString", "interface Visitor"}),
    ".c": ("""#include <stdio.h>

/* A counter of events. */
struct counter {
    int hits;
    int misses;
};

/* Record one hit. */
static void counter_hit(struct counter *c)
{
    c->hits++;
}

int *find(int *xs, int n, int x) {
    for (int i = 0; i < n; i++) {
        if (xs[i] == x) return &xs[i];
    }
    return NULL;
}
""", {"struct counter", "function counter_hit", "function find"}),
    ".cpp": ("""#include <string>

namespace shapes {

class Circle : public Shape {
 public:
  explicit Circle(double r) : r_(r) {}
  double area() const override { return 3.14159 * r_ * r_; }
 private:
  double r_;
};

double Circle::perimeter() const {
  return 2 * 3.14159 * r_;
}

template <typename T>
T twice(T x) { return x + x; }

}  // namespace shapes
""", {"namespace shapes", "function area", "function Circle::perimeter", "function twice"}),
}


@pytest.mark.parametrize("suffix", sorted(SAMPLES))
def test_languages_cut_between_definitions_and_name_them(suffix: str) -> None:
    text, expected = SAMPLES[suffix]
    size = 150
    pieces = chunk_code(text, suffix, size, 40)
    assert pieces is not None
    check_pieces(text, pieces, size)
    named = {s for p in pieces for s in p.symbols}
    assert expected <= named, expected - named
    # Whole file in one piece: its top-level definitions, nothing enclosing.
    whole = chunk_code(text, suffix, 10_000, 40)
    assert whole is not None and len(whole) == 1 and whole[0].enclosing == 0


def test_doc_comments_and_attributes_stay_with_their_definition() -> None:
    for suffix, comment, definition in [
        (".js", "/**", "export async function parseManifest (path) {"),
        (".go", "// Serve starts listening on the address.", "func (s *Server) Serve() error {"),
        (".rs", "/// A point in the plane.", "pub struct Point {"),
        (".java", "@Override", "public String toString() {"),
        (".c", "/* Record one hit. */", "static void counter_hit(struct counter *c)"),
    ]:
        text = SAMPLES[suffix][0]
        pieces = chunk_code(text, suffix, 150, 0)
        assert pieces is not None
        piece = holding(pieces, definition)[0]
        assert comment in piece.text, (suffix, piece.text)
        assert piece.text.index(comment) < piece.text.index(definition)


def test_rust_impl_methods_path() -> None:
    text = SAMPLES[".rs"][0].replace("impl Point {\n", "impl Point {\n" + "".join(
        f"    pub fn get_{i}(&self) -> f64 {{\n        self.x * {i}.0\n    }}\n\n" for i in range(8)))
    pieces = chunk_code(text, ".rs", 160, 0)
    assert pieces is not None
    check_pieces(text, pieces, 160)
    inner = [p for p in pieces if p.path == ("impl Point",)]
    assert inner and all(d.startswith("fn ") for p in inner for d in p.defines)


def test_non_ascii_offsets_are_character_offsets() -> None:
    text = ('"""Ünïcödé módule — 日本語 and emoji 🎉."""\n\n\n'
            + "".join(f'def función_{i}(x):\n    """Devuelve «{i}» — ☃ 🎉."""\n'
                      f'    return "ñ" * {i} + x\n\n\n' for i in range(30)))
    assert len(text.encode()) > len(text)
    pieces = chunk_code(text, ".py", 220, 50)
    assert pieces is not None
    check_pieces(text, pieces, 220)
    for i in range(30):
        p = holding(pieces, f"def función_{i}(x):")
        assert p and any(f"def función_{i}" in q.symbols for q in p)
    for p in pieces[1:]:
        assert p.text.startswith("def función_")


def test_syntax_error_still_chunks() -> None:
    """tree-sitter recovers around a local error: the file is cut as before, symbols and all."""
    for broken in (PYTHON_CLASS.replace("self.jobs = jobs", "self.jobs = = jobs"),
                   PYTHON_CLASS.replace("if code == 0:", "if code == 0"),
                   PYTHON_CLASS.replace("key=len)", "key=len) ) +")):
        pieces = chunk_code(broken, ".py", 300, 50)
        assert pieces is not None
        check_pieces(broken, pieces, 300)
        assert [p.symbols for p in pieces] == [p.symbols for p in chunk_code(PYTHON_CLASS, ".py",
                                                                             300, 50) or []]
    js = SAMPLES[".js"][0].replace("return", "return )(")
    pieces = chunk_code(js, ".js", 150, 0)
    assert pieces is not None and any("class Registry" in p.symbols for p in pieces)


def test_unrecoverable_parse_falls_back() -> None:
    """An unclosed bracket near the top turns a whole Python file into one ERROR node: None, so
    the caller cuts it as text."""
    broken = PYTHON_CLASS.replace("def plan(targets: list[str]) -> list[str]:",
                                  "def plan(targets: list[str] -> list[str]")
    assert chunk_code(broken, ".py", 300, 50) is None


def test_text_that_is_not_code_falls_back() -> None:
    prose = ("The committee met on Tuesday; it's agreed that (for now) nobody's budget changes. "
             "Members asked: why? Because 'it was late' & \"everyone left\"... \n") * 20
    assert chunk_code("}}}} ))) ]]] {{{\n" * 50, ".py", 200, 0) is None
    assert chunk_code(prose, ".rs", 200, 0) is None  # prose parsed as Rust is mostly errors


def test_unsupported_suffix_and_language_for() -> None:
    assert chunk_code("puts 'hi'\n", ".rb", 100, 0) is None
    assert chunk_code("hello\n", ".txt", 100, 0) is None
    assert chunk_code("x = 1\n", "", 100, 0) is None
    assert language_for(".py") == "python" and language_for("PY") == "python"
    assert language_for(".tsx") == "tsx" and language_for(".ts") == "typescript"
    assert language_for(".h") == "cpp" and language_for(".c") == "c"
    assert language_for(".md") is None
    assert chunk_code("   \n\n", ".py", 100, 0) == []
    with pytest.raises(InputError):
        chunk_code("x = 1\n", ".py", 0, 0)


def test_line_longer_than_size_is_cut_inside() -> None:
    text = "x = [" + ", ".join(str(i) for i in range(400)) + "]\n\ndef f():\n    return x\n"
    pieces = chunk_code(text, ".py", 120, 30)
    assert pieces is not None
    check_pieces(text, pieces, 120)
    assert pieces[-1].text.startswith("def f():")


# --- generated files: the invariants on many shapes ---------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta", "ēta", "theta", "日本", "κάππα"]


def _python_file(rng: random.Random) -> str:
    """A random Python-like file: imports, comments, classes with methods, decorated and nested
    functions, long statements and long lines, blank-line runs, now and then a syntax error."""
    out: list[str] = []

    def stmt(indent: str) -> str:
        kind = rng.random()
        w = rng.choice(WORDS)
        if kind < 0.1:
            return f"{indent}# {' '.join(rng.choices(WORDS, k=rng.randint(1, 12)))}\n"
        if kind < 0.15:
            return f"{indent}{w} = [" + ", ".join(str(rng.randint(0, 999)) for _ in range(
                rng.randint(1, 120))) + "]\n"
        if kind < 0.25:
            inner = "".join(stmt(indent + "    ") for _ in range(rng.randint(1, 6)))
            return f"{indent}for {w} in range({rng.randint(1, 9)}):\n{inner}"
        if kind < 0.3:
            return f'{indent}"""{" ".join(rng.choices(WORDS, k=rng.randint(1, 30)))}"""\n'
        if kind < 0.32:
            return f"{indent}{w} = (\n{indent}    1 +\n"  # unbalanced: a syntax error
        return f"{indent}{w} = call_{rng.randint(0, 99)}({w!r}, {rng.random():.3f})\n"

    def function(indent: str, depth: int) -> str:
        head = ""
        if rng.random() < 0.3:
            head += f"{indent}# about {rng.choice(WORDS)}\n"
        if rng.random() < 0.3:
            head += f"{indent}@decorator_{rng.randint(0, 9)}\n"
        body = "".join(stmt(indent + "    ") for _ in range(rng.randint(1, 25)))
        if depth < 2 and rng.random() < 0.2:
            body += function(indent + "    ", depth + 1)
        return f"{head}{indent}def f_{rng.randint(0, 10**6)}(a, b):\n{body}" + "\n" * rng.randint(0, 3)

    for _ in range(rng.randint(0, 4)):
        out.append(f"import {rng.choice(WORDS)}\n")
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.3:
            methods = "".join(function("    ", 1) for _ in range(rng.randint(1, 8)))
            out.append(f"\n\nclass C{rng.randint(0, 999)}:\n    \"\"\"A class.\"\"\"\n\n{methods}")
        elif r < 0.8:
            out.append("\n\n" + function("", 0))
        else:
            out.append(stmt("") + "\n" * rng.randint(0, 30))
    return "".join(out)


def _brace_file(rng: random.Random) -> str:
    """A random C-like file (also read as JavaScript and Go): functions with nested blocks."""
    out: list[str] = []

    def block(indent: str, depth: int) -> str:
        lines = []
        for _ in range(rng.randint(1, 10)):
            if depth < 3 and rng.random() < 0.2:
                lines.append(f"{indent}if (x > {rng.randint(0, 9)}) {{\n{block(indent + '  ', depth + 1)}"
                             f"{indent}}}\n")
            elif rng.random() < 0.1:
                lines.append(f"{indent}// {rng.choice(WORDS)} {rng.choice(WORDS)}\n")
            else:
                lines.append(f"{indent}x = x * {rng.randint(1, 99)} + {rng.choice(['1', '2'])};\n")
        return "".join(lines)

    for i in range(rng.randint(1, 15)):
        if rng.random() < 0.4:
            out.append(f"/* {rng.choice(WORDS)} */\n")
        out.append(f"int fn_{i}(int x) {{\n{block('  ', 0)}  return x;\n}}\n\n")
    return "".join(out)


@pytest.mark.parametrize("seed", range(40))
def test_generated_python_files_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    text = _python_file(rng)
    for size in (rng.randint(60, 200), rng.randint(200, 1200)):
        overlap = rng.choice([0, 20, 100, size // 2])
        pieces = chunk_or_fall_back(text, ".py", size, overlap)
        if pieces is not None:
            check_pieces(text, pieces, size)


def test_generated_python_files_are_mostly_cut_along_their_syntax() -> None:
    """The invariants above are checked on the files that `chunk_code` cuts: most must be."""
    cut = sum(chunk_code(_python_file(random.Random(seed)), ".py", 400, 50) is not None
              for seed in range(40))
    assert cut >= 30, cut


@pytest.mark.parametrize("seed", range(15))
@pytest.mark.parametrize("suffix", [".c", ".js", ".java", ".rs"])
def test_generated_brace_files_keep_the_invariants(seed: int, suffix: str) -> None:
    rng = random.Random(seed * 7 + len(suffix))
    text = _brace_file(rng)
    size = rng.randint(80, 900)
    pieces = chunk_or_fall_back(text, suffix, size, rng.choice([0, 50, 100]))
    if pieces is not None:
        check_pieces(text, pieces, size)
    if suffix == ".c":
        assert pieces is not None
        for p in pieces:  # in C every piece past the first starts a function or a statement
            assert p.text.lstrip()[:1] in {"i", "x", "/", "r", "}"}


@pytest.mark.slow  # two kinds of file at 0.5 and 2 MB, best of three: about 15 s
def test_linear_on_a_two_megabyte_generated_file() -> None:
    """Four times the text takes about four times as long (a quadratic step: sixteen times). A
    ratio of two timings taken here, each the best of three, so a loaded machine cannot decide."""

    def functions(n: int) -> str:
        return "".join(f"def function_{i}(a, b=1):\n    '''Doc ü {i}.'''\n    return a + b * {i}"
                       "\n\n\n" for i in range(n))

    def flat(n: int) -> str:
        return "DATA = {\n" + "".join(f'    "key_{i}": [{i}, "välue"],\n' for i in range(n)) + "}\n"

    def best(text: str) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            pieces = chunk_code(text, ".py", 800, 100)
            times.append(time.perf_counter() - started)
            assert pieces is not None and len(pieces) > len(text) // 1000
        return min(times)

    for make, n in ((functions, 27_000), (flat, 75_000)):
        small, large = make(n // 4), make(n)
        assert len(large) > 2_000_000
        ratio = best(large) / best(small)
        assert ratio < 8, ratio
