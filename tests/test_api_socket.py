"""The HTTP and MCP servers' listening socket: accepted connections send without Nagle.

uvicorn serves on the socket `situate.api.http.listen` opens; asyncio sets TCP_NODELAY on an
accepted connection only when its socket's protocol is IPPROTO_TCP. Without it a keep-alive
client (httpx, any pooled client) waited for its own delayed ACK (~40 ms on Linux) on every
response written in two parts (headers, then body).
"""

import asyncio
import socket

import pytest

from situate.api.http import listen


def accepted_nodelay(host: str) -> int:
    sock = listen(host, 0)
    port = sock.getsockname()[1]
    seen: list[int] = []

    async def main() -> None:
        accepted = asyncio.Event()

        def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()
            accepted.set()

        server = await asyncio.start_server(on_connection, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(host, port)
            await asyncio.wait_for(accepted.wait(), 10)
            writer.close()

    asyncio.run(main())
    return seen[0]


def test_accepted_connections_have_nagle_off():
    with listen("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
    assert accepted_nodelay("127.0.0.1") != 0


def test_accepted_connections_have_nagle_off_on_ipv6_too():
    try:
        probe = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    assert accepted_nodelay("::1") != 0
