"""Embedding backends side by side: speed, memory and quality of every local-model setting.

Three parts, each writing into one result file (`--out`, merged, so the parts can run apart):

`speed`: every backend (`situate.tasks.embedders.runtime.BACKENDS`) loaded in its own model
process, as an ingest loads it; then `--rounds` rounds over the codebase's chunk texts (context
and chunk, as an ingest embeds them with structural contexts), backends interleaved and their
order rotated each round. chunks/s is the median round's; ratio is over torch fp32's. Peak RSS is
each model process's own high-water mark (VmHWM).

`quality`: for each corpus (NAME=CORPUS,EVAL_SET) and backend, the real commands: `situate
ingest CORPUS --context structural --backend B` into a Milvus Lite file of its own, then `situate
evaluate --modes dense,hybrid` (queries embedded as the collection records: the same backend).

`e2e`: the 10k-chunk corpus of benchmarks/bench_scale.py: chunks/s of an embed-only process for
each of `--e2e-backends` (a process that reads the texts and embeds them, nothing else), then
`situate ingest` of the same corpus with the default backend; each with its process tree's peak
RSS. The ratios: ingest over torch fp32 embed-only (the reference: what situate did before), and
over embed-only with the default.

    flock -x /tmp/situate-cpu.lock .venv/bin/python benchmarks/bench_backends.py speed \\
        --rounds 3 --out benchmarks/results/backends.json
    .venv/bin/python benchmarks/bench_backends.py quality \\
        --corpus codebase=$CODEBASE/codebase_chunks.json,$CODEBASE/evaluation_set.jsonl \\
        --corpus nodedocs=/tmp/nodesynth/corpus,/tmp/nodesynth/eval.jsonl \\
        --out benchmarks/results/backends.json

(`situate synth /tmp/nodedocs --out /tmp/nodesynth --generator held-out --n 200` made the second
corpus and its eval set from 19 pages of the Node.js API docs in /usr/share/doc/nodejs/api:
child_process, vm, assert, events, dns, net, url, perf_hooks, worker_threads, zlib, readline,
modules, os, dgram, cluster, repl, path, timers, console.)
    flock -x /tmp/situate-cpu.lock .venv/bin/python benchmarks/bench_backends.py e2e \\
        --out benchmarks/results/backends.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SITUATE = str(Path(sys.executable).parent / "situate")
CODEBASE = ROOT.parent / "shared" / "datasets" / "codebase"


def machine() -> dict[str, Any]:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "platform": platform.platform()}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def merge(out: Path, part: str, data: dict[str, Any]) -> None:
    current = json.loads(out.read_text()) if out.exists() else {}
    current.setdefault("machine", machine())
    current[part] = data
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(current, indent=1) + "\n")


def codebase_texts() -> list[str]:
    """The codebase's chunks as an ingest with structural contexts embeds them (context, then
    the chunk: `Situated.indexed_text`)."""
    from situate.tasks.contexts.base import ContextConfig, get_contextualizer
    from situate.tasks.corpus.load import load_corpus

    contextualizer = get_contextualizer(ContextConfig("structural"))
    texts = []
    for doc in load_corpus(str(CODEBASE / "codebase_chunks.json")).documents:
        result = contextualizer.situate(doc, list(doc.chunks))
        texts.extend(x.indexed_text for x in result.situated)
    return texts


def vm_hwm(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cmd_speed(args: argparse.Namespace) -> None:
    from situate.tasks.embedders.base import Embedders
    from situate.tasks.embedders.runtime import BACKENDS, Runtime

    texts = codebase_texts()[::args.every]
    names = args.backends.split(",") if args.backends else list(BACKENDS)
    cache = Path(args.cache)
    embedders = Embedders()
    loaded = {}
    prepare = {}
    for name in names:
        t = time.perf_counter()
        e = embedders.get("minilm", Runtime(name, "cpu", str(cache)))
        e.embed_documents(texts[:8])
        loaded[name] = e
        prepare[name] = round(time.perf_counter() - t, 1)
        print(f"{name}: loaded in {prepare[name]} s", flush=True)
    rounds: dict[str, list[float]] = {n: [] for n in names}
    load_before = load()
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t = time.perf_counter()
            loaded[name].embed_documents(texts, batch_size=64)
            rate = len(texts) / (time.perf_counter() - t)
            rounds[name].append(round(rate, 2))
            print(f"round {r + 1} {name}: {rate:.1f} chunks/s (load {load()})", flush=True)
    load_after = load()
    ref = statistics.median(rounds["torch"]) if "torch" in rounds else None
    result = {}
    for name in names:
        pid = next(iter(loaded[name]._function._pool._processes))  # the model process
        median = statistics.median(rounds[name])
        result[name] = {"chunks_per_second": round(median, 1), "rounds": rounds[name],
                        "ratio_to_torch": round(median / ref, 2) if ref else None,
                        "peak_rss_mib": round(vm_hwm(pid) / 2**20, 1),
                        "load_seconds": prepare[name], **loaded[name].info,
                        "description": BACKENDS[name].description}
    embedders.release()
    merge(Path(args.out), "speed", {
        "command": " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%d %H:%M"), "texts": len(texts), "every": args.every,
        "load_before": load_before, "load_after": load_after, "backends": result})


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def cmd_quality(args: argparse.Namespace) -> None:
    from situate.tasks.embedders.runtime import BACKENDS

    names = args.backends.split(",") if args.backends else list(BACKENDS)
    work = Path(tempfile.mkdtemp(prefix="situate-backends-"))
    env = {**os.environ, "SITUATE_CACHE_DIR": str(Path(args.cache).resolve()),
           "PREFECT_HOME": str(work / "prefect"), "SITUATE_RESULTS_DIR": str(work / "results")}
    result: dict[str, Any] = {}
    started = time.strftime("%Y-%m-%d %H:%M")
    for spec in args.corpus:
        corpus_name, _, paths = spec.partition("=")
        corpus, eval_set = paths.split(",")
        uri = str(work / f"{corpus_name}.db")
        per: dict[str, Any] = {}
        for name in names:
            collection = f"{corpus_name}_{name.replace('-', '_')}"
            t = time.perf_counter()
            summary = work / f"{collection}-ingest.json"
            run([SITUATE, "ingest", str(Path(corpus).resolve()), "--collection", collection,
                 "--context", "structural", "--backend", name, "--milvus-uri", uri,
                 "--json", str(summary)], env, work)
            ingest_seconds = time.perf_counter() - t
            out = work / f"{collection}.json"
            run([SITUATE, "evaluate", str(Path(eval_set).resolve()), "--collection", collection,
                 "--modes", "dense,hybrid", "--milvus-uri", uri, "--json", str(out)], env, work)
            report = json.loads(out.read_text())
            per[name] = {"pass_at_k": _pass_at_k(report),
                         "ingest": {k: v for k, v in json.loads(summary.read_text()).items()
                                    if k in ("rows", "device", "backend", "precision")},
                         "ingest_seconds": round(ingest_seconds, 1)}
            print(corpus_name, name, per[name]["pass_at_k"], flush=True)
            result[corpus_name] = {"corpus": corpus, "eval_set": eval_set, "backends": per}
            merge(Path(args.out), "quality", {  # after each: a stopped run keeps what it did
                "command": " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]]),
                "started": started, "corpora": result})


def _pass_at_k(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{mode: {"5": pass, ...}} from an evaluate --json report of one collection."""
    return {mode: {str(k): round(v, 2) for k, v in by_k.items()}
            for mode, by_k in report["pass_at_k"].items()}


