"""What a run works with, opened once and handed down: its stores (one per Milvus URI), its
embedding models, and what the command has already read for it (the checked corpus, the parsed
evaluation set).

A flow run makes its own `Resources` (a deployment run), or takes the ones the `situate` command
prepared while Prefect was starting (`provided`): the model already loading in its process, the
store already open, the corpus already checked, so nothing is done twice. Whoever made them
closes them. Imports no Prefect.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from situate.core.errors import CollectionNotFound
from situate.core.protocols import ChunkStore, StoreSpec
from situate.core.settings import get_settings
from situate.storage import open_store, reopen
from situate.tasks.embedders.base import Embedders

if TYPE_CHECKING:
    from situate.tasks.corpus.load import CorpusScan
    from situate.tasks.retrieval.metrics import EvalQuery


@dataclass
class Resources:
    """One run's stores and models, and the inputs its command read already."""

    embedders: Embedders = field(default_factory=Embedders)
    scan: CorpusScan | None = None  # the corpus as the command checked it
    eval_set: list[EvalQuery] | None = None  # the evaluation set as the command read it
    _stores: dict[tuple[str, str], Future[ChunkStore]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def store(self, uri: str, cache_dir: str | None = None) -> ChunkStore:
        """The store at `uri`, opened once for this run (token: SITUATE_MILVUS_TOKEN), keeping
        its derived files (the lexical index) under `cache_dir` (a run's `--cache-dir`; None:
        SITUATE_CACHE_DIR)."""
        cache_dir = cache_dir or get_settings().cache_dir
        with self._lock:
            opening = self._stores.get((uri, cache_dir))
            if opening is None:
                opening = self._stores[(uri, cache_dir)] = Future()
                opening.set_running_or_notify_cancel()
                mine = True
            else:
                mine = False
        if mine:
            try:
                opening.set_result(open_store(uri, _token(), cache_dir=cache_dir))
            except BaseException as e:
                opening.set_exception(e)
                with self._lock:
                    self._stores.pop((uri, cache_dir), None)
        return opening.result()

    def existing_store(self, uri: str, collection: str) -> ChunkStore:
        """The store holding `collection`, for reading: a missing Milvus Lite file is not
        created; a missing collection is one CollectionNotFound."""
        CollectionNotFound.unless_lite_file(collection, uri)
        store = self.store(uri)
        store.require(collection)
        return store

    def open_in_background(self, uri: str, then: Callable[[ChunkStore], object] | None = None,
                           cache_dir: str | None = None) -> None:
        """Start opening the store at `uri` now (a second or two), for the run to find open, and
        then call `then(store)` (to start loading the model the run will need)."""
        threading.Thread(target=self._open_ignoring_errors, args=(uri, then, cache_dir),
                         daemon=True).start()

    def _open_ignoring_errors(self, uri: str, then: Callable[[ChunkStore], object] | None,
                              cache_dir: str | None) -> None:
        try:
            store = self.store(uri, cache_dir)
            if then is not None:
                then(store)
        except Exception:  # noqa: BLE001 - the run opens it again and reports any error
            pass

    def close(self, kill_models: bool = False) -> None:
        """Close every store and let every local model go."""
        self.embedders.release(kill=kill_models)
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for opening in stores:
            if opening.done() and opening.exception() is None:
                opening.result().close()


def _token() -> str:
    return get_settings().milvus_token.get_secret_value()


@contextmanager
def store_at(store: ChunkStore | StoreSpec) -> Iterator[ChunkStore]:
    """`store` itself (a task on a thread of the run), or the store a spec names opened here
    (a task sent to a Dask worker: the token read from this process's settings) and closed when
    the block ends."""
    if not isinstance(store, StoreSpec):
        yield store
        return
    opened = reopen(store, _token())
    try:
        yield opened
    finally:
        opened.close()


_provided: ContextVar[Resources | None] = ContextVar("situate_resources", default=None)


@contextmanager
def provided(resources: Resources) -> Iterator[Resources]:
    """Within this block, a flow run takes `resources` instead of making its own."""
    token = _provided.set(resources)
    try:
        yield resources
    finally:
        _provided.reset(token)


@contextmanager
def run_resources() -> Iterator[Resources]:
    """The resources of a flow run: the command's (closed by the command), or its own (closed
    when the run ends)."""
    given = _provided.get()
    if given is not None:
        yield given
        return
    own = Resources()
    try:
        yield own
    finally:
        own.close()
