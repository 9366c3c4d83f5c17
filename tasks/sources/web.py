"""A website: `https://docs.example.com/guide/` and every page under that prefix.

The pages are those its sitemap lists (the `Sitemap:` lines of robots.txt, else `sitemap.xml`
under the prefix or at the root; sitemap indexes followed), or else those reached by following
links from the start page, within the prefix, up to `web_max_depth` links away. robots.txt is
obeyed (protego), its Crawl-delay too. At most `web_concurrency` requests are in flight to a host
at once, and one at a time to a host with a `web_delay` (or a Crawl-delay), whose requests start
that many seconds apart; each is timed out (`web_timeout`), the whole sync bounded in pages and
seconds; a run stopped by a limit deletes nothing. Pages are read by a few threads, at most twice
`web_concurrency` ahead of the one the listing yields, and yielded in the order one thread would
yield them: the sitemap's, or breadth first from the start page.

Change markers are the ETag, else Last-Modified: the next sync asks with `If-None-Match` /
`If-Modified-Since`, and an unchanged page costs a 304 (its links, when crawling, read from the
mirror's copy). A page that answers 404 or 410 is gone; any other failure (5xx, 403, 429, a
timeout) keeps the last copy and makes the sync incomplete, so nothing is pruned.

Safety: only http(s); nothing outside the start URL's host (and `web_allow_hosts`) is requested;
a redirect is followed only within the prefix (or to an allowed host); each host's addresses are
checked before it is asked: a link-local address (cloud metadata) is refused unless
`web_allow_link_local`, and a private or loopback one unless the start URL is itself on one. A
page's body is read up to its limit (`max_file_bytes` for text, `max_document_bytes` for others)
and no further. Sitemaps are parsed by defusedxml (no entities, no external references).
"""

from __future__ import annotations

import ipaddress
import logging
import posixpath
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from pathlib import Path
from queue import SimpleQueue
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import httpx

from situate.core.errors import InputError
from situate.core.settings import get_settings
from situate.tasks.sources.base import Entry, FetchFailed, Previous, TooLarge, shown

log = logging.getLogger("situate.sources")
USER_AGENT = "situate"
MAX_REDIRECTS = 5
MAX_CRAWL_DELAY = 60.0  # seconds: a robots.txt asking for more is taken as asking for this
SITEMAP_BYTES = 50 * 2**20  # the sitemap protocol's own limit per file
MAX_SITEMAPS = 100
# A path that ends in one of these is the document's own name; any other page is named
# <path>.html (and a path ending in / is <path>index.html).
KNOWN_SUFFIXES = (".html", ".htm", ".xhtml", ".pdf", ".md", ".markdown", ".txt", ".rst", ".epub",
                  ".docx", ".pptx", ".xlsx", ".ipynb", ".json", ".csv")
GONE = (404, 410)
STOP_JOIN_SECONDS = 2.0  # how long closing waits for the reading threads to end
Page = tuple[Entry | None, list[str]]


class _Readers:
    """`size` daemon threads that run the jobs given them, first given first run. Daemon
    threads, not a ThreadPoolExecutor's: one still connecting when the listing is given up (a
    host that never accepts, for `web_timeout`) neither holds up `close` past STOP_JOIN_SECONDS
    nor the interpreter's exit."""

    def __init__(self, size: int) -> None:
        self.jobs: SimpleQueue[tuple[Future[Page], Callable[[], Page]] | None] = SimpleQueue()
        self.threads = [threading.Thread(target=self._run, name=f"situate-web-{i}", daemon=True)
                        for i in range(size)]
        for thread in self.threads:
            thread.start()

    def submit(self, job: Callable[[], Page]) -> Future[Page]:
        future: Future[Page] = Future()
        self.jobs.put((future, job))
        return future

    def _run(self) -> None:
        while (item := self.jobs.get()) is not None:
            future, job = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as e:  # noqa: BLE001 - the listing's thread raises it
                future.set_exception(e)
            del item, future, job

    def close(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)
        until = time.monotonic() + STOP_JOIN_SECONDS
        for thread in self.threads:
            thread.join(max(0.0, until - time.monotonic()))


