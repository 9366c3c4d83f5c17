"""`situate api`: the warm `Retriever` behind HTTP (FastAPI and uvicorn, which come with Prefect).

    POST /search      {"query": str, "k": int, "mode": str} -> {"hits": [...], "took_ms": float,
                      "warnings": [str]} (a query past 64 terms is cut, and the warning says where)
    GET  /collection  what the collection served is (rows, embedder, contexts, last ingested)
    GET  /healthz     {"status": "ok", "collection": NAME}
    GET  /docs        the OpenAPI page (/openapi.json), served from the package (offline)

Every request passes `situate.api.guard.Guard` first: loopback names only in `Host` unless
`--allowed-host` adds others (DNS rebinding), no other origin unless `--cors-origin` lets it,
the token (SITUATE_API_TOKEN, `Authorization: Bearer TOKEN`) before the body is read, a bounded
body, bounded requests in flight. It listens on loopback unless told otherwise; any other
address needs a token of 32 characters or more and the names clients call it by. A request is
checked as every face checks it (`situate.api.request.SearchRequest`); bad input is a 4xx whose
JSON `detail` is one line saying what to send; a Milvus server that stops answering is a 503
(one log line, no traceback) and the next request after it is back succeeds, with no restart.
FastAPI's lifespan owns the retriever: it is closed (the model's process ended, the store let
go) when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import Request

from situate.api.config import RetrieverConfig
from situate.api.guard import Guard, Policy, printable
from situate.api.request import SearchRequest
from situate.api.retriever import Retriever
from situate.api.wire import CollectionDescription, SearchResponse, status_of, warnings_of
from situate.core.errors import InputError, SituateError
from situate.core.processes import stop_process_tree, usable_cores, watch_parent
from situate.core.secrets import redact
from situate.core.settings import AUTO_API_PROCESSES, AUTO_LITE_ROWS
from situate.core.uri import is_lite
from situate.core.version import version

if TYPE_CHECKING:
    from fastapi import FastAPI

# Tries of each Milvus call while serving: one retry, so that a request during an outage is
# answered 503 within about a second instead of after the CLI's 30 s of patience.
SERVING_ATTEMPTS = 2
# A token that anyone who can reach the port may try: long enough not to be guessed.
MIN_PUBLIC_TOKEN = 32
log = logging.getLogger("situate.api")


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str, allowed_hosts: Sequence[str] = (),
               command: str = "situate api") -> None:
    """Refuse a token that could never match or be guessed, and a bind beyond loopback without
    a token or without the names its clients use."""
    if token != token.strip():
        raise InputError("SITUATE_API_TOKEN starts or ends with whitespace: clients' header "
                         "values are stripped, so no request could ever match it; remove the "
                         "whitespace")
    if is_loopback(host):
        return
    if not token:
        raise InputError(f"--host {host} is not a loopback address and SITUATE_API_TOKEN is not "
                         f"set: set it (`{command} --new-token` makes one; clients then send "
                         f"Authorization: Bearer <SITUATE_API_TOKEN>), or run `{command}` on 127.0.0.1")
    if len(token) < MIN_PUBLIC_TOKEN:
        raise InputError(f"SITUATE_API_TOKEN has {len(token)} characters: beyond loopback anyone "
                         f"who reaches the port can try tokens, so it needs at least "
                         f"{MIN_PUBLIC_TOKEN}; `{command} --new-token` makes one")
    if not allowed_hosts:
        raise InputError(f"--host {host} is not a loopback address: name the host clients call "
                         "it by with --allowed-host NAME (SITUATE_ALLOWED_HOSTS; '*' for any, "
                         "behind a proxy that checks it), so that requests under another name "
                         "are refused")


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "no token, or the wrong one"},
    403: {"description": "a request from another origin (see --cors-origin)"},
    404: {"description": "another collection than the one served"},
    408: {"description": "a body not whole within the server's --read-timeout"},
    413: {"description": "a body over the server's limit"},
    421: {"description": "a Host name the server does not answer to (see --allowed-host)"},
    422: {"description": "a body that is not JSON, an empty query, k not a whole number "
                         "from 1 to 1000, an unknown field or mode, a mode this server "
                         "cannot run"},
    429: {"description": "too many requests in flight from this client"},
    503: {"description": "Milvus did not answer, or the server is busy: try again shortly"}}


def create_app(retriever: Retriever, policy: Policy | None = None) -> Any:
    """The HTTP face of `retriever` behind its `Guard`; it closes the retriever when the app shuts
    down."""
    from fastapi import FastAPI
    from fastapi.responses import Response

    policy = policy or Policy()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            retriever.close()

    app = FastAPI(title="situate", lifespan=lifespan, version=version(), docs_url=None,
                  redoc_url=None, summary="Search a collection as `situate evaluate` measured it")
    if policy.token:
        app.openapi_schema = None  # built on first use, with the bearer scheme below
    _docs_and_error_handlers(app)

    body = {"requestBody": {"required": True, "content": {"application/json": {
        "schema": SearchRequest.model_json_schema()}}}}

    @app.post("/search", response_model=SearchResponse, responses=_ERRORS, openapi_extra=body)
    async def search(request: Request) -> Response:
        """The top `k` chunks for `query`, best first, ranked exactly as `situate evaluate`
        ranks them in `mode`."""
        asked = SearchRequest.of_json(await request.body())
        started = time.perf_counter()
        hits = await asyncio.to_thread(retriever.run, asked)
        answer = SearchResponse(hits=hits,
                                took_ms=round((time.perf_counter() - started) * 1000, 3),
                                warnings=warnings_of(asked))
        # Serialized once, here: returned as a model, FastAPI would validate it again against
        # response_model (which stays, for the OpenAPI page) and encode it a second time.
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.get("/collection", response_model=CollectionDescription, responses=_ERRORS)
    def collection() -> CollectionDescription:
        """The collection served: rows, embedder, contexts, when it was last ingested, and the
        modes it can be searched in here."""
        return retriever.describe()

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """The server is up (it says nothing of Milvus: /collection asks it)."""
        return {"status": "ok", "collection": retriever.collection}

    if policy.token:
        _bearer_in_openapi(app)
    return Guard(app, policy)


def _docs_and_error_handlers(app: FastAPI) -> None:
    """The offline API page at /docs, and situate's errors and bad requests as JSON replies."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs/assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="situate API",
                                   swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/assets/swagger-ui.css",
                                   swagger_favicon_url="/docs/assets/favicon-32x32.png")

    @app.exception_handler(SituateError)
    async def situate_error(request: Request, exc: SituateError) -> JSONResponse:
        status, message = status_of(exc)
        if status >= 500:
            log.warning(f"{request.method} {printable(request.url.path)}: {status}: {message}")
        return JSONResponse({"detail": message}, status_code=status,
                            headers={"Retry-After": "5"} if status == 503 else None)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": redact(f"bad request: {exc.errors()[0].get('msg', '')}")},
                            status_code=422)


