"""The door of every served face (`situate api`, `situate mcp --transport streamable-http`): one
ASGI middleware that checks a request before any of it reaches situate.

In order, for each HTTP request:
1. **Host**: only loopback names (localhost, 127.0.0.1, ::1) and the names given with
   `--allowed-host` (SITUATE_ALLOWED_HOSTS); any other `Host` is 421. A web page the user visits
   can rebind its own name to 127.0.0.1 (DNS rebinding): its requests then carry that name, and
   are refused before they can read the collection. The value is read by the URL parser as one
   authority (name and port, nothing else: `localhost:1@evil.example` is refused) and the name
   compared exactly.
2. **Origin**: a browser's request from another origin is 403, unless that origin was given to
   `--cors-origin` (SITUATE_CORS_ORIGINS), which also answers its preflight (Starlette's
   CORSMiddleware). The server's own origin (its /docs page) passes: the same scheme as the
   request's, and the name and port of its `Host`, compared exactly (a page on another port of
   localhost is another origin).
3. **Concurrency**: at most `client_limit` requests in flight per client address (429 past it)
   and `total_limit` in all (503, and never less than four clients' worth, so that one address
   cannot take every slot), each with `Retry-After`. `/healthz` is never counted or refused.
   The address is the socket's: uvicorn reads `X-Forwarded-For` only from the proxies named by
   `--forwarded-allow-ips`.
4. **Token**: with SITUATE_API_TOKEN, `Authorization: Bearer TOKEN` (scheme in any case, RFC
   7235), compared in constant time, before a byte of the body is read: 401.
5. **Body**: at most `max_body` bytes (64 KiB by default), refused from its `Content-Length`
   before reading, or as it streams past the limit: 413; a body not whole within `read_timeout`
   seconds (10 by default) is 408, and its connection closed (headers not whole within the same
   time close the connection: `situate.api.http.header_timed`). The body is read here, whole, and
   handed on: nothing past the limit is ever held in memory.

Every refusal is one JSON line `{"detail": ...}`, which shows at most a short, escaped prefix of
any value the client sent (`shown`). The access log is written here, one line a request, once its
status is known, with the path only: a query string (where a careless client may put a token) is
never logged, and the path is data, not a line of the log: control characters, NUL, ESC and
other non-printables are escaped (`printable`) and it is cut at LOGGED_PATH characters with a
marker. The line is written by a thread of its own (`situate.api.http.configure_logging`), never
by the event loop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 64 * 1024
CLIENT_LIMIT = 64
TOTAL_LIMIT = 256
# Seconds a request's body may take to arrive whole (64 KiB at 6.5 KB/s, a very slow link).
READ_TIMEOUT = 10.0
# Characters of a path the access log keeps, and of a client's value a refusal shows.
LOGGED_PATH = 512
SHOWN = 64
DEFAULT_PORTS = {"http": 80, "https": 443}
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# Paths anyone may read without the token: the API's own description, and whether it is up.
OPEN_PATHS = ("/healthz", "/docs", "/openapi.json")
OPEN_PREFIXES = ("/docs/",)  # the page's scripts and styles
# Paths no limit on requests in flight applies to: whether the server is up must be answerable
# while it is busiest.
UNLIMITED_PATHS = ("/healthz",)

access_log = logging.getLogger("situate.api.access")


def printable(text: str, limit: int = LOGGED_PATH) -> str:
    """`text` as data in a log line or a reply: at most `limit` characters of it, each control
    character, NUL, ESC, other non-printable, backslash and double quote as a visible escape
    (`\\n`, `\\x1b`, `\\x00`, `\\u2028`), and `...[N more characters]` where it was cut. Reads
    `limit` characters, whatever the text's length."""
    cut = text[:limit]
    if not (cut.isprintable() and "\\" not in cut and '"' not in cut):
        cut = "".join(c if c.isprintable() and c not in '\\"' else _escaped(c) for c in cut)
    return cut if len(text) <= limit else f"{cut}...[{len(text) - limit:,} more characters]"


def _escaped(char: str) -> str:
    return {"\\": "\\\\", '"': '\\"'}.get(char) or char.encode("unicode_escape").decode("ascii")


def shown(value: str, limit: int = SHOWN) -> str:
    """A client's value as a refusal shows it: quoted, escaped and cut (`printable`)."""
    return f"'{printable(value, limit)}'"


