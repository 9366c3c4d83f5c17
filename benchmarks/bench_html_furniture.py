"""HTML furniture removal is linear in the page: CPU seconds to read pages of nested menus of
growing size, this tree's reader against another revision's (`--reference REV`), interleaved.

The pages are made here, by hand: a site's mega-menu, `ul.menu > li.menu-item > a` nested
`--depth` levels, repeated until the page has the size asked for, around one paragraph of
content (the paragraph must come out, the menus must not). Each size is read by each reader in
turn, `--repeat` times, in fresh processes (one import, one read, `time.process_time`); the
table gives the median and the spread, and seconds per MB (flat when linear).

    .venv/bin/python benchmarks/bench_html_furniture.py [--sizes 1 2 4 8] [--reference 89467a2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

READ = r"""
import importlib.util, json, sys, time
from pathlib import Path
if sys.argv[2] != "-":  # the reference reader, loaded in place of this tree's
    spec = importlib.util.spec_from_file_location("situate.tasks.corpus.readers.html", sys.argv[2])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
from situate.tasks.corpus.readers import read_document
start = time.process_time()
sections = list(read_document(Path(sys.argv[1]), max_bytes=10**9).sections)
elapsed = time.process_time() - start
text = "\n".join(s.text for s in sections)
print(json.dumps({"cpu": elapsed, "ok": "The page's own paragraph." in text and "Item 3" not in text}))
"""


def page(size: int, depth: int) -> str:
    parts = ["<html><body><div id='content'><h1>Title</h1><p>The page's own paragraph.</p></div>"]
    n = total = 0
    while total < size:
        menu = "".join(f"<ul class='menu'><li class='menu-item'><a href='/m{n}/{d}'>Item {d}</a>"
                       for d in range(depth)) + "</li></ul>" * depth
        parts.append(menu)
        total += len(menu)
        n += 1
    parts.append("<p>The closing paragraph.</p></body></html>")
    return "".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1, 2, 4, 8], help="page sizes, MB")
    ap.add_argument("--depth", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reference", default="", help="a git revision whose html.py to time beside")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        readers = {"this tree": "-"}
        if args.reference:
            ref = Path(tmp) / "reference_html.py"
            ref.write_text(subprocess.run(["git", "show", f"{args.reference}:tasks/corpus/readers/html.py"],
                                          cwd=ROOT, capture_output=True, text=True, check=True).stdout)
            readers[args.reference] = str(ref)
        times: dict[tuple[str, float], list[float]] = {}
        for mb in args.sizes:
            path = Path(tmp) / f"menus-{mb}.html"
            path.write_text(page(int(mb * 1_000_000), args.depth))
            for _ in range(args.repeat):
                for name, module in readers.items():  # interleaved
                    r = subprocess.run([sys.executable, "-c", READ, str(path), module], cwd=ROOT,
                                       capture_output=True, text=True)
                    if r.returncode != 0:
                        sys.exit(r.stderr[-2000:])
                    got = json.loads(r.stdout.strip().splitlines()[-1])
                    if not got["ok"]:
                        sys.exit(f"{name} read {path} wrong (content lost or menus kept)")
                    times.setdefault((name, mb), []).append(got["cpu"])
        print(f"| page | reader | CPU s (median, min-max of {args.repeat}) | CPU s per MB |")
        print("|---|---|---|---|")
        for mb in args.sizes:
            for name in readers:
                t = times[(name, mb)]
                med = statistics.median(t)
                print(f"| {mb:g} MB | {name} | {med:.2f} ({min(t):.2f}-{max(t):.2f}) | {med / mb:.2f} |")


if __name__ == "__main__":
    main()
