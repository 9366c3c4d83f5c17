"""One document is cut in the same places whatever its format: inline code reads as Markdown
writes it (in backticks) in an HTML page, an EPUB chapter and a Word document, so the text is as
long as the Markdown's and each chunk begins where the Markdown's does. Without the backticks a
page full of inline code is shorter than its Markdown, and its chunks pack a heading the Markdown
starts a chunk with."""

from __future__ import annotations

from pathlib import Path

from situate.tasks.corpus.readers import read_document
from situate.tasks.corpus.readers.html import html_sections, parse
from situate.tasks.corpus.sections import chunk_sections

LIMIT = 50 * 1024 * 1024
SIZE, OVERLAP = 300, 30

# (heading, sentences; a word in backticks is inline code)
SECTIONS = [
    ("Opening files", ["Call `open()` with `path` and `mode`, then `read()` or `write()`.",
                       "The `encoding` is `utf-8` unless `locale` says `latin-1`.",
                       "Close with `close()` or use `with`; `fd` and `buffer` are freed."]),
    ("Reading lines", ["Use `readline()` or iterate; `strip()` drops the `\\n`.",
                       "Each `line` is a `str`; `bytes` need `decode()` first.",
                       "A `StopIteration` ends the `for` loop."]),
    ("Writing safely", ["Pass `newline=''` to `open()` and call `flush()` before `fsync()`.",
                        "Use `os.replace()` to swap `tmp` and `target` atomically.",
                        "Check `errno` and `EEXIST` when `O_EXCL` is set."]),
    ("Closing", ["Call `close()` on `f` once; a second `close()` is a no-op.",
                 "The `closed` flag is `True` after it and `read()` raises `ValueError`."]),
    ("Summary", ["Open with `open()`, read with `read()`, write with `write()`, close with `close()`."]),
]


def _markdown() -> str:
    parts = ["# Files\n"]
    for title, sentences in SECTIONS:
        parts.append(f"## {title}\n\n" + "\n\n".join(sentences) + "\n")
    return "\n".join(parts)


def _code_html(sentence: str) -> str:
    pieces = sentence.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def _html() -> str:
    body = ["<h1>Files</h1>"]
    for title, sentences in SECTIONS:
        body.append(f"<h2>{title}</h2>")
        body += [f"<p>{_code_html(s)}</p>" for s in sentences]
    return "<html><head><title>Files</title></head><body>" + "\n".join(body) + "</body></html>"