EMBED_ONLY = """
import json, sys, time
from situate.tasks.embedders.base import Embedders
from situate.tasks.embedders.runtime import Runtime
texts = []
for line in open(sys.argv[1]):
    doc = json.loads(line)
    texts.extend(doc["text"].split("\\n\\n"))
e = Embedders().get("minilm", Runtime(sys.argv[2], "cpu", sys.argv[3]))
e.embed_documents(texts[:8])
t = time.perf_counter()
for i in range(0, len(texts), 64):
    e.embed_documents(texts[i:i + 64], batch_size=64)
print(json.dumps({"chunks": len(texts), "seconds": time.perf_counter() - t}))
"""


def cmd_e2e(args: argparse.Namespace) -> None:
    from bench_scale import TreeMemory, write_corpus

    work = Path(tempfile.mkdtemp(prefix="situate-e2e-"))
    corpus = work / "corpus.jsonl"
    write_corpus(corpus, args.chunks)
    cache = str(Path(args.cache).resolve())
    env = {**os.environ, "SITUATE_CACHE_DIR": cache, "PREFECT_HOME": str(work / "prefect"),
           "SITUATE_RESULTS_DIR": str(work / "results")}
    result: dict[str, Any] = {"chunks": args.chunks, "default": args.ingest_backends.split(",")[0],
                              "load_before": load()}
    command = " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]])
    started = time.strftime("%Y-%m-%d %H:%M")
    for name in args.e2e_backends.split(","):
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", EMBED_ONLY, str(corpus), name, cache],
                                env=env, cwd=work, stdout=subprocess.PIPE, text=True)
        with TreeMemory(proc.pid) as memory:
            out, _ = proc.communicate()
        wall = time.perf_counter() - t
        done = json.loads(out.strip().splitlines()[-1])
        result[f"embed_only_{name}"] = {
            "wall_seconds": round(wall, 1), "embed_seconds": round(done["seconds"], 1),
            "chunks_per_second": round(done["chunks"] / done["seconds"], 1),
            "peak_rss_mib": round(memory.peak / 2**20, 1)}
        print(name, result[f"embed_only_{name}"], flush=True)
        merge(Path(args.out), "e2e", {"command": command, "started": started, **result})
    for name in args.ingest_backends.split(","):
        t = time.perf_counter()
        proc = subprocess.Popen([SITUATE, "ingest", str(corpus), "--collection", "e2e",
                                 "--context", "structural", "--backend", name, "--milvus-uri",
                                 str(work / f"{name}.db"), "--json", str(work / f"{name}.json")],
                                env=env, cwd=work, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        with TreeMemory(proc.pid) as memory:
            _, err = proc.communicate()
        wall = time.perf_counter() - t
        if proc.returncode:
            sys.exit(f"ingest failed: {err[-2000:]}")
        summary = json.loads((work / f"{name}.json").read_text())
        result[f"ingest_{name}"] = {"wall_seconds": round(wall, 1),
                                    "rows": summary["rows"], "seconds": summary["seconds"],
                                    "backend": summary.get("backend"),
                                    "peak_rss_mib": round(memory.peak / 2**20, 1)}
        print(name, result[f"ingest_{name}"], flush=True)
        merge(Path(args.out), "e2e", {"command": command, "started": started, **result})
    result["load_after"] = load()
    merge(Path(args.out), "e2e", {"command": command, "started": started, **result})


def cmd_choose(args: argparse.Namespace) -> None:
    """The default: the fastest backend whose hybrid Pass@5/10/20 is within 0.5 points of torch
    fp32 at every k on every corpus, and dense within 1.0 (measured, from the file's parts)."""
    out = Path(args.out)
    d = json.loads(out.read_text())
    speed, corpora = d["speed"]["backends"], d["quality"]["corpora"]
    held, missed = [], {}
    for name, b in speed.items():
        if not all(name in c["backends"] for c in corpora.values()):
            continue
        worst = {"dense": 0.0, "hybrid": 0.0}
        for c in corpora.values():
            ref, got = c["backends"]["torch"]["pass_at_k"], c["backends"][name]["pass_at_k"]
            for mode in worst:
                worst[mode] = max(worst[mode], *(ref[mode][k] - got[mode][k] for k in ref[mode]))
        if worst["hybrid"] <= 0.5 and worst["dense"] <= 1.0:
            held.append((b["chunks_per_second"], name))
        else:
            missed[name] = worst
    rate, best = max(held)
    ratio = speed[best]["ratio_to_torch"]
    faster = sorted(((speed[n]["ratio_to_torch"], n) for n in missed
                     if speed[n]["ratio_to_torch"] > ratio), reverse=True)
    text = f"Default on the CPU: `{best}`, {ratio:.2f}× torch fp32, quality held on both corpora."
    if ratio < 2.0:
        text += " Nothing reached 2.0× with quality held."
    if faster:
        r, n = faster[0]
        text += (f" The fastest setting, `{n}` at {r:.2f}×, lost up to {missed[n]['dense']:.2f} "
                 f"points of dense and {missed[n]['hybrid']:.2f} of hybrid Pass@k: outside the "
                 "bounds (dynamic int8 quantizes each call's activations by their own range, and "
                 "this CPU has no VNNI to make int8 much faster than fp32).")
    d["default"] = {"backend": best, "ratio_to_torch": ratio, "text": text}
    out.write_text(json.dumps(d, indent=1) + "\n")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["speed", "quality", "e2e", "choose"])
    parser.add_argument("--backends", default="", help="comma-separated (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--every", type=int, default=1, help="speed: every Nth codebase text")
    parser.add_argument("--corpus", action="append", default=[], help="NAME=CORPUS,EVAL_SET")
    parser.add_argument("--cache", default="data/cache")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--e2e-backends", default="torch,onnx-int8")
    parser.add_argument("--ingest-backends", default="onnx-int8")
    parser.add_argument("--out", default="benchmarks/results/backends.json")
    args = parser.parse_args()
    {"speed": cmd_speed, "quality": cmd_quality, "e2e": cmd_e2e,
     "choose": cmd_choose}[args.part](args)


if __name__ == "__main__":
    main()
