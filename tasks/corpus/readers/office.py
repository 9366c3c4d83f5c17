"""DOCX, PPTX and XLSX: the Office Open XML packages, read as sections that know their place.

Every file first goes through `zipguard` (the libraries open the zip themselves and would inflate
a bomb) and through a look at `[Content_Types].xml`, so that a spreadsheet saved under a `.docx`
name is "not a DOCX" rather than a library's KeyError. Any exception a library raises, when opening
or midway through the lazy sections, becomes `Unreadable("corrupt DOCX", ...)`.

- DOCX (python-docx): the body in document order, paragraphs and tables interleaved, content
  controls and tracked insertions included, deletions left out; footnotes and endnotes at the end
  under a "Footnotes"/"Endnotes" heading, marked "[n]" where they are referenced; page headers
  and footers left out (the same lines on every page). Headings (Heading 1-9, Title, or any style
  with an outline level) give the `heading_path` of what follows; a paragraph in a quote's style
  reads "> " before each line, as Markdown writes it. No pages: Word lays pages out
  when it renders, the file has none.
- PPTX (python-pptx): slide by slide, the title first, then the text frames and tables in reading
  order (top to bottom, then left to right), groups opened, then the speaker notes.
- XLSX (openpyxl, read-only and streaming): sheet by sheet, rows as "a | b | c" in blocks of up
  to 50 rows, each block after the first starting with the sheet's header row again.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from situate.tasks.corpus.readers.base import FileReader, Limits, Place, Reading, Section, Unreadable
from situate.tasks.corpus.readers.zipguard import open_zip, read_member

# The main part's content type tells the three formats apart (and their macro/template variants).
_MAIN_TYPES = {
    "DOCX": re.compile(r"(wordprocessingml|ms-word)\.[A-Za-z.]*main\+xml"),
    "PPTX": re.compile(r"(presentationml|ms-powerpoint)\.[A-Za-z.]*main\+xml"),
    "XLSX": re.compile(r"(spreadsheetml|ms-excel)\.[A-Za-z.]*main\+xml"),
}
_WHAT = {"DOCX": "a Word document", "PPTX": "a PowerPoint presentation", "XLSX": "an Excel workbook"}

XLSX_BLOCK_ROWS = 50
# A block also ends past this many characters, so that at the default chunk size (800) most chunks
# of a sheet start with a block, hence with the header row repeated at its top.
XLSX_BLOCK_CHARS = 700


def _opened(opener: Callable[[Path], Reading]) -> Callable[[Path, str, Limits], Reading]:
    """A format's reader: the package checked to be that format, then opened by `opener`, a
    library's exception on a damaged package an `Unreadable`."""

    def read_package(path: Path, fmt: str, limits: Limits) -> Reading:
        label = fmt.upper()
        _check_package(Path(path), label, limits.max_bytes)
        try:
            return opener(Path(path))
        except Unreadable:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the library raises on a damaged package
            raise _failure(label, e) from None

    return read_package


def _failure(label: str, e: BaseException) -> Unreadable:
    """What a library's exception on a package means: XML entity declarations refused (openpyxl
    parses through defusedxml, which refuses them: a few kilobytes of entities can expand to
    gigabytes), else a damaged package."""
    from defusedxml import DefusedXmlException

    seen: BaseException | None = e
    for _ in range(8):  # the library's exception, the one it was raised from, ...
        if seen is None:
            break
        if isinstance(seen, DefusedXmlException):
            return Unreadable(f"XML entities in {label}", "the file declares XML entities (a few can "
                                                          "expand to gigabytes of text): refused, "
                                                          "nothing expanded")
        seen = seen.__cause__ or seen.__context__
    return Unreadable(f"corrupt {label}", _reason(e))


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())[:300]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _check_package(path: Path, label: str, max_bytes: int) -> None:
    """Refuse what is not a zip, an encrypted file, a bomb, and a zip that is another package
    (an XLSX under a .docx name, an EPUB, a jar) before the library sees it."""
    with open_zip(path, label, max_bytes) as zf:
        try:
            types = read_member(zf, "[Content_Types].xml", max_bytes, fmt_label=label)
        except Unreadable as e:
            if e.kind == "zip bomb":
                raise
            if "[Content_Types].xml" not in zf.namelist():
                raise Unreadable(f"not {_a(label)} {label}",
                                 "a zip, but not an Office package (it has no [Content_Types].xml)") from None
            raise
    text = types.decode("utf-8", "replace")
    if _MAIN_TYPES[label].search(text):
        return
    for other, pattern in _MAIN_TYPES.items():
        if pattern.search(text):
            raise Unreadable(f"not {_a(label)} {label}",
                             f"the file is {_WHAT[other]} ({other}) under a .{label.lower()} name: "
                             f"rename it to .{other.lower()}")
    raise Unreadable(f"not {_a(label)} {label}", "an Office-style package, but with no "
                                                 f"{_WHAT[label]} in it")


