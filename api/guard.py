"""The door of every served face (`situate api`, `situate mcp --transport streamable-http`): one
ASGI middleware that checks a request before any of it reaches situate.

In order, for each HTTP request:
1. **Host**: only loopback names (localhost, 127.0.0.1, ::1) and the names given with
   `--allowed-host` (SITUATE_ALLOWED_HOSTS); any other `Host` is 421. A web page the user visits
   can rebind its own name to 127.0.0.1 (DNS rebinding): its requests then carry that name, and
   are refused before they can read the collection.
2. **Origin**: a browser's request from another origin is 403, unless that origin was given to
   `--cors-origin` (SITUATE_CORS_ORIGINS), which also answers its preflight (Starlette's
   CORSMiddleware). The server's own origin (its /docs page: the origin's host is the `Host`)
   passes.
3. **Concurrency**: at most `client_limit` requests in flight per client address (429 past it)
   and `total_limit` in all (503), each with `Retry-After`.
4. **Token**: with SITUATE_API_TOKEN, `Authorization: Bearer TOKEN` (scheme in any case, RFC
   7235), compared in constant time, before a byte of the body is read: 401.
5. **Body**: at most `max_body` bytes (64 KiB by default), refused from its `Content-Length`
   before reading, or as it streams past the limit: 413. The body is read here, whole, and
   handed on: nothing past the limit is ever held in memory.

Every refusal is one JSON line `{"detail": ...}`. The access log is written here, one line a
request, with the path only: a query string (where a careless client may put a token) is never
logged.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 64 * 1024
CLIENT_LIMIT = 64
TOTAL_LIMIT = 256
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# Paths anyone may read without the token: the API's own description, and whether it is up.
OPEN_PATHS = ("/healthz", "/docs", "/openapi.json")
OPEN_PREFIXES = ("/docs/",)  # the page's scripts and styles

access_log = logging.getLogger("situate.api.access")


def host_name(host: str) -> str:
    """The name of a `Host` header or an origin's authority, lowercased, without port or IPv6
    brackets: "[::1]:8000" -> "::1"."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") > 1:  # a bare IPv6 address
        return host
    return host.rsplit(":", 1)[0] if ":" in host else host


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
    open_paths: tuple[str, ...] = field(default=OPEN_PATHS)

    def host_allowed(self, host: str) -> bool:
        name = host_name(host)
        if not name:
            return False
        return (is_loopback_name(name) or "*" in self.allowed_hosts
                or name in (host_name(h) for h in self.allowed_hosts))

    def origin_allowed(self, origin: str, host: str) -> bool:
        """A browser origin ("scheme://host[:port]") that may call: one CORS allows, or the
        server's own (its pages, /docs: the origin's host is the request's `Host`)."""
        origin = origin.strip().rstrip("/").lower()
        if origin in (o.rstrip("/").lower() for o in self.cors_origins):
            return True
        scheme, sep, authority = origin.partition("://")
        return (bool(sep) and scheme in ("http", "https")
                and host_name(authority) == host_name(host) != "")

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
            client = scope.get("client") or ("-", 0)
            access_log.info('%s:%s - "%s %s HTTP/%s" %s %.1fms', client[0], client[1],
                            scope.get("method", ""), scope.get("path", ""),
                            scope.get("http_version", "1.1"), status[0] if status else "-",
                            (time.perf_counter() - started) * 1000)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        policy = self.policy
        headers = _headers(scope)
        host = headers.get(b"host", b"").decode("latin-1")
        if not policy.host_allowed(host):
            await _refuse(send, 421, f"Host {host_name(host) or '(none)'!r} is not served here: "
                                     "call it by a loopback address, or start the server with "
                                     "--allowed-host NAME")
            return
        origin = headers.get(b"origin", b"").decode("latin-1")
        if origin and not policy.origin_allowed(origin, host):
            await _refuse(send, 403, "requests from another origin are refused: start the "
                                     "server with --cors-origin ORIGIN to let that page call it")
            return
        preflight = (scope.get("method") == "OPTIONS" and origin
                     and b"access-control-request-method" in headers)
        if preflight:  # answered by CORS (no token: browsers send none on a preflight)
            await self.inner(scope, receive, send)
            return
        client = (scope.get("client") or ("-", 0))[0]
        if self.in_flight[client] >= policy.client_limit:
            await _refuse(send, 429, f"more than {policy.client_limit} requests in flight from "
                                     "this client: wait for answers, then try again",
                          retry_after=1)
            return
        if self.total >= policy.total_limit:
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
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > policy.max_body:
                await _refuse(send, 413, _too_large(policy.max_body))
                return
            more = message.get("more_body", False)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.inner(scope, replay, send)


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
