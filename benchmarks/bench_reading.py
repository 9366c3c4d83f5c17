"""Reading speed of situate's document readers, and reading's share of a whole ingest.

Why: a PDF, an Office file or an EPUB costs far more to read than a text file. The claim to check
is that reading never dominates an ingest with the default embedder (MiniLM, on CPU), and that a
very long PDF is read one page at a time (memory does not grow with its length).

The corpus is generated here, seeded, with realistic text (sentences of the Python standard
library's docstrings): by default 1,000 files, 250 PDFs of 3-30 pages (reportlab: headings,
paragraphs, lists, tables, a running header and footer), 200 HTML pages (a site's menus around an
article), 200 DOCX, 100 PPTX (bullets, tables, speaker notes), 100 XLSX (1-4 sheets of records),
50 EPUB (chapters) and 100 notebooks (Markdown, code, outputs).

Measured:

- (a) reading alone, per format, each in a fresh process: the readers alone (`read_document`, every
  section consumed) and reading as ingest's scan does it (`load_corpus`: read, clean, cut into
  chunks); files/s, MB/s, pages/s for PDFs, per CPU second of the process (the machine is shared:
  CPU time is what reading costs) and per wall second; the readers' import time apart.
- (b) a whole `situate ingest DIR --collection x --context structural` (MiniLM) of the corpus (or
  of `--ingest-files` of it, the same mix), with the time spent reading counted inside the command
  itself (the loader's per-file read wrapped with a timer; the scan pass and the streaming pass
  both), against the command's wall time and its `seconds` per stage.
- (c) a 2,000-page PDF: read page by page (`read_document`, sections consumed and dropped), and
  through `load_corpus`; pages/s and peak RSS against the interpreter with the same libraries
  imported and PDFium initialised (a fresh process; RSS sampled every 10 ms while reading).

    .venv/bin/python benchmarks/bench_reading.py [--keep DIR] [--scale 1.0] [--ingest-files N]
        [--parts alone long ingest] [--update] [--long-pages 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reading_corpus import (  # the script's folder is on sys.path
    Text,
    generate,
    make_pdf,
    stdlib_sentences,
)

ROOT = Path(__file__).resolve().parent.parent
MIX = {"pdf": 250, "html": 200, "docx": 200, "pptx": 100, "xlsx": 100, "epub": 50, "ipynb": 100}


READ_ALONE = """
import json, resource, sys, time
from pathlib import Path
def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
def close_readers():
    try:  # documents are read in a reader process (issue 32); before, in this one
        from situate.tasks.corpus.sandbox import _close_all
    except ImportError:
        return
    _close_all()
t = time.perf_counter()
from situate.tasks.corpus.load import load_corpus
from situate.tasks.corpus.readers import read_document, readers
files = sorted(p for p in Path(sys.argv[1]).rglob("*") if p.is_file())
readers()  # the registry imports every reader module (their libraries stay unloaded)
imported = time.perf_counter() - t
t = time.perf_counter()  # the first file alone: the format's libraries are imported as it is read
for s in read_document(files[0], max_bytes=1 << 30).sections:
    pass
first = time.perf_counter() - t
repeat = int(sys.argv[2])
# The fastest of `repeat` passes, in wall time and in this process's CPU time: the machine is
# shared, and CPU time is what reading costs whatever else runs.
readers = loaded = readers_cpu = loaded_cpu = float("inf")
for _ in range(repeat):
    t, c = time.perf_counter(), time.process_time()
    chars = units = 0
    for f in files:
        reading = read_document(f, max_bytes=1 << 30)
        for s in reading.sections:
            chars += len(s.text)
        units += reading.units
    readers, readers_cpu = min(readers, time.perf_counter() - t), min(readers_cpu, time.process_time() - c)
    t, c, k = time.perf_counter(), time.process_time(), children_cpu()
    corpus = load_corpus(sys.argv[1])
    close_readers()  # the reader process reaped: its CPU is this process's children's
    loaded = min(loaded, time.perf_counter() - t)
    loaded_cpu = min(loaded_cpu, time.process_time() - c + children_cpu() - k)
print(json.dumps({"import_seconds": round(imported, 3), "first_file_seconds": round(first, 3),
                  "reader_seconds": round(readers, 3), "reader_cpu_seconds": round(readers_cpu, 3),
                  "load_seconds": round(loaded, 3), "load_cpu_seconds": round(loaded_cpu, 3),
                  "files": len(files), "chars": chars,
                  "reader_units": units, "documents": len(corpus.documents),
                  "chunks": corpus.chunk_count, "units": dict(corpus.units),
                  "skipped": dict(corpus.skipped)}))