def _docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Files", level=1)
    for title, sentences in SECTIONS:
        document.add_heading(title, level=2)
        for sentence in sentences:
            paragraph = document.add_paragraph()
            for i, piece in enumerate(sentence.split("`")):
                if not piece:
                    continue
                if i % 2:  # inline code: a run split in two, as Word splits runs anywhere
                    for half in (piece[: len(piece) // 2], piece[len(piece) // 2:]):
                        if half:
                            paragraph.add_run(half).font.name = "Courier New"
                else:
                    paragraph.add_run(piece)
    document.add_paragraph().add_run("npm install --save-dev jest").font.name = "Consolas"
    document.save(str(path))


def _starts(sections: object) -> list[str]:
    _, pieces = chunk_sections(sections, SIZE, OVERLAP)  # type: ignore[arg-type]
    return [p.text.strip().split("\n", 1)[0] for p in pieces]


def test_html_docx_and_epub_chunks_begin_where_the_markdown_s_do(tmp_path: Path) -> None:
    (tmp_path / "files.md").write_text(_markdown())
    (tmp_path / "files.html").write_text(_html())
    _docx(tmp_path / "files.docx")
    md = _starts(read_document(tmp_path / "files.md", max_bytes=LIMIT).sections)
    assert {"Reading lines", "Writing safely", "Closing"} <= set(md)  # the Markdown cuts at headings
    for name in ("files.html", "files.docx"):
        assert _starts(read_document(tmp_path / name, max_bytes=LIMIT).sections) == md, name
    chapter = _starts(html_sections(parse(_html())))  # an EPUB chapter's walk
    assert chapter == md


def test_inline_code_reads_in_backticks_and_a_title_without_them(tmp_path: Path) -> None:
    page = ("<html><body><h2>The <code>open()</code> call</h2><p>Call <code>open()</code> "
            "then<code> read() </code>.</p><ul><li>use <code>with</code></li></ul>"
            "<table><tr><td><code>mode</code></td><td>r</td></tr><tr><td>x</td><td>y</td></tr></table>"
            "<pre><code>f = open(p)</code></pre></body></html>")
    got = [(s.kind, s.text) for s in html_sections(parse(page))]
    assert got == [("heading", "The open() call"), ("text", "Call `open()` then `read()` .\n\n- use `with`"),
                   ("table", "`mode` | r\nx | y"), ("code", "f = open(p)")]
    _docx(tmp_path / "files.docx")
    sections = list(read_document(tmp_path / "files.docx", max_bytes=LIMIT).sections)
    assert ("heading", "Opening files") in [(s.kind, s.text) for s in sections]
    texts = [s.text for s in sections]
    assert "Call `open()` with `path` and `mode`, then `read()` or `write()`." in texts
    assert "npm install --save-dev jest" in texts  # a paragraph all in code is a code block's line


def test_small_sections_are_packed_alike_in_markdown_and_html(tmp_path: Path) -> None:
    """One policy: two small sections under two level-2 headings are one chunk in Markdown, and
    so in HTML (a heading is the preferred cut, not a forced one: forcing it would change the
    Markdown's own chunks)."""
    (tmp_path / "small.md").write_text("# Guide\n\n## Install\n\nRun `pip install x`.\n\n"
                                       "## Use\n\nCall `x.run()`.\n")
    (tmp_path / "small.html").write_text(
        "<html><body><h1>Guide</h1><h2>Install</h2><p>Run <code>pip install x</code>.</p>"
        "<h2>Use</h2><p>Call <code>x.run()</code>.</p></body></html>")
    got = {name: [p.text for p in chunk_sections(read_document(tmp_path / name, max_bytes=LIMIT).sections,
                                                 800, 100)[1]]
           for name in ("small.md", "small.html")}
    assert got["small.md"] == got["small.html"] == [
        "Guide\n\nInstall\n\nRun `pip install x`.\n\nUse\n\nCall `x.run()`."]


# A hard-wrapped paragraph (its lines at most 60 columns), as much documentation is written.
WRAPPED = [
    ("Buffers", "A buffer holds the bytes read from a file until the `read()`\n"
                "call returns them. Its size is set when the file is opened\n"
                "and cannot change afterwards, so a large `buffering` value\n"
                "costs memory for every file that is open at the same time.\n"
                "Small files are read whole and need no buffer of their own."),
    ("Flushing", "Written bytes stay in the buffer until `flush()` is called,\n"
                 "the buffer is full, or the file is closed. A process that\n"
                 "exits without closing its files may lose what the buffer\n"
                 "held, which is why `with` blocks are the usual way to open\n"
                 "files that are written, and why `fsync()` follows a flush."),
    ("Modes", "The mode string says whether the file is read or written,\n"
              "whether it is text or bytes, and whether writing appends or\n"
              "replaces. Text mode decodes with the `encoding` argument and\n"
              "turns each line ending into a newline; binary mode hands the\n"
              "bytes over as they are, with no decoding and no translation."),
]


def test_a_page_keeps_its_source_line_breaks_as_the_markdown_does(tmp_path: Path) -> None:
    """A CommonMark renderer writes a soft line break as a newline: the page's paragraphs break
    where the Markdown's lines do, and the chunks come out the same, text and all (a chunk's
    overlap is whole lines; with each paragraph one long line the page's chunks would share
    nothing and begin elsewhere). Indentation around a break is no text."""
    md = "# Files\n\n" + "\n\n".join(f"## {t}\n\n{p}" for t, p in WRAPPED) + "\n"
    body = "".join(f"<h2>{t}</h2>\n<p>\n    {_code_html(p).replace(chr(10), chr(10) + '    ')}\n</p>\n"
                   for t, p in WRAPPED)
    (tmp_path / "files.md").write_text(md)
    (tmp_path / "files.html").write_text(f"<html><body><h1>Files</h1>\n{body}</body></html>")
    got = {name: [(p.start, p.text) for p in chunk_sections(
        read_document(tmp_path / name, max_bytes=LIMIT).sections, 300, 80)[1]]
        for name in ("files.md", "files.html")}
    assert len(got["files.md"]) > len(WRAPPED)  # cut inside sections, with overlap
    assert got["files.html"] == got["files.md"]


def test_quotes_and_wrapped_list_items_read_as_the_markdown_writes_them(tmp_path: Path) -> None:
    """A block quote's lines after "> ", and a list item's source line breaks kept under its text,
    in HTML (and so EPUB) and in a Word quote style: the text is the Markdown's, so it is as long
    and breaks its lines in the same places."""
    md = ("> Stability: 1 - Experimental. Use the\n> flag to enable it.\n\n"
          "* `size` {integer} The size of each\n  chunk of data.\n  * `chunk` {any} One chunk,\n"
          "    as given.\n* Returns: {number}")
    page = ("<blockquote>\n<p>Stability: 1 - Experimental. Use the\nflag to enable it.</p>\n</blockquote>\n"
            "<ul>\n<li><code>size</code> {integer} The size of each\nchunk of data.\n<ul>\n"
            "<li><code>chunk</code> {any} One chunk,\nas given.</li>\n</ul></li>\n"
            "<li>Returns: {number}</li>\n</ul>")
    assert "\n\n".join(s.text for s in html_sections(parse(page))) == md.replace("* ", "- ")
    import docx

    document = docx.Document()
    document.add_paragraph("Stability: 1 - Experimental.", style="Quote")
    document.add_paragraph("Plain text.")
    document.save(str(tmp_path / "q.docx"))
    got = [s.text for s in read_document(tmp_path / "q.docx", max_bytes=LIMIT).sections]
    assert got == ["> Stability: 1 - Experimental.", "Plain text."]
