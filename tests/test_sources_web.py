"""A website as a corpus, against a site served on 127.0.0.1 by the test: its sitemap, robots.txt
and ETags (an unchanged page costs a 304), links followed within the prefix only, and the safety
limits (another host, a 50 MB page, a server that never answers, a link-local start URL, 500s)."""

from __future__ import annotations

import time

import pytest

from situate.core.errors import InputError
from tests.fakes.website import Site


def text(n: int, extra: str = "") -> str:
    return f"Page {n} explains topic {n} at some length so that it makes a chunk. {extra}"


@pytest.fixture
def site():
    s = Site().start()
    yield s
    s.stop()


@pytest.fixture
def settings_env(monkeypatch):
    from situate.core.settings import get_settings

    def set_env(**values: str) -> None:
        for k, v in values.items():
            monkeypatch.setenv(f"SITUATE_{k.upper()}", v)
        get_settings.cache_clear()

    yield set_env
    get_settings.cache_clear()


def with_sitemap(site: Site, pages: list[int]) -> None:
    for n in pages:
        site.html(f"/docs/p{n}.html", f"Page {n}", text(n))
    site.html("/docs/private/secret.html", "Secret", "not to be read")
    site.robots = (f"User-agent: *\nDisallow: /docs/private/\nSitemap: {site.base}/docs/sitemap.xml\n")
    site.sitemap("/docs/sitemap.xml", [f"{site.base}/docs/p{n}.html" for n in pages]
                 + [f"{site.base}/docs/private/secret.html", "http://example.invalid/elsewhere.html"])


def test_sitemap_robots_and_conditional_requests(site, tmp_path):
    from situate.tasks.sources.mirror import mirror_root, sync

    with_sitemap(site, [0, 1, 2, 3])
    url, cache = f"{site.base}/docs/", tmp_path / "cache"
    first = sync(url, cache, 10**7)
    assert (first.listed, first.fetched, first.complete) == (4, 4, True)
    assert site.requested("/docs/private/secret.html") == []  # robots.txt disallows it
    assert not any("elsewhere" in p for _, p, _ in site.log)  # another host: never asked

    site.log.clear()
    again = sync(url, cache, 10**7)
    assert (again.fetched, again.unchanged) == (0, 4)
    assert [site.requested(f"/docs/p{n}.html") for n in range(4)] == [[304]] * 4

    del site.pages["/docs/p2.html"]
    with_sitemap(site, [0, 1, 3, 4])
    site.html("/docs/p1.html", "Page 1", text(1, "Edited."))
    third = sync(url, cache, 10**7)
    assert (third.fetched, third.unchanged, third.deleted) == (2, 2, 1)
    tree = mirror_root(url, cache) / "tree"
    assert sorted(p.name for p in tree.iterdir()) == ["p0.html", "p1.html", "p3.html", "p4.html"]


def test_crawl_stays_within_prefix_and_host(site, tmp_path):
    """Without a sitemap, links are followed within the prefix; a redirect to another host is
    not followed (that host's server is never asked), nor a link outside the prefix."""
    from situate.tasks.sources.mirror import sync

    other = Site().start()
    try:
        elsewhere = other.base.replace("127.0.0.1", "localhost") + "/docs/p9.html"
        other.html("/docs/p9.html", "Elsewhere", "another host")
        site.html("/docs/", "Home", text(0), ("guide/a.html", "../outside.html", "moved.html",
                                               elsewhere))
        site.html("/docs/guide/a.html", "A", text(1), ("../index.html", "b"))
        site.html("/docs/guide/b", "B", text(2))
        site.html("/outside.html", "Outside", "not under the prefix")
        site.redirects["/docs/moved.html"] = elsewhere
        report = sync(f"{site.base}/docs/", tmp_path / "cache", 10**7)
        assert report.fetched == 3  # index.html, guide/a.html, guide/b.html
        assert site.requested("/outside.html") == []
        assert other.log == []
        assert [why for d, why in report.failed] == [
            f"redirects outside {site.base}/docs/ (to {elsewhere}): not followed"]
    finally:
        other.stop()


