"""The docs site as a reader sees it, offline: built by mkdocs as `make docs` builds it, served
on loopback, and rendered by Debian's headless Chromium with every other host unreachable (its
resolver answers only 127.0.0.1). The home page's Mermaid diagram must be drawn (an SVG, from the
Mermaid the site bundles, not from a CDN) and a long line of code must stay in its box."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fakes.prefect_server import wait_until
from tests.test_ui import CHROMIUM, Browser

pytestmark = [pytest.mark.slow]
# Every name resolves to nothing but loopback: a page that needs the network shows it.
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[str]:
    """The site built into a temporary folder and served on a free loopback port."""
    out = tmp_path_factory.mktemp("site")
    subprocess.run(["make", "-s", "links"], cwd=ROOT, check=True, capture_output=True)
    built = subprocess.run([str(Path(sys.executable).with_name("mkdocs")), "build", "--strict",
                            "-q", "-d", str(out / "site")], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    handler = functools.partial(_Quiet, directory=str(out / "site"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def browser(tmp_path) -> Iterator[Browser]:
    opened = Browser(tmp_path / "profile", tmp_path / "chromium.log", OFFLINE)
    try:
        yield opened
    finally:
        opened.close()


def _shadow_svgs(browser: Browser) -> int:
    """SVG elements drawn in the page's `div.mermaid` elements. Material draws each diagram in a
    closed shadow root, which a script cannot read; the DevTools DOM pierces it."""
    root = browser.call("DOM.getDocument", depth=-1, pierce=True)["root"]

    def walk(node: dict, in_mermaid: bool) -> int:
        attrs = node.get("attributes", [])
        classes = dict(zip(attrs[::2], attrs[1::2], strict=False)).get("class", "").split()
        here = in_mermaid or (node.get("nodeName") == "DIV" and "mermaid" in classes)
        found = int(in_mermaid and node.get("nodeName", "").lower() == "svg")
        for child in node.get("children", []) + node.get("shadowRoots", []):
            found += walk(child, here)
        return found

    return walk(root, False)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make test installs it)")
def test_the_home_page_diagram_is_drawn_offline(site, browser):
    browser.call("DOM.enable")
    browser.goto(f"{site}/")
    wait_until(lambda: browser.eval("document.readyState") == "complete", 60, "the home page")
    drawn = wait_until(lambda: _shadow_svgs(browser), 60, "the Mermaid diagram drawn as an SVG")
    assert drawn >= 1
    assert browser.eval("document.querySelectorAll('pre.mermaid').length") == 0  # none left raw
    assert browser.eval("typeof mermaid") == "object"  # the site's own copy
    fetched = browser.eval("performance.getEntriesByType('resource').map(e => e.name)")
    assert fetched and all(url.startswith(site) for url in fetched), fetched


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make test installs it)")
@pytest.mark.parametrize("width", [1400, 700, 400])
def test_long_code_lines_stay_in_their_box(site, browser, width):
    """serving.md holds the longest command lines: each code block ends within the article's
    column on a wide screen (within the screen on a narrow one, where the theme draws code from
    edge to edge), its long lines scroll inside it, and the page never scrolls sideways."""
    browser.call("Emulation.setDeviceMetricsOverride", width=width, height=1000,
                 deviceScaleFactor=1, mobile=False)
    browser.goto(f"{site}/tutorials/serving/")
    wait_until(lambda: browser.eval("document.readyState") == "complete", 60, "serving.md")
    wide = browser.eval("""(() => {
        const column = document.querySelector('article.md-content__inner').getBoundingClientRect();
        const edge = %s ? column.right : document.documentElement.clientWidth;
        return [...document.querySelectorAll('article pre')]
          .filter(p => p.getBoundingClientRect().right > edge + 0.5)
          .map(p => p.textContent.slice(0, 60)); })()""" % ("true" if width >= 1000 else "false"))
    assert wide == []
    scrolls = browser.eval("[...document.querySelectorAll('article pre > code')]"
                           ".filter(c => c.scrollWidth > c.clientWidth + 1).length")
    assert scrolls >= 1  # its long lines exist, and scroll where they are
    assert browser.eval("document.documentElement.scrollWidth <= window.innerWidth")
