"""Chunking source code along its syntax tree (tree-sitter), with the definitions each piece is in.

`chunk_code` cuts a source file into pieces of at most `size` characters where the code's own
structure says a cut is clean: between top-level definitions first, then between a class's
members, then between a function's statements, and so on down the tree; a piece never ends in the
middle of a line unless one line alone is longer than `size`. Small neighbours are packed together
up to `size` (with the imports and comments between them); a comment or attribute block directly
above a definition or statement stays with it. Each piece knows the definitions it sits in and the
ones it holds (`CodePiece.symbols`), which the structural context turns into "Inside: ...".

The packer is `chunk_text`'s greedy fill (situate.tasks.corpus.chunking) over the tree's cut
points: the strongest cut between a third of `size` and `size` wins (the latest of equals, so small
definitions are packed), a shallower cut always outranking a deeper one. Consecutive pieces share
up to `overlap` characters: whole trailing units (a short method, a statement) as the next piece's
start, whole lines inside a body cut in two. Measured on held-out code (benchmarks/CODE_RESULTS.md):
a first version that cut early at strong boundaries (leaving small pieces) and did not overlap
across definitions lost to `chunk_text` where a small definition ended a piece or a long one's
header was left alone. `chunk_text` stays the fallback: `chunk_code` returns None for a language
without a grammar here and for a file the grammar mostly cannot parse.

Linear in the file's size: only the nodes larger than `size` are opened (their children are the
cut points); everything smaller is kept whole or packed, so a 2 MB generated file costs one
tree-sitter parse plus a walk over its top-level statements.
"""

from __future__ import annotations

import bisect
import importlib
import re
import threading
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

from situate.tasks.corpus.filetypes import GRAMMARS

if TYPE_CHECKING:
    from tree_sitter import Language, Node

# language -> (grammar module, function returning the language pointer)
_GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}
# Lines that belong to the definition or statement right below them (no blank line between).
# Annotations and decorators on lines of their own count too (Rust's `#[...]`, Java's `@Override`).
_COMMENT_MARKERS: dict[str, tuple[bytes, ...]] = {
    "python": (b"#", b"@"),
    "rust": (b"//", b"/*", b"*", b"#["),
    "c": (b"//", b"/*", b"*"), "cpp": (b"//", b"/*", b"*"), "go": (b"//", b"/*", b"*"),
}
_C_COMMENTS = (b"//", b"/*", b"*", b"@")
# A parse whose top-level ERROR nodes cover more than this share of the file is not trusted.
MAX_ERROR_SHARE = 0.5

# Definitions: node type -> the word the label starts with ("class Executor", "fn run").
_KINDS: dict[str, str] = {
    # Python
    "function_definition": "def", "class_definition": "class",
    # JavaScript / TypeScript
    "function_declaration": "function", "generator_function_declaration": "function",
    "class_declaration": "class", "abstract_class_declaration": "class", "method_definition": "method",
    "method_signature": "method", "abstract_method_signature": "method",
    "function_signature": "function", "interface_declaration": "interface",
    "type_alias_declaration": "type", "enum_declaration": "enum", "internal_module": "namespace",
    "module": "module",
    # Go
    "method_declaration": "func", "type_spec": "type", "type_alias": "type",
    # Rust
    "function_item": "fn", "function_signature_item": "fn", "struct_item": "struct",
    "enum_item": "enum", "union_item": "union", "trait_item": "trait", "impl_item": "impl",
    "mod_item": "mod", "macro_definition": "macro_rules!",
    # Java
    "record_declaration": "record", "annotation_type_declaration": "@interface",
    "constructor_declaration": "constructor", "compact_constructor_declaration": "constructor",
    # C / C++
    "struct_specifier": "struct", "union_specifier": "union", "enum_specifier": "enum",
    "class_specifier": "class", "namespace_definition": "namespace",
}
# The same node type means different things in different grammars.
_KIND_BY_LANGUAGE: dict[tuple[str, str], str] = {
    ("go", "function_declaration"): "func",
    ("java", "method_declaration"): "method",
    ("c", "function_definition"): "function", ("cpp", "function_definition"): "function",
}
_SPECIFIERS = frozenset({"struct_specifier", "union_specifier", "enum_specifier", "class_specifier"})
_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function",
                              "generator_function"})
