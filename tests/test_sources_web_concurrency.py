"""A website read by several requests at once (SITUATE_WEB_CONCURRENCY), against a site served on
127.0.0.1 whose pages take their time: at most that many in flight, one at a time with a delay
(SITUATE_WEB_DELAY, Crawl-delay) and started that far apart, the entries in the order one request
at a time gives, the page limit exact, and a listing given up or interrupted ending its requests
and threads at once."""

from __future__ import annotations

import hashlib
import signal
import threading
import time

import pytest

from situate.core.errors import InputError
from tests import test_sources_web
from tests.fakes.website import Site
from tests.test_sources_web import text

site, settings_env = test_sources_web.site, test_sources_web.settings_env  # its fixtures, here too


class Held:
    """The mirror's copy as a listing asks for it (`Previous`): markers and bodies by id."""

    def __init__(self, entries: list | None = None) -> None:
        self.held = {e.id: e for e in entries or [] if e.body is not None}

    def marker(self, doc_id: str) -> str | None:
        entry = self.held.get(doc_id)
        return entry.marker if entry else None

    def body(self, doc_id: str, limit: int) -> bytes | None:
        entry = self.held.get(doc_id)
        return entry.body[:limit] if entry else None


def listed(url: str, tmp_path, previous: Held | None = None) -> tuple[list, bool]:
    from situate.tasks.sources.web import WebSource

    source = WebSource(url, tmp_path)
    try:
        entries = list(source.entries(previous or Held()))
    finally:
        source.close()
    return entries, source.complete


def with_sitemap(site: Site, pages: int) -> None:
    for n in range(pages):
        site.html(f"/docs/p{n}.html", f"Page {n}", text(n))
    site.robots = f"User-agent: *\nSitemap: {site.base}/docs/sitemap.xml\n"
    site.sitemap("/docs/sitemap.xml", [f"{site.base}/docs/p{n}.html" for n in range(pages)])


def page_starts(site: Site) -> list[float]:
    return [t for t, path in site.starts if path.startswith("/docs/p")]


def web_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("situate-web-") and t.is_alive()]


def test_pages_are_read_concurrently_up_to_the_limit(site, tmp_path, settings_env):
    """12 pages of 0.2 s each: one at a time takes 12 x 0.2 s; four at a time about a quarter of
    that, with never more than four in flight."""
    with_sitemap(site, 12)
    site.latency = 0.2
    url = f"{site.base}/docs/"
    seconds = {}
    for concurrency in ("1", "4"):
        settings_env(web_concurrency=concurrency)
        site.most_in_flight = 0
        t = time.perf_counter()
        entries, complete = listed(url, tmp_path)
        seconds[concurrency] = time.perf_counter() - t
        assert (len(entries), complete) == (12, True)
        assert site.most_in_flight == int(concurrency)
    assert seconds["1"] >= 12 * 0.2
    assert seconds["4"] < seconds["1"] / 2.5, seconds
    assert web_threads() == []


def test_a_delay_means_one_request_at_a_time_started_that_far_apart(site, tmp_path,
                                                                     settings_env):
    """A Crawl-delay shorter than a page's answer: still one page in flight at a time. A
    SITUATE_WEB_DELAY longer than a page's answer: the requests start that far apart."""
    settings_env(web_concurrency="4")
    with_sitemap(site, 4)
    site.robots += "Crawl-delay: 0.1\n"
    site.latency = 0.25
    entries, _ = listed(f"{site.base}/docs/", tmp_path)
    assert len(entries) == 4 and site.most_in_flight == 1

    with_sitemap(site, 4)  # no Crawl-delay
    settings_env(web_delay="0.25")
    site.latency, site.most_in_flight = 0.01, 0
    site.starts.clear()
    entries, _ = listed(f"{site.base}/docs/", tmp_path)
    starts = page_starts(site)
    assert len(entries) == 4 and len(starts) == 4 and site.most_in_flight == 1
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) >= 0.25 - 0.03, gaps


def crawled_site(site: Site) -> None:
    """A tree of pages without a sitemap: the start page links to 8, each of them to 3 more
    (some shared, one back up), a failing page, a gone one; pages answer in uneven times, so
    that the ones asked later are often read first."""
    site.html("/docs/", "Home", text(0), tuple(f"s{i}.html" for i in range(8)) + ("bad.html",
                                                                                  "gone.html"))
    for i in range(8):
        site.html(f"/docs/s{i}.html", f"S{i}", text(i), (f"t{i}.html", f"t{(i + 1) % 8}.html",
                                                          f"deep/u{i}.html", "./"))
        site.html(f"/docs/t{i}.html", f"T{i}", text(10 + i), ("../outside.html",))
        site.html(f"/docs/deep/u{i}.html", f"U{i}", text(20 + i), (f"v{i}.html",))
        site.html(f"/docs/deep/v{i}.html", f"V{i}", text(30 + i))
    site.html("/docs/bad.html", "Bad", "fails")
    site.failing.add("/docs/bad.html")
    for path in site.pages:
        site.slow[path] = int(hashlib.sha256(path.encode()).hexdigest(), 16) % 6 * 0.02