def _bearer_in_openapi(app: Any) -> None:
    """The OpenAPI page's "Authorize" button: the bearer scheme on the guarded operations."""
    from fastapi.openapi.utils import get_openapi

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, summary=app.summary,
                               routes=app.routes)
            spec.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "SITUATE_API_TOKEN"}}
            for path in ("/search", "/collection"):
                for operation in spec["paths"].get(path, {}).values():
                    operation["security"] = [{"bearer": []}]
            app.openapi_schema = spec
        return app.openapi_schema  # type: ignore[no-any-return]

    app.openapi = schema


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


def uvicorn_config(app: Any, policy: Policy) -> Any:
    """How uvicorn serves `app` behind `policy`: its own access log off (the guard writes one
    without query strings); the client's address the socket's peer unless the policy's
    `forwarded_allow_ips` names the proxies whose X-Forwarded-For and X-Forwarded-Proto are
    believed (uvicorn's defaults believe them from 127.0.0.1, so any local process could pass as
    any address); and a request's headers read within the policy's `read_timeout`
    (`header_timed`)."""
    import uvicorn

    forwarded = policy.forwarded_allow_ips
    return uvicorn.Config(app, log_level="info", access_log=False, lifespan="on",
                          timeout_graceful_shutdown=10, server_header=False,
                          proxy_headers=bool(forwarded), forwarded_allow_ips=forwarded or None,
                          http=header_timed(policy.read_timeout))