def test_big_page_is_cut_at_the_limit(site, tmp_path, settings_env):
    """A 50 MB page (no Content-Length) is read to the limit (SITUATE_MAX_FILE_BYTES for text,
    10,000,000 bytes by default) and no further, and left out. The site counts the blocks it
    finished writing: the client has read past the limit, so the site wrote at least the limit,
    less the one block (64 KiB) whose write the closed connection may have cut; and the sockets'
    buffers let it get no more than a few MiB ahead of the client."""
    from situate.core.settings import Settings
    from situate.tasks.sources.mirror import sync

    limit = Settings().max_file_bytes
    site.html("/docs/", "Home", text(0), ("big.html",))
    site.big["/docs/big.html"] = 50 * 2**20
    report = sync(f"{site.base}/docs/", tmp_path / "cache", 200 * 2**20)
    assert (report.fetched, report.too_large) == (1, 1)
    time.sleep(0.2)
    assert limit - 2**16 <= site.sent["/docs/big.html"] < limit + 10 * 2**20


def test_a_sitemap_of_nested_entities_is_left_out_unexpanded(site, tmp_path, caplog):
    """A sitemap built as an XML bomb (entities of entities, a billion 'lol's expanded) is read
    by defusedxml, which refuses entities: the sitemap is left out, with a warning, and the site
    is crawled instead, in well under a second."""
    from situate.tasks.sources.mirror import sync

    lol = "".join(f'<!ENTITY lol{i} "{"".join(f"&lol{i - 1};" for _ in range(10))}">'
                  for i in range(1, 10))
    bomb = (f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY lol0 "lol">{lol}]>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&lol9;</loc>'
            '</url></urlset>')
    site.pages["/docs/sitemap.xml"] = ("application/xml", bomb.encode())
    site.robots = f"User-agent: *\nSitemap: {site.base}/docs/sitemap.xml\n"
    site.html("/docs/", "Home", text(0), ("p1.html",))
    site.html("/docs/p1.html", "Page 1", text(1))
    t = time.perf_counter()
    report = sync(f"{site.base}/docs/", tmp_path / "cache", 10**7)
    assert time.perf_counter() - t < 5
    assert (report.fetched, report.complete) == (2, True)  # index.html and p1.html, crawled
    assert "sitemap.xml is not usable XML (EntitiesForbidden); left out" in caplog.text


def test_server_that_never_answers_is_timed_out(site, tmp_path, settings_env):
    from situate.tasks.sources.mirror import sync

    settings_env(web_timeout="0.5")
    site.html("/docs/", "Home", text(0), ("slow.html",))
    site.hanging.add("/docs/slow.html")
    t = time.perf_counter()
    report = sync(f"{site.base}/docs/", tmp_path / "cache", 10**7)
    assert time.perf_counter() - t < 5
    assert report.failed == [("slow.html", "timed out after 0.5 s (SITUATE_WEB_TIMEOUT)")]
    assert not report.complete


def test_link_local_start_is_refused_unless_allowed(tmp_path, settings_env):
    from situate.tasks.sources.base import open_source

    for url in ("http://169.254.169.254/", "http://[fe80::1]/latest/"):
        with pytest.raises(InputError) as e:
            open_source(url, tmp_path)
        assert str(e.value) == (f"{url}: a link-local address (a cloud metadata service) is "
                                "refused; set SITUATE_WEB_ALLOW_LINK_LOCAL=true if you mean it")
    settings_env(web_allow_link_local="true")
    source = open_source("http://169.254.169.254/", tmp_path)  # built; nothing requested
    source.close()


def test_links_to_private_addresses_from_a_public_start_are_refused(tmp_path):
    from situate.tasks.sources.web import WebSource

    source = WebSource("http://127.0.0.1:9/docs/", tmp_path)
    source.private_start = False  # as if the start URL were public
    assert source.refusal("http://127.0.0.1:9/docs/a.html") == "127.0.0.1 is a private address"
    assert source.refusal("http://10.0.0.1/docs/") == "another host (10.0.0.1)"
    assert source.refusal("file:///etc/passwd") == "file scheme"
    source.close()


