"""The generated corpus of benchmarks/bench_reading.py: realistic text (sentences of the Python
standard library's docstrings) made into PDF, HTML, DOCX, PPTX, XLSX, EPUB and notebook files,
seeded, in the mix the benchmark asks for."""

from __future__ import annotations

import ast
import json
import random
import re
import sysconfig
import time
import zipfile
from pathlib import Path
from typing import Any

SUFFIX = {"pdf": ".pdf", "html": ".html", "docx": ".docx", "pptx": ".pptx", "xlsx": ".xlsx",
          "epub": ".epub", "ipynb": ".ipynb"}


# --- text ---------------------------------------------------------------------------------------

def stdlib_sentences(limit: int = 40_000) -> list[str]:
    """Sentences of English prose from the standard library's docstrings (always installed)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    for f in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        if "test" in f.as_posix():
            continue
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            for para in doc.split("\n\n"):
                if re.search(r">>>|::|^\s*[-*]|\s{4}", para, re.M):
                    continue
                for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(para.split())):
                    if 30 <= len(s) <= 240 and s[0].isupper() and s[-1] in ".!?":
                        out.append(s)
        if len(out) >= limit:
            break
    return out


class Text:
    """Seeded realistic text: paragraphs of real sentences, titles of real words."""

    def __init__(self, rng: random.Random, sentences: list[str]) -> None:
        self.rng = rng
        self.sentences = sentences
        self.words = sorted({w.strip(".,;:()'\"").lower() for s in sentences[:5000] for w in s.split()
                             if w.isalpha() and 4 <= len(w) <= 12})

    def sentence(self) -> str:
        return self.rng.choice(self.sentences)

    def paragraph(self, lo: int = 2, hi: int = 6) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(lo, hi)))

    def title(self, lo: int = 2, hi: int = 6) -> str:
        return " ".join(self.rng.choice(self.words) for _ in range(self.rng.randint(lo, hi))).capitalize()

    def code(self) -> str:
        name = self.rng.choice(self.words)
        arg = self.rng.choice(self.words)
        return (f"def {name}_{arg}({arg}, limit=10):\n    \"\"\"{self.sentence()}\"\"\"\n"
                f"    result = [x for x in {arg} if x]\n    return result[:limit]\n\n"
                f"print({name}_{arg}(range(5)))\n")


def esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- generators ---------------------------------------------------------------------------------

def make_pdf(path: Path, t: Text, pages: int, title: str = "", page_chars: int = 3000) -> None:
    """A report of about `pages` pages: headings, paragraphs, bullet lists, a table now and then,
    a running header (the title) and footer (page number)."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import ListFlowable, Paragraph, SimpleDocTemplate, Spacer, Table

    styles = getSampleStyleSheet()
    title = title or t.title(3, 6)

    def decorate(canvas: Any, doc: Any) -> None:
        canvas.saveState()
        canvas.setFont("Helvetica", 8)
        canvas.drawString(56, A4[1] - 40, f"{title} - internal report")
        canvas.drawRightString(A4[0] - 56, 30, f"Page {doc.page}")
        canvas.restoreState()

    story: list[Any] = [Paragraph(esc(title), styles["Title"])]
    chars = 0
    target = pages * page_chars  # about a page of A4 in 10-point text
    while chars < target:
        story.append(Paragraph(esc(t.title()), styles["Heading2"]))
        for _ in range(t.rng.randint(2, 5)):
            p = t.paragraph()
            chars += len(p)
            story.append(Paragraph(esc(p), styles["BodyText"]))
        if t.rng.random() < 0.3:
            items = [t.sentence() for _ in range(t.rng.randint(3, 5))]
            chars += sum(map(len, items))
            story.append(ListFlowable([Paragraph(esc(i), styles["BodyText"]) for i in items],
                                      bulletType="bullet"))
        if t.rng.random() < 0.2:
            rows = [["Item", "Owner", "Status", "Value"]] + [
                [t.title(1, 2), t.title(1, 1), t.rng.choice(["open", "done", "blocked"]),
                 f"{t.rng.randint(1, 9999)}"] for _ in range(t.rng.randint(3, 8))]
            story.append(Table(rows, style=[("GRID", (0, 0), (-1, -1), 0.5, colors.grey)]))
            chars += 30 * len(rows)
        story.append(Spacer(1, 6))
    SimpleDocTemplate(str(path), pagesize=A4, title=title).build(
        story, onFirstPage=decorate, onLaterPages=decorate)