"""


def read_alone(d: Path, env: dict[str, str], repeat: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    r = subprocess.run([sys.executable, "-c", READ_ALONE, str(d), str(repeat)], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"reading {d} failed:\n{r.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    mb = sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) / 1e6
    res["mb"] = round(mb, 2)
    res["load_average_before_after"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    for key in ("reader", "load", "reader_cpu", "load_cpu"):
        s = max(res[f"{key}_seconds"], 1e-9)
        res[f"{key}_files_per_second"] = round(res["files"] / s, 1)
        res[f"{key}_mb_per_second"] = round(mb / s, 2)
        if res["reader_units"]:
            res[f"{key}_units_per_second"] = round(res["reader_units"] / s, 1)
    return res


# The real command, with the loader's per-file read timed inside it (scan pass and streaming pass
# told apart by the tally's `options.quiet`, which only the streaming pass sets).
INGEST = """
import atexit, json, os, sys, time
import situate.tasks.corpus.directory as directory
from situate.tasks.corpus.clean import Tally
spent = {"scan_read_seconds": 0.0, "stream_read_seconds": 0.0, "scan_read_cpu_seconds": 0.0,
         "stream_read_cpu_seconds": 0.0, "scan_files": 0, "stream_files": 0}
def reader_cpu():
    # Documents are read in the reader process (issue 32): its CPU counts as reading.
    try:
        from situate.tasks.corpus.sandbox import _LIVE
    except ImportError:
        return 0.0
    total = 0.0
    for r in list(_LIVE):
        try:
            with open(f"/proc/{r.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, AttributeError, IndexError, ValueError):
            pass
    return total
def timed(fn):
    def wrapper(f, doc_id, where, *rest, **kw):
        t, c, r = time.perf_counter(), time.thread_time(), reader_cpu()
        try:
            return fn(f, doc_id, where, *rest, **kw)
        finally:
            tally = next((a for a in rest if isinstance(a, Tally)), None)
            key = "stream" if tally is not None and tally.options.quiet else "scan"
            spent[f"{key}_read_seconds"] += time.perf_counter() - t
            spent[f"{key}_read_cpu_seconds"] += time.thread_time() - c + max(0.0, reader_cpu() - r)
            spent[f"{key}_files"] += 1
    return wrapper
directory._read_document = timed(directory._read_document)  # a directory's files, as its walk reads them
directory._text_document = timed(directory._text_document)
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(spent)))
from situate.cli.main import main
sys.argv = ["situate", *sys.argv[2:]]
sys.exit(main())
"""


def ingest(corpus: Path, tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    spent = tmp / "spent.json"
    summary = tmp / "summary.json"
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", INGEST, str(spent), "ingest", str(corpus),
                        "--collection", "reading", "--context", "structural", "--json", str(summary)],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"situate ingest failed:\n{r.stderr[-3000:]}")
    # CPU of the command and every process it waited for (model workers, Prefect's server)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    s = json.loads(summary.read_text())
    read = json.loads(spent.read_text())
    reading = read["scan_read_seconds"] + read["stream_read_seconds"]
    reading_cpu = read["scan_read_cpu_seconds"] + read["stream_read_cpu_seconds"]
    return {"wall_seconds": round(wall, 1), "documents": s["documents"], "chunks": s["chunks_written"],
            "formats": s.get("formats"), "units": s.get("units"), "skipped": s.get("skipped"),
            "stage_seconds": s.get("seconds"), **{k: round(v, 2) for k, v in read.items()},
            "reading_seconds": round(reading, 1), "reading_share": round(reading / wall, 3),
            "cpu_seconds": round(cpu, 1), "reading_cpu_seconds": round(reading_cpu, 1),
            "reading_cpu_share": round(reading_cpu / cpu, 3),
            "chunks_per_second": round(s["chunks_written"] / wall, 1),
            "load_average_before_after": [round(load, 2), round(os.getloadavg()[0], 2)]}


LONG = """
import gc, json, sys, threading, time
from pathlib import Path
import psutil
mode, path = sys.argv[1], Path(sys.argv[2])
from situate.tasks.corpus.load import load_corpus
from situate.tasks.corpus.readers import read_document
import situate.tasks.corpus.readers.pdf  # noqa: the reader's libraries loaded (PDFium)
import pypdfium2
pypdfium2.PdfDocument(str(path)).close()  # and PDFium initialised: the baseline
gc.collect()
me = psutil.Process()
# RSS now, sampled while reading: ru_maxrss is no measure here (Linux keeps the parent's high-water
# mark across fork and exec, so a child of a big process starts with its peak)
baseline = me.memory_info().rss / 2**20
peak_rss = baseline
done = False
def sample():
    global peak_rss
    while not done:
        peak_rss = max(peak_rss, me.memory_info().rss / 2**20)
        time.sleep(0.01)
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
t, c = time.perf_counter(), time.process_time()
pages = chars = 0
if mode == "reader":
    reading = read_document(path, max_bytes=1 << 31)
    last = None
    for s in reading.sections:
        chars += len(s.text)
        last = s.where.get("page", last)
    pages = reading.units or last or 0