def authority(value: str) -> tuple[str, int | None] | None:
    """A `Host` header's (or an origin's) name, lowercased and without IPv6 brackets, and its
    port, read by the URL parser; None unless it is one authority and nothing else (no user
    information, path, spaces or control characters, and a port that is a port)."""
    value = value.strip()
    if not value or not value.isascii() or not value.isprintable() or any(
            c in value for c in " @/\\?#"):
        return None
    if value.count(":") > 1 and not value.startswith("["):  # a bare IPv6 address
        return value.lower(), None
    try:
        parts = urlsplit("//" + value)
        port = parts.port
    except ValueError:  # "localhost:3000.evil.example", "[::1", "host:99999"
        return None
    return (parts.hostname, port) if parts.hostname else None


def origin_of(value: str) -> tuple[str, str, int] | None:
    """A browser origin ("scheme://host[:port]") as (scheme, name, port), the port filled in from
    the scheme; None unless it is an http(s) origin and nothing more."""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or parts.path not in ("", "/") or parts.query \
            or parts.fragment or "@" in parts.netloc:
        return None
    found = authority(parts.netloc)
    if found is None:
        return None
    name, port = found
    return parts.scheme, name, port if port is not None else DEFAULT_PORTS[parts.scheme]


def host_name(host: str) -> str:
    """The name of a `Host` header, lowercased, without port or IPv6 brackets ("[::1]:8000" ->
    "::1"); "" when it is not one authority (`authority`)."""
    found = authority(host)
    return found[0] if found else ""