def rows(entries: list) -> list[tuple]:
    return [(e.id, e.marker, e.body, e.failed, e.too_large) for e in entries]


def test_entries_come_in_the_same_order_whatever_the_concurrency(site, tmp_path, settings_env):
    """The same site listed one request at a time and six at a time: the same entries in the
    same order, crawled (breadth first) and from a sitemap, and again on a re-run that costs 304s
    (a crawl then reads the links of its copies)."""
    crawled_site(site)
    url = f"{site.base}/docs/"
    runs = {}
    for concurrency in ("1", "6"):
        settings_env(web_concurrency=concurrency, web_max_depth="2")
        first, complete = listed(url, tmp_path)
        again, _ = listed(url, tmp_path, Held(first))
        runs[concurrency] = (rows(first), rows(again), complete)
    assert runs["1"] == runs["6"]
    first, again, complete = runs["1"]
    assert [r[0] for r in first][:11] == ["index.html"] + [f"s{i}.html" for i in range(8)] + [
        "bad.html", "t0.html"]
    assert len(first) == 1 + 8 + 1 + 8 + 8  # depth 2: no v*.html; gone.html is no entry
    assert complete is True and ("bad.html", "", None, "HTTP 500", False) in first
    assert [r[0] for r in again] == [r[0] for r in first]
    assert all(r[2] is None for r in again if r[0] != "bad.html")  # 304s

    sitemap = [f"{url}{p}" for p in ("s3.html", "bad.html", "t1.html", "gone.html", "s0.html",
                                      "deep/u2.html", "s5.html", "t7.html", "deep/v1.html")]
    site.sitemap("/docs/sitemap.xml", sitemap)
    site.robots = f"User-agent: *\nSitemap: {url}sitemap.xml\n"
    sitemapped = {}
    for concurrency in ("1", "6"):
        settings_env(web_concurrency=concurrency)
        sitemapped[concurrency] = rows(listed(url, tmp_path)[0])
    assert sitemapped["1"] == sitemapped["6"]
    assert [r[0] for r in sitemapped["6"]] == ["s3.html", "bad.html", "t1.html", "s0.html",
                                               "deep/u2.html", "s5.html", "t7.html",
                                               "deep/v1.html"]


def test_the_page_limit_holds_exactly(site, tmp_path, settings_env):
    """SITUATE_WEB_MAX_PAGES=5 with 4 requests at a time: 5 pages asked for, 5 listed, the
    listing incomplete (nothing is pruned on its word); a crawl the same."""
    settings_env(web_concurrency="4", web_max_pages="5")
    with_sitemap(site, 12)
    site.latency = 0.02
    entries, complete = listed(f"{site.base}/docs/", tmp_path)
    assert [e.id for e in entries] == [f"p{n}.html" for n in range(5)] and complete is False
    assert len(page_starts(site)) == 5

    site.robots = ""
    del site.pages["/docs/sitemap.xml"]
    crawled_site(site)
    site.starts.clear()
    entries, complete = listed(f"{site.base}/docs/", tmp_path)
    assert [e.id for e in entries] == ["index.html"] + [f"s{i}.html" for i in range(4)]
    assert complete is False
    assert sorted(p for _, p in site.starts if not p.endswith("sitemap.xml")) == sorted(
        ["/docs/"] + [f"/docs/s{i}.html" for i in range(4)])


def test_a_listing_given_up_ends_its_requests_at_once(site, tmp_path, settings_env):
    """Pages that never answer (SITUATE_WEB_TIMEOUT 30 s): a listing left after its first entry
    ends the requests in flight and its threads at once."""
    from situate.tasks.sources.web import WebSource

    settings_env(web_concurrency="3")
    with_sitemap(site, 4)
    site.hanging |= {"/docs/p1.html", "/docs/p2.html", "/docs/p3.html"}
    source = WebSource(f"{site.base}/docs/", tmp_path)
    entries = source.entries(Held())
    assert next(entries).id == "p0.html"
    time.sleep(0.3)
    assert len(web_threads()) == 3
    t = time.perf_counter()
    entries.close()
    assert time.perf_counter() - t < 1.0
    assert web_threads() == []
    source.close()


