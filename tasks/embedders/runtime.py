"""Where and how a local model runs: its backend (`openvino`, `torch`, `onnx`, ...) and device.

`Runtime` travels to the model's own process (tasks/embedders/local.py) with the model's name:
it is small, frozen and picklable. A backend names one measured setting (BENCHMARKS.md, "Embedding
backends"); `openvino`, `openvino-bf16` and `onnx-int8` are the ones most users want, the others
are the rest of the frontier, kept selectable so that a machine unlike the one measured can
choose for itself.

The device is `auto`, `cpu`, `cuda`, `cuda:N` or `mps`. `auto` picks CUDA when torch sees it (fp16
there, larger batches), else MPS, else the CPU with the default backend, as sentence-transformers
does. A device asked for by name and absent is one InputError line (`check_device`), found before
any model loads; `auto` is resolved where the model runs.

Imports no torch, Prefect or project module with state: the CLI checks options with it.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from situate.core.errors import InputError


@dataclass(frozen=True)
class Quantization:
    """onnxruntime.quantization's `quantize_dynamic` settings (weights int8, activations quantized
    per call from their own range)."""

    per_channel: bool = False
    ops: tuple[str, ...] = ()  # the op types quantized; () for every one the library can

    def key(self) -> dict[str, object]:
        return {"method": "dynamic", "weight": "qint8", "per_channel": self.per_channel,
                "ops": list(self.ops)}


@dataclass(frozen=True)
class Backend:
    """One way to run a local model: torch, or ONNX Runtime over an export of the same weights."""

    name: str
    engine: str  # "torch" | "onnx" (ONNX Runtime) | "openvino": the last two run an export
    precision: str  # "fp32" | "bf16" | "int8" (torch on a GPU: "fp16", decided by the device)
    description: str
    level: str = "all"  # ONNX Runtime's graph optimization level: basic | extended | all
    batch: int = 8  # texts per forward pass on the CPU (measured: BENCHMARKS.md, "tune")
    fuse: bool = False  # onnxruntime.transformers' BERT fusions (attention, layer norm, GELU)
    quantization: Quantization | None = None


# Measured on the codebase and a documentation corpus (BENCHMARKS.md): the CPU default is the
# fastest whose hybrid Pass@5/10/20 stays within 0.5 points of torch fp32 and dense within 1.0,
# among those that compute the same on every CPU (bf16 runs only where the CPU has it).
BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("torch", "torch", "fp32", "PyTorch (fp32 on the CPU, fp16 on CUDA)"),
    Backend("onnx", "onnx", "fp32", "ONNX Runtime fp32, BERT fusions, all graph optimizations",
            fuse=True),
    Backend("onnx-int8", "onnx", "int8", "ONNX Runtime, fused, MatMul weights int8 per channel",
            fuse=True, quantization=Quantization(per_channel=True, ops=("MatMul",))),
    Backend("openvino", "openvino", "fp32", "OpenVINO fp32 of the plain export (its own CPU graph "
            "optimizations)"),
    Backend("openvino-bf16", "openvino", "bf16", "OpenVINO, bfloat16 inference where the CPU has "
            "it (AVX-512 BF16, AMX), else fp32", batch=16),
    Backend("onnx-plain", "onnx", "fp32", "ONNX Runtime fp32 of the plain export, no fusions"),
    Backend("onnx-basic", "onnx", "fp32", "ONNX Runtime fp32, basic graph optimizations only",
            level="basic"),
    Backend("onnx-int8-all", "onnx", "int8", "ONNX Runtime, every quantizable op int8 per tensor",
            quantization=Quantization()),
    Backend("onnx-int8-channel", "onnx", "int8", "ONNX Runtime, every quantizable op int8 per "
            "channel", quantization=Quantization(per_channel=True)),
    Backend("onnx-int8-matmul", "onnx", "int8", "ONNX Runtime, MatMul weights int8 per tensor",
            quantization=Quantization(ops=("MatMul",))),
    Backend("onnx-int8-fused-all", "onnx", "int8", "ONNX Runtime, fused, every quantizable op int8 "
            "per channel", fuse=True, quantization=Quantization(per_channel=True)),
)}
DEFAULT_BACKEND = "auto"  # the device's: torch fp16 on CUDA/MPS, CPU_BACKEND on the CPU
CPU_BACKEND = "openvino"
ONNX_MODELS = ("minilm",)  # embedders whose model situate can export (the others: torch only)
DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def openvino_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def cpu_backend() -> str:
    """The CPU default, or ONNX Runtime's fp32 where OpenVINO is not installed (a platform
    without its wheel): the same vectors, a little slower."""
    return CPU_BACKEND if openvino_installed() else "onnx"


def model_cache_dir(value: str = "") -> Path:
    """The machine-level cache of exported models: `value` (SITUATE_MODEL_CACHE) when given, else
    the user's cache directory as the platform names it (platformdirs). One per user, not per
    folder: a script in one folder and an MCP server an agent starts in another share one export
    (written atomically, under a lock: `situate.tasks.embedders.exported`). Here, not with the
    settings: the model's process needs it, and not pydantic's settings (0.14 s of its start)."""
    if value:
        return Path(value).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_cache_dir("situate", appauthor=False))


def backend_names() -> list[str]:
    return ["auto", *BACKENDS]


@dataclass(frozen=True)
class Runtime:
    """What the model process is told: backend (or `auto`), device (or `auto`), and where exports
    are cached (`cache_dir`: SITUATE_MODEL_CACHE; empty, the user's cache directory:
    `model_cache_dir`)."""

    backend: str = DEFAULT_BACKEND
    device: str = "auto"
    cache_dir: str = ""
    batch: int = 0  # texts per forward pass; 0: the backend's measured size (`batch_size`)

    def key(self) -> str:
        return f"{self.backend}@{self.device}" + (f"/{self.batch}" if self.batch else "")


def check_backend(backend: str, embedder: str = "minilm") -> str:
    """`backend` if it is known and `embedder` can run on it, else one InputError line."""
    if backend != "auto" and backend not in BACKENDS:
        raise InputError(f"--backend {backend!r}: unknown backend; choose one of "
                         f"{', '.join(backend_names())}")
    if backend not in ("auto", "torch") and embedder not in ONNX_MODELS:
        raise InputError(f"--backend {backend}: only {', '.join(ONNX_MODELS)} can run on ONNX "
                         f"Runtime or OpenVINO; embedder {embedder!r} runs on torch (--backend "
                         "torch or auto)")
    if backend != "auto" and BACKENDS[backend].engine == "openvino" and not openvino_installed():
        raise InputError(f"--backend {backend}: OpenVINO is not installed here (pip install "
                         "openvino); use --backend onnx or auto")
    return backend


def check_device(device: str, backend: str = "auto") -> str:
    """`device` if it is well formed and, when named, present (torch is asked only then): else one
    InputError line. `auto` is resolved where the model loads (`resolve_device`)."""
    device = device.strip().lower()
    if not DEVICE_RE.match(device):
        raise InputError(f"--device {device!r}: choose auto, cpu, cuda, cuda:N or mps")
    if device in ("auto", "cpu"):
        return device
    if backend not in ("auto", "torch") and BACKENDS[backend].engine != "torch":
        raise InputError(f"--device {device}: backend {backend} runs on the CPU; use "
                         f"--backend torch (or auto) on {device}")
    problem = absent(device)
    if problem:
        raise InputError(problem)
    return device


def absent(device: str) -> str:
    """Why `device` cannot be used here ("" when it can): torch's own answer."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            return (f"--device {device}: torch sees no CUDA device here (torch "
                    f"{torch.__version__}): use --device cpu or auto")
        index = int(device.partition(":")[2] or 0)
        count = torch.cuda.device_count()
        if index >= count:
            return (f"--device {device}: torch sees {count} CUDA device(s) (cuda:0 to "
                    f"cuda:{count - 1}): use one of them, or --device auto")
        return ""
    mps = getattr(torch.backends, "mps", None)
    if device == "mps" and not (mps is not None and mps.is_available()):
        return "--device mps: torch sees no Apple MPS device here: use --device cpu or auto"
    return ""