def make_html(path: Path, t: Text) -> None:
    title = t.title(3, 6)
    body = [f"<h1>{esc(title)}</h1>"]
    for _ in range(t.rng.randint(3, 10)):
        body.append(f"<h2>{esc(t.title())}</h2>")
        body += [f"<p>{esc(t.paragraph())}</p>" for _ in range(t.rng.randint(1, 4))]
        if t.rng.random() < 0.3:
            body.append("<ul>" + "".join(f"<li>{esc(t.sentence())}</li>" for _ in range(4)) + "</ul>")
        if t.rng.random() < 0.2:
            body.append(f"<pre><code>{esc(t.code())}</code></pre>")
    menu = "".join(f'<li><a href="/{w}">{w.title()}</a></li>' for w in t.rng.sample(t.words, 8))
    path.write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<link rel="stylesheet" href="/static/site.css"><script src="/static/site.js"></script></head>
<body><header><a class="logo" href="/">Handbook</a></header><nav><ul>{menu}</ul></nav>
<div class="cookie-consent"><p>This site uses cookies to improve your experience.</p>
<button>Accept</button></div>
<main><article>{''.join(body)}</article></main>
<aside><h3>Related</h3><ul>{menu}</ul></aside>
<footer><p>Copyright the authors. All rights reserved.</p></footer></body></html>
""", encoding="utf-8")


def make_docx(path: Path, t: Text) -> None:
    import docx

    d = docx.Document()
    d.core_properties.title = t.title(3, 6)
    d.add_heading(d.core_properties.title, level=1)
    for _ in range(t.rng.randint(3, 14)):
        d.add_heading(t.title(), level=2)
        for _ in range(t.rng.randint(2, 5)):
            d.add_paragraph(t.paragraph())
        if t.rng.random() < 0.3:
            for _ in range(t.rng.randint(3, 5)):
                d.add_paragraph(t.sentence(), style="List Bullet")
        if t.rng.random() < 0.2:
            rows = t.rng.randint(3, 8)
            table = d.add_table(rows=rows, cols=3)
            for r in range(rows):
                for c in range(3):
                    table.cell(r, c).text = t.title(1, 3) if c < 2 else str(t.rng.randint(1, 999))
    d.save(str(path))


def make_pptx(path: Path, t: Text) -> None:
    import pptx
    from pptx.util import Inches

    p = pptx.Presentation()
    slide = p.slides.add_slide(p.slide_layouts[0])
    slide.shapes.title.text = t.title(3, 6)
    slide.placeholders[1].text = t.sentence()
    for _ in range(t.rng.randint(5, 20)):
        if t.rng.random() < 0.15:
            slide = p.slides.add_slide(p.slide_layouts[5])
            slide.shapes.title.text = t.title()
            table = slide.shapes.add_table(4, 3, Inches(1), Inches(2), Inches(8), Inches(2)).table
            for r in range(4):
                for c in range(3):
                    table.cell(r, c).text = t.title(1, 2) if c < 2 else str(t.rng.randint(1, 99))
        else:
            slide = p.slides.add_slide(p.slide_layouts[1])
            slide.shapes.title.text = t.title()
            frame = slide.placeholders[1].text_frame
            frame.text = t.sentence()
            for _ in range(t.rng.randint(2, 5)):
                frame.add_paragraph().text = t.sentence()
        if t.rng.random() < 0.6:
            slide.notes_slide.notes_text_frame.text = t.paragraph(1, 3)
    p.save(str(path))


def make_xlsx(path: Path, t: Text) -> None:
    import datetime

    import openpyxl

    wb = openpyxl.Workbook()
    for n in range(t.rng.randint(1, 4)):
        ws = wb.active if n == 0 else wb.create_sheet()
        ws.title = t.title(1, 2)[:28] + f" {n + 1}"
        ws.append(["ID", "Date", "Customer", "Category", "Amount", "Notes"])
        day = datetime.date(2024, 1, 1)
        for i in range(t.rng.randint(20, 400)):
            ws.append([i + 1, day + datetime.timedelta(days=t.rng.randint(0, 700)), t.title(2, 3),
                       t.rng.choice(["hardware", "services", "licences", "travel", "training"]),
                       round(t.rng.uniform(10, 50_000), 2),
                       t.sentence() if t.rng.random() < 0.4 else ""])
    wb.save(str(path))


def make_epub(path: Path, t: Text) -> None:
    """An EPUB 3 book: the mimetype stored first, the container, the package, a nav document and
    5-15 chapters of XHTML."""
    title = t.title(3, 6)
    chapters = []
    for n in range(t.rng.randint(5, 15)):
        heading = t.title()
        paras = "".join(f"<p>{esc(t.paragraph(3, 8))}</p>" for _ in range(t.rng.randint(6, 20)))
        chapters.append((f"ch{n + 1}.xhtml", heading, f"""<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{esc(heading)}</title></head>
