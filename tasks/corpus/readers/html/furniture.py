"""What of a page is furniture, not content: the rules (`RULES`) that drop a block by a reason they
can name, the main content that shields the blocks holding it from the weakest rule, and the
pruning of the tree (each dropped block logged at debug level with its rule).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

log = logging.getLogger("situate.load")


# Never content. Elements whose text is not the page's (scripts, styles, widgets).
DROP_TAGS = frozenset({"script", "style", "noscript", "svg", "iframe", "template", "button", "select",
                       "textarea", "input", "canvas", "object", "embed", "head", "dialog"})


# Page furniture by its tag, unless it holds the main content.
FURNITURE_TAGS = frozenset({"nav", "footer", "aside", "menu"})


DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "dialog",
                        "alertdialog", "menu", "menubar"})


# A book's pages that repeat what its metadata and headings say, and its navigation lists (EPUB 3
# structural semantics, DPUB-ARIA roles): pandoc's EPUB opens with a title page holding only the
# title, read as a chapter of its own.
DROP_TYPES = frozenset({"cover", "titlepage", "halftitlepage", "toc", "landmarks", "page-list", "loi",
                        "lot", "loa", "lov", "doc-toc", "doc-pagelist", "doc-cover"})


# Notes are content wherever they sit (an EPUB's footnotes are often <aside epub:type="footnote">,
# pandoc's are <aside role="doc-endnotes"> with --reference-location).
NOTE_TYPES = frozenset({"footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes", "note",
                        "doc-footnote", "doc-endnote", "doc-endnotes"})


# A page-level <header> (not inside one of these) is the site's banner (ARIA's mapping).
SECTIONING = frozenset({"article", "aside", "main", "nav", "section"})


# Words in an id or class that mark page furniture; a token matches when it starts or ends with
# one ("navbar", "social-links", "advertisement", "sphinxsidebar", "mainnav").
DROP_WORDS = ("cookie", "consent", "gdpr", "banner", "breadcrumb", "sidebar", "menu", "nav", "footer",
              "share", "social", "advert")


# A block dropped only by an id/class word or as a form must hold less than this share of the
# page's text (a wrapper whose class happens to say "sidebar" is not furniture).
WEAK_SHARE = 0.4


# The names a dropped block is logged with (debug level), by how sure they are.
RULES = {
    "tag": "never content (script, style, form control, embedded object)",
    "furniture tag": "nav, footer, aside or menu",
    "role": "an ARIA landmark or widget role that is not content (navigation, banner, ...), or a "
            "book's cover, title page or navigation list (epub:type, DPUB-ARIA role)",
    "hidden": "hidden, aria-hidden or display:none",
    "banner": "a page-level <header> without a heading",
    "form": "a form (search box, login), under 40% of the page's text",
    "class": "a furniture word in its id or class, under 40% of the page's text",
}


HEADINGS = {f"h{n}": n for n in range(1, 7)}


_LEAVES = frozenset({"ul", "ol", "dl", "table", "pre", "p", "blockquote", *HEADINGS})


_TOKENS = re.compile(r"[^a-z0-9]+")


_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)


def _tag(el: Any) -> str:
    tag = el.tag
    if not isinstance(tag, str):
        return ""  # a comment or processing instruction
    return _local(tag)


@lru_cache(maxsize=4096)
def _local(tag: str) -> str:
    """A tag's local name, lowercased ("{http://www.w3.org/1999/xhtml}P" and "epub:P" are "p")."""
    return tag.rsplit("}", 1)[-1].split(":")[-1].lower()


def _rule(el: Any, tag: str, scoped: bool) -> str:
    """The rule by which `el` is furniture ("" for none). `scoped`: inside a sectioning element."""
    if tag in DROP_TAGS:
        return "tag"
    types: set[str] = set()
    words = ""
    hidden = False
    for key, value in el.items():
        name = _local(key)
        if name == "role" or (name == "type" and key != "type"):  # role, epub:type
            types.update(value.lower().split())
        elif name == "class" or (name == "id" and not _anchor(el, tag, value)):
            words += " " + value.lower()
        elif name == "hidden" or (name == "aria-hidden" and value.strip().lower() == "true") \
                or (name == "style" and _HIDDEN_STYLE.search(value)):
            hidden = True
    if types & NOTE_TYPES:
        return ""
    if tag in FURNITURE_TAGS:
        return "furniture tag"
    if types & (DROP_ROLES | DROP_TYPES):
        return "role"
    if hidden:
        return "hidden"
    if tag == "header" and not scoped:
        return "banner"  # tentatively: kept if it holds a heading (a title block, not a site's banner)
    if tag == "form":
        return "form"
    if words and any(w.startswith(DROP_WORDS) or w.endswith(DROP_WORDS) for w in _TOKENS.split(words) if w):
        return "class"
    return ""


def _anchor(el: Any, tag: str, value: str) -> bool:
    """Whether an id is the anchor of the element's own heading (`<h2 id="shared-cache">Shared
    cache</h2>`, pandoc's `<section id="...">` around it): spelled from its words, it names the
    heading, not the block's role, and is no evidence of furniture."""
    heading = el if tag in HEADINGS else next((c for c in el if isinstance(c.tag, str)), None)
    if heading is None or _tag(heading) not in HEADINGS:
        return False
    said = set(_TOKENS.split(heading.text_content().lower()))
    return all(w in said or w.isdigit() for w in _TOKENS.split(value.lower()) if w)


