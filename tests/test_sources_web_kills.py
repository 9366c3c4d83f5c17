"""A real `situate ingest` of a website killed with SIGKILL while its pages are synced into the
mirror, and while the collection's rows are written; then the same command. The killed run
follows a change on the site (one page edited, one deleted, one added), and the command run again
leaves the collection's rows as a fresh ingest's of the new site (tests/test_sources_kills.py
does the same for a git repository)."""

from __future__ import annotations

import signal

import pytest

from tests.fakes.website import Site
from tests.test_sources_kills import _ingest, _rows

# The same kills as the git source's, through the website's own listing: the soak tier.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.soak, pytest.mark.timeout(900)]


def _text(n: int, extra: str = "") -> str:
    sentences = " ".join(f"Section {n}.{i} of the handbook covers shard {i} of topic {n}, its "
                         f"replicas, leases and the retries a worker makes." for i in range(12))
    return f"{sentences} {extra}"


def _publish(site: Site, pages: list[int], edited: int | None = None) -> None:
    site.pages.clear()
    for n in pages:
        site.html(f"/docs/p{n}.html", f"Page {n}", _text(n, "Edited." if n == edited else ""))
    site.robots = f"User-agent: *\nSitemap: {site.base}/docs/sitemap.xml\n"
    site.sitemap("/docs/sitemap.xml", [f"{site.base}/docs/p{n}.html" for n in pages])


BEFORE, AFTER = [0, 1, 2, 3, 4], [0, 1, 3, 4, 5]  # p2 deleted, p5 added, p1 edited


@pytest.fixture
def site():
    s = Site().start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("fresh")
    s = Site().start()
    try:
        _publish(s, AFTER, edited=1)
        _ingest(tmp, f"{s.base}/docs/", str(tmp / "m.db"))
    finally:
        s.stop()
    return _rows(str(tmp / "m.db"))


@pytest.mark.parametrize("point", ["during_fetch", "during_rows"])
def test_a_killed_website_ingest_then_the_same_command(tmp_path, site, fresh, point):
    url, uri = f"{site.base}/docs/", str(tmp_path / "m.db")
    _publish(site, BEFORE)
    _ingest(tmp_path, url, uri)
    _publish(site, AFTER, edited=1)
    assert _ingest(tmp_path, url, uri, point) == -signal.SIGKILL
    _ingest(tmp_path, url, uri)
    assert _rows(uri) == fresh
