"""The lexical index built from a collection's rows (`situate.storage.lexical`), code against
code: what a process that finds the index missing or stale spends to build it (a `.db` copied
without it, a server reached at another address).

Each work directory is one that `bench_search_scale.py` wrote (its `milvus` data directory holds
the `scale` collection). A `milvus-lite server` is started on it, and each variant
(NAME=CHECKOUT: a checkout of situate, its folders imported as `situate.*`) builds the index from
the rows in a process of its own, the variants in turn, REPEAT times (the order rotating):

- seconds to read every row through the store and seal the index, and the process's CPU in them
  (the rest is Lite's server building the rows);
- the process's RSS growth held once the index is sealed (the index and what the allocator
  keeps), and its peak during the build (sampled every 50 ms);
- the index's rows, terms and top 10 of a few queries, which every variant must give alike.

    .venv/bin/python benchmarks/bench_lexical_rebuild.py --reuse DIR [DIR ...]
        --variant before=/tmp/base --variant after=. [--repeat 1]
        [--note "before=commit 04fc04d: ..."] [--out benchmarks/results/lexical-rebuild.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUERIES = ("lease queue worker", "retry backoff timeout", "parse config file", "index segment merge")

# Run in the variant's process: its own folders first on sys.path, as the package `situate`.
CHILD = r"""
import json, os, sys, threading, time
uri, collection = sys.argv[1], sys.argv[2]

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

from situate.storage.lexical import Bm25
from situate.storage.milvus import MilvusStore
import scipy.sparse  # noqa: F401  imported before the memory is counted

store = MilvusStore(uri)
store.load(collection)
leg = store._lexical_leg(collection)
peak, stop = [0.0], threading.Event()

def watch():
    while not stop.wait(0.05):
        peak[0] = max(peak[0], rss())

before = rss()
threading.Thread(target=watch, daemon=True).start()
started, cpu = time.perf_counter(), os.times()
index = Bm25()
index.upsert(leg._rows())
index.seal()
took, done = time.perf_counter() - started, os.times()
held = rss() - before
stop.set()
print(json.dumps({
    "rows": index.rows, "terms": int(index.matrix.nnz), "seconds": round(took, 2),
    "client_cpu_s": round(done.user - cpu.user + done.system - cpu.system, 2),
    "held_mib": round(held, 1), "peak_mib": round(max(peak[0], rss()) - before, 1),
    "top10": {q: [i for i, _ in index.top(q, 10)] for q in json.loads(sys.argv[3])}}))
store.close()
"""


def package_links(checkout: Path, into: Path) -> Path:
    """A folder holding `situate/` made of `checkout`'s folders (setup.py's FOLDERS), to put first
    on a process's sys.path: that checkout's code is then `situate.*`, whatever is installed."""
    text = (checkout / "setup.py").read_text()
    line = next(x for x in text.splitlines() if x.startswith("FOLDERS = ("))
    folders = [f.strip().strip('"') for f in line.split("(", 1)[1].rstrip(")").split(",") if f.strip()]
    package = into / "situate"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for folder in folders:
        (package / folder).symlink_to(checkout / folder)
    return into


def build(links: Path, uri: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(links))
    done = subprocess.run([sys.executable, "-c", CHILD, uri, "scale", json.dumps(QUERIES)],
                          capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(),
                          check=False)
    if done.returncode:
        sys.exit(f"build failed: {done.stderr[-2000:]}")
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reuse", nargs="+", required=True, metavar="WORKDIR")
    p.add_argument("--variant", action="append", required=True, metavar="NAME=CHECKOUT")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--note", action="append", default=[], metavar="NAME=TEXT",
                   help="what variant NAME is (its commit, what it changes), kept with the results")
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/lexical-rebuild.json"))
    a = p.parse_args()
    from tests.fakes.milvus_server import MilvusServer

    scratch = Path(tempfile.mkdtemp(prefix="lexical-rebuild-"))
    variants = []
    for spec in a.variant:
        name, _, checkout = spec.partition("=")
        variants.append((name, package_links(Path(checkout).resolve(), scratch / name)))
    results = []
    for work in map(Path, a.reuse):
        server = MilvusServer(work / "milvus", timeout=1800)
        started = time.perf_counter()
        server.start()
        row: dict = {"workdir": str(work), "server_start_s": round(time.perf_counter() - started, 1),
                     "runs": {name: [] for name, _ in variants}}
        try:
            for r in range(a.repeat):
                turn = variants[r % len(variants):] + variants[:r % len(variants)]
                for name, links in turn:
                    run = build(links, server.uri)
                    print(f"{work.name} {name}: {run['rows']:,} rows in {run['seconds']} s "
                          f"(client CPU {run['client_cpu_s']} s), held +{run['held_mib']} MiB, "
                          f"peak +{run['peak_mib']} MiB", flush=True)
                    row["runs"][name].append(run)
        finally:
            server.stop()
        first = row["runs"][variants[0][0]][0]
        for name, runs in row["runs"].items():
            for run in runs:
                if (run["rows"], run["terms"], run["top10"]) != (
                        first["rows"], first["terms"], first["top10"]):
                    sys.exit(f"{work.name}: {name} built another index than {variants[0][0]}")
        row["chunks"] = first["rows"]
        results.append(row)
    out = {"benchmark": "lexical-rebuild", "date": time.strftime("%Y-%m-%d"),
           "command": "benchmarks/bench_lexical_rebuild.py " + " ".join(sys.argv[1:]),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                      f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} "
                      "at the end (this run's own processes included)",
           "variants": [name for name, _ in variants],
           "notes": dict(n.partition("=")[::2] for n in a.note), "results": results}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