def _ink(text: str | None) -> int:
    """Characters of `text` that are not whitespace."""
    return len(text) - sum(text.count(c) for c in " \t\n\r\f\xa0") if text else 0


def _sizes(root: Any) -> dict[Any, int]:
    """Each element's non-whitespace text length, its subtree's (one pass down, one back up)."""
    size: dict[Any, int] = {}
    order = []
    for node in root.iter():
        parent = node.getparent()
        if isinstance(node.tag, str):
            size[node] = _ink(node.text)
            order.append((node, parent))
        if parent is not None and node.tail:
            size[parent] += _ink(node.tail)
    for node, parent in reversed(order):
        if parent is not None:
            size[parent] += size[node]
    return size


def _holders(found: Iterator[Any] | list[Any]) -> set[Any]:
    """The elements found and every ancestor of theirs (each ancestor chain walked once)."""
    marked: set[Any] = set()
    for el in found:
        while el is not None and el not in marked:
            marked.add(el)
            el = el.getparent()
    return marked


def _mains(root: Any) -> set[Any]:
    """The elements holding (or being) a main-content element: <main>, <article>, role=main."""
    return _holders(el for el in root.iter() if isinstance(el.tag, str) and (
        _tag(el) in ("main", "article") or (el.get("role") or "").strip().lower() == "main"))


def _remove(el: Any) -> None:
    """Take `el` out of the tree, keeping the text that follows it (its tail, the parent's)."""
    parent = el.getparent()
    if parent is None:
        return
    tail = el.tail
    if tail:
        previous = el.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(el)


def _element(el: Any) -> str:
    name = _tag(el)
    for key in ("id", "class", "role"):
        if el.get(key):
            name += f" {key}={el.get(key)!r}"
    return f"<{name}>"


def _drop(found: list[tuple[Any, str]]) -> None:
    debug = log.isEnabledFor(logging.DEBUG)
    for el, rule in found:
        if debug:
            words = " ".join(el.text_content().split())
            log.debug("html: dropped %s by rule %r (%s), %d characters: %.80s", _element(el), rule,
                      RULES[rule], len(words), words)
        _remove(el)


def _prune(root: Any) -> None:
    """Remove the page furniture, each block by a named rule (`RULES`), in two passes:

    1. the sure rules (a tag never content, a furniture tag, a role, hidden, a page-level <header>
       without a heading), except on a block holding <main>, <article> or role=main (a
       script-like tag goes whatever it holds);
    2. the weak rules (a form, a furniture word in the id or class), except on a block holding
       the main content (see `_content_root`) or more than `WEAK_SHARE` of the page's text.

    Everything else stays, wherever it is. Each pass is one walk of the tree."""
    mains = _mains(root)
    headed = _holders([el for el in root.iter() if isinstance(el.tag, str) and _tag(el) in HEADINGS])
    sure: list[tuple[Any, str]] = []
    weak: list[tuple[Any, str]] = []
    scoped: dict[Any, bool] = {}
    gone: set[Any] = set()  # dropped, or inside a dropped block
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        parent = el.getparent()
        if parent is not None and parent in gone:
            gone.add(el)
            continue
        tag = _tag(el)
        inside = parent is not None and (scoped.get(parent, False) or _tag(parent) in SECTIONING)
        scoped[el] = inside
        if tag in ("html", "body", "main", "article"):
            continue
        rule = _rule(el, tag, inside)
        if not rule:
            continue
        if rule == "banner" and el in headed:
            continue  # a title block (pandoc's title-block-header), not a site's banner
        if rule in ("form", "class"):
            weak.append((el, rule))
            continue
        if rule != "tag" and el in mains:
            continue
        sure.append((el, rule))
        gone.add(el)
    _drop(sure)
    if not weak:
        return
    size = _sizes(root)
    mains = _mains(root)
    body = root.find("body")
    body_size = size.get(body if body is not None else root, 0)
    main = _content_root(root, size, mains)
    shielded = {main, *main.iterancestors()}
    candidates = dict(weak)
    chosen: list[tuple[Any, str]] = []
    gone = set()
    for el in root.iter():  # document order: a block inside a dropped one goes with it
        parent = el.getparent()
        if parent is not None and parent in gone:
            gone.add(el)
            continue
        weak_rule = candidates.get(el)
        if weak_rule is None or el in mains or el in shielded or size.get(el, 0) > WEAK_SHARE * body_size:
            continue
        chosen.append((el, weak_rule))
        gone.add(el)
    _drop(chosen)


def _content_root(root: Any, size: dict[Any, int], mains: set[Any]) -> Any:
    """<main> or [role=main] (the one with most text), else a single <article>, else, from
    <body> down, the child holding 70% of its parent's text while there is one."""
    candidates = [el for el in mains
                  if _tag(el) == "main" or (el.get("role") or "").strip().lower() == "main"]
    if candidates:
        return max(candidates, key=lambda el: size.get(el, 0))
    articles = [el for el in mains if _tag(el) == "article"]
    if len(articles) == 1:
        return articles[0]
    body = root.find("body")
    node = body if body is not None else root
    while True:
        total = size.get(node, 0)
        if not total:
            return node
        children = [c for c in node if isinstance(c.tag, str)]
        best = max(children, key=lambda c: size.get(c, 0), default=None)
        if best is None or size.get(best, 0) < 0.7 * total or _tag(best) in _LEAVES:
            return node  # a list, table or code block is read by its container, as what it is
        node = best