def is_loopback_name(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Policy:
    """What the door lets through (see the module's docstring)."""

    token: str = ""
    allowed_hosts: tuple[str, ...] = ()  # names beyond loopback; "*": any (behind a proxy)
    cors_origins: tuple[str, ...] = ()
    max_body: int = MAX_BODY
    client_limit: int = CLIENT_LIMIT
    total_limit: int = TOTAL_LIMIT
    read_timeout: float = READ_TIMEOUT
    # Proxies whose X-Forwarded-For and X-Forwarded-Proto uvicorn believes ("" none: the client
    # is the socket's peer); uvicorn's `forwarded_allow_ips`.
    forwarded_allow_ips: str = ""
    open_paths: tuple[str, ...] = field(default=OPEN_PATHS)

    @property
    def slots(self) -> int:
        """Requests in flight in all: never fewer than four clients' worth."""
        return max(self.total_limit, 4 * self.client_limit)

    def host_allowed(self, host: str) -> bool:
        """A `Host` served here: a loopback name or an allowed one (an allowed "name:port" asks
        for that port too)."""
        found = authority(host)
        if found is None:
            return False
        if is_loopback_name(found[0]) or "*" in self.allowed_hosts:
            return True
        for allowed in self.allowed_hosts:
            named = authority(allowed)
            if named is not None and named[0] == found[0] and named[1] in (None, found[1]):
                return True
        return False

    def origin_allowed(self, origin: str, host: str, scheme: str = "http") -> bool:
        """A browser origin ("scheme://host[:port]") that may call: one CORS names (scheme, name
        and port equal), or the server's own (its pages, /docs): the request's scheme, and the
        name and port of its `Host`."""
        found = origin_of(origin)
        if found is None:
            return False
        if found in (origin_of(o) for o in self.cors_origins):
            return True
        own = authority(host)
        if own is None or scheme not in DEFAULT_PORTS:
            return False
        name, port = own
        return found == (scheme, name, port if port is not None else DEFAULT_PORTS[scheme])

    def authorized(self, header: bytes) -> bool:
        if not self.token:
            return True
        scheme, _, given = header.decode("latin-1").strip().partition(" ")
        return (scheme.lower() == "bearer"
                and secrets.compare_digest(given.strip().encode(), self.token.encode()))


class Guard:
    """ASGI middleware applying a `Policy` in front of `app` (see the module's docstring)."""

    def __init__(self, app: App, policy: Policy) -> None:
        self.policy = policy
        self.inner: App = app
        if policy.cors_origins:
            from starlette.middleware.cors import CORSMiddleware

            self.inner = CORSMiddleware(app, allow_origins=list(policy.cors_origins),
                                        allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                                        allow_headers=["authorization", "content-type",
                                                       "mcp-session-id", "mcp-protocol-version",
                                                       "last-event-id"],
                                        expose_headers=["mcp-session-id"], max_age=600)
        self.in_flight: Counter[str] = Counter()
        self.total = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        started = time.perf_counter()
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self._handle(scope, receive, sending)
        finally:
            # Once the request's fate is known; every value in it is bounded and escaped.
            client = scope.get("client") or ("-", 0)
            access_log.info('%s:%s - "%s %s HTTP/%s" %s %.1fms',
                            printable(str(client[0]), SHOWN), client[1],
                            printable(str(scope.get("method", "")), SHOWN),
                            printable(str(scope.get("path", ""))),
                            printable(str(scope.get("http_version", "1.1")), 8),
                            status[0] if status else "-", (time.perf_counter() - started) * 1000)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        policy = self.policy
        headers = _headers(scope)
        host = headers.get(b"host", b"").decode("latin-1")
        if not policy.host_allowed(host):
            await _refuse(send, 421, f"Host {shown(host) if host else '(none)'} is not served "
                                     "here: call it by a loopback address, or start the server "
                                     "with --allowed-host NAME")
            return
        origin = headers.get(b"origin", b"").decode("latin-1")
        if origin and not policy.origin_allowed(origin, host, scope.get("scheme", "http")):
            await _refuse(send, 403, "requests from another origin are refused: start the "
                                     "server with --cors-origin ORIGIN to let that page call it")
            return
        preflight = (scope.get("method") == "OPTIONS" and origin
                     and b"access-control-request-method" in headers)
        if preflight:  # answered by CORS (no token: browsers send none on a preflight)
            await self.inner(scope, receive, send)
            return
        if scope.get("path", "") in UNLIMITED_PATHS:
            await self._admitted(scope, receive, send, headers)
            return
        client = (scope.get("client") or ("-", 0))[0]
        if self.in_flight[client] >= policy.client_limit:
            await _refuse(send, 429, f"more than {policy.client_limit} requests in flight from "
                                     "this client: wait for answers, then try again",
                          retry_after=1)
            return
        if self.total >= policy.slots:
            await _refuse(send, 503, "the server is busy: try again shortly", retry_after=1)
            return
        self.in_flight[client] += 1
        self.total += 1
        try:
            await self._admitted(scope, receive, send, headers)
        finally:
            self.total -= 1
            self.in_flight[client] -= 1
            if not self.in_flight[client]:
                del self.in_flight[client]

    async def _admitted(self, scope: Scope, receive: Receive, send: Send,
                        headers: dict[bytes, bytes]) -> None:
        policy = self.policy
        path = scope.get("path", "")
        open_path = path in policy.open_paths or path.startswith(OPEN_PREFIXES)
        if not open_path and not policy.authorized(headers.get(b"authorization", b"")):
            await _refuse(send, 401, "missing or wrong token: send Authorization: Bearer "
                                     "<SITUATE_API_TOKEN>",
                          extra=[(b"www-authenticate", b"Bearer")])
            return
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await _refuse(send, 400, "Content-Length is not a number")
                return
            if declared > policy.max_body:
                await _refuse(send, 413, _too_large(policy.max_body))
                return
        try:
            async with asyncio.timeout(policy.read_timeout):
                body = await _read(receive, policy.max_body)
        except TimeoutError:
            await _refuse(send, 408, f"the body did not arrive whole within "
                                     f"{policy.read_timeout:g} s: send it at once (the server's "
                                     "limit is --read-timeout)")
            return
        if body is None:  # the client went away
            return
        if len(body) > policy.max_body:
            await _refuse(send, 413, _too_large(policy.max_body))
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.inner(scope, replay, send)


async def _read(receive: Receive, limit: int) -> bytearray | None:
    """The body, read until it is whole or one chunk past `limit` (None: the client left)."""
    body = bytearray()
    more = True
    while more and len(body) <= limit:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def _too_large(limit: int) -> str:
    return (f"the body is larger than {limit:,} bytes: send a smaller request (the server's "
            "limit is SITUATE_API_MAX_BODY)")


def _headers(scope: Scope) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for name, value in scope.get("headers") or ():
        out.setdefault(bytes(name).lower(), bytes(value))
    return out


async def _refuse(send: Send, status: int, detail: str, retry_after: int | None = None,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    # A refused request's body is never read: the connection cannot be reused for another.
    headers.append((b"connection", b"close"))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
