"""`situate api`: the warm `Retriever` behind HTTP (FastAPI and uvicorn, which come with Prefect).

    POST /search      {"query": str, "k": int, "mode": str} -> {"hits": [...], "took_ms": float}
    GET  /collection  what the collection served is (rows, embedder, contexts, last ingested)
    GET  /healthz     {"status": "ok", "collection": NAME}
    GET  /docs        the OpenAPI page (/openapi.json)

It listens on loopback unless told otherwise; any other address needs SITUATE_API_TOKEN, which
clients then send as `Authorization: Bearer TOKEN` (a request without it is answered 401; with a
token set, loopback clients send it too). Bad input is a 4xx whose JSON `detail` says what to
send; a Milvus server that stops answering is a 503 (one log line, no traceback) and the next
request after it is back succeeds, with no restart. FastAPI's lifespan owns the retriever: it is
closed (the model's process ended) when the server stops.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import secrets
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from situate.api.retriever import Retriever
from situate.api.wire import (
    CollectionInfo,
    SearchHit,
    SearchRequest,
    SearchResponse,
    other_collection,
    status_of,
    validation_message,
)
from situate.core.errors import InputError, SituateError

if TYPE_CHECKING:
    from fastapi import FastAPI

# Tries of each Milvus call while serving: one retry, so that a request during an outage is
# answered 503 within about a second instead of after the CLI's 30 s of patience.
SERVING_ATTEMPTS = 2
log = logging.getLogger("situate.api")


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str, command: str = "situate api") -> None:
    """Refuse to listen beyond loopback without a token."""
    if not token and not is_loopback(host):
        raise InputError(f"--host {host} is not a loopback address and SITUATE_API_TOKEN is not "
                         f"set: set it (clients then send Authorization: Bearer TOKEN), or run "
                         f"`{command}` on 127.0.0.1")


def create_app(retriever: Retriever, token: str = "") -> FastAPI:
    """The HTTP face of `retriever`; it closes the retriever when the app shuts down. With
    `token`, /search and /collection need `Authorization: Bearer TOKEN`."""
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            retriever.close()

    app = FastAPI(title="situate", lifespan=lifespan, version=_version(),
                  summary=f"Search collection {retriever.collection!r} as `situate evaluate` "
                          "measured it")
    bearer = Depends(HTTPBearer(auto_error=False,
                                description="SITUATE_API_TOKEN, when the server has one"))

    async def authorized(credentials: HTTPAuthorizationCredentials | None = bearer) -> None:
        if not token:
            return
        given = credentials.credentials if credentials is not None else ""
        if not secrets.compare_digest(given.encode(), token.encode()):
            raise _Unauthorized()

    guarded = [Depends(authorized)]

    @app.exception_handler(_Unauthorized)
    async def unauthorized(request: Request, exc: _Unauthorized) -> JSONResponse:
        return JSONResponse({"detail": "missing or wrong token: send Authorization: Bearer "
                                       "<SITUATE_API_TOKEN>"}, status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(SituateError)
    async def situate_error(request: Request, exc: SituateError) -> JSONResponse:
        status, message = status_of(exc)
        if status >= 500:
            log.warning(f"{request.method} {request.url.path}: {status}: {message}")
        return JSONResponse({"detail": message}, status_code=status,
                            headers={"Retry-After": "5"} if status == 503 else None)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_message(list(exc.errors()))}, status_code=422)

    errors: dict[int | str, dict[str, Any]] = {
        401: {"description": "no token, or the wrong one"},
        404: {"description": "another collection than the one served"},
        422: {"description": "an empty query, k outside 1-1000, an unknown mode"},
        503: {"description": "Milvus did not answer: try again shortly"}}

    @app.post("/search", response_model=SearchResponse, dependencies=guarded, responses=errors)
    async def search(request: SearchRequest) -> Response:
        """The top `k` chunks for `query`, best first, ranked exactly as `situate evaluate`
        ranks them in `mode`."""
        other_collection(request.collection, retriever.collection)
        started = time.perf_counter()
        hits = await retriever.asearch(request.query, request.k, request.mode)
        answer = SearchResponse(hits=[SearchHit.of(h) for h in hits],
                                took_ms=round((time.perf_counter() - started) * 1000, 3))
        # Serialized once, here: returned as a model, FastAPI would validate it again against
        # response_model (which stays, for the OpenAPI page) and encode it a second time.
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.get("/collection", response_model=CollectionInfo, dependencies=guarded,
             responses=errors)
    def collection() -> CollectionInfo:
        """The collection served: rows, embedder, contexts, when it was last ingested."""
        return CollectionInfo.of(retriever.describe())

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """The server is up (it says nothing of Milvus: /collection asks it)."""
        return {"status": "ok", "collection": retriever.collection}

    return app


class _Unauthorized(Exception):
    pass


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or one InputError saying why not (taken, not here)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        # The protocol number matters: asyncio turns Nagle off (TCP_NODELAY) only on accepted
        # sockets whose proto is IPPROTO_TCP; with proto 0 every keep-alive response whose
        # headers and body go out in two writes waited ~40 ms for the client's delayed ACK.
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}: choose another "
                         "--port or --host") from None
    return sock


def run_uvicorn(app: Any, sock: socket.socket) -> str | None:
    """Serve `app` on `sock` until SIGINT or SIGTERM; returns that signal's name (None if it
    stopped otherwise). uvicorn shuts down gracefully (the lifespan closes the retriever)."""
    import uvicorn

    stopped: list[str] = []
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # uvicorn re-raises the signal it stopped on once it is done: heard here, not fatal.
        previous = {sig: signal.signal(sig, lambda s, f: stopped.append(signal.Signals(s).name))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server = uvicorn.Server(uvicorn.Config(app, log_level="info", access_log=True,
                                               lifespan="on", timeout_graceful_shutdown=10))
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    return stopped[0] if stopped else None


def serve(collection: str, uri: str, *, host: str = "127.0.0.1", port: int = 8000,
          mode: str = "hybrid", fusion: str | None = None, reranker: str | None = None,
          token: str = "", workers: int = 1) -> str | None:
    """`situate api`: check the address, open the retriever (warm), listen, serve until stopped;
    returns the signal it stopped on."""
    check_bind(host, token)
    configure_logging()
    sock = listen(host, port)
    try:
        retriever = Retriever(collection, uri, mode=mode, fusion=fusion, reranker=reranker,
                              retry_attempts=SERVING_ATTEMPTS, workers=workers)
    except BaseException:
        sock.close()
        raise
    info = retriever.describe()
    shown = f"[{host}]" if ":" in host else host
    log.info(f"serving collection {collection!r} ({info.rows} rows, {info.embedder}, mode "
             f"{mode}) on http://{shown}:{sock.getsockname()[1]} (docs: /docs)"
             + ("; clients send Authorization: Bearer SITUATE_API_TOKEN" if token else ""))
    return run_uvicorn(create_app(retriever, token), sock)


def configure_logging() -> None:
    """situate's own log lines (the store's retries, a 503's one line) on stderr, as uvicorn's."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    for name in ("situate",):
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("situate")
    except PackageNotFoundError:
        return "unknown"