def test_half_the_pages_failing_deletes_nothing_and_names_them(site, tmp_path):
    from situate.tasks.sources.mirror import sync

    with_sitemap(site, list(range(6)))
    url, cache = f"{site.base}/docs/", tmp_path / "cache"
    assert sync(url, cache, 10**7).fetched == 6
    site.failing |= {"/docs/p0.html", "/docs/p2.html", "/docs/p4.html"}
    del site.pages["/docs/p5.html"]  # gone (404), but this run deletes nothing
    bad = sync(url, cache, 10**7)
    assert not bad.complete and bad.deleted == 0
    assert bad.failed == [(f"p{n}.html", "HTTP 500") for n in (0, 2, 4)]
    site.failing.clear()
    good = sync(url, cache, 10**7)
    assert good.complete and good.deleted == 1 and good.failed == []


def test_forbidden_and_throttled_pages_fail_by_name_and_a_refused_start_is_one_line(site,
                                                                                 tmp_path):
    """The how-to's failures: a page answering 403, 401 or 429 fails with that reason and the
    run deletes nothing (a page gone at the same time stays); a start URL where nothing listens
    is one line."""
    import socket

    from situate.tasks.sources.mirror import sync

    with_sitemap(site, list(range(4)))
    url, cache = f"{site.base}/docs/", tmp_path / "cache"
    assert sync(url, cache, 10**7).fetched == 4
    site.statuses.update({"/docs/p0.html": 403, "/docs/p1.html": 401, "/docs/p2.html": 429})
    del site.pages["/docs/p3.html"]
    bad = sync(url, cache, 10**7)
    assert not bad.complete and bad.deleted == 0
    assert bad.failed == [("p0.html", "403 forbidden"), ("p1.html", "401 unauthorized"),
                          ("p2.html", "429 throttled")]

    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(InputError) as e:
        sync(f"http://127.0.0.1:{port}/docs/", tmp_path / "cache", 10**7)
    said = str(e.value)
    assert said.startswith(f"http://127.0.0.1:{port}/docs/: cannot be read (ConnectError")
    assert "\n" not in said


def test_the_cli_refuses_a_link_local_start_in_one_line(tmp_path):
    """`situate ingest http://169.254.169.254/...`: exit 2, the refusal alone on stderr (no
    traceback), nothing on stdout and no collection file."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    url = "http://169.254.169.254/latest/"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "PREFECT_API"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    out = subprocess.run([str(Path(sys.executable).with_name("situate")), "ingest", url,
                          "--collection", "metadata", "--milvus-uri", str(tmp_path / "m.db"),
                          "--cache-dir", str(tmp_path / "cache")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stdout) == (2, ""), out.stderr[-3000:]
    assert out.stderr.splitlines() == [
        f"situate ingest: error: {url}: a link-local address (a cloud metadata service) is "
        "refused; set SITUATE_WEB_ALLOW_LINK_LOCAL=true if you mean it"]
    assert not (tmp_path / "m.db").exists()
    assert not (tmp_path / "cache" / "sources").exists()  # no empty mirror left behind


@pytest.mark.e2e
@pytest.mark.slow
def test_ingest_from_a_website(prefect_harness, state, site, counting):
    """First run indexes every page; a re-run costs 304s and writes nothing; a run with half the
    pages failing prunes nothing and names them; 1 edit + 1 add + 1 delete then touch exactly
    those and give a fresh ingest's rows."""
    from tests.fakes.milvus_server import snapshot
    from tests.helpers import ingest, searches_like_fresh

    with_sitemap(site, list(range(6)))
    params = {"corpus": f"{site.base}/docs/", "collection": "site", "context": "structural",
              "embedder": "counting", "prune": True}
    t = time.perf_counter()
    first = ingest(**params)
    first_s = time.perf_counter() - t
    assert (first.new, first.source["fetched"]) == (6, 6)
    before = snapshot(state["milvus_uri"], "site")

    site.log.clear()
    counting.texts = 0
    t = time.perf_counter()
    again = ingest(**params)
    again_s = time.perf_counter() - t
    assert {status for _, p, status in site.log if p.endswith(".html")} == {304}
    assert (again.source["fetched"], again.chunks_written, counting.texts) == (0, 0, 0)
    assert snapshot(state["milvus_uri"], "site") == before
    print(f"first run {first_s:.2f} s, unchanged re-run {again_s:.2f} s")

    site.failing |= {"/docs/p0.html", "/docs/p2.html", "/docs/p4.html"}
    with_sitemap(site, [0, 1, 2, 3, 4])  # p5 gone from the sitemap: kept, as the run is partial
    half = ingest(**params)
    assert half.failed == {"p0.html": "HTTP 500", "p2.html": "HTTP 500", "p4.html": "HTTP 500"}
    assert (half.deleted_documents, half.chunks_deleted, half.rows) == (0, 0, 6)
    table = {row["metric"]: row["value"] for row in half.table()}  # the run's summary artifact
    assert table["failed p2.html"] == "HTTP 500" and table["source failed"] == "3"
    assert table["source unchanged (not fetched)"] == "2" and table["deleted_documents"] == "0"

    site.failing.clear()
    del site.pages["/docs/p2.html"]
    with_sitemap(site, [0, 1, 3, 4, 7])
    site.html("/docs/p1.html", "Page 1", text(1, "Edited."))
    synced = ingest(**params)
    # p5 (gone earlier) and p2 deleted, p1 edited, p7 added
    assert (synced.new, synced.changed, synced.deleted_documents) == (1, 1, 2)
    assert synced.source["fetched"] == 2 and synced.failed == {}

    fresh = ingest(**{**params, "collection": "sitefresh", "cache_dir": state["cache_dir"] + "2"})
    assert fresh.new == 5
    assert snapshot(state["milvus_uri"], "site") == snapshot(state["milvus_uri"], "sitefresh")
    searches_like_fresh(state["milvus_uri"], "site", "sitefresh")


