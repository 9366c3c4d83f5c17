"""`situate mcp`: the warm `Retriever` as a Model Context Protocol server, on the official `mcp`
SDK (2.x, `MCPServer`), over stdio (an agent starts it) or streamable HTTP.

Two tools: `search` (`query`, `k`, `mode`, `collection`), whose arguments are checked as every
face checks a search (`situate.api.request.SearchRequest`: before the SDK's own, laxer, coercion)
and whose structured result is the same JSON as `POST /search` answers
(`situate.api.wire.SearchResponse`), and `describe_collection` (rows, embedder, contexts, when it
was last ingested, the modes it can be searched in). A bad argument or a failing store is a tool
error with one line saying what to do, never a traceback. Over HTTP, the same door as
`situate api` (`situate.api.guard`: Host and Origin, token first, bounded bodies). Over stdio, a
line that is not a JSON-RPC message (not JSON, not UTF-8, nested deeper than the parser goes) is
answered with a JSON-RPC parse error (-32700, id null), as the SDK's HTTP transport answers it:
the SDK's stdio transport (mcp 2.3) drops such a line in silence, and a client would wait
forever for the id it sent (`run_stdio`).

An agent starts `situate mcp` from a directory of its own choosing: a relative Milvus Lite path is
made absolute when the server starts (and named so in every error), and an error before the
session begins is one line on stderr, which MCP clients show.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from situate.api.config import RetrieverConfig
from situate.api.guard import Guard, Policy
from situate.api.http import check_bind, listen, run_uvicorn, starting
from situate.api.request import K, Mode, Query, SearchRequest, Served
from situate.api.retriever import Retriever
from situate.api.wire import CollectionDescription, SearchResponse, message_of, warnings_of
from situate.core.errors import SituateError
from situate.core.uri import is_lite
from situate.core.version import version

if TYPE_CHECKING:
    from mcp.server import MCPServer

TRANSPORTS = ("stdio", "streamable-http")
log = logging.getLogger("situate.api")


def create_server(retriever: Retriever) -> MCPServer[Any]:
    """An MCP server whose tools search and describe `retriever`'s collection."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    class Server(MCPServer[Any]):
        async def call_tool(self, name: str, arguments: dict[str, Any],
                            context: Any = None) -> Any:
            if name == "search":  # checked as every face checks it, before the SDK coerces
                try:
                    arguments = SearchRequest.of(arguments).model_dump(exclude_none=True)
                except SituateError as e:
                    raise ToolError(message_of(e)) from None
            return await super().call_tool(name, arguments, context)

    name = retriever.collection
    server = Server(
        "situate", version=version(), log_level="WARNING",
        instructions=f"Search the collection {name!r} (chunks of documents, each with a context "
                     "that situates it in its document) with `search`; `describe_collection` "
                     "says what it holds.")
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
    modes = " | ".join(retriever.modes)

    @server.tool(name="search", annotations=read_only, description=(
        f"The chunks of collection {name!r} most relevant to `query`, best first, ranked as "
        "situate's evaluation ranks them: `hits` (id, doc_id, index, text, context, score, "
        f"metadata) and `took_ms`. Modes here: {modes} (default {retriever.mode})."))
    async def search(query: Query, k: K = 10, mode: Mode = None,
                     collection: Served = None    ) -> SearchResponse:
        started = time.perf_counter()
        request = SearchRequest(query=query, k=k, mode=mode, collection=collection)
        try:
            hits = await asyncio.to_thread(retriever.run, request)
        except SituateError as e:
            raise ToolError(message_of(e)) from None
        return SearchResponse(hits=hits,
                              took_ms=round((time.perf_counter() - started) * 1000, 3),
                              warnings=warnings_of(request))

    @server.tool(name="describe_collection", annotations=read_only, description=(
        f"What collection {name!r} holds: rows, the embedder of its vectors, the contexts its "
        "chunks were given, when it was last ingested, and the search modes."))
    async def describe_collection() -> CollectionDescription:
        try:
            return await asyncio.to_thread(retriever.describe)
        except SituateError as e:
            raise ToolError(message_of(e)) from None

    return server


async def run_stdio(server: MCPServer[Any]) -> None:
    """`server` over this process's stdin and stdout (the SDK's `stdio_server`), each line the
    SDK could not read as a JSON-RPC message answered with a parse error (id null: no id could
    be read from it) instead of dropped."""
    import anyio
    import mcp_types as types
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    async with stdio_server() as (read_stream, write_stream):
        passed, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def relay() -> None:
            async with passed:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        log.warning("MCP over stdio: a line that is not a JSON-RPC message was "
                                    "answered with a parse error")
                        await write_stream.send(SessionMessage(types.JSONRPCError(
                            jsonrpc="2.0", id=None, error=types.ErrorData(
                                code=types.PARSE_ERROR,
                                message="Parse error: the line is not a JSON-RPC message"))))
                    else:
                        await passed.send(item)

        lowlevel = server._lowlevel_server  # what the SDK's own run_stdio_async serves
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(relay)
            await lowlevel.run(inbound, write_stream, lowlevel.create_initialization_options())
            tasks.cancel_scope.cancel()


def absolute(uri: str) -> str:
    """A Milvus Lite path made absolute against the directory the server starts in (an MCP
    client starts it wherever it likes); a server URI as it is."""
    return os.path.abspath(os.path.expanduser(uri)) if is_lite(uri) else uri


def serve(config: RetrieverConfig, *, transport: str = "stdio", host: str = "127.0.0.1",
          port: int = 8000, policy: Policy | None = None) -> str | None:
    """`situate mcp`: open the retriever `config` describes (warm), then serve MCP over
    `transport` until the client goes (stdio) or the server is stopped (streamable-http: returns
    the signal's name)."""
    from situate.api.http import configure_logging, serving

    if transport not in TRANSPORTS:
        from situate.core.errors import InputError

        raise InputError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    policy = policy or Policy()
    collection = config.collection
    config = serving(config).model_copy(update={"uri": absolute(config.uri)})
    sock = None
    if transport == "streamable-http":
        check_bind(host, policy.token, policy.allowed_hosts, "situate mcp")
        sock = listen(host, port)
    configure_logging()  # on stderr: stdout is the protocol's, over stdio
    try:
        with starting("situate mcp"):
            retriever = Retriever.open(config)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    try:
        server = create_server(retriever)
        if sock is None:
            log.info(f"serving collection {collection!r} at {retriever.uri} over MCP on stdio")
            import anyio

            anyio.run(run_stdio, server)
            return None
        from mcp.server.transport_security import TransportSecuritySettings

        # The guard checks Host and Origin (with --allowed-host and --cors-origin), the token
        # and the body's size for the whole app, as it does for `situate api`.
        app = server.streamable_http_app(
            host=host, max_request_body_size=policy.max_body,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        shown = f"[{host}]" if ":" in host else host
        log.info(f"serving collection {collection!r} over MCP on "
                 f"http://{shown}:{sock.getsockname()[1]}/mcp"
                 + ("; clients send Authorization: Bearer <SITUATE_API_TOKEN>"
                    if policy.token else ""))
        return run_uvicorn(Guard(app, policy), sock, policy)
    finally:
        retriever.close()


