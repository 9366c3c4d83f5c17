"""A served collection without a model or Milvus: a `Retriever` over a one-chunk store and the
hash embedding, for tests of the servers' door (tests/test_serving_hostile.py), in the test's
process or in a server process of its own (`python -m tests.fakes.served mcp-stdio`)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from situate.core.records import CollectionInfo, Hit


class OneChunkStore:
    """A store whose every search finds one chunk; it keeps the query text each leg was asked."""

    uri = "memory"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def require(self, collection: str) -> None:
        pass

    def describe(self, collection: str) -> CollectionInfo:
        return CollectionInfo(64, "hash:bow-64")

    def count(self, collection: str) -> int:
        return 1

    def leg_search(self, collection: str, leg: str, query: str, vector: Any, limit: int) -> list[Hit]:
        self.asked.append((leg, query))
        return [Hit("c1", "doc", 0, "the retry delay doubles", "", 1.0)]

    def leg_scores(self, collection: str, leg: str, query: str, vector: Any,
                   ids: Any) -> dict[str, float]:
        return {}

    def ranking(self, collection: str, leg: str, query: str, vector: Any,
                limit: int) -> list[tuple[str, float]]:
        return [(h.id, h.score) for h in self.leg_search(collection, leg, query, vector, limit)]

    def hits(self, collection: str, ranked: list[tuple[str, float]]) -> list[Hit]:
        return [Hit(i, "doc", 0, "the retry delay doubles", "", s) for i, s in ranked]


def retriever(store: OneChunkStore | None = None, embedders: Any = None) -> Any:
    """A warm hybrid `Retriever` of collection "c" over `store`."""
    from situate.api.retriever import Retriever
    from situate.tasks.embedders.base import Embedders

    found = Retriever.over(store or OneChunkStore(), "c", embedders=embedders or Embedders())
    found.warm()
    return found


@contextmanager
def served(app: Any, policy: Any = None) -> Iterator[int]:
    """`app` served by uvicorn as `situate api` configures it for `policy`, in a thread, on a
    free port of 127.0.0.1 (a client bound to 127.0.0.7 is another address); yields the port."""
    import uvicorn

    from situate.api.guard import Policy
    from situate.api.http import listen, uvicorn_config

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app, policy or Policy()))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


if __name__ == "__main__" and sys.argv[1:] == ["mcp-stdio"]:
    import anyio

    from situate.api.mcp import create_server, run_stdio
    from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec
    from tests.fakes.hash_embedding import HashEmbedding

    EMBEDDERS.register("hash", EmbedderSpec("bow-64", "math", "", "",
                                            lambda model, key: HashEmbedding()))

    anyio.run(run_stdio, create_server(retriever()))