# Ctrl-C while a listing waits on pages that never answer, in a process of its own: the signal
# goes to that process's main thread (a test's own would reach the test runner's worker).
INTERRUPTED = """
import json, signal, sys, threading, time
# Ctrl-C as a terminal's shell gives it: a process started with SIGINT ignored (inherited from
# whatever started this test's worker) would otherwise never see it.
signal.signal(signal.SIGINT, signal.default_int_handler)
from tests.test_sources_web_concurrency import Held, web_threads
from situate.tasks.sources.web import WebSource
source = WebSource(sys.argv[1], sys.argv[2])
entries = source.entries(Held())
first = next(entries).id
print(json.dumps({"first": first, "threads": len(web_threads())}), flush=True)
t = time.perf_counter()
try:
    next(entries)
    said = {"interrupted": False}
except KeyboardInterrupt:
    said = {"interrupted": True, "seconds": time.perf_counter() - t, "left": len(web_threads())}
t = time.perf_counter()
source.close()
said["close"] = time.perf_counter() - t
print(json.dumps(said), flush=True)
"""


def test_ctrl_c_while_a_listing_waits_ends_its_requests_at_once(site, tmp_path):
    """Ctrl-C while the listing waits on pages that never answer: KeyboardInterrupt at once, no
    request thread left, and closing the source takes no time."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    with_sitemap(site, 4)
    site.hanging |= {"/docs/p1.html", "/docs/p2.html", "/docs/p3.html"}
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "SITUATE_WEB_CONCURRENCY": "3", "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED, f"{site.base}/docs/",
                             str(tmp_path)], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline() or "{}")
        assert started == {"first": "p0.html", "threads": started.get("threads")}, started
        time.sleep(0.5)  # the listing is waiting on p1
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    said = json.loads(out.strip().splitlines()[-1])
    assert said["interrupted"], said
    assert said["seconds"] < 2.0 and said["left"] == 0 and said["close"] < 0.5, said


@pytest.mark.parametrize("value", ["0", "-2", "65", "four"])
def test_an_unusable_concurrency_is_one_line(tmp_path, settings_env, value):
    from situate.tasks.sources.web import WebSource

    settings_env(web_concurrency=value)
    with pytest.raises(InputError) as e:
        WebSource("http://127.0.0.1:9/docs/", tmp_path)
    assert str(e.value).startswith(f"SITUATE_WEB_CONCURRENCY '{value}': ")
    assert str(e.value).endswith("; fix or unset it (environment or .env)")


def test_the_cli_says_an_unusable_concurrency_in_one_line(tmp_path):
    from tests.test_flows import _cli

    r = _cli("ingest", "http://127.0.0.1:9/docs/", "--collection", "c", "--dry-run", cwd=tmp_path,
             env={"SITUATE_WEB_CONCURRENCY": "0"})
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "situate ingest: error: SITUATE_WEB_CONCURRENCY '0': Input should be greater than or "
        "equal to 1; fix or unset it (environment or .env)"), r.stderr
    assert r.stdout == ""


@pytest.mark.soak  # a measurement (wall times, a ratio) of what the 12-page test above checks
def test_a_crawl_of_200_pages_of_50_ms(site, tmp_path, settings_env):
    """The measurement: 200 pages crawled (start page, 14 sections, their pages), each taking
    50 ms to answer, one request at a time and at the default concurrency (wall times printed)."""
    from situate.core.settings import default
    from situate.tasks.sources.mirror import sync

    site.html("/docs/", "Home", "home", tuple(f"s{i}/" for i in range(14)))
    for i in range(14):
        site.html(f"/docs/s{i}/", f"S{i}", f"section {i}", tuple(f"p{j}.html" for j in range(14)))
    for i, j in [(i, j) for i in range(14) for j in range(14)][:185]:
        site.html(f"/docs/s{i}/p{j}.html", f"P{i}.{j}", f"page {i}.{j} " * 20)
    site.latency = 0.05
    seconds = {}
    for concurrency in (1, default("web_concurrency")):
        settings_env(web_concurrency=str(concurrency))
        t = time.perf_counter()
        report = sync(f"{site.base}/docs/", tmp_path / str(concurrency), 10**7)
        seconds[concurrency] = time.perf_counter() - t
        assert (report.fetched, report.complete) == (200, True)
    one, default_s = seconds[1], seconds[default("web_concurrency")]
    print(f"200 pages of 50 ms: concurrency 1 {one:.2f} s, {default('web_concurrency')} "
          f"{default_s:.2f} s: {one / default_s:.2f}x")
    assert one / default_s > 2
