"""The GPU figures, in one run on a machine with a GPU: the default's chunks/s on the GPU against
the same machine's CPU cores, and a 100k-chunk ingest end to end.

benchmarks/gpu/README.md says how to get situate onto a GPU machine that has no network (the
device tool's) and run this there. Each part is merged into `--out` as soon as it is done, so a
run stopped at its time limit keeps what it measured. In order of importance:

`speed`: bench_scale's generated corpus (`--texts` chunks), each chunk with its structural
context as an ingest embeds it, embedded as an ingest embeds a window (`flows.ingest.embed`:
longest first, calls of at least the model's forward batch) by the default (`--device auto`:
torch fp16 on the GPU), `--rounds` rounds; then on the CPU cores, by the CPU's default backend
(openvino, exported from the packaged weights on first use: the time it took is recorded) on
`--cpu-texts` of the texts. chunks/s of each, and the GPU's ratio over the CPU.

`ingest`: `situate ingest` of bench_scale's corpus of `--chunks` chunks (after a small ingest that makes
Prefect's database, as on any run after a user's first) with every setting at its
default (structural contexts, Milvus Lite file, `--device auto`): wall time, the process tree's
peak RSS, rows; then a process that only embeds the same texts on the GPU (as the e2e part of
bench_backends.py does on the CPU), for the ratio ingest / embedding alone.

`batch`: the GPU's texts per forward pass (64, 256, 1024; each in its own model process): what a
later default should be.

`reference`: torch fp32 on the CPU cores as situate embedded before it had backends (corpus
order, calls of 64, batches of 32) on `--cpu-texts` texts: the reference of every ratio on the
benchmarks page.

    python benchmarks/bench_gpu.py --out $OUT/gpu.json          # on the GPU machine
    python benchmarks/bench_gpu.py --smoke --device cpu --out /tmp/gpu.json   # anywhere: small
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_backends import SITUATE, machine, merge, scale_texts, vm_hwm  # noqa: E402


def gpu() -> dict[str, Any]:
    """The GPU as nvidia-smi and torch see it (empty without one)."""
    found: dict[str, Any] = {}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        found["nvidia_smi"] = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    import torch

    found["torch"] = torch.__version__
    found["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name(0)
    return found


def rate(embedder: Any, texts: list[str]) -> float:
    from situate.core.settings import get_settings
    from situate.flows.ingest import embed

    size = get_settings().window  # as an ingest embeds its windows
    t = time.perf_counter()
    for i in range(0, len(texts), size):
        embed(embedder, texts[i:i + size])
    return len(texts) / (time.perf_counter() - t)


def loaded(backend: str, device: str, cache: str, batch: int = 0) -> tuple[Any, Any, float]:
    from situate.tasks.embedders.base import Embedders
    from situate.tasks.embedders.runtime import Runtime

    embedders = Embedders()
    t = time.perf_counter()
    e = embedders.get("minilm", Runtime(backend, device, cache, batch=batch))
    e.embed_documents(["warm up"] * 8)
    return embedders, e, round(time.perf_counter() - t, 1)


def peak(e: Any) -> float:
    pid = next(iter(e._function._pool._processes))  # the model process
    return round(vm_hwm(pid) / 2**20, 1)


def part_speed(args: argparse.Namespace, texts: list[str], out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"texts": len(texts), "cpu_texts": min(len(texts), args.cpu_texts)}
    embedders, e, seconds = loaded("auto", args.device, args.cache)
    rounds = [round(rate(e, texts), 1) for _ in range(args.rounds)]
    result["default"] = {**e.info, "forward_batch": e.forward_batch, "load_seconds": seconds,
                         "rounds": rounds, "chunks_per_second": sorted(rounds)[len(rounds) // 2],
                         "model_process_peak_rss_mib": peak(e)}
    embedders.release()
    print("speed default", result["default"], flush=True)
    merge(out, "speed", result)
    cpu_texts = texts[:args.cpu_texts]
    embedders, e, seconds = loaded("auto", "cpu", args.cache)  # the CPU's default backend
    result["cpu_default"] = {**e.info, "load_seconds": seconds, "cores": len(os.sched_getaffinity(0)),
                             "chunks_per_second": round(rate(e, cpu_texts), 1),
                             "model_process_peak_rss_mib": peak(e)}
    embedders.release()
    result["ratio_default_over_cpu_default"] = round(
        result["default"]["chunks_per_second"] / result["cpu_default"]["chunks_per_second"], 2)
    print("speed cpu default", result["cpu_default"], flush=True)
    merge(out, "speed", result)
    return result


def _checked(run: Any) -> Any:
    """bench_backends' timed runs exit on a failure; here a failed part is recorded and the next
    parts still run."""
    try:
        return run()
    except SystemExit as e:
        raise RuntimeError(str(e)) from None


def part_ingest(args: argparse.Namespace, out: Path) -> None:
    from bench_backends import _embed_only, _timed, codebase_texts
    from bench_scale import write_corpus

    work = Path(tempfile.mkdtemp(prefix="situate-gpu-"))
    corpus = work / "corpus.jsonl"
    write_corpus(corpus, args.chunks)
    cache = str(Path(args.cache).resolve())
    env = {**os.environ, "SITUATE_CACHE_DIR": cache, "PREFECT_HOME": str(work / "prefect"),
           "SITUATE_RESULTS_DIR": str(work / "results"), "SITUATE_DEVICE": args.device}
    # Prefect makes its database on a PREFECT_HOME's first run (once per machine and user): a
    # small ingest first, so that the timed one is any run after a user's first.
    small = work / "first-documents.jsonl"
    with corpus.open() as f:
        small.write_text("".join(line for _, line in zip(range(8), f, strict=False)))
    subprocess.run([SITUATE, "ingest", str(small), "--collection", "warm", "--milvus-uri",
                    str(work / "warm.db")], env=env, cwd=work, capture_output=True, check=True)
    summary = work / "summary.json"
    cmd = [SITUATE, "ingest", str(corpus), "--collection", "gpu", "--milvus-uri",
           str(work / "gpu.db"), "--json", str(summary)]
    timed, stdout = _checked(lambda: _timed(cmd, env, work))
    done = json.loads(summary.read_text())
    result: dict[str, Any] = {"chunks": args.chunks, "command": " ".join(cmd[1:3]) + " ...",
                              **timed, "rows": done["rows"], "seconds": done["seconds"],
                              **{k: done.get(k) for k in ("device", "backend", "precision")},
                              "stdout": stdout[-2000:]}
    print("ingest", {k: v for k, v in result.items() if k != "stdout"}, flush=True)
    merge(out, "ingest", result)
    texts = work / "texts.json"  # what the ingest embedded: each chunk with its structural context
    texts.write_text(json.dumps(codebase_texts(corpus)))
    result["embed_only"] = _checked(lambda: _embed_only(texts, "auto", "now", cache, env, work,
                                                        device=args.device))
    result["ratio_ingest_over_embed_only"] = round(
        result["wall_seconds"] / result["embed_only"]["wall_seconds"], 3)
    print("embed only", result["embed_only"], result["ratio_ingest_over_embed_only"], flush=True)
    merge(out, "ingest", result)


def part_batch(args: argparse.Namespace, texts: list[str], out: Path) -> None:
    result: dict[str, Any] = {}
    for batch in (64, 256, 1024):
        embedders, e, seconds = loaded("auto", args.device, args.cache, batch=batch)
        result[str(batch)] = {"chunks_per_second": round(rate(e, texts), 1),
                              "forward_batch": e.forward_batch, **e.info}
        embedders.release()
        print("batch", batch, result[str(batch)], flush=True)
        merge(out, "batch", result)


def part_reference(args: argparse.Namespace, texts: list[str], out: Path) -> None:
    embedders, e, seconds = loaded("torch", "cpu", args.cache, batch=32)
    cpu_texts = texts[:args.cpu_texts]
    t = time.perf_counter()
    for i in range(0, len(cpu_texts), 64):  # as situate embedded before: corpus order, calls of 64
        e.embed_documents(cpu_texts[i:i + 64], batch_size=64)
    result = {"texts": len(cpu_texts), **e.info,
              "chunks_per_second": round(len(cpu_texts) / (time.perf_counter() - t), 1),
              "description": "torch fp32 on the CPU as situate ran it before: corpus order, calls "
                             "of 64, batches of 32"}
    embedders.release()
    print("reference", result, flush=True)
    merge(out, "reference", result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/gpu.json")
    parser.add_argument("--cache", default="data/cache")
    parser.add_argument("--device", default="auto", help="where the default runs (auto: the GPU)")
    parser.add_argument("--texts", type=int, default=10_000)
    parser.add_argument("--cpu-texts", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--parts", default="speed,ingest,batch,reference")
    parser.add_argument("--smoke", action="store_true",
                        help="small sizes (300 texts, 200 on the CPU, a 2,000-chunk ingest)")
    args = parser.parse_args()
    if args.smoke:
        args.texts, args.cpu_texts, args.chunks, args.rounds = 300, 200, 2_000, 1
    out = Path(args.out)
    merge(out, "run", {"command": " ".join(["benchmarks/bench_gpu.py", *sys.argv[1:]]),
                       "started": time.strftime("%Y-%m-%d %H:%M"), "gpu": gpu(),
                       "machine": machine()})
    parts = args.parts.split(",")
    texts = scale_texts(args.texts) if {"speed", "batch", "reference"} & set(parts) else []
    failed = []
    for part in parts:
        t = time.perf_counter()
        try:  # a part that fails is recorded, and the next ones still run
            if part == "speed":
                part_speed(args, texts, out)
            elif part == "ingest":
                part_ingest(args, out)
            elif part == "batch":
                part_batch(args, texts, out)
            elif part == "reference":
                part_reference(args, texts, out)
        except Exception:
            failed.append(part)
            merge(out, f"{part}_failed", {"traceback": traceback.format_exc()[-4000:]})
            traceback.print_exc()
        print(f"part {part} took {time.perf_counter() - t:.0f} s", flush=True)
    if failed:
        sys.exit(f"failed: {', '.join(failed)} (their tracebacks are in {out})")


if __name__ == "__main__":
    main()