# Nodes that only hold a definition (a decorator list, `export`, `template <...>`, a typedef).
_WRAPPERS = frozenset({"decorated_definition", "export_statement", "ambient_declaration",
                       "template_declaration", "type_definition", "declaration", "type_declaration",
                       "expression_statement"})
# A definition's or statement's body: its children are one level down, not two.
_BODIES = frozenset({"block", "class_body", "declaration_list", "statement_block",
                     "field_declaration_list", "compound_statement", "interface_body", "enum_body",
                     "statement_list", "constructor_body", "enum_variant_list", "object_type"})

_MAX_LABEL = 80
_WHITESPACE = re.compile(rb"[ \t\r\f\v]*")


@dataclass(frozen=True)
class CodePiece:
    """A piece of a source file.

    `start` is the character offset of `text` in the file. `symbols` names definitions as
    "<kind> <name>" labels ("class Executor", "def run_target", "impl Display for Point",
    "func Server.Serve", "method render"): first the definitions the piece's first character is
    inside (outermost first), then the definitions that begin in the piece (only the outermost of
    them: a class that begins here is listed, its methods are not). `enclosing` says how many of
    `symbols` are the first kind, so `symbols[:enclosing]` is the piece's place ("Inside: class
    Executor > def run_target") and `symbols[enclosing:]` what it defines.
    """

    start: int
    text: str
    symbols: tuple[str, ...] = ()
    enclosing: int = 0

    @property
    def path(self) -> tuple[str, ...]:
        return self.symbols[: self.enclosing]

    @property
    def defines(self) -> tuple[str, ...]:
        return self.symbols[self.enclosing:]


def language_for(suffix: str) -> str | None:
    """The grammar for a file suffix (".py", "rs", ".TSX"), or None when there is none here."""
    s = suffix.strip().lower()
    if s and not s.startswith("."):
        s = "." + s
    return GRAMMARS.get(s)


_LANGUAGES: dict[str, Language] = {}
_LOCK = threading.Lock()


def _language(name: str) -> Language:
    """The tree-sitter Language of a grammar, imported on first use and kept (a Language is
    immutable and shared; parsers are not, so each call makes its own)."""
    with _LOCK:
        lang = _LANGUAGES.get(name)
        if lang is None:
            from tree_sitter import Language

            module, function = _GRAMMARS[name]
            lang = Language(getattr(importlib.import_module(module), function)())
            _LANGUAGES[name] = lang
        return lang