class WebSource:
    """A website under a URL prefix (see the module's docstring)."""

    def __init__(self, url: str, workdir: Path) -> None:
        settings = get_settings()
        self.url, self.shown, self.complete = url, shown(url), True
        self.fetched_to_list = False  # a dry run's listing requested pages (no sitemap)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"{self.shown}: give an http(s)://host/ URL")
        self.origin = (parts.scheme, parts.hostname.lower(), parts.port)
        path = parts.path or "/"
        self.prefix = path if path.endswith("/") else path[:path.rfind("/") + 1]
        self.start = urldefrag(url)[0] if parts.path else url + "/"
        self.hosts = {parts.hostname.lower(), *(h.strip().lower() for h in
                                                settings.web_allow_hosts.split(",") if h.strip())}
        self.allow_link_local = settings.web_allow_link_local
        self.private_start = False
        start_kind = self._kind(parts.hostname)
        if start_kind == "link-local" and not self.allow_link_local:
            raise InputError(f"{self.shown}: a link-local address (a cloud metadata service) is "
                             "refused; set SITUATE_WEB_ALLOW_LINK_LOCAL=true if you mean it")
        self.private_start = start_kind in ("private", "loopback", "link-local")
        self.checked: dict[str, str] = {parts.hostname.lower(): start_kind}
        self.timeout = settings.web_timeout
        self.delay = settings.web_delay
        self.concurrency = settings.web_concurrency
        self.last: dict[str, float] = {}  # host -> when its last request started (monotonic)
        self.busy: dict[str, int] = {}  # host -> its requests in flight
        self.turns = threading.Condition()
        self.stopping = threading.Event()  # the listing was given up: requests end now
        self.streams: weakref.WeakSet[Any] = weakref.WeakSet()  # the client's connections
        self.streams_lock = threading.Lock()
        self.readers: _Readers | None = None
        self.text_limit = settings.max_file_bytes
        self.max_pages, self.max_depth = settings.web_max_pages, settings.web_max_depth
        self.deadline = time.monotonic() + settings.web_max_seconds
        self.client = httpx.Client(timeout=httpx.Timeout(self.timeout), follow_redirects=False,
                                   headers={"User-Agent": USER_AGENT}, trust_env=False)
        self.robots: dict[tuple[str, str, int | None], object] = {}

    # -- what may be asked ---------------------------------------------------------------------

    def _kind(self, host: str) -> str:
        """"public", "private", "loopback" or "link-local": the worst of the host's addresses;
        InputError-free: "unresolved" when it has none."""
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError:
            return "unresolved"
        kinds = set()
        for info in infos:
            ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if ip.is_link_local:
                kinds.add("link-local")
            elif ip.is_loopback:
                kinds.add("loopback")
            elif ip.is_private or ip.is_reserved or ip.is_multicast or ip.is_unspecified:
                kinds.add("private")
            else:
                kinds.add("public")
        for kind in ("link-local", "private", "loopback", "public"):
            if kind in kinds:
                return kind
        return "unresolved"

    def refusal(self, url: str) -> str:
        """Why `url` may not be requested ("" when it may)."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https"):
            return f"{parts.scheme or 'no'} scheme"
        if host not in self.hosts:
            return f"another host ({host})"
        kind = self.checked.get(host)
        if kind is None:
            kind = self.checked[host] = self._kind(host)
        if kind == "link-local" and not self.allow_link_local:
            return f"{host} is a link-local address"
        if kind in ("private", "loopback") and not self.private_start:
            return f"{host} is a private address"
        return ""

    def within(self, url: str) -> bool:
        parts = urlsplit(url)
        if (parts.hostname or "").lower() != self.origin[1] or parts.scheme != self.origin[0] \
                or parts.port != self.origin[2]:
            return (parts.hostname or "").lower() in self.hosts - {self.origin[1]}
        return (parts.path or "/").startswith(self.prefix)

    def doc_id(self, url: str) -> str | None:
        """The mirror name (document id) of a page under the prefix, None for one that has none
        (a query string, another host)."""
        parts = urlsplit(url)
        if parts.query or (parts.hostname or "").lower() != self.origin[1]:
            return None
        path = unquote(parts.path or "/")
        if not path.startswith(unquote(self.prefix)):
            return None
        rel = path[len(unquote(self.prefix)):]
        if rel == "" or rel.endswith("/"):
            return rel + "index.html"
        if posixpath.splitext(rel)[1].lower() in KNOWN_SUFFIXES:
            return rel
        return rel + ".html"

    def allowed_by_robots(self, url: str) -> bool:
        from protego import Protego

        parts = urlsplit(url)
        key = (parts.scheme, (parts.hostname or "").lower(), parts.port)
        robots = self.robots.get(key)
        if robots is None:
            text = ""
            base = f"{parts.scheme}://{parts.netloc}"
            try:
                answer = self._get(f"{base}/robots.txt", {}, 512 * 1024)
                if answer[0] == 200 and answer[2] is not None:
                    text = answer[2].decode("utf-8", errors="replace")
            except (FetchFailed, TooLarge):
                text = ""
            robots = self.robots[key] = Protego.parse(text)
        return bool(robots.can_fetch(url, USER_AGENT))  # type: ignore[attr-defined]

    # -- requests ------------------------------------------------------------------------------

    @contextmanager
    def _turn(self, url: str) -> Iterator[None]:
        """Politeness, around one request: at most `web_concurrency` in flight to its host, and
        with a `web_delay` (or the host's robots.txt Crawl-delay, up to MAX_CRAWL_DELAY) one at a
        time, started that many seconds after the last one started."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        delay = self.delay
        robots = self.robots.get((parts.scheme, host, parts.port))
        crawl_delay = getattr(robots, "crawl_delay", None)
        if crawl_delay is not None:
            delay = max(delay, min(float(crawl_delay(USER_AGENT) or 0), MAX_CRAWL_DELAY))
        room = 1 if delay else self.concurrency
        with self.turns:
            while self.busy.get(host, 0) >= room and not self.stopping.is_set():
                self.turns.wait()
            self._stopped()
            self.busy[host] = self.busy.get(host, 0) + 1
            now = time.monotonic()
            last = self.last.get(host)
            start = max(now, last + delay) if last is not None and delay else now
            self.last[host] = start
        try:
            if self.stopping.wait(start - now):
                self._stopped()
            yield
        finally:
            with self.turns:
                self.busy[host] -= 1
                self.turns.notify_all()

    def _stopped(self) -> None:
        if self.stopping.is_set():
            raise FetchFailed("the listing was stopped")

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace of the client's requests: each new connection is remembered, so
        that `_stop` can shut its socket (a thread waiting on it then returns at once)."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            with self.streams_lock:
                self.streams.add(info["return_value"])
            if self.stopping.is_set():
                self._shut_sockets()

    def _shut_sockets(self) -> None:
        with self.streams_lock:
            streams = list(self.streams)
        for stream in streams:
            sock = stream.get_extra_info("socket")
            if sock is not None and sock.fileno() != -1:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _stop(self) -> None:
        """The listing is over (done, given up, interrupted): requests in flight end now (their
        waits are woken, their connections shut) and the reading threads are let go."""
        self.stopping.set()
        with self.turns:
            self.turns.notify_all()
        self._shut_sockets()
        readers, self.readers = self.readers, None
        if readers is not None:
            readers.close()

    def _get(self, url: str, headers: dict[str, str], limit: int,
             ) -> tuple[int, httpx.Headers, bytes | None, str]:
        """(status, headers, body up to `limit` or None, final URL) of a GET, redirects followed
        only where `refusal` and `within` allow. FetchFailed for a refused redirect or a failed
        request, TooLarge past `limit`."""
        for _ in range(MAX_REDIRECTS + 1):
            why = self.refusal(url)
            if why:
                raise FetchFailed(f"not requested: {why}")
            if time.monotonic() > self.deadline:
                raise FetchFailed("the sync's time limit (SITUATE_WEB_MAX_SECONDS) passed")
            try:
                with self._turn(url), self.client.stream("GET", url, headers=headers,
                                                         extensions={"trace": self._trace}) as r:
                    if r.has_redirect_location:
                        target = urldefrag(urljoin(url, r.headers.get("location", "")))[0]
                        if not self.within(target):
                            raise FetchFailed(f"redirects outside {shown(self.start)} "
                                              f"(to {shown(target)[:200]}): not followed")
                        url = target
                        continue
                    if r.status_code != 200:
                        return r.status_code, r.headers, None, url
                    page_limit = limit
                    if r.headers.get("content-type", "").startswith("text/"):
                        page_limit = min(limit, self.text_limit)
                    declared = r.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > page_limit:
                        raise TooLarge
                    body = bytearray()
                    for piece in r.iter_bytes():
                        body += piece
                        if len(body) > page_limit:
                            raise TooLarge
                        self._stopped()
                    return 200, r.headers, bytes(body), url
            except httpx.TimeoutException:
                self._stopped()
                raise FetchFailed(f"timed out after {self.timeout:g} s (SITUATE_WEB_TIMEOUT)") from None
            except httpx.HTTPError as e:
                self._stopped()
                raise FetchFailed(f"{type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
        raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")

    # -- the listing ---------------------------------------------------------------------------

    def entries(self, previous: Previous) -> Iterator[Entry]:
        return self._pages(previous, bodies=True)

    def listing(self, previous: Previous) -> Iterator[Entry]:
        """The pages without requesting them, for a dry run: from the sitemap, with no marker
        (a sync asks for each conditionally). A site without a sitemap is listed by crawling
        it, which requests its pages (`fetched_to_list`), within the same limits."""
        return self._pages(previous, bodies=False)

    def _pages(self, previous: Previous, bodies: bool) -> Iterator[Entry]:
        self.stopping.clear()
        if not self.allowed_by_robots(self.start):
            raise InputError(f"{self.shown}: robots.txt disallows it for {USER_AGENT}")
        listed = self._sitemap_urls()
        crawl = listed is None
        queue: deque[tuple[str, int]] = deque([(self.start, 0)] if crawl else
                                              [(u, 0) for u in listed or []])
        queued = {u for u, _ in queue}
        # The pages asked for and not yet yielded, in the order they are yielded: the queue's.
        # A crawl's queue only grows at its end, so the pages read ahead are the ones a single
        # thread would read next.
        ahead: deque[tuple[Future[Page], int]] = deque()
        pages = 0
        limited = False
        try:
            while True:
                while queue and not limited and len(ahead) < 2 * self.concurrency:
                    url, depth = queue.popleft()
                    doc_id = self.doc_id(url)
                    if doc_id is None or not self.allowed_by_robots(url):
                        log.info(f"{self.shown}: {shown(url)[:200]} left out (robots.txt, a query "
                                 "string, or outside the prefix)")
                        continue
                    if pages >= self.max_pages or time.monotonic() > self.deadline:
                        limited = True
                        break
                    pages += 1
                    if not crawl and not bodies:
                        ahead.append((_done((Entry(doc_id, ""), [])), depth))
                        continue
                    self.fetched_to_list = not bodies
                    ahead.append((self._read(url, doc_id, previous, pages == 1), depth))
                if not ahead:
                    break
                future, depth = ahead.popleft()
                entry, links = future.result()
                if entry is not None:
                    yield entry
                if crawl and depth < self.max_depth and not limited:
                    for link in links:
                        if link not in queued and self.within(link) and self.doc_id(link):
                            queued.add(link)
                            queue.append((link, depth + 1))
            if limited:
                self.complete = False
                log.warning(f"{self.shown}: stopped at {pages} pages (SITUATE_WEB_MAX_PAGES, "
                            "SITUATE_WEB_MAX_SECONDS); nothing is deleted this run")
        finally:
            for future, _ in ahead:
                future.cancel()
            self._stop()

    def _read(self, url: str, doc_id: str, previous: Previous, first: bool) -> Future[Page]:
        """`_page`, run by a reading thread (the mirror's marker is read here: its database
        belongs to this thread)."""
        if self.readers is None:
            self.readers = _Readers(self.concurrency)
        known = previous.marker(doc_id)
        return self.readers.submit(lambda: self._page(url, doc_id, known, previous, first))

    def _page(self, url: str, doc_id: str, known: str | None, previous: Previous,
              first: bool) -> Page:
        """One page: its entry (None when gone) and the links on it. `known`: the mirror's
        marker of it."""
        headers = {}
        if known and known.startswith("etag:"):
            headers["If-None-Match"] = known[5:]
        elif known and known.startswith("last-modified:"):
            headers["If-Modified-Since"] = known[14:]
        try:
            status, answer, body, final = self._get(url, headers, get_settings().max_document_bytes)
        except TooLarge:
            return Entry(doc_id, "", too_large=True), []
        except FetchFailed as e:
            if first and known is None and str(e).startswith(("ConnectError", "timed out")):
                raise InputError(f"{self.shown}: cannot be read ({e})") from None
            return Entry(doc_id, known or "", failed=str(e)), []
        if status == 304 and known:
            old = previous.body(doc_id, self.text_limit) or b""
            return Entry(doc_id, known), self._links(url, old, doc_id)
        if status in GONE:
            return None, []
        if status != 200 or body is None:
            why = {403: "403 forbidden", 401: "401 unauthorized",
                   429: "429 throttled"}.get(status, f"HTTP {status}")
            return Entry(doc_id, known or "", failed=why), []
        etag, modified = answer.get("etag"), answer.get("last-modified")
        marker = f"etag:{etag}" if etag else (f"last-modified:{modified}" if modified else "")
        return Entry(doc_id, marker, len(body), body=body), self._links(final, body, doc_id)

    def _links(self, base: str, body: bytes, doc_id: str) -> list[str]:
        if not doc_id.endswith((".html", ".htm", ".xhtml")) or not body.strip():
            return []
        import lxml.html

        try:
            root = lxml.html.document_fromstring(body)
        except (ValueError, Exception):  # noqa: BLE001 - a page that is no HTML has no links
            return []
        base_href = root.xpath("//base/@href")
        if base_href:
            base = urljoin(base, str(base_href[0]))
        return [urldefrag(urljoin(base, str(h).strip()))[0] for h in root.xpath("//a/@href")]

    def _sitemap_urls(self) -> list[str] | None:
        """The page URLs under the prefix that the site's sitemaps list; None when it has none."""
        from defusedxml import ElementTree
        from protego import Protego

        parts = urlsplit(self.start)
        root = f"{parts.scheme}://{parts.netloc}"
        robots = self.robots.get(self.origin)
        declared = list(robots.sitemaps) if isinstance(robots, Protego) else []
        todo = deque(declared or [root + self.prefix + "sitemap.xml", root + "/sitemap.xml"])
        found: list[str] = []
        seen_sitemaps = 0
        any_sitemap = False
        while todo and seen_sitemaps < MAX_SITEMAPS:
            url = todo.popleft()
            seen_sitemaps += 1
            try:
                status, _, body, _ = self._get(url, {}, SITEMAP_BYTES)
            except (FetchFailed, TooLarge) as e:
                log.info(f"{self.shown}: sitemap {shown(url)[:200]} not read ({e})")
                continue
            if status != 200 or not body:
                continue
            try:
                tree = ElementTree.fromstring(body)
            except Exception as e:  # noqa: BLE001 - defusedxml refuses entities; bad XML is no sitemap
                log.warning(f"{self.shown}: sitemap {shown(url)[:200]} is not usable XML "
                            f"({type(e).__name__}); left out")
                continue
            any_sitemap = True
            tag = tree.tag.rsplit("}", 1)[-1]
            locs = [str(e.text).strip() for e in tree.iter() if e.tag.rsplit("}", 1)[-1] == "loc"
                    and e.text]
            if tag == "sitemapindex":
                todo.extend(u for u in locs if not self.refusal(u))
            else:
                found.extend(u for u in locs if self.within(u))
            if not declared and any_sitemap:
                break  # the prefix's own sitemap, not the root's as well
        if not any_sitemap:
            return None
        return list(dict.fromkeys(urldefrag(u)[0] for u in found))

    def fetch(self, entry: Entry, limit: int) -> bytes:
        raise FetchFailed("a page is read by its listing")  # entries carry their bodies

    def close(self) -> None:
        self._stop()
        self.client.close()


def _done(page: Page) -> Future[Page]:
    future: Future[Page] = Future()
    future.set_result(page)
    return future