def test_requests_to_a_host_are_spaced_by_its_crawl_delay(site, tmp_path, settings_env):
    """robots.txt's Crawl-delay (and SITUATE_WEB_DELAY) spaces the requests to one host."""
    from situate.tasks.sources.mirror import sync

    site.html("/docs/", "Home", text(0), ("a.html", "b.html"))
    site.html("/docs/a.html", "A", text(1))
    site.html("/docs/b.html", "B", text(2))
    site.robots = "User-agent: *\nCrawl-delay: 0.3\n"
    t = time.perf_counter()
    assert sync(f"{site.base}/docs/", tmp_path / "cache", 10**7).fetched == 3
    # robots.txt, two sitemap probes, three pages: five gaps after robots.txt is read
    assert time.perf_counter() - t >= 5 * 0.3
    site.robots = ""
    settings_env(web_delay="0.2")
    t = time.perf_counter()
    assert sync(f"{site.base}/docs/", tmp_path / "cache2", 10**7).fetched == 3
    assert time.perf_counter() - t >= 5 * 0.2


def test_a_redirect_to_an_allowed_host_is_followed(site, tmp_path, settings_env):
    from situate.tasks.sources.mirror import mirror_root, sync

    other = Site().start()
    try:
        settings_env(web_allow_hosts="localhost")
        target = other.base.replace("127.0.0.1", "localhost") + "/cdn/moved.html"
        other.html("/cdn/moved.html", "Moved", "served from elsewhere")
        site.html("/docs/", "Home", text(0), ("moved.html",))
        site.redirects["/docs/moved.html"] = target
        url = f"{site.base}/docs/"
        report = sync(url, tmp_path / "cache", 10**7)
        assert (report.fetched, report.failed) == (2, [])
        assert other.requested("/cdn/moved.html") == [200]
        assert "served from elsewhere" in (mirror_root(url, tmp_path / "cache") / "tree" /
                                           "moved.html").read_text()
    finally:
        other.stop()