def _a(label: str) -> str:
    return "an" if label[:1] in "AEFHILMNORSX" else "a"


def _guarded(sections: Iterable[Section], label: str,
             close: Callable[[], None] | None = None) -> Iterator[Section]:
    """`sections` with any library exception raised while they are produced turned into an
    `Unreadable`, and `close` called however the iteration ends."""
    try:
        yield from sections
    except Unreadable:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged part found midway
        raise _failure(label, e) from None
    finally:
        if close is not None:
            close()


def _cell_text(text: str) -> str:
    """A table cell on one line: its paragraphs and line breaks as spaces."""
    return " ".join(text.split())


def _row_line(cells: list[str]) -> str:
    """ "a | b | c", trailing empty cells dropped; "" for an empty row."""
    while cells and not cells[-1]:
        cells.pop()
    return " | ".join(cells)


# --- DOCX --------------------------------------------------------------------------------------

_HEADING_NAME = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
_TOC_NAME = re.compile(r"^toc\s*[1-9]$", re.IGNORECASE)
# Inline containers whose runs are shown text; w:del and w:moveFrom (deleted text) are not here.
_INLINE_CONTAINERS = {"hyperlink", "ins", "smartTag", "sdt", "sdtContent", "fldSimple", "customXml",
                      "moveTo", "dir", "bdo"}


def _read_docx(path: Path) -> Reading:
    import docx

    document = docx.Document(str(path))
    body = document.element.body
    title = (document.core_properties.title or "").strip()
    if not title:
        title = _docx_first_heading(document, body)
    return Reading(format="docx", sections=_guarded(_docx_sections(document, body), "DOCX"),
                   title=title, unit="", units=0)


def _local(tag: object) -> str:
    """An element's tag without its namespace ("p" for w:p); "" for comments and PIs."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _docx_blocks(parent: Any) -> Iterator[Any]:
    """The body's paragraphs and tables in document order, content controls opened."""
    for child in parent.iterchildren():
        name = _local(child.tag)
        if name in ("p", "tbl"):
            yield child
        elif name in ("sdt", "sdtContent", "customXml", "ins", "moveTo"):
            yield from _docx_blocks(child)


def _docx_first_heading(document: Any, body: Any) -> str:
    """The Title paragraph's text, else the first heading's: the title Word would show."""
    first = ""
    styles = _StyleLevels(document)
    for block in _docx_blocks(body):
        if _local(block.tag) != "p":
            continue
        level, is_title = styles.level(block)
        if level:
            text = " ".join(_paragraph_text(block).split())
            if text and is_title:
                return text
            if text and not first:
                first = text
    return first