<body><h1>{esc(heading)}</h1>{paras}</body></html>"""))
    manifest = "".join(f'<item id="c{i}" href="{name}" media-type="application/xhtml+xml"/>'
                       for i, (name, _, _) in enumerate(chapters))
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    nav = "".join(f'<li><a href="{name}">{esc(h)}</a></li>' for name, h, _ in chapters)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")  # stored, first
        z.writestr("META-INF/container.xml", """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
</rootfiles></container>""", compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/content.opf", f"""<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier id="id">urn:uuid:{t.rng.getrandbits(64):x}</dc:identifier>
<dc:title>{esc(title)}</dc:title><dc:language>en</dc:language></metadata>
<manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
{manifest}</manifest><spine>{spine}</spine></package>""", compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/nav.xhtml", f"""<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Contents</title></head><body><nav epub:type="toc"><ol>{nav}</ol></nav></body></html>""",
                   compress_type=zipfile.ZIP_DEFLATED)
        for name, _, body in chapters:
            z.writestr(f"OEBPS/{name}", body, compress_type=zipfile.ZIP_DEFLATED)


def make_ipynb(path: Path, t: Text) -> None:
    cells: list[dict[str, Any]] = [{"cell_type": "markdown", "metadata": {},
                                    "source": [f"# {t.title(3, 6)}\n", "\n", t.paragraph()]}]
    for n in range(t.rng.randint(4, 16)):
        if t.rng.random() < 0.5:
            cells.append({"cell_type": "markdown", "metadata": {},
                          "source": [f"## {t.title()}\n", "\n", t.paragraph(1, 4)]})
        code = t.code()
        cells.append({"cell_type": "code", "execution_count": n + 1, "metadata": {},
                      "source": code.splitlines(keepends=True),
                      "outputs": [{"output_type": "stream", "name": "stdout",
                                   "text": [f"[{', '.join(str(i) for i in range(1, 5))}]\n"]}]})
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                      "language": "python"},
                                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def generate(out: Path, mix: dict[str, int], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    t = Text(rng, stdlib_sentences())
    made: dict[str, Any] = {}
    for fmt, n in mix.items():
        d = out / fmt
        d.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        for i in range(n):
            path = d / f"{fmt}-{i:04d}{SUFFIX[fmt]}"
            if fmt == "pdf":
                make_pdf(path, t, rng.randint(3, 30))
            else:
                globals()[f"make_{fmt}"](path, t)
        made[fmt] = {"files": n, "bytes": sum(f.stat().st_size for f in d.iterdir()),
                     "generate_seconds": round(time.perf_counter() - start, 1)}
        print("generated", fmt, json.dumps(made[fmt]), flush=True)
    return made


# --- measuring ----------------------------------------------------------------------------------