else:
    corpus = load_corpus(path, max_file_bytes=1 << 31)
    pages = dict(corpus.units).get("pages", 0)
    chars = len(corpus.documents[0].text)
seconds, cpu = time.perf_counter() - t, time.process_time() - c
done = True
sampler.join()
print(json.dumps({"mode": mode, "pages": pages, "chars": chars, "seconds": round(seconds, 2),
                  "pages_per_second": round(pages / seconds, 1), "cpu_seconds": round(cpu, 2),
                  "pages_per_cpu_second": round(pages / cpu, 1), "baseline_rss_mib": round(baseline, 1),
                  "peak_rss_mib": round(peak_rss, 1), "growth_mib": round(peak_rss - baseline, 1)}))
"""


def long_pdf(path: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for mode in ("reader", "load"):
        r = subprocess.run([sys.executable, "-c", LONG, mode, str(path)], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"reading {path} ({mode}) failed:\n{r.stderr[-3000:]}")
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
        out[-1]["load_average_after"] = round(os.getloadavg()[0], 2)
        print("long pdf", json.dumps(out[-1]), flush=True)
    return out


# One load of a corpus by the code of `base` (a checkout; "" for this one): its CPU, the reader
# process's included (it is closed, so reaped, before the count), and a digest of what it read.
COMPARE = """
import hashlib, importlib.util, json, os, resource, sys, time, types
base, corpus = sys.argv[1], sys.argv[2]
if base:  # the situate packages of the checkout, not the installed ones
    pkg = types.ModuleType("situate"); pkg.__path__ = []; sys.modules["situate"] = pkg
    for sub in ("core", "storage", "tasks", "flows"):
        spec = importlib.util.spec_from_file_location(f"situate.{sub}", f"{base}/{sub}/__init__.py",
                                                      submodule_search_locations=[f"{base}/{sub}"])
        m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m)
from situate.tasks.corpus.load import load_corpus
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
c, t = cpu(), time.perf_counter()
loaded = load_corpus(corpus)
peak = {}
try:
    from situate.tasks.corpus import sandbox
    for r in list(sandbox._LIVE):  # the reader's high-water marks, before it leaves
        status = open(f"/proc/{r.proc.pid}/status").read()
        peak = {k: int(line.split()[1]) // 1024 for line in status.splitlines()
                for k in ("VmHWM", "VmPeak") if line.startswith(k + ":")}
    sandbox._close_all()
except ImportError:
    pass
cpu_s, wall = cpu() - c, time.perf_counter() - t
digest = hashlib.sha256()
for d in loaded.documents:
    chunks = [(x.index, x.text, x.start, x.where) for x in d.chunks]
    digest.update(json.dumps([d.id, d.text, d.metadata, chunks], sort_keys=True, default=str).encode())
print(json.dumps({"cpu_seconds": cpu_s, "wall_seconds": wall, "documents": len(loaded.documents),
                  "chunks": loaded.chunk_count, "units": dict(loaded.units), "skipped": dict(loaded.skipped),
                  "digest": digest.hexdigest()[:16], "reader_peak_mib": peak}))