class _StyleLevels:
    """Heading levels by paragraph style, looked up once per style: a style named "Heading N",
    "Title", or with an outline level (its own or a base style's) is a heading."""

    def __init__(self, document: Any) -> None:
        self.styles: dict[str, Any] = {}
        try:
            for style in document.styles:
                if style.style_id:
                    self.styles[style.style_id] = style
        except Exception:  # noqa: BLE001 - a damaged styles part: no style is a heading then
            self.styles = {}
        self.cache: dict[str, tuple[int, bool]] = {}

    def level(self, p: Any) -> tuple[int, bool]:
        """(heading level 1-6 or 0, whether it is the Title style) of paragraph element `p`."""
        ppr = p.find(_w("pPr"))
        own = ppr.find(_w("outlineLvl")) if ppr is not None else None
        if own is not None:  # the paragraph's own outline level wins; 9 is "body text"
            lvl = _int(own.get(_w("val")), 9)
            return (min(lvl + 1, 6), False) if 0 <= lvl < 9 else (0, False)
        style_el = ppr.find(_w("pStyle")) if ppr is not None else None
        style_id = style_el.get(_w("val")) if style_el is not None else ""
        if not style_id:
            return 0, False
        if style_id not in self.cache:
            self.cache[style_id] = self._style_level(style_id)
        return self.cache[style_id]

    def _style_level(self, style_id: str) -> tuple[int, bool]:
        style = self.styles.get(style_id)
        for _ in range(10):  # base-style chains are short; a cycle must not loop
            if style is None:
                return 0, False
            name = (style.name or "").strip()
            if name.lower() == "title":
                return 1, True
            m = _HEADING_NAME.match(name)
            if m:
                return min(int(m.group(1)), 6), False
            ppr = style.element.find(_w("pPr"))
            lvl_el = ppr.find(_w("outlineLvl")) if ppr is not None else None
            if lvl_el is not None:  # "TOC Heading" is based on Heading 1 but says 9, body text
                lvl = _int(lvl_el.get(_w("val")), 9)
                return (min(lvl + 1, 6), False) if 0 <= lvl < 9 else (0, False)
            style = style.base_style
        return 0, False

    def is_toc_entry(self, p: Any) -> bool:
        """A line of a generated table of contents ("toc 1" ... styles): the headings again with
        page numbers, left out."""
        style = self._style_of(p)
        return style is not None and bool(_TOC_NAME.match(style.name or ""))

    def _style_of(self, p: Any) -> Any:
        """Paragraph element `p`'s paragraph style, or None."""
        ppr = p.find(_w("pPr"))
        style_el = ppr.find(_w("pStyle")) if ppr is not None else None
        return self.styles.get(style_el.get(_w("val"))) if style_el is not None else None

    def is_quote(self, p: Any) -> bool:
        """A paragraph in a block quote's style ("Quote", "Intense Quote", "Block Text", or one
        based on them)."""
        style = self._style_of(p)
        for _ in range(10):  # base-style chains are short; a cycle must not loop
            if style is None:
                return False
            if (style.name or "").strip().lower() in _QUOTE_STYLES:
                return True
            style = style.base_style
        return False

    def is_list(self, p: Any) -> int:
        """-1 for a paragraph that is not a list item, else its list level (0 outermost)."""
        ppr = p.find(_w("pPr"))
        numpr = ppr.find(_w("numPr")) if ppr is not None else None
        if numpr is not None:
            num = numpr.find(_w("numId"))
            if num is None or num.get(_w("val")) != "0":
                ilvl = numpr.find(_w("ilvl"))
                return _int(ilvl.get(_w("val")) if ilvl is not None else "0", 0)
            return -1
        style_el = ppr.find(_w("pStyle")) if ppr is not None else None
        style = self.styles.get(style_el.get(_w("val"))) if style_el is not None else None
        if style is None:
            return -1
        name = (style.name or "").lower()
        spr = style.element.find(_w("pPr"))
        numpr = spr.find(_w("numPr")) if spr is not None else None
        ilvl = numpr.find(_w("ilvl")) if numpr is not None else None
        if ilvl is not None:
            return _int(ilvl.get(_w("val")), 0)
        if numpr is not None or (name.startswith("list") and "paragraph" not in name):
            m = re.search(r"\s(\d)$", name)  # "List Bullet 2" is the second level
            return int(m.group(1)) - 1 if m else 0
        return -1


