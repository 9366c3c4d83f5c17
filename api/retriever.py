"""`Retriever`: situate's one search path, warm. It opens a collection's store once, loads the
embedder the collection was built with once, and answers queries exactly as `situate evaluate`
measured them (the same query cleaning, BM25 identifier parts, fusion and rerank:
`situate.tasks.retrieval.search.answer`), from any number of threads or from asyncio.

The evaluation, `situate search`, the HTTP and MCP servers (`situate.api.http`, `.mcp`) and the
LangChain and LlamaIndex retrievers (`situate.integrations`) all search through it; none of them
ranks anything itself. Imports no Prefect: an app that searches loads no orchestration.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from situate.api.config import RetrieverConfig, check_mode
from situate.api.request import SearchRequest
from situate.core.errors import (
    CollectionNotServed,
    InputError,
    SituateError,
)
from situate.core.records import Hit, same_embedder
from situate.core.settings import get_settings
from situate.storage import open_existing
from situate.tasks.embedders.base import EMBEDDERS, Embedders
from situate.tasks.embedders.runtime import (
    BACKENDS,
    ONNX_MODELS,
    Runtime,
    cpu_backend,
    gpu_possible,
)
from situate.tasks.rerankers.base import Reranker, get_reranker
from situate.tasks.retrieval.search import (
    MODES,
    MODES_WITHOUT_RERANKER,
    answer,
    can_rerank,
    check_fusion,
    clean_query,
    unavailable,
)

if TYPE_CHECKING:
    from situate.core.protocols import SearchStore
    from situate.tasks.embedders.base import Embedder

log = logging.getLogger("situate.retrieve")

# The query of the searches that warm a retriever (`warm`): the model's load and first call,
# and the store's first search of each kind, are paid when it opens, not by a user's query.
WARM_UP_QUERY = "warm up"
# Threads that run the second leg of hybrid searches (each search runs its other leg itself): a
# server answers at most this many hybrid searches with both legs at once; more wait their turn.
LEG_THREADS = 16
# Queries `search_many` searches at once by default, and at most.
BATCH = 64
MAX_BATCH = 256


class CollectionDescription(BaseModel):
    """The collection a retriever searches, as it describes itself (`Retriever.describe`, HTTP's
    `GET /collection`, MCP's `describe_collection`): its rows, the embedder its vectors came from
    and the backend and precision it ran on, the contexts its chunks were given and when it was
    last ingested ("" where the collection predates situate recording it), and how the retriever
    searches it."""

    model_config = ConfigDict(frozen=True)

    collection: str
    rows: int
    embedder: str
    backend: str
    precision: str
    dim: int | None
    contexts: str
    ingested: str
    mode: str
    modes: tuple[str, ...]
    fusion: str


class Retriever:
    """A warm search over one collection: `search(query, k, mode)` returns typed `Hit`s.

    `Retriever(collection, uri, **settings)` takes `RetrieverConfig`'s fields as keywords (its
    signature is made from them), and `token`; `Retriever.open(config)` takes a config whole.
    Opens the store at `uri` (default `SITUATE_MILVUS_URI`; a missing collection is an
    InputError) and loads the embedder the collection records; `embedder`, if given, must name
    the same one (as `situate evaluate --embedder` must). `mode` is the default of `search`;
    `fusion` (default `SITUATE_FUSION`) fuses hybrid's legs; `reranker` (default
    `SITUATE_RERANKER`) reranks the `rerank` mode, loaded on first use. Safe to share between
    threads; `asearch` is `search` for asyncio. A context manager; `close()` lets the store and
    the model go.

    Against a Milvus server that is down, each call is tried `retry_attempts` times (default 8,
    about 30 s in all) before a `StoreUnreachable`; the servers ask for fewer, so that a request
    is answered 503 at once. The token is SITUATE_MILVUS_TOKEN unless `token` is given.

    A local model runs in the calling process, so a script, `python -c`, standard input or a
    notebook searches without an `if __name__ == "__main__":` guard. With `model_process` (what
    `situate search` and the servers use: Ctrl-C stops them without waiting on the model), it
    runs in a process of its own, and with `workers` > 1 in that many (each on one core): queries
    that threads search at the same time are then embedded together, each to the vector it gets
    alone. A script that asks for either starts processes, so it needs the guard. A hybrid search
    runs its two legs at the same time.
    """

    def __init__(self, collection: str, uri: str | None = None, *,
                 reranker: str | Reranker | None = None, token: str | None = None,
                 **settings: Any) -> None:
        # The keywords are RetrieverConfig's fields (the signature below is made from them), so
        # a setting added to the config is a keyword here too; `reranker` may also be an
        # instance, and `token` is a secret the config never holds.
        unknown = sorted(set(settings) - set(RetrieverConfig.model_fields))
        if unknown:
            raise TypeError(f"Retriever() got an unexpected keyword argument {unknown[0]!r}")
        given = None if isinstance(reranker, Reranker) else reranker
        self._open(RetrieverConfig.checked(collection=collection, uri=uri, reranker=given,
                                           **settings),
                   token, reranker if isinstance(reranker, Reranker) else None)

    @classmethod
    def open(cls, config: RetrieverConfig, *, token: str | None = None,
             reranker: Reranker | None = None) -> Retriever:
        """The retriever `config` describes (`situate.api.config`: every face's settings, checked
        when it was made); `token` as for the constructor; `reranker` an instance for the rerank
        mode instead of the one `config.reranker` names."""
        self = cls.__new__(cls)
        self._open(config, token, reranker)
        return self

    def _open(self, config: RetrieverConfig, token: str | None, reranker: Reranker | None) -> None:
        settings = get_settings()
        self.config = config
        embedders = Embedders(processes=config.model_process or config.workers > 1)
        # A model in a process of its own starts loading now, while the store opens, on the
        # guess that the collection was embedded as these settings embed: the store's import and
        # opening and the model's load then take two cores, not one after the other (`situate
        # search` waited for both, one after the other).
        early = _load_early(embedders, config)
        try:
            store = open_existing(config.uri, config.collection,
                                  settings.milvus_token.get_secret_value() if token is None
                                  else token, retry_attempts=config.retry_attempts,
                                  cache_dir=settings.cache_dir)
        except BaseException:
            embedders.release(kill=True)
            raise
        try:
            self._setup(store, config.collection, embedders, owns=True, mode=config.mode,
                        fusion=config.fusion, reranker=reranker or config.reranker,
                        embedder=config.embedder, workers=config.workers, backend=config.backend,
                        device=config.device)
            if early is not None and (config.mode == "bm25" or self._embedder_loaded() is not early):
                embedders.discard(early)  # guessed wrong: the collection's own model is loading
            self.warm(config.mode)
        except BaseException:
            self._stop_legs()
            embedders.release(kill=True)  # a model still loading is not waited for
            store.close()
            raise

    @classmethod
    def over(cls, store: SearchStore, collection: str, *, embedders: Embedders,
             mode: str = "hybrid", fusion: str | None = None,
             reranker: str | Reranker | None = None, embedder: str | None = None,
             backend: str | None = None, device: str | None = None) -> Retriever:
        """A retriever on a store and models someone else opened and closes (the evaluate
        flow's run resources): `close()` leaves them open. Loads nothing until `warm` or a
        search needs it."""
        store.require(collection)
        self = cls.__new__(cls)
        self._setup(store, collection, embedders, owns=False, mode=mode, fusion=fusion,
                    reranker=reranker, embedder=embedder, workers=1, backend=backend,
                    device=device)
        return self

    def _setup(self, store: SearchStore, collection: str, embedders: Embedders, *, owns: bool,
               mode: str, fusion: str | None, reranker: str | Reranker | None,
               embedder: str | None, workers: int, backend: str | None = None,
               device: str | None = None) -> None:
        check_mode(mode)
        settings = get_settings()
        self.collection = collection
        self.mode = mode
        self.workers = workers
        self._legs = ThreadPoolExecutor(LEG_THREADS, thread_name_prefix="situate-leg")
        self.fusion = check_fusion(fusion or settings.fusion)
        self._store = store
        self._embedders = embedders
        self._owns = owns
        self._lock = threading.Lock()
        self._closed = False
        self._warm: set[str] = set()  # modes searched once already (`warm`)
        self._lanes_warm = False
        self._encoder: Embedder | None = None
        self._reranker = reranker if isinstance(reranker, Reranker) else None
        self._reranker_spec = reranker if isinstance(reranker, str) else settings.reranker
        info = store.describe(collection)
        self.embedder = embedder_of(collection, store.uri, info.embedder, embedder) or settings.embedder
        self.runtime = query_runtime(info, backend, device)
        self._recorded = (info.backend, info.precision)

    # --- what a search needs, loaded once ---------------------------------------------------

    def warm(self, *modes: str) -> None:
        """Load and warm what searches in `modes` need (default: the retriever's mode), so that
        no query pays for it: the embedder (every mode but bm25) and the reranker (rerank)
        loaded, and one search of each mode made, its query embedded (rerank's search made
        without the reranker's call, which a paid API would bill)."""
        for mode in modes or (self.mode,):
            check_mode(mode)
            encoder = self._embedder_loaded() if mode != "bm25" else None
            if mode == "rerank":
                self._reranker_loaded()
            leg = "hybrid" if mode == "rerank" else mode
            with self._lock:
                if leg in self._warm:
                    continue
                self._warm.add(leg)
                lanes = encoder is not None and not self._lanes_warm
                self._lanes_warm = self._lanes_warm or lanes
            if lanes and encoder is not None:
                encoder.warm_lanes(WARM_UP_QUERY)  # every model process, not only the first
            answer(self._store, self.collection, WARM_UP_QUERY, leg, 1, encoder, None, self.fusion,
                   self._legs)

    def _embedder_loaded(self) -> Embedder:
        with self._lock:
            if self._encoder is None:
                self._encoder = self._embedders.get(self.embedder, self.runtime)
                self._encoder.use_lanes(self.workers)
                self._note_precision(self._encoder)
            return self._encoder

    def _note_precision(self, encoder: Embedder) -> None:
        """Queries embedded at another precision than the collection's vectors (the same model:
        the same vector space, a little apart): said once, when the model loads."""
        backend, precision = self._recorded
        if not backend or encoder.info["backend"] in ("api", backend):
            return
        info = encoder.info
        log.warning(f"collection {self.collection!r} was embedded with {backend} ({precision}); "
                    f"its queries are embedded with {info['backend']} ({info['precision']}) on "
                    f"{info['device']}: the same model, so the same vector space (--backend "
                    f"{backend} embeds them as its vectors were)")

    def _reranker_loaded(self) -> Reranker:
        with self._lock:
            if self._reranker is None:
                self._reranker = get_reranker(self._reranker_spec)
            return self._reranker

    # --- searching ------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, mode: str | None = None, *,
               collection: str | None = None) -> list[Hit]:
        """The top `k` (1 to 1000) chunks for `query`, best first, in `mode` (default: the
        retriever's): `dense`, `bm25`, `hybrid` or `rerank` (where a reranker is configured:
        `modes`). An InputError for an empty query, a `k` that is not a whole number from 1 to
        1000, an unknown or unavailable mode, or a `collection` other than this one (the same
        checks every face makes: `situate.api.request`); a StoreError when Milvus fails
        (StoreUnreachable when it does not answer)."""
        return self.run(SearchRequest.of({"query": query, "k": k, "mode": mode,
                                          "collection": collection}))

    def search_many(self, queries: Sequence[str], k: int = 10, mode: str | None = None, *,
                    batch: int = BATCH) -> list[list[Hit]]:
        """Each query's `search`, in order, `batch` (1 to MAX_BATCH) of them searched at once, each
        in a thread of its own: searches under way together share the store's calls where the
        store can (on Milvus Lite one dense search call carries many query vectors, and its cost
        is mostly a pass over the collection per call: `situate.storage.coalesce`), and the
        model embeds their queries together where that changes no vector. Each query still
        ranks exactly as `search` ranks it alone. The first error raised is raised once every
        search has ended. What an evaluation uses (`situate evaluate --query-batch`)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise InputError(f"batch={batch!r} is not a number of queries: give a whole number "
                             f"from 1 to {MAX_BATCH}")
        if batch == 1 or len(queries) < 2:
            return [self.search(q, k, mode) for q in queries]
        with ThreadPoolExecutor(min(batch, len(queries)),
                                thread_name_prefix="situate-batch") as pool:
            futures = [pool.submit(self.search, q, k, mode) for q in queries]
            return [f.result() for f in futures]

    async def asearch(self, query: str, k: int = 10, mode: str | None = None, *,
                      collection: str | None = None) -> list[Hit]:
        """`search`, run in a worker thread: the event loop goes on while the model and the
        store work."""
        request = SearchRequest.of({"query": query, "k": k, "mode": mode,
                                    "collection": collection})
        return await asyncio.to_thread(self.run, request)

    def run(self, request: SearchRequest) -> list[Hit]:
        """The hits of a request a face has checked (`SearchRequest.of`)."""
        if request.collection is not None and request.collection != self.collection:
            raise CollectionNotServed(request.collection, self.collection)
        mode = self.mode if request.mode is None else request.mode
        if mode not in self.modes:
            raise InputError(unavailable(mode))
        text = clean_query(request.query)
        if self._closed:
            raise SituateError(f"the retriever of collection {self.collection!r} is closed: "
                               "open another")
        encoder = self._embedder_loaded() if mode != "bm25" else None
        reranker = self._reranker_loaded() if mode == "rerank" else None
        return answer(self._store, self.collection, text, mode, request.k, encoder, reranker,
                      self.fusion, self._legs)

    def describe(self) -> CollectionDescription:
        """The collection served: rows, embedder, contexts, when it was last ingested."""
        info = self._store.describe(self.collection)
        return CollectionDescription(
            collection=self.collection, rows=self._store.count(self.collection),
            embedder=info.embedder or self.embedder, backend=info.backend,
            precision=info.precision, dim=info.dim, contexts=info.contexts,
            ingested=info.ingested, mode=self.mode, modes=self.modes, fusion=self.fusion)

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes `search` can run here: `rerank` only with a reranker that can run (a local
        `st:` cross-encoder, or Cohere with COHERE_API_KEY)."""
        if self._reranker is not None or can_rerank(self._reranker_spec):
            return MODES
        return MODES_WITHOUT_RERANKER

    @property
    def uri(self) -> str:
        return self._store.uri

    @property
    def on_lite(self) -> bool:
        """Whether the store is Milvus Lite (a file, or a `milvus-lite server`), whose one process
        walks every row in each dense search: concurrent searches go to it as one call from
        this process (`situate.storage.coalesce`). A store that does not say is not."""
        return bool(getattr(self._store, "on_lite", False))

    # --- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Let the store and the model go (those this retriever opened); safe to call twice."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._stop_legs()
        if self._owns:
            self._embedders.release()
            self._store.close()

    def _stop_legs(self) -> None:
        legs = getattr(self, "_legs", None)
        if legs is not None:
            legs.shutdown(wait=False)

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Retriever({self.collection!r}, {self.uri!r}, mode={self.mode!r}, "
                f"fusion={self.fusion!r}, embedder={self.embedder!r})")


def _constructor_signature() -> inspect.Signature:
    """`Retriever(collection, uri=None, *, <every other RetrieverConfig field>, token=None)`, each
    keyword with its field's type and default, for help(), IDEs and the docs."""
    from pydantic_core import PydanticUndefined

    kind = inspect.Parameter
    params = [kind("self", kind.POSITIONAL_OR_KEYWORD),
              kind("collection", kind.POSITIONAL_OR_KEYWORD, annotation=str),
              kind("uri", kind.POSITIONAL_OR_KEYWORD, default=None, annotation=str | None)]
    for name, field in RetrieverConfig.model_fields.items():
        if name in ("collection", "uri"):
            continue
        default = None if field.default is PydanticUndefined else field.default
        annotation: Any = str | Reranker if name == "reranker" else field.annotation
        if default is None and annotation is not None and type(None) not in getattr(
                annotation, "__args__", ()):
            annotation = annotation | None
        params.append(kind(name, kind.KEYWORD_ONLY, default=default, annotation=annotation))
    params.append(kind("token", kind.KEYWORD_ONLY, default=None, annotation=str | None))
    return inspect.Signature(params, return_annotation=None)


Retriever.__init__.__signature__ = _constructor_signature()  # type: ignore[attr-defined]


def _load_early(embedders: Embedders, config: RetrieverConfig) -> Embedder | None:
    """The local model a collection embedded with these settings would record, loading in its
    own process from now on (`config`'s embedder and backend, else the settings'; None where the
    models do not run in processes, where `auto` could mean a GPU, for an API's embedder, or when
    the guess is not even a valid one: the collection's own record decides, as it always did)."""
    if not embedders.processes or config.mode == "bm25":
        return None
    settings = get_settings()
    spec = config.embedder or settings.embedder
    backend = config.backend or settings.embed_backend
    try:
        if backend == "auto":
            if gpu_possible():
                return None  # which device `auto` means is torch's to say, in the model's process
            backend = cpu_backend() if spec.partition(":")[0] in ONNX_MODELS else "torch"
        if not EMBEDDERS.get(spec.partition(":")[0]).local:
            return None
        runtime = Runtime(backend, config.device or settings.device, settings.model_cache)
        early = embedders.get(spec, runtime)
    except SituateError:
        return None
    early.use_lanes(config.workers)
    return early


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """A hit's metadata as the framework retrievers give it: the source document's own, then
    situate's fields of the hit (which win a clash): id, doc_id, index, context, score."""
    return {**hit.metadata, "id": hit.id, "doc_id": hit.doc_id, "index": hit.index,
            "context": hit.context, "score": hit.score}


def query_runtime(info: Any, backend: str | None, device: str | None) -> Runtime:
    """How a collection's queries are embedded: by `backend` when given, else as its vectors were
    (the backend it records), else by the settings'; on `device` (default: the settings')."""
    settings = get_settings()
    recorded = info.backend if info.backend in BACKENDS else ""
    return Runtime(backend or recorded or settings.embed_backend, device or settings.device,
                   settings.model_cache)


def embedder_of(collection: str, uri: str, stored: str, wanted: str | None) -> str:
    """The embedder of a collection's queries: the one its vectors came from (`stored`);
    `wanted`, if given, must be the same (by name, and by model when it names one), else one
    InputError (the rule: `situate.core.records.same_embedder`). "" when neither says (a
    collection made before situate recorded it)."""
    if not same_embedder(stored, wanted):
        raise InputError(f"collection {collection!r} at {uri} was embedded with {stored}, not "
                         f"{wanted}: leave the embedder out or name the same one")
    return stored or wanted or ""


__all__ = ["CollectionDescription", "Hit", "Retriever", "embedder_of", "hit_metadata"]
