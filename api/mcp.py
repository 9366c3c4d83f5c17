"""`situate mcp`: the warm `Retriever` as a Model Context Protocol server, on the official `mcp`
SDK (2.x, `MCPServer`), over stdio (an agent starts it) or streamable HTTP.

Two tools: `search` (`query`, `k`, `mode`), whose structured result is the same JSON as
`POST /search` answers (`situate.api.wire.SearchResponse`), and `describe_collection` (rows,
embedder, contexts, when it was last ingested). A bad argument or a failing store is a tool error
with one line saying what to do, never a traceback. Over HTTP, the same address rule as
`situate api`: loopback, or SITUATE_API_TOKEN sent as `Authorization: Bearer TOKEN`.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from situate.api.http import SERVING_ATTEMPTS, check_bind, listen, run_uvicorn
from situate.api.retriever import Retriever
from situate.api.wire import CollectionInfo, SearchHit, SearchResponse, message_of
from situate.core.errors import SituateError
from situate.tasks.retrieval.search import MAX_K, MODES

if TYPE_CHECKING:
    from mcp.server import MCPServer

TRANSPORTS = ("stdio", "streamable-http")
log = logging.getLogger("situate.api")


def create_server(retriever: Retriever) -> MCPServer[Any]:
    """An MCP server whose tools search and describe `retriever`'s collection."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    name = retriever.collection
    server: MCPServer[Any] = MCPServer(
        "situate", version=_version(), log_level="WARNING",
        instructions=f"Search the collection {name!r} (chunks of documents, each with a context "
                     "that situates it in its document) with `search`; `describe_collection` "
                     "says what it holds.")
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    def refused(e: SituateError) -> ToolError:
        return ToolError(message_of(e))

    @server.tool(name="search", annotations=read_only, description=(
        f"The chunks of collection {name!r} most relevant to `query`, best first, ranked as "
        "situate's evaluation ranks them: `hits` (id, doc_id, index, text, context, score, "
        "metadata) and `took_ms`."))
    async def search(
            query: Annotated[str, Field(description="what to search for")],
            k: Annotated[int, Field(description=f"number of hits, 1 to {MAX_K}")] = 10,
            mode: Annotated[str | None, Field(description=(
                f"{' | '.join(MODES)}; default: the server's"))] = None) -> SearchResponse:
        started = time.perf_counter()
        try:
            hits = await retriever.asearch(query, k, mode)
        except SituateError as e:
            raise refused(e) from None
        return SearchResponse(hits=[SearchHit.of(h) for h in hits],
                              took_ms=round((time.perf_counter() - started) * 1000, 3))

    @server.tool(name="describe_collection", annotations=read_only, description=(
        f"What collection {name!r} holds: rows, the embedder of its vectors, the contexts its "
        "chunks were given, when it was last ingested, and the search modes."))
    async def describe_collection() -> CollectionInfo:
        import asyncio

        try:
            return CollectionInfo.of(await asyncio.to_thread(retriever.describe))
        except SituateError as e:
            raise refused(e) from None

    return server


class BearerAuth:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer TOKEN` (401 otherwise)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not secrets.compare_digest(given, self.expected):
                from starlette.responses import JSONResponse

                response = JSONResponse(
                    {"detail": "missing or wrong token: send Authorization: Bearer "
                               "<SITUATE_API_TOKEN>"},
                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve(collection: str, uri: str, *, transport: str = "stdio", host: str = "127.0.0.1",
          port: int = 8000, mode: str = "hybrid", fusion: str | None = None,
          reranker: str | None = None, token: str = "", workers: int = 1) -> str | None:
    """`situate mcp`: open the retriever (warm), then serve MCP over `transport` until the client
    goes (stdio) or the server is stopped (streamable-http: returns the signal's name)."""
    from situate.api.http import configure_logging

    if transport not in TRANSPORTS:
        from situate.core.errors import InputError

        raise InputError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    sock = None
    if transport == "streamable-http":
        check_bind(host, token, "situate mcp")
        sock = listen(host, port)
    configure_logging()  # on stderr: stdout is the protocol's, over stdio
    try:
        retriever = Retriever(collection, uri, mode=mode, fusion=fusion, reranker=reranker,
                              retry_attempts=SERVING_ATTEMPTS, workers=workers)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    try:
        server = create_server(retriever)
        if sock is None:
            log.info(f"serving collection {collection!r} over MCP on stdio")
            server.run("stdio")
            return None
        app = server.streamable_http_app(host=host)
        shown = f"[{host}]" if ":" in host else host
        log.info(f"serving collection {collection!r} over MCP on "
                 f"http://{shown}:{sock.getsockname()[1]}/mcp"
                 + ("; clients send Authorization: Bearer SITUATE_API_TOKEN" if token else ""))
        return run_uvicorn(BearerAuth(app, token) if token else app, sock)
    finally:
        retriever.close()


def _version() -> str:
    from situate.api.http import _version as version

    return version()