_QUOTE_STYLES = frozenset({"quote", "intense quote", "block text"})
_W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def _w(name: str) -> str:
    return f"{{{_W_NS}}}{name}"


def _int(value: object, default: int) -> int:
    try:
        return int(str(value))
    except ValueError:
        return default


Marks = dict[tuple[str, str], str]  # ("footnoteReference", w:id) -> the number Word shows


def _paragraph_text(p: Any, marks: Marks | None = None, styled: bool = False) -> str:
    """What Word shows of paragraph element `p`: runs, hyperlinks, fields' results, content
    controls and tracked insertions, "[n]" for a footnote's reference; not deleted text, field
    codes or the fallback copies of drawings. A text box's paragraphs follow on lines of their
    own. `styled`: inline code in Markdown's backticks (`_styled`)."""
    out: list[str] = []
    _collect(p, out, marks or {}, styled)
    return _styled("".join(out)) if styled else "".join(out)


# Inline code (a run in a character style named for code or verbatim text, or in a monospaced
# font) in Markdown's backticks, as the HTML reader marks it (situate.tasks.corpus.readers.html):
# a document's text is as long as its Markdown's, and is cut where the Markdown is. Runs are
# marked with private-use characters while a paragraph is gathered, so that neighbouring code runs
# (Word splits runs anywhere) are marked once.
_OPEN, _CLOSE = "\ue010", "\ue011"
_MONOSPACE = frozenset({"consolas", "courier", "courier new", "menlo", "monaco", "lucida console",
                        "source code pro", "dejavu sans mono", "liberation mono", "cascadia code",
                        "cascadia mono", "sf mono", "roboto mono", "fira code", "fira mono"})
_CODE_RUN = re.compile(f"{_OPEN}(.*?){_CLOSE}", re.DOTALL)


def _is_code(run: Any) -> bool:
    """Whether a run is inline code: its character style is named for code or verbatim text
    (pandoc's "VerbatimChar", "HTMLCode"), or its font is a monospaced one."""
    props = run.find(_w("rPr"))
    if props is None:
        return False
    style = props.find(_w("rStyle"))
    fonts = props.find(_w("rFonts"))
    style_id = (style.get(_w("val")) or "").lower() if style is not None else ""
    font = (fonts.get(_w("ascii")) or fonts.get(_w("hAnsi")) or "").lower() if fonts is not None else ""
    return "verbatim" in style_id or "code" in style_id or font in _MONOSPACE


def _styled(text: str) -> str:
    """A paragraph gathered with code runs marked: neighbouring ones joined, each stretch in
    backticks (spaces kept outside them); a stretch without text or running over a line, and a
    paragraph that is all code (a code block's line), unmarked."""

    def wrap(m: re.Match[str]) -> str:
        inner = m.group(1)
        if not inner.strip() or "\n" in inner:
            return inner
        lead, trail = inner[:len(inner) - len(inner.lstrip())], inner[len(inner.rstrip()):]
        return f"{lead}`{inner.strip()}`{trail}"

    text = text.replace(_CLOSE + _OPEN, "")
    bare = text.strip()
    if bare.startswith(_OPEN) and bare.endswith(_CLOSE) and bare.count(_OPEN) == 1:
        return text.replace(_OPEN, "").replace(_CLOSE, "")  # all code: a code block's line
    return _CODE_RUN.sub(wrap, text).replace(_OPEN, "").replace(_CLOSE, "")


def _code_paragraph(p: Any) -> bool:
    """A paragraph in a style for code blocks (pandoc's "SourceCode", Word's "HTML Preformatted",
    "Code", "Verbatim"): code, its runs not marked as inline code."""
    props = p.find(_w("pPr"))
    style = props.find(_w("pStyle")) if props is not None else None
    name = (style.get(_w("val")) or "").lower() if style is not None else ""
    return any(word in name for word in ("code", "verbatim", "preformatted"))


