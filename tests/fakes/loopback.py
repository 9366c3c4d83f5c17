"""What every loopback fake of a provider API shares: a threaded HTTP server on a free 127.0.0.1
port, started and stopped with the fake, quiet about clients that hang up on purpose."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (killed, timed out) is part of the test, not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LoopbackServer:
    """Base of the fakes: subclasses set `handler_class` (whose handlers read `self.fake`)."""

    handler_class: type[BaseHTTPRequestHandler]
    thread_name = "fake-api"
    _server: QuietServer | None = None

    def start(self) -> Self:
        handler = type("Handler", (self.handler_class,), {"fake": self})
        self._server = QuietServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True, name=self.thread_name)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"


def send_json(handler: BaseHTTPRequestHandler, status: int, value: object,
              content_type: str = "application/json") -> None:
    """Answer `handler`'s request with `value` as JSON."""
    import json

    data = json.dumps(value).encode()
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
