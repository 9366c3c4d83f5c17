"""A cold `situate search` against a reference checkout's, in one run: wall time from the shell
(a new process each time: Python, the imports, the store opened, the model loaded, one query
answered, the exit) and the CPU time of the command with its model process.

Each code ingests the sample corpus (`data/sample/corpus`) into a Milvus Lite file of its own,
in a scratch folder of its own (as `make demo` does), then the two are run in turn, `--rounds`
times each after one round that only warms the file cache: the same query, the same collection
name, the same machine at the same time. The reference is another checkout's package: a folder
holding `situate/` (its `api`, `core`, ... folders, linked), run by this checkout's Python, so
that only situate's code differs. Both top hits are compared.

    git worktree add /tmp/ref 7e5dd2a
    mkdir -p /tmp/refpkg/situate && for f in api core flows integrations storage tasks; do
        ln -s /tmp/ref/$f /tmp/refpkg/situate/$f; done
    .venv/bin/python benchmarks/bench_search_start.py --reference /tmp/refpkg \\
        [--rounds 7] [--scratch /tmp/bss] [--out benchmarks/results/search-start.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERY = "How is the retry delay computed?"
# A command's main, run by `python -c` (the console script's own line): the CLI's module moved
# from situate.flows.cli to situate.cli.main, so the reference's is found in its package.
MAIN = ("import sys; from {module} import main; sys.argv[0] = 'situate'; "
        "sys.exit(main())")


def cli_module(package: Path | None) -> str:
    base = (package / "situate") if package else ROOT
    return "situate.cli.main" if (base / "cli" / "main.py").exists() else "situate.flows.cli"


def command(package: Path | None, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SITUATE_")}
    if package is not None:
        env["PYTHONPATH"] = str(package)
    return [sys.executable, "-c", MAIN.format(module=cli_module(package)), *args], env


def run(package: Path | None, folder: Path, *args: str) -> tuple[float, str]:
    """(wall seconds, stdout) of one command run in `folder`."""
    argv, env = command(package, *args)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=600)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:2])} in {folder} failed ({proc.returncode}): {err[-2000:]}")
    return wall, out


def timed(package: Path | None, folder: Path) -> tuple[float, float, str]:
    """One cold search: wall time, and CPU time from the children's rusage (the command and the
    model's process, which it waits for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, out = run(package, folder, "search", QUERY, "--collection", "sample", "--k", "5")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def top_hit(out: str) -> str:
    first = out.splitlines()[0].split()
    return " ".join(first[2:]) if len(first) > 2 else ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True, type=Path,
                   help="a folder holding the reference checkout's situate/ package")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--scratch", type=Path, default=Path("/tmp/situate-bench-search-start"))
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                   "search-start.json")
    a = p.parse_args()
    codes = {"reference": a.reference.resolve(), "this checkout": None}
    folders = {}
    for name, package in codes.items():
        folder = a.scratch / name.replace(" ", "-")
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "data" / "milvus.db").exists():
            print(f"{name}: ingesting the sample corpus", flush=True)
            run(package, folder, "ingest", str(ROOT / "data" / "sample" / "corpus"),
                "--collection", "sample")
        folders[name] = folder
    load_before = [round(x, 2) for x in os.getloadavg()]
    walls: dict[str, list[float]] = {name: [] for name in codes}
    cpus: dict[str, list[float]] = {name: [] for name in codes}
    tops: dict[str, set[str]] = {name: set() for name in codes}
    for i in range(a.rounds + 1):
        for name, package in codes.items():
            wall, cpu, out = timed(package, folders[name])
            tops[name].add(top_hit(out))
            if i:  # the first round warms the file cache
                walls[name].append(round(wall, 3))
                cpus[name].append(round(cpu, 3))
        print(f"round {i}: " + ", ".join(f"{n} {walls[n][-1] if i else '-'} s" for n in codes),
              flush=True)
    load_after = [round(x, 2) for x in os.getloadavg()]
    median = {n: statistics.median(v) for n, v in walls.items()}
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "query": QUERY, "rounds": a.rounds,
        "load_before": load_before, "load_after": load_after,
        "codes": {n: {"package": str(codes[n] or ROOT), "wall_s": walls[n],
                      "median_wall_s": median[n], "cpu_s": cpus[n],
                      "median_cpu_s": statistics.median(cpus[n]), "top_hits": sorted(tops[n])}
                  for n in codes},
        "ratio_median_wall": round(median["this checkout"] / median["reference"], 3),
        "ratio_median_cpu": round(statistics.median(cpus["this checkout"])
                                  / statistics.median(cpus["reference"]), 3),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"median wall: reference {median['reference']:.2f} s, this checkout "
          f"{median['this checkout']:.2f} s: {result['ratio_median_wall']}x; CPU "
          f"{result['ratio_median_cpu']}x; load {load_before} -> {load_after}; wrote {a.out}")


if __name__ == "__main__":
    main()