def header_timed(limit: float) -> type:
    """uvicorn's h11 protocol, closing a connection whose request's headers are not whole within
    `limit` seconds of its opening or of its previous answer: uvicorn waits for ever for the
    rest of a request's first bytes (the guard times the body, once the headers are in)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimed(H11Protocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self.loop.call_later(limit, self._late, self.cycle)

        def _late(self, armed: Any) -> None:
            if self.cycle is armed and not self.transport.is_closing():
                self.transport.close()  # no new request's headers since it was armed

    return HeaderTimed


def run_uvicorn(app: Any, sock: socket.socket, policy: Policy) -> str | None:
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
        server = uvicorn.Server(uvicorn_config(app, policy))
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    return stopped[0] if stopped else None


def serving(config: RetrieverConfig) -> RetrieverConfig:
    """A server's retriever: its model in processes of its own (so that a stop is not kept
    waiting by it), and few attempts at a Milvus server that is down, so that a request is
    answered 503 at once (unless the configuration asks for more)."""
    return config.model_copy(update={"model_process": True, "retry_attempts":
                                     config.retry_attempts or SERVING_ATTEMPTS})


def server_processes(asked: int, uri: str) -> int:
    """The server processes of `situate api --processes asked`: `asked`; for 0, 1 on a Milvus
    Lite file (one process's at a time) or a machine of one core, else 0: decided once the
    first serves (`auto_processes`)."""
    if asked or is_lite(uri) or usable_cores() == 1:
        return asked or 1
    return 0


def auto_processes(rows: int, lite: bool) -> int:
    """How many server processes answer by default, once the first one serves a collection of
    `rows` chunks, on Milvus Lite (`lite`: a `milvus-lite server`) or a Milvus server: one per
    core, at most AUTO_API_PROCESSES; on Lite, only while the collection holds at most
    AUTO_LITE_ROWS chunks (Lite walks every row once a dense search call, and concurrent
    searches share a call only within one process), else one."""
    if lite and rows > AUTO_LITE_ROWS:
        return 1
    return max(1, min(usable_cores(), AUTO_API_PROCESSES))


def serve(config: RetrieverConfig, *, host: str = "127.0.0.1", port: int = 8000,
          policy: Policy | None = None, processes: int = 0) -> str | None:
    """`situate api`: check the address, open the retriever `config` describes (warm), listen,
    serve until stopped; returns the signal it stopped on. With more than one server process
    (`server_processes`), they answer on the one socket, each with its own retriever
    (`situate.api.http_processes`)."""
    policy = policy or Policy()
    check_bind(host, policy.token, policy.allowed_hosts)
    processes = server_processes(processes, config.uri)
    if processes > 1 and is_lite(config.uri):
        raise InputError(f"--processes {processes} needs a Milvus server: a Milvus Lite file "
                         f"({config.uri}) is one process's at a time; serve it with "
                         "`milvus-lite server` and give its http:// URI (--milvus-uri), or run "
                         "one process")
    configure_logging()
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host

    def announce(rows: int, embedder: str, each: str = "") -> None:
        log.info(f"serving collection {config.collection!r} ({rows} rows, {embedder}, mode "
                 f"{config.mode}) on http://{shown}:{sock.getsockname()[1]}{each} (docs: /docs)"
                 + ("; clients send Authorization: Bearer <SITUATE_API_TOKEN>" if policy.token
                    else ""))

    if processes != 1:  # several, or as many as the first one's collection calls for (0)
        from situate.api.http_processes import serve_processes

        return serve_processes(config, sock, policy, processes, lambda info, n: announce(
            info["rows"], info["embedder"], f" from {n} processes" if n > 1 else ""), child,
            lambda info: auto_processes(info["rows"], info["lite"]))
    try:
        with starting("situate api"):
            retriever = Retriever.open(serving(config))
    except BaseException:
        sock.close()
        raise
    info = retriever.describe()
    announce(info.rows, info.embedder)
    return run_uvicorn(create_app(retriever, policy), sock, policy)


def child(config: RetrieverConfig, policy: Policy, sock: socket.socket, told: Any) -> None:
    """One server process of `situate api --processes N` (`situate.api.http_processes`): its
    retriever opened, the parent told on `told` (the collection's description, or the error),
    then uvicorn until SIGTERM or SIGINT. Ctrl-C reaches the whole process group: while
    starting, the parent alone hears it (and stops this process with SIGTERM)."""
    import gc

    from situate.api.http_processes import ServerProcessError

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Once the command's process is gone (killed outright), stop: SIGTERM is uvicorn's graceful
    # shutdown, or the end at once while this one starts. It must not serve on, nor load on.
    watch_parent(os.getppid(), lambda: os.kill(os.getpid(), signal.SIGTERM))
    configure_logging()
    try:
        retriever = Retriever.open(serving(config))
        info = retriever.describe()
    except SituateError as e:
        told.send(e)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - said to the parent in one line, as the CLI says it
        told.send(ServerProcessError(f"a server process could not start: {type(e).__name__}: "
                                     f"{redact(str(e))}"))
        sys.exit(2)
    try:
        try:
            told.send({"rows": info.rows, "embedder": info.embedder, "lite": retriever.on_lite})
            told.close()
        except OSError:  # the command's process is gone: nothing to serve for
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        run_uvicorn(create_app(retriever, policy), Handed(sock), policy)
    finally:
        retriever.close()  # the app's shutdown did, unless uvicorn failed before it
        # Its model processes have nothing left to do, and this process's exit would wait for
        # them: once the command's process was killed outright, a pool's worker sometimes
        # never heard its pool shut down, and both waited for ever.
        stop_process_tree(grace=5)
    # A spawned process ends with os._exit, without the collection an interpreter's own exit
    # makes: the model's pool (closed with the app) releases its semaphores only when collected,
    # else the resource tracker the processes share reports them leaked when the command ends.
    del retriever
    gc.collect()


class Handed(socket.socket):
    """A server process's end of the Unix socket its parent hands it connections on
    (`situate.api.http_processes.Handing`), given to uvicorn as its listening socket: asyncio's
    accept loop calls `accept`, which receives the next connection's descriptor. Once the parent
    is gone (the end reads empty), the process stops as on SIGTERM."""

    def __init__(self, end: socket.socket) -> None:
        super().__init__(fileno=end.detach())

    def listen(self, backlog: int = 0) -> None:
        """Nothing to do: the parent listens."""

    def accept(self) -> tuple[socket.socket, Any]:
        message, fds, _, _ = socket.recv_fds(self, 1, 1)
        if not message or not fds:
            if not message:  # the parent is gone: stop taking connections, and stop
                with contextlib.suppress(RuntimeError):
                    asyncio.get_running_loop().remove_reader(self.fileno())
                os.kill(os.getpid(), signal.SIGTERM)
            raise ConnectionAbortedError("no connection was handed over")
        conn = socket.socket(fileno=fds[0])
        try:
            peer = conn.getpeername()
        except OSError:  # the client left already
            peer = None
        return conn, peer


@contextlib.contextmanager
def starting(command: str) -> Any:
    """While a server opens its store and loads its model: SIGTERM or Ctrl-C says so in its own
    line, ends every process the server started (the model's) and exits with 128 + the signal's
    number at once. Nothing is saved or lost by it: the server had not begun to answer (and has
    no resume hint to give, unlike an interrupted ingest)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        from situate.core.processes import stop_process_tree

        sys.stderr.write(f"{command}: stopped ({signal.Signals(signum).name}) while starting, "
                         "before serving\n")
        sys.stderr.flush()
        stop_process_tree(2.0)
        os._exit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def configure_logging() -> None:
    """situate's own log lines (the store's retries, a 503's one line) on stderr, as uvicorn's.
    The access log's lines are written by a thread of their own (a QueueHandler's listener):
    a stderr that a slow reader holds up never holds up the event loop."""
    import atexit
    import logging.handlers
    import queue

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    logger = logging.getLogger("situate")
    if not logger.handlers:
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    access = logging.getLogger("situate.api.access")
    if not access.handlers:
        lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        access.addHandler(logging.handlers.QueueHandler(lines))
        access.propagate = False
        listener = logging.handlers.QueueListener(lines, handler)
        listener.start()
        atexit.register(listener.stop)


