"""A website: `https://docs.example.com/guide/` and every page under that prefix.

The pages are those its sitemap lists (the `Sitemap:` lines of robots.txt, else `sitemap.xml`
under the prefix or at the root; sitemap indexes followed), or else those reached by following
links from the start page, within the prefix, up to `web_max_depth` links away. robots.txt is
obeyed (protego), its Crawl-delay too. Requests go one at a time, a host asked again only after
`web_delay` seconds (or its Crawl-delay), each timed out (`web_timeout`), the whole sync bounded
in pages and seconds; a run stopped by a limit deletes nothing.

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
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
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
        self.last: dict[str, float] = {}  # host -> when it was last asked (time.monotonic)
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

    def _wait_turn(self, url: str) -> None:
        """Politeness: a host is asked again only `web_delay` seconds (or its robots.txt's
        Crawl-delay, up to MAX_CRAWL_DELAY) after its last request."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        delay = self.delay
        robots = self.robots.get((parts.scheme, host, parts.port))
        crawl_delay = getattr(robots, "crawl_delay", None)
        if crawl_delay is not None:
            delay = max(delay, min(float(crawl_delay(USER_AGENT) or 0), MAX_CRAWL_DELAY))
        last = self.last.get(host)
        if last is not None and delay:
            time.sleep(max(0.0, last + delay - time.monotonic()))
        self.last[host] = time.monotonic()

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
            self._wait_turn(url)
            try:
                with self.client.stream("GET", url, headers=headers) as r:
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
                    return 200, r.headers, bytes(body), url
            except httpx.TimeoutException:
                raise FetchFailed(f"timed out after {self.timeout:g} s (SITUATE_WEB_TIMEOUT)") from None
            except httpx.HTTPError as e:
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
        if not self.allowed_by_robots(self.start):
            raise InputError(f"{self.shown}: robots.txt disallows it for {USER_AGENT}")
        listed = self._sitemap_urls()
        crawl = listed is None
        queue: deque[tuple[str, int]] = deque([(self.start, 0)] if crawl else
                                              [(u, 0) for u in listed or []])
        queued = {u for u, _ in queue}
        pages = 0
        first = True
        while queue:
            url, depth = queue.popleft()
            doc_id = self.doc_id(url)
            if doc_id is None or not self.allowed_by_robots(url):
                log.info(f"{self.shown}: {shown(url)[:200]} left out (robots.txt, a query "
                         "string, or outside the prefix)")
                continue
            if pages >= self.max_pages or time.monotonic() > self.deadline:
                self.complete = False
                log.warning(f"{self.shown}: stopped at {pages} pages (SITUATE_WEB_MAX_PAGES, "
                            "SITUATE_WEB_MAX_SECONDS); nothing is deleted this run")
                return
            pages += 1
            if not crawl and not bodies:
                yield Entry(doc_id, "")
                continue
            self.fetched_to_list = not bodies
            entry, links = self._page(url, doc_id, previous, first)
            first = False
            if entry is not None:
                yield entry
            if crawl and depth < self.max_depth:
                for link in links:
                    if link not in queued and self.within(link) and self.doc_id(link):
                        queued.add(link)
                        queue.append((link, depth + 1))

    def _page(self, url: str, doc_id: str, previous: Previous,
              first: bool) -> tuple[Entry | None, list[str]]:
        """One page: its entry (None when gone) and the links on it."""
        known = previous.marker(doc_id)
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
        self.client.close()