"""


def compare(corpus: Path, base: Path, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    """The loader of `base` (today's code) and this one over the same corpus, interleaved
    `rounds` times, each load in a fresh process; CPU of every process (the reader's too)."""
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
    load = [round(os.getloadavg()[0], 2)]
    for _ in range(rounds):
        for name in ("base", "new"):
            # Today's code read workbooks without defusedxml (not installed then).
            extra = {"OPENPYXL_DEFUSEDXML": "False"} if name == "base" else {}
            r = subprocess.run([sys.executable, "-c", COMPARE, str(base) if name == "base" else "",
                                str(corpus)], cwd=ROOT, env={**env, **extra}, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"loading with the {name} code failed:\n{r.stderr[-3000:]}")
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(name, json.dumps(runs[name][-1]), flush=True)
        load.append(round(os.getloadavg()[0], 2))
    pages = runs["new"][0]["units"].get("pages", 0)
    ratios = sorted(n["cpu_seconds"] / b["cpu_seconds"]
                    for b, n in zip(runs["base"], runs["new"], strict=True))
    out: dict[str, Any] = {"corpus": str(corpus), "rounds": rounds, "pages": pages,
                           "load_average": load, "cpu_ratios_new_over_base": [round(x, 3) for x in ratios],
                           "same_output": runs["base"][0]["digest"] == runs["new"][0]["digest"]}
    for name, rs in runs.items():
        cpu = sorted(r["cpu_seconds"] for r in rs)
        out[name] = {"cpu_seconds": [round(x, 2) for x in cpu],
                     "files_per_cpu_second": round(len(list(corpus.rglob("*.*"))) / cpu[len(cpu) // 2], 2),
                     "pages_per_cpu_second": round(pages / cpu[len(cpu) // 2], 1) if pages else None,
                     "documents": rs[0]["documents"], "chunks": rs[0]["chunks"], "digest": rs[0]["digest"],
                     "reader_peak_mib": rs[0]["reader_peak_mib"]}
    return out


def subset(corpus: Path, out: Path, files: int) -> Path:
    """Every n-th file of each format (hard links), `files` in all, the same mix."""
    all_files = sorted(p for p in corpus.rglob("*") if p.is_file())
    step = max(1, len(all_files) // files)
    for p in all_files[::step][:files]:
        target = out / p.relative_to(corpus)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(p, target)
    return out


def code_version(paths: tuple[str, ...] = ("tasks/corpus",)) -> str:
    """The commit measured, and the files under `paths` changed since it, if any (others edit
    them while benchmarks run)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT,
                           capture_output=True, text=True).stdout.split()
    return head + (" + uncommitted " + ",".join(sorted(set(dirty) - {"M", "??", "A", "D"}))
                   if dirty else "")


def markdown_tables(results: dict[str, Any]) -> str:
    """Rates per CPU second (what reading costs, whatever else the machine runs) and per wall
    second (what this run saw), the ingest's reading share both ways, the long PDF."""
    lines = ["| format | files | MB | units | chunks | readers alone: files/s | MB/s | units/s | "
             "read + chunk (load_corpus): files/s | MB/s | units/s | wall files/s (read + chunk) | "
             "import + first file s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fmt, r in results.get("alone", {}).items():
        unit = next(iter(r["units"]), "")
        lines.append(
            f"| {fmt} | {r['files']} | {r['mb']} | {r['reader_units'] or ''} {unit} | {r['chunks']} | "
            f"{r['reader_cpu_files_per_second']} | {r['reader_cpu_mb_per_second']} | "
            f"{r.get('reader_cpu_units_per_second', '')} | {r['load_cpu_files_per_second']} | "
            f"{r['load_cpu_mb_per_second']} | {r.get('load_cpu_units_per_second', '')} | "
            f"{r['load_files_per_second']} | {r['import_seconds']} + {r['first_file_seconds']} |")
    text = "\n".join(lines) + "\n"
    if results.get("ingest"):
        i = results["ingest"]
        text += ("\n| ingest of | documents | chunks | wall s | reading wall s (scan + stream) | "
                 "reading share of wall | CPU s (all processes) | reading CPU s | reading share of CPU | "
                 "chunks/s | stages (summary) |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
                 f"| {i['corpus']} | {i['documents']} | {i['chunks']} | {i['wall_seconds']} | "
                 f"{i['reading_seconds']} ({i['scan_read_seconds']} + {i['stream_read_seconds']}) | "
                 f"{100 * i['reading_share']:.1f}% | {i.get('cpu_seconds', '')} | "
                 f"{i.get('reading_cpu_seconds', '')} | {100 * i.get('reading_cpu_share', 0):.1f}% | "
                 f"{i['chunks_per_second']} | "
                 f"{', '.join(f'{k} {v:.1f}' for k, v in (i['stage_seconds'] or {}).items())} |\n")
    if results.get("long_pdf"):
        text += ("\n| 2,000-page PDF | pages | wall s | pages/s | CPU s | pages/CPU s | baseline RSS MiB | "
                 "peak RSS MiB | growth MiB |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in results["long_pdf"]:
            what = "read page by page (readers)" if r["mode"] == "reader" else "load_corpus (read + chunk)"
            text += (f"| {what} | {r['pages']} | {r['seconds']} | {r['pages_per_second']} | "
                     f"{r.get('cpu_seconds', '')} | {r.get('pages_per_cpu_second', '')} | "
                     f"{r['baseline_rss_mib']} | {r['peak_rss_mib']} | {r['growth_mib']} |\n")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="generate the corpus here and keep it (reused if there)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every format's file count")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--ingest-files", type=int, default=0,
                    help="ingest only this many files of the corpus (the same mix); 0: all")
    ap.add_argument("--parts", nargs="+", default=["alone", "long", "ingest"],
                    choices=["alone", "long", "ingest", "compare"], help="what to measure")
    ap.add_argument("--base", type=Path, help="compare: a checkout of the reference code (git worktree "
                                              "add DIR COMMIT), loaded against this one, interleaved")
    ap.add_argument("--rounds", type=int, default=3, help="compare: loads of each code, interleaved")
    ap.add_argument("--compare-dir", help="compare: the part of the corpus to load (e.g. pdf); default all")
    ap.add_argument("--update", action="store_true",
                    help="keep the other parts of an earlier --out (the same corpus, checked)")
    ap.add_argument("--repeat", type=int, default=2, help="reading passes per format; the fastest counts")
    ap.add_argument("--long-pages", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "reading.json")
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier --out and stop")
    args = ap.parse_args()
    if args.render:
        print(markdown_tables(json.loads(Path(args.render).read_text())), end="")
        return
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        work = args.keep or tmp / "reading"
        corpus = work / "corpus"
        mix = {fmt: max(1, round(n * args.scale)) for fmt, n in MIX.items()}
        results: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                                              f"Python {platform.python_version()}",
                                   "command": " ".join([Path(sys.executable).name, *sys.argv]),
                                   "mix": mix}
        made = work / "generated.json"  # a kept corpus of the same mix and seed is reused
        if made.exists() and json.loads(made.read_text())["mix"] == mix | {"seed": args.seed}:
            results["generated"] = json.loads(made.read_text())["generated"]
        else:
            if corpus.exists():
                shutil.rmtree(corpus)  # another mix or seed: made again from nothing
            results["generated"] = generate(corpus, mix, args.seed)
            made.write_text(json.dumps({"mix": mix | {"seed": args.seed},
                                        "generated": results["generated"]}))
        if args.update and args.out.exists():
            earlier = json.loads(args.out.read_text())
            if earlier.get("generated") != results["generated"]:
                sys.exit(f"{args.out} was measured on another corpus: run without --update")
            results = {**earlier, **{k: v for k, v in results.items() if k != "command"},
                       "commands": earlier.get("commands", [earlier.get("command")]) + [results["command"]]}
        results["code"] = code_version()
        env = {**os.environ, "SITUATE_MILVUS_URI": f"{tmp}/milvus.db", "SITUATE_CACHE_DIR": f"{tmp}/c",
               "SITUATE_RESULTS_DIR": f"{tmp}/r"}
        env.pop("ANTHROPIC_API_KEY", None)
        if "alone" in args.parts:
            results["alone"] = {}
            for fmt in mix:
                results["alone"][fmt] = read_alone(corpus / fmt, env, args.repeat)
                print("read", fmt, json.dumps(results["alone"][fmt]), flush=True)
        if "long" in args.parts:
            long = work / f"long-{args.long_pages}.pdf"
            if not long.exists():
                t = time.perf_counter()
                make_pdf(long, Text(random.Random(args.seed), stdlib_sentences()), args.long_pages,
                         title="A very long manual", page_chars=3250)
                print("generated long pdf", round(time.perf_counter() - t, 1), "s", flush=True)
            results["long_pdf_bytes"] = long.stat().st_size
            results["long_pdf"] = long_pdf(long, env)
        if "compare" in args.parts:
            if args.base is None:
                sys.exit("--parts compare needs --base DIR (a checkout of the reference commit)")
            where = corpus / args.compare_dir if args.compare_dir else corpus
            results.setdefault("compare", {})[args.compare_dir or "all"] = compare(
                where, args.base.resolve(), args.rounds, env)
            print("compare", json.dumps(results["compare"]), flush=True)
        if "ingest" in args.parts:
            target = corpus if not args.ingest_files else subset(corpus, tmp / "subset", args.ingest_files)
            results["ingest"] = {"corpus": "all" if not args.ingest_files
                                 else f"{args.ingest_files} files, the same mix", **ingest(target, tmp, env)}
            print("ingest", json.dumps(results["ingest"]), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(markdown_tables(results), end="")


if __name__ == "__main__":
    main()