@dataclass(frozen=True)
class Resolved:
    """What a model process runs on: device, backend and precision, as reported to the run."""

    device: str
    backend: str
    precision: str

    def report(self, batch: int, note: str | None = None) -> dict[str, object]:
        """What the model's process reports of itself to the run (`Embedder.info`,
        `Embedder.forward_batch`): this, its forward batch, and what preparing it took."""
        return {"device": self.device, "backend": self.backend, "precision": self.precision,
                "batch": batch, "prepared": note}


def resolve(runtime: Runtime, embedder: str = "minilm") -> Resolved:
    """The device, backend and precision `runtime` means here (torch imported for `auto`)."""
    device = runtime.device
    if device == "auto":
        device = auto_device()
    elif device != "cpu":
        problem = absent(device)
        if problem:
            raise InputError(problem)
    backend = runtime.backend
    if backend == "auto":
        backend = cpu_backend() if device == "cpu" and embedder in ONNX_MODELS else "torch"
    chosen = BACKENDS[backend]
    if chosen.engine != "torch" and device != "cpu":
        raise InputError(f"backend {backend} runs on the CPU, not {device}: use --backend torch")
    precision = "fp16" if chosen.engine == "torch" and device != "cpu" else chosen.precision
    return Resolved(device, backend, precision)


def gpu_possible() -> bool:
    """Whether torch could see a GPU here: on Linux without an NVIDIA or AMD driver it cannot,
    and the ONNX backends' process then needs no torch at all (its import costs seconds and
    hundreds of MB)."""
    if sys.platform != "linux":
        return True
    return any(os.path.exists(p) for p in ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd"))


def auto_device() -> str:
    """CUDA when torch sees it, else MPS, else the CPU (sentence-transformers' order)."""
    if not gpu_possible():
        return "cpu"
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def batch_size(device: str, backend: str = "torch", asked: int = 0) -> int:
    """Texts per forward pass: `asked` if given; a GPU wants wide batches; on the CPU the
    backend's own, measured with the texts sorted by length as an ingest sends them (BENCHMARKS.md,
    "tune": with sorted texts, small batches were fastest on every CPU backend)."""
    if asked:
        return asked
    return BACKENDS[backend].batch if device == "cpu" else 256