def _collect(el: Any, out: list[str], marks: Marks, styled: bool = False) -> None:
    for child in el.iterchildren():
        name = _local(child.tag)
        if name == "r":
            code = styled and _is_code(child)
            if code:
                out.append(_OPEN)
            _collect_run(child, out, marks)
            if code:
                out.append(_CLOSE)
        elif name in _INLINE_CONTAINERS:
            _collect(child, out, marks, styled)


def _note_marks(body: Any) -> Marks:
    """Word numbers notes by where they are first referenced, not by their ids: footnotes 1, 2,
    3; endnotes i, ii, iii."""
    marks: Marks = {}
    for kind, label in (("footnoteReference", str), ("endnoteReference", _roman)):
        for ref in body.iter(_w(kind)):
            key = (kind, str(ref.get(_w("id"))))
            if key not in marks:
                marks[key] = label(sum(1 for k in marks if k[0] == kind) + 1)
    return marks


def _roman(n: int) -> str:
    out = ""
    for value, digits in ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"),
                          (50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
        while n >= value:
            out += digits
            n -= value
    return out


def _collect_run(run: Any, out: list[str], marks: Marks) -> None:
    for child in run.iterchildren():
        name = _local(child.tag)
        if name == "t":
            out.append(child.text or "")
        elif name in ("tab", "ptab"):
            out.append("\t")
        elif name in ("br", "cr"):
            out.append("\n")
        elif name == "noBreakHyphen":
            out.append("-")
        elif name in ("footnoteReference", "endnoteReference"):
            key = (name, str(child.get(_w("id"))))
            out.append(f"[{marks.get(key, key[1])}]")  # the note itself comes at the end, "[1] ..."
        elif name in ("drawing", "pict", "AlternateContent", "object"):
            for box in child.iter(_w("txbxContent")):
                if any(a.tag == _MC_FALLBACK for a in box.iterancestors()):
                    continue
                for inner in box.iter(_w("p")):
                    text = _paragraph_text(inner, marks).strip()
                    if text:
                        out.append("\n" + text)


def _docx_sections(document: Any, body: Any) -> Iterator[Section]:
    styles = _StyleLevels(document)
    marks = _note_marks(body)
    path: list[tuple[int, str]] = []
    items: list[str] = []  # consecutive list items, joined into one section

    def place() -> Place:
        return Place(heading_path=tuple(t for _, t in path) if path else None)

    def flush() -> Iterator[Section]:
        if items:
            yield Section("\n".join(items), place())
            items.clear()

    for block in _docx_blocks(body):
        if _local(block.tag) == "tbl":
            yield from flush()
            rows = _docx_table(block, marks)
            if rows:
                yield Section("\n".join(rows), place(), kind="table")
            continue
        text = _paragraph_text(block, marks, styled=not _code_paragraph(block))
        if not text.strip() or styles.is_toc_entry(block):
            continue
        level, _ = styles.level(block)
        if level:
            yield from flush()
            title = " ".join(_paragraph_text(block, marks).split())  # a title has no marks
            path = [h for h in path if h[0] < level] + [(level, title)]
            yield Section(title, place(), kind="heading", level=level)
            continue
        depth = styles.is_list(block)
        if depth >= 0:
            items.append("  " * min(depth, 8) + "- " + text.strip())
            continue
        yield from flush()
        text = text.strip("\n")
        if styles.is_quote(block):  # as Markdown writes a quote (as inline code's backticks)
            text = "\n".join(f"> {line}" for line in text.split("\n"))
        yield Section(text, place())
    yield from flush()
    for kind, title in (("footnotes", "Footnotes"), ("endnotes", "Endnotes")):
        notes = _docx_notes(document, kind, marks)
        if notes:
            yield Section(title, Place(heading_path=(title,)), kind="heading", level=1)
            yield Section("\n".join(notes), Place(heading_path=(title,)))


def _docx_notes(document: Any, kind: str, marks: Marks) -> list[str]:
    """The footnotes (or endnotes) as "[n] text" lines in the order they are referenced (notes
    never referenced last, by id); the separators Word keeps among them are not notes."""
    from docx.oxml import parse_xml

    for rel in document.part.rels.values():
        if rel.is_external or not rel.reltype.endswith("/" + kind):
            continue
        root = parse_xml(rel.target_part.blob)
        ref = "footnoteReference" if kind == "footnotes" else "endnoteReference"
        order = {key[1]: i for i, key in enumerate(k for k in marks if k[0] == ref)}
        found = []
        for note in root.iterchildren(_w(kind[:-1])):
            if note.get(_w("type")) not in (None, "normal"):
                continue
            text = " ".join(" ".join(_paragraph_text(p, marks) for p in note.iter(_w("p"))).split())
            note_id = str(note.get(_w("id")))
            if text:
                label = marks.get((ref, note_id), note_id)
                found.append((order.get(note_id, len(order)), f"[{label}] {text}"))
        return [line for _, line in sorted(found, key=lambda f: f[0])]
    return []


def _docx_table(tbl: Any, marks: Marks) -> list[str]:
    """A table's rows as "a | b" lines: a cell merged across columns once, a cell merged down
    rows only in its first row; a nested table's text inside its cell."""
    rows = []
    for tr in tbl.iterchildren(_w("tr")):
        cells = []
        for tc in tr.xpath("./w:tc | ./w:sdt/w:sdtContent/w:tc"):
            tcpr = tc.find(_w("tcPr"))
            vmerge = tcpr.find(_w("vMerge")) if tcpr is not None else None
            if vmerge is not None and vmerge.get(_w("val"), "continue") == "continue":
                cells.append("")
                continue
            cells.append(_cell_text(" ".join(_paragraph_text(p, marks, styled=True)
                                            for p in tc.iter(_w("p")))))
        line = _row_line(cells)
        if line.strip(" |"):
            rows.append(line)
    return rows


# --- PPTX --------------------------------------------------------------------------------------

def _read_pptx(path: Path) -> Reading:
    import pptx

    presentation = pptx.Presentation(str(path))
    slides = list(presentation.slides)
    title = (presentation.core_properties.title or "").strip()
    if not title and slides:
        title = _slide_title(slides[0])
    return Reading(format="pptx", sections=_guarded(_pptx_sections(slides), "PPTX"),
                   title=title, unit="slides", units=len(slides))


def _slide_title(slide: Any) -> str:
    shape = slide.shapes.title
    if shape is None or not shape.has_text_frame:
        return ""
    return " ".join(shape.text_frame.text.split())


def _pptx_sections(slides: list[Any]) -> Iterator[Section]:
    """Per slide: its title (as text: the slide is already an edge, and a heading would repeat
    the title as a heading path), its shapes in reading order, its speaker notes."""
    for n, slide in enumerate(slides, 1):
        title = _slide_title(slide)
        place = Place(slide=n, slide_title=title)
        title_shape = slide.shapes.title
        title_id = title_shape.shape_id if title_shape is not None else None
        if title:
            yield Section(title, place)
        for shape in _reading_order(slide.shapes):
            if title_id is not None and shape.shape_id == title_id:
                continue
            yield from _pptx_shape(shape, place)
        if slide.has_notes_slide:
            frame = slide.notes_slide.notes_text_frame
            notes = frame.text.replace("\v", "\n").strip() if frame is not None else ""
            if notes:
                yield Section(notes, replace(place, notes=True), kind="notes")


def _reading_order(shapes: Iterable[Any]) -> list[Any]:
    """Top to bottom, then left to right; shapes with no position (inherited from nowhere)
    first, in the file's order."""
    return sorted(shapes, key=lambda s: (s.top or 0, s.left or 0))


def _pptx_shape(shape: Any, place: Place) -> Iterator[Section]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        for inner in _reading_order(shape.shapes):
            yield from _pptx_shape(inner, place)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = []
        for row in shape.table.rows:
            cells = []
            for cell in row.cells:
                if cell._tc.get("hMerge") in ("1", "true"):
                    continue  # the merge origin to its left holds the text
                cells.append("" if cell._tc.get("vMerge") in ("1", "true") else _cell_text(cell.text))
            line = _row_line(cells)
            if line.strip(" |"):
                rows.append(line)
        if rows:
            yield Section("\n".join(rows), place, kind="table")
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        lines = []
        for para in shape.text_frame.paragraphs:
            text = para.text.replace("\v", "\n").strip()
            if text:
                lines.append("  " * min(para.level, 8) + text)
        if lines:
            yield Section("\n".join(lines), place)


# --- XLSX --------------------------------------------------------------------------------------

def _read_xlsx(path: Path) -> Reading:
    import openpyxl

    # Given as an open file, not a name: openpyxl refuses a name without an Excel extension (the
    # reader process's /proc/self/fd/N); read-only, it keeps reading from it until closed.
    source = open(path, "rb")  # closed with the workbook, once its sections are read
    try:
        workbook = openpyxl.load_workbook(source, read_only=True, data_only=True)
    except BaseException:
        source.close()
        raise

    def close() -> None:
        workbook.close()
        source.close()

    try:
        sheets = [ws for ws in workbook.worksheets if ws.sheet_state == "visible"]
        hidden = [ws.title for ws in workbook.worksheets if ws.sheet_state != "visible"]
        title = (workbook.properties.title or "").strip() if workbook.properties else ""
    except BaseException:
        close()
        raise
    metadata: dict[str, Any] = {"hidden_sheets": hidden} if hidden else {}
    return Reading(format="xlsx", sections=_guarded(_xlsx_sections(sheets), "XLSX", close),
                   title=title, metadata=metadata, unit="sheets", units=len(sheets))


def format_cell(value: object) -> str:
    """A cell as a person reads it: 4 not 4.0, a date as 2024-01-31, a time of day kept only
    when there is one, booleans as Excel shows them."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0):
            return value.date().isoformat()
        return value.isoformat(sep=" ", timespec="seconds" if not value.microsecond else "auto")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    return _cell_text(str(value))


def _xlsx_sections(sheets: list[Any]) -> Iterator[Section]:
    for ws in sheets:
        yield from _sheet_sections(ws)


def _sheet_sections(ws: Any) -> Iterator[Section]:
    """One sheet in blocks of rows. The first non-empty row is taken as the header and starts
    every block after the first too, so each block (and mostly each chunk) says what its columns
    are; the block's `rows` are its own rows' numbers, not the header's."""
    ws.reset_dimensions()  # a file's declared dimension can be wrong or huge; read what is there
    name = ws.title
    header = ""
    block: list[str] = []
    first = last = 0
    size = 0

    def emit() -> Section:
        text = "\n".join(block if first == header_row else [header, *block])
        return Section(text, Place(sheet=name, rows=(first, last)), kind="table")

    header_row = 0
    # Read-only openpyxl yields every row from 1 on, filling the rows a sheet leaves out with
    # empty ones, so a row's position is its number.
    for number, values in enumerate(ws.iter_rows(values_only=True), 1):
        line = _row_line([format_cell(v) for v in values])
        if not line.strip(" |"):
            continue
        if not header:
            header, header_row = line, number
        if block and (len(block) >= XLSX_BLOCK_ROWS or size + len(line) > XLSX_BLOCK_CHARS):
            yield emit()
            block = []
        if not block:
            first = number
            size = len(header) + 1 if number != header_row else 0  # the header repeated counts too
        block.append(line)
        size += len(line) + 1
        last = number
    if block:
        yield emit()


# One reader a format: the registry's dispatch by suffix is the only one.
READERS = (FileReader("docx", "Word document", (".docx",), _opened(_read_docx)),
           FileReader("pptx", "slides", (".pptx",), _opened(_read_pptx)),
           FileReader("xlsx", "spreadsheet", (".xlsx", ".xlsm"), _opened(_read_xlsx)))
