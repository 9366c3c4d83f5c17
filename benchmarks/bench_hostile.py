"""One `situate ingest` over a folder of hostile files beside three ordinary ones (issue 32), with
the peak RSS of the command's whole process tree (sampled every 100 ms) and of each process in it.

The folder is `tests/hostile_files.hostile_folder`: links out of it (absolute, relative, /proc, a
directory), a FIFO, a file the user may not read (mode 000: readable anyway when run as root), the
PDFs (6,000 overlapping runs; a form drawn 10,000 and 10^6 times; a page tree of a million pages)
and the XLSX of internal entities.

    .venv/bin/python benchmarks/bench_hostile.py [--draws 10000,1000000] [SITUATE_READ_MEMORY=2GiB ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hostile_files import SECRET_MARK, hostile_folder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", default="10000,1000000",
                    help="the form-XObject PDFs to make, by draws; empty: no bomb at all")
    ap.add_argument("env", nargs="*", help="NAME=VALUE settings for the command")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="situate-hostile-"))
    draws = tuple(int(x) for x in args.draws.split(",") if x)
    corpus = hostile_folder(base, draws=draws, bombs=bool(draws))
    env = {**os.environ, "SITUATE_MILVUS_URI": str(base / "m.db"), "SITUATE_CACHE_DIR": str(base / "cache"),
           "SITUATE_RESULTS_DIR": str(base / "results"), **dict(kv.split("=", 1) for kv in args.env)}
    start = time.time()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "situate"), "ingest", str(corpus),
                             "--collection", "hostile", "--json", str(base / "summary.json")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    top = psutil.Process(proc.pid)
    peak, each = 0, {}
    while proc.poll() is None:
        total = 0
        try:
            for p in [top, *top.children(recursive=True)]:
                try:
                    rss = p.memory_info().rss
                    total += rss
                    name = " ".join(p.cmdline())[:90]
                    each[name] = max(each.get(name, 0), rss >> 20)
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.1)
    out, err = proc.communicate()
    summary = json.loads((base / "summary.json").read_text()) if proc.returncode == 0 else {}
    print(json.dumps({"exit": proc.returncode, "wall_seconds": round(time.time() - start, 1),
                      "peak_tree_rss_mib": peak >> 20, "peak_rss_mib_by_process": each,
                      "traceback": "Traceback" in out + err, "secret_in_output": SECRET_MARK in out + err,
                      "documents": summary.get("documents"), "skipped": summary.get("skipped"),
                      "load_average": round(os.getloadavg()[0], 2)}, indent=1))


if __name__ == "__main__":
    main()
