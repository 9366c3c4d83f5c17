"""Make the sample corpus's documents in the formats teams keep: a PDF handbook, a Word runbook,
an HTML page of a docs site, slides with speaker notes, a spreadsheet, a notebook.

The files under corpus/ are this script's output, committed so that `make demo` needs nothing but
the package; run it again (`.venv/bin/python data/sample/make_documents.py`) to remake them from
their source here: nothing in them comes from anywhere else. Made with reportlab (PDF),
python-docx, python-pptx and openpyxl; the HTML and the notebook are written as text.
"""

from __future__ import annotations

import base64
import datetime
import json
import struct
import zlib
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"


def handbook_pdf(path: Path) -> None:
    """Three pages with a running header and page footer, headings, a table, and a word
    hyphenated at a line end."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4, invariant=1)
    c.setTitle("Harbor Operations Handbook")
    width, height = A4
    pages = [
        ("1 On-call duties", [
            "The on-call engineer owns the Harbor queue for one week, from Monday 09:00 UTC.",
            "During the shift they answer pages within fifteen minutes and keep a log of every",
            "incident in the shared incident channel, with the job ids involved.",
            "At the end of the week they hand over open incidents in a written note, so that",
            "the next engineer never has to rediscover what the previous one already knew.",
        ]),
        ("2 Escalation", [
            "A dead-letter queue that grows by more than 500 jobs in an hour is an incident of",
            "severity two: page the storage team if the cause is the database, the platform",
            "team otherwise. Severity one is reserved for lost jobs, which Harbor's lease proto-",
            "col is designed to make impossible; treat any report of one as a data bug.",
        ]),
        ("3 Service levels", []),
    ]
    for number, (heading, lines) in enumerate(pages, start=1):
        c.setFont("Helvetica", 8)
        c.drawString(60, height - 40, "Harbor Operations Handbook - internal")
        c.drawString(width - 100, 30, f"Page {number}")
        c.setFont("Helvetica-Bold", 16)
        c.drawString(60, height - 90, heading)
        c.setFont("Helvetica", 11)
        y = height - 120
        for line in lines:
            c.drawString(60, y, line)
            y -= 16
        if number == 3:
            c.drawString(60, y, "Targets per queue, measured monthly:")
            y -= 24
            rows = [("Queue", "Latency p95", "Availability"), ("payments", "2 s", "99.95%"),
                    ("emails", "30 s", "99.5%"), ("reports", "10 min", "99%")]
            for row in rows:
                for col, cell in enumerate(row):
                    c.drawString(60 + col * 150, y, cell)
                y -= 18
        c.showPage()
    c.save()


def runbook_docx(path: Path) -> None:
    import docx

    d = docx.Document()
    d.core_properties.title = "Harbor Runbook"
    d.core_properties.created = datetime.datetime(2026, 1, 15, 9, 0, 0)
    d.core_properties.modified = datetime.datetime(2026, 1, 15, 9, 0, 0)
    d.add_heading("Harbor Runbook", 0)
    d.add_heading("Restarting a stuck worker", 1)
    d.add_paragraph("A worker is stuck when its heartbeat is older than two lease periods. "
                    "Drain it with `harbor worker drain ID`, wait for its leases to expire, then "
                    "restart the process; its jobs return to the queue by themselves.")
    d.add_heading("Replaying the dead-letter queue", 1)
    d.add_paragraph("Fix the cause first. Then `harbor dlq replay --since 1h` moves the jobs back "
                    "with their attempt counters reset, at most 100 jobs a second so that the "
                    "database is not flooded.")
    d.add_heading("Alert thresholds", 2)
    table = d.add_table(rows=3, cols=2)
    for row, (name, value) in enumerate([("Alert", "Threshold"), ("queue depth", "10,000 jobs"),
                                         ("lease expiries", "50 per minute")]):
        table.cell(row, 0).text = name
        table.cell(row, 1).text = value
    d.save(str(path))


ARCHITECTURE_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Harbor architecture</title>
<script>window.analytics = {track() {}};</script><style>nav {float: left}</style></head>
<body>
<header class="site-header"><a href="/">Harbor docs</a></header>
<nav class="sidebar"><ul><li><a href="/start">Getting started</a></li><li><a href="/ops">Operations
</a></li><li><a href="/api">API reference</a></li></ul></nav>
<div class="cookie-consent">We use cookies to improve your experience. <button>Accept all</button>
</div>
<main>
<h1>Harbor architecture</h1>
<p>Harbor is three processes: the API, which accepts jobs; the workers, which lease and run them;
and the sweeper, which returns expired leases to the queue.</p>
<h2>Storage</h2>
<p>Every job is one row in PostgreSQL. A lease is an update that sets the job's owner and expiry
in one statement, guarded by <code>FOR UPDATE SKIP LOCKED</code>, so two workers can never take the
same row.</p>
<pre><code>UPDATE jobs SET owner = $1, lease_until = now() + interval '30 seconds'
WHERE id = (SELECT id FROM jobs WHERE state = 'ready'
            ORDER BY priority DESC, id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id, payload;</code></pre>
<h2>Scaling out</h2>
<p>Workers are stateless: add processes until the database's connection pool is the limit, then
put PgBouncer in front of it in transaction mode.</p>
<table><tr><th>Component</th><th>Scales by</th></tr><tr><td>API</td><td>replicas behind a load
balancer</td></tr><tr><td>workers</td><td>processes per host</td></tr></table>
</main>
<aside class="related">Related: <a href="/ops">Operations handbook</a></aside>
<footer class="site-footer">&copy; 2026 Harbor authors. <a href="/privacy">Privacy</a></footer>
</body></html>
"""