def test_dry_run_lists_the_sitemap_without_requesting_pages(site, tmp_path):
    """A dry run prices the site from its sitemap against the mirror's markers: no page is
    requested and the mirror is left as it was."""
    from situate.tasks.sources.mirror import mirror_root, sync
    from situate.tasks.sources.preview import preview_scan

    with_sitemap(site, [0, 1, 2, 3])
    url, cache = f"{site.base}/docs/", tmp_path / "cache"
    site.log.clear()
    scan, seen = preview_scan(url, 200, 20, None, str(cache))
    assert (seen.listed, seen.new, seen.to_check, seen.gone) == (4, 4, 0, 0)
    assert scan.documents == 0 and not mirror_root(url, cache).exists()
    assert not any(p.startswith("/docs/p") for _, p, _ in site.log), site.log

    sync(url, cache, 10**7)
    del site.pages["/docs/p2.html"]
    with_sitemap(site, [0, 1, 3, 4])
    state = (mirror_root(url, cache) / "state.sqlite").read_bytes()
    site.log.clear()
    scan, seen = preview_scan(url, 200, 20, None, str(cache))
    assert (seen.listed, seen.new, seen.to_check, seen.gone, seen.fetched_to_list) == (
        4, 1, 3, 1, False)
    assert scan.documents == 4  # the mirror as it stands: p0-p3
    assert not any(p.startswith("/docs/p") for _, p, _ in site.log), site.log
    assert (mirror_root(url, cache) / "state.sqlite").read_bytes() == state
    assert "no document fetched" in seen.note()


def test_dry_run_of_a_site_without_sitemap_crawls_and_says_so(site, tmp_path):
    from situate.tasks.sources.mirror import mirror_root, sync
    from situate.tasks.sources.preview import preview

    site.html("/docs/index.html", "Home", text(0), links=("a.html",))
    site.html("/docs/a.html", "A", text(1))
    url, cache = f"{site.base}/docs/index.html", tmp_path / "cache"
    sync(url, cache, 10**7)
    site.html("/docs/a.html", "A", text(1, "Edited."))
    tree = mirror_root(url, cache) / "tree"
    before = (tree / "a.html").read_bytes()
    seen = preview(url, cache, 10**7)
    assert (seen.listed, seen.changed, seen.unchanged, seen.fetched_to_list) == (2, 1, 1, True)
    assert seen.bytes_to_fetch > 0 and "requested to find their links" in seen.note()
    assert (tree / "a.html").read_bytes() == before  # nothing written


def test_cli_dry_run_of_a_site_fetches_no_page_and_writes_nothing(site, tmp_path):
    """`situate ingest URL --dry-run --json`: the plan carries the sitemap's listing against the
    mirror (here: none yet, so every page is new) and says how it was made; no page is requested,
    no mirror, cache or Milvus Lite file is created."""
    import json

    from tests.test_flows import _cli

    with_sitemap(site, [0, 1, 2])
    site.log.clear()
    out = tmp_path / "plan.json"
    r = _cli("ingest", f"{site.base}/docs/", "--collection", "c", "--context", "structural",
             "--dry-run", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads(out.read_text())
    assert plan["dry_run"] is True and plan["documents"] == 0
    assert (plan["source"]["listed"], plan["source"]["new"], plan["source"]["sizes unknown"]) == (
        3, 3, 3)
    assert "listed only: no document fetched" in r.stdout
    assert not any(p.startswith("/docs/p") for _, p, _ in site.log), site.log
    assert not (tmp_path / "cache").exists() and not (tmp_path / "m.db").exists()


def test_a_dry_run_flow_of_a_site_syncs_nothing(prefect_harness, state, site):
    """`ingest_flow` with dry_run (a deployment's dry run): the site is listed from its sitemap,
    no page is requested and nothing is mirrored; the plan artifact carries the listing."""
    from situate.tasks.sources.mirror import mirror_root
    from tests.helpers import ingest

    with_sitemap(site, [0, 1, 2])
    site.log.clear()
    url = f"{site.base}/docs/"
    plan = ingest(corpus=url, collection="dry", context="structural", embedder="hash",
                  dry_run=True)
    assert plan.dry_run and (plan.source["listed"], plan.source["new"]) == (3, 3)
    assert not any(p.startswith("/docs/p") for _, p, _ in site.log), site.log
    assert not mirror_root(url, state["cache_dir"]).exists()
