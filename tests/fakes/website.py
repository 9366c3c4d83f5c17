"""A small website on 127.0.0.1 for the website source's tests: pages with ETags (304 to a
matching If-None-Match), robots.txt, a sitemap, and pages that misbehave on purpose (a redirect
to another host, a page of 50 MB, a page that never answers, 500s), and pages that take their
time, with the requests in flight at once recorded."""

from __future__ import annotations

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Site:
    """The pages (path -> (content type, body)) and how the server treats them; `log` holds
    (method, path, status) of every request, `sent` the bytes of each big page sent; `latency`
    (or `slow`, per path) the seconds a page (not robots.txt) takes to answer; `starts` the
    (time.monotonic, path) of each page request as it arrives, `most_in_flight` the most page
    requests waited on at once."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[str, bytes]] = {}
        self.robots = ""
        self.failing: set[str] = set()  # paths answered with 500
        self.statuses: dict[str, int] = {}  # path -> another status it answers with (403, 429)
        self.redirects: dict[str, str] = {}  # path -> Location
        self.big: dict[str, int] = {}  # path -> bytes of a page streamed without a length
        self.hanging: set[str] = set()  # paths that never answer
        self.log: list[tuple[str, str, int]] = []
        self.sent: dict[str, int] = {}
        self.server: ThreadingHTTPServer | None = None
        self.stop_hanging = threading.Event()
        self.latency = 0.0
        self.slow: dict[str, float] = {}
        self.starts: list[tuple[float, str]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()

    def html(self, path: str, title: str, text: str, links: tuple[str, ...] = ()) -> None:
        anchors = "".join(f'<p><a href="{link}">{link}</a></p>' for link in links)
        body = (f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
                f"<p>{text}</p>{anchors}</body></html>")
        self.pages[path] = ("text/html; charset=utf-8", body.encode())

    def sitemap(self, path: str, urls: list[str]) -> None:
        locs = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
        self.pages[path] = ("application/xml", (
            '<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/'
            f'schemas/sitemap/0.9">{locs}</urlset>').encode())

    @property
    def base(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def requested(self, path: str) -> list[int]:
        return [status for _, p, status in self.log if p == path]

    def start(self) -> Site:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
                site.log.append(("GET", self.path, status))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Transfer-Encoding" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/robots.txt":
                    return self.page()
                with site.lock:
                    site.starts.append((time.monotonic(), self.path))
                    site.in_flight += 1
                    site.most_in_flight = max(site.most_in_flight, site.in_flight)
                try:
                    time.sleep(site.slow.get(self.path, site.latency))
                finally:  # before the answer: its client counts the request until it is read
                    with site.lock:
                        site.in_flight -= 1
                return self.page()

            def page(self) -> None:
                path = self.path
                if path == "/robots.txt":
                    if site.robots:
                        return self.answer(200, {"Content-Type": "text/plain"}, site.robots.encode())
                    return self.answer(404, {})
                if path in site.hanging:
                    site.log.append(("GET", path, 0))
                    site.stop_hanging.wait(60)
                    return None
                if path in site.failing:
                    return self.answer(500, {"Content-Type": "text/plain"}, b"boom")
                if path in site.statuses:
                    return self.answer(site.statuses[path], {"Content-Type": "text/plain"}, b"no")
                if path in site.redirects:
                    return self.answer(302, {"Location": site.redirects[path]})
                if path in site.big:
                    return self.stream(path)
                if path not in site.pages:
                    return self.answer(404, {"Content-Type": "text/plain"}, b"not found")
                kind, body = site.pages[path]
                etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    return self.answer(304, {"ETag": etag})
                return self.answer(200, {"Content-Type": kind, "ETag": etag}, body)

            def stream(self, path: str) -> None:
                site.log.append(("GET", path, 200))
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                block = b"<p>" + b"x" * 65_530 + b"</p>"
                sent = 0
                try:
                    while sent < site.big[path]:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
                        sent += len(block)
                        site.sent[path] = sent
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass  # the client stopped reading: what the test wants

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stop_hanging.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            time.sleep(0)