def chunk_code(text: str, suffix: str, size: int, overlap: int = 0) -> list[CodePiece] | None:
    """Cut source `text` (of a file with `suffix`) into pieces of at most `size` characters along
    its syntax, or None when there is no grammar for `suffix` or the parse is mostly errors (the
    caller then uses `chunk_text`).

    The pieces are in order and cover the text: every character is in a piece, except runs of
    whitespace longer than `size` with no code in them. Consecutive pieces share up to `overlap`
    characters: at a cut between definitions (or statements) the next piece starts with the whole
    units just before the cut that fit in `overlap` (a one-line method ending a piece is also at
    the head of the next); inside a body with no such unit, whole lines, as `chunk_text` does.
    """
    from situate.core.errors import InputError

    if size <= 0:
        raise InputError(f"chunk size must be positive, got {size}")
    name = language_for(suffix)
    if name is None:
        return None
    if not text.strip():
        return []
    from tree_sitter import Parser

    data = text.encode("utf-8", "surrogatepass")
    tree = Parser(_language(name)).parse(data)
    root = tree.root_node
    if root.has_error and _error_share(root, len(data)) > MAX_ERROR_SHARE:
        return None
    return _Chunker(name, text, data, root, size, max(0, min(overlap, size // 2))).run()


def _error_share(root: Node, total: int) -> float:
    if root.type == "ERROR":
        return 1.0
    bad = sum(c.end_byte - c.start_byte for c in root.children if c.type == "ERROR" or c.is_missing)
    return bad / max(total, 1)


@dataclass
class _Def:
    start: int  # bytes, of the definition with its decorators / export / template prefix
    end: int
    label: str
    parent: int  # index of the enclosing recorded definition, -1 at top level


class _Chunker:
    """One file's chunking: the cut points from the tree, then the greedy packing."""

    def __init__(self, language: str, text: str, data: bytes, root: Node, size: int,
                 overlap: int) -> None:
        self.language = language
        self.text = text
        self.data = data
        self.root = root
        self.size = size
        self.overlap = overlap
        self.markers = _COMMENT_MARKERS.get(language, _C_COMMENTS)
        # Rows are what tree-sitter counts: lines ended by "\n" only.
        char_lengths = [len(line) + 1 for line in text.split("\n")]
        self.line_char = [0, *accumulate(char_lengths)][:-1]
        if len(data) == len(text):
            self.line_byte = self.line_char
        else:
            byte_lengths = [len(line) + 1 for line in data.split(b"\n")]
            self.line_byte = [0, *accumulate(byte_lengths)][:-1]
        # cut row -> (strength, overlapped); rows after which a cut would split a comment from
        # what it describes
        self.cuts: dict[int, tuple[int, bool]] = {}
        self.glued: set[int] = set()
        self.defs: list[_Def] = []
        self.def_starts: list[int] = []
        self.indents: dict[int, int] = {}
        self._cursor = (0, 0)  # a (character, byte) offset pair, for converting near it

    # --- cut points ------------------------------------------------------------------------------

    def _line_end(self, row: int) -> int:
        """The byte offset of `row`'s line break (or of the end of the text)."""
        return self.line_byte[row + 1] - 1 if row + 1 < len(self.line_byte) else len(self.data)

    def _indent(self, row: int) -> int:
        """Bytes of whitespace that start `row` (each row measured once, without copying it)."""
        indent = self.indents.get(row)
        if indent is None:
            start = self.line_byte[row]
            m = _WHITESPACE.match(self.data, start)  # always matches, perhaps nothing
            indent = self.indents[row] = (m.end() if m else start) - start
        return indent

    def _blank(self, row: int) -> bool:
        return self.line_byte[row] + self._indent(row) >= self._line_end(row)

    def _first_on_line(self, node: Node) -> bool:
        row = node.start_point.row
        return node.start_byte == self.line_byte[row] + self._indent(row)

    def _attached_start(self, row: int) -> int:
        """The first row of the comment/attribute lines directly above `row` (no blank line
        between) at the same indentation, which belong with it; `row` when there are none."""
        indent = self._indent(row)
        best = row
        k = row - 1
        while k >= 0 and not self._blank(k):
            ind = self._indent(k)
            if ind < indent or not self.data.startswith(self.markers, self.line_byte[k] + ind):
                break
            if ind == indent:
                best = k
            k -= 1
        return best

    def _blank_before(self, row: int) -> bool:
        return row > 0 and self._blank(row - 1)

    def _add_cut(self, row: int, level: int, overlapped: bool) -> None:
        if row <= 0:
            return
        top = self._attached_start(row)
        self.glued.update(range(top + 1, row + 1))
        if top <= 0:
            return
        strength = 10_000 - 2 * level - (0 if self._blank_before(top) else 1)
        old = self.cuts.get(top)
        if old is None or strength > old[0]:
            self.cuts[top] = (strength, overlapped)

    def outline(self) -> None:
        """Cut points at the children of the root and of every node larger than `size`, and the
        definitions among them (with their nesting), walking nothing smaller."""
        # (node, its nearest definition, its depth (nodes opened above it, bodies and wrapped
        # definitions not counted: a cut at a shallower depth always outranks a deeper one), the
        # definition a wrapper holds,
        # whether node is a body whose first statement is still to come)
        stack: list[tuple[Node, int, int, Node | None, bool]] = [(self.root, -1, 0, None, False)]
        while stack:
            node, parent_def, depth, inner, pending = stack.pop()
            nesting = self._def_depth(parent_def)
            previous_def = False
            own_row = node.start_point.row
            is_root = node == self.root
            for child in node.named_children:
                big = child.end_byte - child.start_byte > self.size
                if inner is not None:
                    # A wrapper's parts (decorators, `export`, `template <...>`) stay with the
                    # definition it holds, which the wrapper stands for (recorded and cut at).
                    if child == inner:
                        stack.append((child, parent_def, depth, None, False))
                    continue
                is_comment = "comment" in child.type
                label = None if is_comment else self._label(child)
                row = child.start_point.row
                body = not is_root and self._is_body(node, child)
                if pending:
                    # A body's first statement (and the comments before it) stays with the header.
                    pending = is_comment
                elif row != own_row and not body and self._first_on_line(child):
                    adjacent = label is not None or previous_def
                    level = 2 * depth + (0 if adjacent else 1)
                    self._add_cut(row, level, overlapped=nesting > 0 and not adjacent)
                if not is_comment:
                    previous_def = label is not None
                own = parent_def
                if label is not None:
                    self.defs.append(_Def(child.start_byte, child.end_byte, label, parent_def))
                    own = len(self.defs) - 1
                if body and not is_root:
                    # opened with its header: the body's statements are the header's own parts
                    stack.append((child, parent_def, depth, None, True))
                elif big:
                    if label is not None:
                        stack.append((child, own, depth + 1, self._inner(child), False))
                    else:
                        stack.append((child, parent_def, depth + 1, None, False))
        # The stack walks out of document order: sort (enclosing first at equal starts), re-point.
        order = sorted(range(len(self.defs)), key=lambda i: (self.defs[i].start, -self.defs[i].end))
        new_index = {old: new for new, old in enumerate(order)}
        self.defs = [_Def(d.start, d.end, d.label, new_index.get(d.parent, -1))
                     for d in (self.defs[i] for i in order)]
        self.def_starts = [d.start for d in self.defs]

    @staticmethod
    def _is_body(node: Node, child: Node) -> bool:
        """Whether `child` is the body of `node` (a definition's, a loop's, a branch's): never cut
        from the header above it."""
        if child.type in _BODIES:
            return True
        return any(node.child_by_field_name(f) == child for f in ("body", "consequence"))

    def _def_depth(self, index: int) -> int:
        n = 0
        while index >= 0:
            n += 1
            index = self.defs[index].parent
        return n

    # --- labels ----------------------------------------------------------------------------------

    def _text(self, node: Node | None) -> str:
        if node is None:
            return ""
        raw = self.data[node.start_byte:node.end_byte].decode("utf-8", "replace")
        name = " ".join(raw.split())
        return name if len(name) <= _MAX_LABEL else name[: _MAX_LABEL - 3] + "..."

    def _inner(self, node: Node) -> Node | None:
        """The definition a wrapper node holds (a decorated function, an exported class, a
        template's function, a typedef's struct), or None."""
        t = node.type
        if t not in _WRAPPERS:
            return None
        if t == "decorated_definition":
            return node.child_by_field_name("definition")
        if t == "export_statement":
            inner = node.child_by_field_name("declaration") or node.child_by_field_name("value")
            return inner if inner is not None and self._label(inner) is not None else None
        if t in ("type_definition", "declaration"):
            inner = node.child_by_field_name("type")
            if inner is not None and inner.type in _SPECIFIERS and \
                    inner.child_by_field_name("body") is not None:
                return inner
            return None
        if t == "expression_statement":  # TypeScript's `namespace N { ... }`
            first = node.named_children[0] if node.named_child_count else None
            return first if first is not None and first.type == "internal_module" else None
        if t == "type_declaration":
            specs = [c for c in node.named_children if c.type == "type_spec"]
            return specs[0] if len(specs) == 1 else None
        for c in node.named_children:  # ambient_declaration, template_declaration
            if "comment" not in c.type and self._label(c) is not None:
                return c
        return None

    def _label(self, node: Node) -> str | None:
        """"<kind> <name>" when `node` is a definition (or only wraps one), else None."""
        t = node.type
        if t in _WRAPPERS and t != "expression_statement":
            inner = self._inner(node)
            return self._label(inner) if inner is not None else None
        if t in ("lexical_declaration", "variable_declaration"):
            declarators = [c for c in node.named_children if c.type == "variable_declarator"]
            if len(declarators) == 1:
                value = declarators[0].child_by_field_name("value")
                if value is not None and value.type in _FUNCTION_VALUES:
                    return f"function {self._text(declarators[0].child_by_field_name('name'))}"
                if value is not None and value.type == "class":
                    return f"class {self._text(declarators[0].child_by_field_name('name'))}"
            return None
        if t == "expression_statement" and self.language in ("javascript", "typescript", "tsx"):
            expr = node.named_children[0] if node.named_child_count else None
            if expr is not None and expr.type == "internal_module":
                return self._label(expr)
            if expr is not None and expr.type == "assignment_expression":
                right = expr.child_by_field_name("right")
                if right is not None and right.type == "class":
                    named = right.child_by_field_name("name") or expr.child_by_field_name("left")
                    return f"class {self._text(named)}"
                if right is not None and right.type in _FUNCTION_VALUES:
                    return f"function {self._text(expr.child_by_field_name('left'))}"
            return None
        if t in ("field_definition", "public_field_definition", "pair"):
            value = node.child_by_field_name("value")
            if value is None or value.type not in _FUNCTION_VALUES:
                return None
            key = (node.child_by_field_name("property") or node.child_by_field_name("name")
                   or node.child_by_field_name("key"))
            return f"method {self._text(key)}"
        kind = _KIND_BY_LANGUAGE.get((self.language, t)) or _KINDS.get(t)
        if kind is None:
            return None
        if t in _SPECIFIERS and node.child_by_field_name("body") is None:
            return None  # `struct S *p;`: a use of the type, not its definition
        if t == "function_declaration" and self.language == "go":
            return f"func {self._text(node.child_by_field_name('name'))}"
        if t == "method_declaration" and self.language == "go":
            receiver = node.child_by_field_name("receiver")
            types = [c.child_by_field_name("type") for c in (receiver.named_children if receiver
                                                             else [])]
            owner = self._text(types[0]).lstrip("*").split("[")[0] if types and types[0] else ""
            name = self._text(node.child_by_field_name("name"))
            return f"func {owner}.{name}" if owner else f"func {name}"
        if t == "impl_item":
            trait = node.child_by_field_name("trait")
            target = self._text(node.child_by_field_name("type"))
            return f"impl {self._text(trait)} for {target}" if trait is not None else f"impl {target}"
        if t == "function_definition" and self.language in ("c", "cpp"):
            return f"function {self._declared_name(node)}".rstrip()
        name = self._text(node.child_by_field_name("name"))
        return f"{kind} {name}" if name else kind

    def _declared_name(self, node: Node) -> str:
        """A C/C++ function's name: the innermost `declarator` (through pointers, references)."""
        d = node.child_by_field_name("declarator")
        for _ in range(16):
            if d is None:
                return ""
            inner = d.child_by_field_name("declarator")
            if inner is None:
                if d.type == "reference_declarator" and d.named_child_count:
                    inner = d.named_children[-1]
                else:
                    return self._text(d)
            d = inner
        return self._text(d)

    # --- packing ---------------------------------------------------------------------------------

    def _char_of_row(self, row: int) -> int:
        return self.line_char[row]

    def _byte_of(self, char: int) -> int:
        """The byte offset of a character offset. Pieces go forward through the text (back by at
        most an overlap), so each conversion encodes only the text since the previous one."""
        if self.line_byte is self.line_char:
            return char
        row = bisect.bisect_right(self.line_char, char) - 1
        c, b = self._cursor
        if not self.line_char[row] <= c <= char:
            c, b = self.line_char[row], self.line_byte[row]
        b += len(self.text[c:char].encode("utf-8", "surrogatepass"))
        self._cursor = (char, b)
        return b

    def run(self) -> list[CodePiece]:
        self.outline()
        text, size, n = self.text, self.size, len(self.text)
        rows = sorted(r for r in self.cuts if r not in self.glued)
        offsets = [self.line_char[r] for r in rows]
        strengths = [self.cuts[r][0] for r in rows]
        overlapped = [self.cuts[r][1] for r in rows]
        pieces: list[CodePiece] = []
        s = done = 0  # `done`: where the last piece ended; the next must end past it
        while s < n:
            limit = s + size
            overlap_next, cut_strength = True, 0
            if limit >= n:
                end = n
            else:
                hi = bisect.bisect_right(offsets, limit) - 1
                best = self._best(strengths, bisect.bisect_right(offsets, max(s + size // 3, done)),
                                  hi)
                if best < 0:
                    best = self._best(strengths, bisect.bisect_right(offsets, max(s, done)), hi)
                if best >= 0:
                    end, overlap_next, cut_strength = offsets[best], overlapped[best], strengths[best]
                elif s < done:
                    s = done  # the overlap left no room to get past the last cut: none here
                    continue
                else:
                    end = self._fallback_cut(s, limit)
            piece = text[s:end]
            if piece.strip():
                pieces.append(self._piece(s, end, piece))
            if end >= n:
                break
            done = nxt = end
            if self.overlap:
                # The next piece repeats the last whole units before the cut that fit in `overlap`
                # (a short method, a statement): cut points as strong as this cut, less the
                # blank-line point. Inside a body, or when the cut was a fallback, whole lines.
                j = bisect.bisect_left(offsets, end - self.overlap)
                while j < len(offsets) and offsets[j] < end and strengths[j] < cut_strength - 1:
                    j += 1
                if j < len(offsets) and s < offsets[j] < end:
                    nxt = offsets[j]
                elif overlap_next:
                    i = bisect.bisect_left(self.line_char, end - self.overlap)
                    if i < len(self.line_char) and s < self.line_char[i] < end:
                        nxt = self.line_char[i]
            s = nxt
        return pieces

    @staticmethod
    def _best(strengths: list[int], lo: int, hi: int) -> int:
        """The strongest cut among candidates lo..hi, the latest of equals; -1 when none."""
        best, best_s = -1, -1
        for i in range(lo, hi + 1):
            if strengths[i] >= best_s:
                best, best_s = i, strengths[i]
        return best

    def _fallback_cut(self, s: int, limit: int) -> int:
        """No cut point of the tree fits: the last line start (after a blank line if there is
        one past a third of the piece), else a space, else `limit` (one line longer than size)."""
        lo = bisect.bisect_right(self.line_char, s)
        hi = bisect.bisect_right(self.line_char, limit) - 1
        floor = s + self.size // 3
        for i in range(hi, lo - 1, -1):
            if self.line_char[i] <= floor:
                break
            if self._blank_before(i):
                return self.line_char[i]
        if hi >= lo:
            return self.line_char[hi]
        space = self.text.rfind(" ", floor, limit)
        return space + 1 if space > s else limit

    def _piece(self, s: int, end: int, piece: str) -> CodePiece:
        lead = len(piece) - len(piece.lstrip())
        first = self._byte_of(s + lead)
        stop = self._byte_of(end)
        starts = self.def_starts
        # Innermost recorded definition open at `first`: walk up from the last one begun before.
        path: list[str] = []
        i = bisect.bisect_left(starts, first) - 1
        while i >= 0 and self.defs[i].end <= first:
            i = self.defs[i].parent
        while i >= 0:
            path.append(self.defs[i].label)
            i = self.defs[i].parent
        path.reverse()
        defined: list[str] = []
        begin = bisect.bisect_left(starts, first)
        for j in range(begin, bisect.bisect_left(starts, stop)):
            d = self.defs[j]
            if d.parent < 0 or self.defs[d.parent].start < first:
                defined.append(d.label)
        return CodePiece(s, piece, (*path, *defined), len(path))