def roadmap_pptx(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    p = Presentation()
    p.core_properties.title = "Harbor roadmap 2026"
    slides = [
        ("Harbor roadmap 2026", "Where the queue goes next",
         "Open with the two customer requests that shaped this plan."),
        ("Q2: priorities", "Weighted fair queuing between tenants, so that one tenant's burst "
         "cannot starve the others.",
         "The design doc for weighted fair queuing is in the architecture folder."),
        ("Q3: exactly-once sinks", "Idempotency keys stored with each job result, checked by "
         "sinks before they write.", "Say that this needs the storage team's review."),
    ]
    for title, body, notes in slides:
        slide = p.slides.add_slide(p.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        slide.notes_slide.notes_text_frame.text = notes
    slide = p.slides.add_slide(p.slide_layouts[5])
    slide.shapes.title.text = "Milestones"
    shape = slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(1.5))
    for row, (name, when) in enumerate([("Milestone", "Quarter"), ("fair queuing GA", "Q2"),
                                        ("exactly-once sinks beta", "Q3")]):
        shape.table.cell(row, 0).text = name
        shape.table.cell(row, 1).text = when
    p.save(str(path))


def capacity_xlsx(path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    wb.properties.title = "Harbor capacity plan"
    hosts = wb.active
    hosts.title = "Hosts"
    hosts.append(["Host", "Workers", "Jobs per second", "Region"])
    for n in range(1, 9):
        hosts.append([f"worker-{n:02d}", 16, 16 * 45, "eu-west" if n <= 4 else "us-east"])
    growth = wb.create_sheet("Growth")
    growth.append(["Month", "Jobs per day (millions)", "Headroom"])
    for month, jobs, headroom in [("January", 4.0, "62%"), ("February", 4.6, "56%"),
                                  ("March", 5.3, "49%"), ("April", 6.1, "41%")]:
        growth.append([month, jobs, headroom])
    growth.append(["Forecast: add two worker hosts per region before June, when headroom falls "
                   "under 30%."])
    wb.save(str(path))


def _png(width: int = 4, height: int = 4) -> bytes:
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0,
                                                             0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def tuning_ipynb(path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": [
            "# Tuning the lease period\n", "\n",
            "A lease that is too short makes slow jobs run twice; one that is too long delays "
            "recovery after a worker dies. We look at job durations to pick it."]},
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": [
            "durations = load_durations('payments')\n", "p99 = durations.quantile(0.99)\n",
            "lease = max(30, 3 * p99)  # three times the slowest normal job\n", "lease"],
         "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                      "data": {"text/plain": ["42.0"]}}]},
        {"cell_type": "code", "execution_count": 2, "metadata": {}, "source": [
            "plot_histogram(durations)"],
         "outputs": [{"output_type": "display_data", "metadata": {},
                      "data": {"image/png": base64.b64encode(_png()).decode(),
                               "text/plain": ["<Figure size 640x480>"]}}]},
        {"cell_type": "markdown", "metadata": {}, "source": [
            "## Result\n", "\n",
            "The payments queue gets a lease of 42 seconds: three times its 99th percentile job "
            "duration."]},
    ]
    notebook = {"cells": cells, "metadata": {"kernelspec": {"name": "python3",
                                                            "display_name": "Python 3",
                                                            "language": "python"},
                                             "language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook, indent=1) + "\n")


def main() -> None:
    (CORPUS / "docs").mkdir(parents=True, exist_ok=True)
    (CORPUS / "notes").mkdir(parents=True, exist_ok=True)
    handbook_pdf(CORPUS / "docs" / "handbook.pdf")
    runbook_docx(CORPUS / "docs" / "runbook.docx")
    (CORPUS / "docs" / "architecture.html").write_text(ARCHITECTURE_HTML)
    roadmap_pptx(CORPUS / "docs" / "roadmap.pptx")
    capacity_xlsx(CORPUS / "docs" / "capacity.xlsx")
    tuning_ipynb(CORPUS / "notes" / "tuning.ipynb")


if __name__ == "__main__":
    main()
