"""A packaged model on ONNX Runtime or OpenVINO: exported once from its own weights, cached,
optionally int8.

Why not sentence-transformers' `backend="onnx"`: it needs optimum-onnx, whose only release
requires transformers < 4.58, and sentence-transformers 6 requires transformers >= 5, so it would
cost a downgrade of both. Why not pymilvus-model's `OnnxEmbeddingFunction`: it embeds one text at a
time padded to the maximum length and downloads from the Hub. So the libraries' own tools do it
here, each for its step: `torch.onnx.export` exports the packaged weights (no network), with the
model's pooling and normalization in the graph; `onnxruntime.transformers.optimizer` fuses
BERT's attention, layer norms and GELU; `onnxruntime.quantization.quantize_dynamic` makes int8
weights; ONNX Runtime, or OpenVINO's CPU plugin (which reads the plain ONNX export itself and
makes its own fusions), runs it with the model's own tokenizer. Vectors match torch's to about
1e-6 (fp32; tests/test_embed_backends.py).

The export is kept in the user's model cache (`models/` under SITUATE_MODEL_CACHE, by default the
user's cache directory: `situate.tasks.embedders.runtime.model_cache_dir`), one for every process and
project of the user, named by the weights' sha256, the
backend's settings and the exporter's versions, so a change in any of them makes a new one. It is
prepared in a private temporary directory and renamed into place (atomic); runs that start
together on an empty cache take a lock file in turn, and the second finds the first's. The
manifest records the model file's size and sha256, checked on every load: a truncated or
corrupt file is set aside and prepared again.

Runs in the model's process (tasks/embedders/local.py); torch is imported only to export.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from situate.core.processes import usable_cores
from situate.core.records import batched
from situate.tasks.embedders.runtime import Backend
from situate.tasks.embedders.spans import in_groups

MODEL_FILE = "model.onnx"
MANIFEST = "manifest.json"
DIGESTS = "digests.json"  # under models/: files' sha256 by their stat (`known_sha256`)
OPENVINO_CACHE = "openvino-cache"  # OpenVINO's compiled queries' runner, inside an export
OPSET = 17
FORMAT = 1  # of this module's exports: bumped when how they are made changes


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def known_sha256(path: Path, memo: Path) -> str:
    """`path`'s sha256, read from `memo` (a JSON file of digests by path) while the file's
    device, inode, size and change times are the ones recorded with it, else computed and
    recorded: hashing the 90 MB weights and the 90 MB export cost every search's start 0.3 s of
    CPU. Any write to the file changes its ctime, which no one can set back; a memo that cannot
    be read or written only means hashing again."""
    st = path.stat()
    stamp = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    name = str(path.resolve())
    try:
        known = json.loads(memo.read_text())
        entry = known.get(name) if isinstance(known, dict) else None
    except (OSError, ValueError):
        known, entry = {}, None
    if isinstance(entry, dict) and entry.get("stat") == stamp and isinstance(entry.get("sha256"), str):
        return str(entry["sha256"])
    digest = sha256_file(path)
    known = {k: v for k, v in (known if isinstance(known, dict) else {}).items()
             if Path(k).exists()}  # files gone (an export set aside) leave the memo
    known[name] = {"stat": stamp, "sha256": digest}
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=f".{memo.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(known, f)
        os.replace(tmp, memo)  # atomic: processes starting together write whole files
    except OSError:
        pass
    return digest


def weights_files(model_dir: Path) -> list[Path]:
    found = sorted(p for p in model_dir.iterdir()
                   if p.suffix in (".safetensors", ".bin") and p.is_file())
    if not found:
        raise FileNotFoundError(f"no weights (.safetensors or .bin) in {model_dir}")
    return found


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def export_key(model_dir: Path, backend: Backend, memo: Path | None = None) -> dict[str, Any]:
    """Every input that changes the exported file (the weights' digests kept in `memo`)."""
    def digest(p: Path) -> str:
        return sha256_file(p) if memo is None else known_sha256(p, memo)

    return {"format": FORMAT, "weights": {p.name: digest(p) for p in weights_files(model_dir)},
            "fuse": backend.fuse,
            "quantization": backend.quantization.key() if backend.quantization else None,
            "opset": OPSET, "torch": _version("torch"), "onnxruntime": _version("onnxruntime"),
            "onnx": _version("onnx")}


def export_dir(cache_dir: Path, model_name: str, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    slug = "".join(c if c.isalnum() or c in "-." else "-" for c in model_name)[:60]
    return cache_dir / "models" / f"{slug}-{digest}"


def valid(place: Path) -> bool:
    """Whether `place` holds a finished export whose model file is the one its manifest names
    (its digest kept beside the exports: `known_sha256`)."""
    try:
        manifest = json.loads((place / MANIFEST).read_text())
        model = place / MODEL_FILE
        return bool(model.stat().st_size == manifest["bytes"]
                    and known_sha256(model, place.parent / DIGESTS) == manifest["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def prepared(model_dir: Path, model_name: str, backend: Backend,
             cache_dir: Path) -> tuple[Path, str | None]:
    """The ONNX model of `backend` for the model in `model_dir`, prepared if it is not cached (or
    not intact); with a line saying what was prepared and how long it took, else None."""
    key = export_key(model_dir, backend, cache_dir / "models" / DIGESTS)
    place = export_dir(cache_dir, model_name, key)
    if valid(place):
        return place / MODEL_FILE, None
    with _locked(place.with_name(place.name + ".lock")):
        if valid(place):  # another run prepared it while this one waited
            return place / MODEL_FILE, None
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(dir=place.parent, prefix=f".{place.name}.tmp-"))
        try:
            _prepare(model_dir, backend, tmp)
            model = tmp / MODEL_FILE
            manifest = {"model": model_name, "backend": backend.name, "key": key,
                        "settings": asdict(backend), "bytes": model.stat().st_size,
                        "sha256": sha256_file(model), "created": time.time()}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            os.chmod(tmp, 0o755)
            if place.exists():  # a broken one: set it aside, then take its place
                aside = Path(tempfile.mkdtemp(dir=place.parent, prefix=f".{place.name}.bad-"))
                os.replace(place, aside / "old")
                shutil.rmtree(aside, ignore_errors=True)
            os.replace(tmp, place)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
    what = f"{backend.name} ({backend.precision}" + (", fused" if backend.fuse else "") + ")"
    return place / MODEL_FILE, (f"prepared {model_name} for {what} in {seconds:.1f} s "
                                f"(once; cached in {place})")


def _prepare(model_dir: Path, backend: Backend, out: Path) -> None:
    fp32 = out / "export.onnx"
    export(model_dir, fp32)
    current = fp32
    if backend.fuse:
        fused = out / "fused.onnx"
        fuse(current, fused, model_dir)
        current = fused
    if backend.quantization is not None:
        from onnx import TensorProto
        from onnxruntime.quantization import QuantType, quantize_dynamic

        q = backend.quantization
        quantized = out / "quantized.onnx"
        # A fused model's contrib ops (Attention, SkipLayerNormalization) defeat ONNX's shape
        # inference: their outputs are float32, as the library's message suggests saying.
        quantize_dynamic(current, quantized, weight_type=QuantType.QInt8, per_channel=q.per_channel,
                         op_types_to_quantize=list(q.ops) or None,
                         extra_options={"DefaultTensorType": TensorProto.FLOAT})
        current = quantized
    os.replace(current, out / MODEL_FILE)
    for leftover in out.iterdir():
        if leftover.name != MODEL_FILE:
            leftover.unlink()


def pooling(model_dir: Path) -> tuple[str, bool]:
    """The model's pooling ("mean" or "cls") and whether it L2-normalizes, from its
    sentence-transformers modules (mean, normalized, when it has none)."""
    mode, normalize = "mean", True
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
    except (OSError, ValueError):
        return mode, normalize
    normalize = any(m.get("type", "").endswith("Normalize") for m in modules)
    for m in modules:
        if m.get("type", "").endswith("Pooling"):
            config = json.loads((model_dir / m["path"] / "config.json").read_text())
            if config.get("pooling_mode_cls_token"):
                mode = "cls"
            elif not config.get("pooling_mode_mean_tokens", True):
                raise ValueError(f"pooling of {model_dir} is neither mean nor CLS: not exported")
    return mode, normalize


def export(model_dir: Path, out: Path) -> None:
    """`torch.onnx.export` of the transformer with the model's pooling and normalization."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True,
                                      attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    mode, normalize = pooling(model_dir)
    names = list(tokenizer.model_input_names)

    class Pooled(torch.nn.Module):  # type: ignore[misc]  # torch is not followed (pyproject)
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            features = dict(zip(names, inputs, strict=True))
            hidden = self.model(**features).last_hidden_state
            if mode == "cls":
                vector = hidden[:, 0]
            else:
                mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                vector = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            if normalize:
                vector = torch.nn.functional.normalize(vector, p=2, dim=1)
            return vector

    sample = tokenizer(["an example sentence to trace", "another"], padding=True,
                       return_tensors="pt")
    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    axes["embedding"] = {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer's notes on transformers' mask code (a padding branch that never runs here:
        # the mask is as long as the input) and on opset 17's indexing: not for a user's log.
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled(), tuple(sample[n] for n in names), str(out), dynamo=False,
                          input_names=names, output_names=["embedding"], dynamic_axes=axes,
                          opset_version=OPSET, do_constant_folding=True)


def fuse(source: Path, out: Path, model_dir: Path) -> None:
    """onnxruntime.transformers' BERT fusions (its own optimizer, CPU, fp32)."""
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((model_dir / "config.json").read_text())
    optimized = optimize_model(str(source), model_type="bert",
                               num_heads=int(config["num_attention_heads"]),
                               hidden_size=int(config["hidden_size"]), opt_level=0)
    optimized.save_model_to_file(str(out))


class OnnxEmbedding:
    """An exported model on ONNX Runtime or OpenVINO behind `encode_documents` /
    `encode_queries` / `dim`, and `tokenizer` / `max_seq_length` for `SpanPooled`
    (tasks/embedders/spans.py).

    Documents run on every core, queries on one (a runner each, made on first use), as with
    torch (tasks/embedders/local.py). A call's texts are tokenized once, sorted by their number
    of word pieces and padded per batch, so that a batch pads little. Dynamic int8 quantizes each
    call's activations by their own range, so a text's vector depends a little on its batch: such
    a model is not `batch_invariant`, and concurrent queries are then embedded one at a time.
    """

    def __init__(self, path: Path, model_dir: Path, backend: Backend, batch_size: int = 32) -> None:
        self.path = path
        self.backend = backend
        self.batch_size = batch_size
        self.tokenizer = FastTokenizer(model_dir)
        self.max_seq_length = _max_length(model_dir, self.tokenizer)
        self.batch_invariant = backend.quantization is None
        self.precision = backend.precision
        if backend.engine == "openvino" and backend.precision == "bf16" and not _cpu_has("BF16"):
            self.precision = "fp32"  # what OpenVINO runs where the CPU has no bfloat16
        self._runners: dict[int, Any] = {}
        self._dim = 0
        self._hidden_size = _hidden_size(model_dir)

    def runner(self, threads: int) -> Any:
        """A function from a batch's inputs to its vectors, on `threads` threads."""
        if threads not in self._runners:
            make = _openvino if self.backend.engine == "openvino" else _onnxruntime
            self._runners[threads] = make(self.path, self.backend, threads, self.precision)
        return self._runners[threads]

    @property
    def dim(self) -> int:
        """The vectors' width, known without compiling a runner for it: a process that only
        embeds queries compiles only the one-thread runner. The export pools the transformer's
        last hidden state (`export`), so its width is the model's `hidden_size`; a model whose
        config does not say is asked with one text."""
        if not self._dim:
            self._dim = self._hidden_size or int(self._run(["dimension"], usable_cores()).shape[1])
        return self._dim

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, usable_cores())

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._run(texts, 1)

    def _run(self, texts: list[str], threads: int) -> np.ndarray:
        run, names = self.runner(threads)
        encoded = self.tokenizer(list(texts), truncation=True, max_length=self.max_seq_length,
                                 verbose=False)
        ids = encoded["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: -len(ids[i]))
        pad = int(self.tokenizer.pad_token_id or 0)

        def padded(members: list[int]) -> Any:  # one batch, padded to its longest text
            width = len(ids[members[0]])
            feed = {}
            for name in names:
                batch = np.full((len(members), width), pad if name == "input_ids" else 0,
                                dtype=np.int64)
                for row, i in enumerate(members):
                    values = encoded[name][i]
                    batch[row, :len(values)] = values
                feed[name] = batch
            return run(feed)

        out = in_groups(len(texts), batched(order, self.batch_size), padded)
        if out is None:
            return np.empty((0, self._dim), dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        result: np.ndarray = out / np.maximum(norms, 1e-12)
        return result


def _onnxruntime(path: Path, backend: Backend, threads: int, precision: str) -> tuple[Any, list[str]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[backend.level]
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return (lambda feed: session.run(None, feed)[0]), [i.name for i in session.get_inputs()]


def _openvino(path: Path, backend: Backend, threads: int, precision: str) -> tuple[Any, list[str]]:
    """OpenVINO's CPU plugin over the plain export: one stream (the LATENCY hint: one batch at a
    time on every thread given; THROUGHPUT's two streams, each given a batch at once, ran no
    faster here and took about 80 MiB more), in the precision asked. An infer request per
    thread: a request is not to be shared between threads (an app's own threads may search at
    once)."""
    import threading

    import openvino as ov

    config: dict[str, Any] = {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
        # Its threads are not pinned to cores: the machine is shared (the store's server, Prefect,
        # an app's own threads), and a pinned thread waits for its core while another is idle.
        "ENABLE_CPU_PINNING": False}
    compiled = None
    if threads == 1:
        # The queries' runner is what a search waits for as it starts: its compiled form is kept
        # beside the export (OpenVINO's model cache: the same network, read back instead of
        # compiled again; 0.7 s -> 0.2 s here), so only a machine's first search compiles it.
        # Only this one: the documents' runner depends on the cores, and an ingest's compile is
        # nothing beside its embedding. A cache that cannot be used is no reason to fail.
        try:
            compiled = ov.Core().compile_model(str(path), "CPU", {
                **config, "CACHE_DIR": str(path.parent / OPENVINO_CACHE)})
        except RuntimeError:
            compiled = None
    if compiled is None:
        compiled = ov.Core().compile_model(str(path), "CPU", config)
    output = compiled.output(0)
    local = threading.local()

    def run(feed: dict[str, np.ndarray]) -> np.ndarray:
        request = getattr(local, "request", None)
        if request is None:
            request = local.request = compiled.create_infer_request()
        vectors: np.ndarray = np.array(request.infer(feed)[output], dtype=np.float32)
        return vectors

    return run, [i.get_any_name() for i in compiled.inputs]


def _cpu_has(capability: str) -> bool:
    """Whether OpenVINO's CPU plugin lists `capability` (e.g. "BF16") for this CPU."""
    import openvino as ov

    return capability in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


class FastTokenizer:
    """The model's own tokenizer (its `tokenizer.json`) read by the `tokenizers` library, called
    as transformers' fast tokenizer is called here (texts in a batch; `truncation` at
    `max_length`, special tokens, offsets): the same Rust tokenizer underneath, with neither
    transformers nor torch imported (1.7 s of a search's start).

    Each setting of truncation is a tokenizer of its own, made once and never changed after, so
    that threads can tokenize at the same time."""

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        self._file = str(model_dir / "tokenizer.json")
        self._load = Tokenizer.from_file
        plain = self._load(self._file)
        plain.no_truncation()
        plain.no_padding()
        self._by_length: dict[int | None, Any] = {None: plain}
        try:
            config = json.loads((model_dir / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            config = {}
        self.model_max_length = int(config.get("model_max_length") or 512)
        pad = plain.token_to_id(str(config.get("pad_token") or "[PAD]"))
        self.pad_token_id = int(pad) if pad is not None else 0

    def _cut_at(self, max_length: int | None) -> Any:
        tokenizer = self._by_length.get(max_length)
        if tokenizer is None:
            tokenizer = self._load(self._file)
            tokenizer.no_padding()
            tokenizer.enable_truncation(int(max_length or 0))  # longest_first, right, stride 0
            self._by_length[max_length] = tokenizer
        return tokenizer

    def __call__(self, texts: list[str], *, truncation: bool = False, max_length: int | None = None,
                 add_special_tokens: bool = True, return_offsets_mapping: bool = False,
                 verbose: bool = False) -> dict[str, list[Any]]:
        tokenizer = self._cut_at(max_length if truncation else None)
        encodings = tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        out: dict[str, list[Any]] = {"input_ids": [e.ids for e in encodings],
                                     "token_type_ids": [e.type_ids for e in encodings],
                                     "attention_mask": [e.attention_mask for e in encodings]}
        if return_offsets_mapping:
            out["offset_mapping"] = [e.offsets for e in encodings]
        return out


def _hidden_size(model_dir: Path) -> int:
    """The transformer's `hidden_size` from its config.json (0 when it does not say)."""
    try:
        return int(json.loads((model_dir / "config.json").read_text())["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _max_length(model_dir: Path, tokenizer: Any) -> int:
    try:
        return int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError):
        return int(min(getattr(tokenizer, "model_max_length", 512), 512))


def load(model_dir: Path, model_name: str, backend: Backend, cache_dir: Path,
         batch_size: int = 32) -> tuple[OnnxEmbedding, str | None]:
    """The model on ONNX Runtime (prepared first if needed), and what preparing it took."""
    path, note = prepared(model_dir, model_name, backend, cache_dir)
    return OnnxEmbedding(path, model_dir, backend, batch_size), note
