"""EPUB through zipfile and lxml (not ebooklib, which is AGPL): chapters in spine order.

An EPUB is a zip: META-INF/container.xml names the package document (OPF), whose manifest lists
the files and whose spine orders the chapters. Each chapter is XHTML and goes through the HTML
reader's walk (`html_sections`), so headings, code, lists and tables read as in a web page; its
sections also carry `chapter` (1-based, counting chapters with text) and `chapter_title` (from
the book's table of contents, else the chapter's first heading or <title>).

The zip is checked before anything is inflated (a bomb is refused from its directory), members
are inflated with a bound, and chapters are read one at a time. An EPUB whose content is
encrypted (DRM, listed in META-INF/encryption.xml; font obfuscation is not DRM) is refused.
"""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag

from situate.tasks.corpus.readers.base import FileReader, Limits, Place, Reading, Section, Unreadable
from situate.tasks.corpus.readers.html import decode, html_sections, parse
from situate.tasks.corpus.readers.zipguard import open_zip, read_member

LABEL = "EPUB"
CHAPTER_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/html+xml"})
# Font obfuscation (IDPF, Adobe) is listed in encryption.xml too, but hides only fonts.
FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})


def read(path: Path, *, fmt: str = "epub", max_bytes: int) -> Reading:
    """Open `path` as an EPUB: a zip that is no bomb, not DRM-encrypted, with a package document;
    its chapters are read lazily in spine order."""
    path = Path(path)
    zf = open_zip(path, LABEL, max_bytes)
    try:
        names = set(zf.namelist())
        _refuse_drm(zf, names, max_bytes)
        opf_name = _package_name(zf, names, max_bytes)
        opf = _xml(read_member(zf, opf_name, max_bytes, fmt_label=LABEL), opf_name)
        base = posixpath.dirname(opf_name)
        manifest = {}
        for item in opf.xpath("//*[local-name()='manifest']/*[local-name()='item']"):
            href = item.get("href")
            if item.get("id") and href:
                manifest[item.get("id")] = (_resolve(base, href), (item.get("media-type") or "").lower(),
                                            item.get("properties") or "")
        spine = []
        for ref in opf.xpath("//*[local-name()='spine']/*[local-name()='itemref']"):
            entry = manifest.get(ref.get("idref") or "")
            if entry and entry[1] in CHAPTER_TYPES and entry[0] in names:
                spine.append(entry[0])
        if not spine:
            raise Unreadable(f"corrupt {LABEL}", f"{path}: the package lists no chapters in its spine")
        titles = [" ".join(t.split())
                  for t in opf.xpath("//*[local-name()='metadata']/*[local-name()='title']/text()")]
        toc = _toc(zf, opf, manifest, names, max_bytes)
    except BaseException:
        zf.close()
        raise
    reading = Reading(format=fmt, sections=iter(()), title=next((t for t in titles if t), ""),
                      unit="chapters", units=len(spine))
    reading.sections = _chapters(zf, spine, toc, max_bytes, reading)
    return reading


def _chapters(zf: zipfile.ZipFile, spine: list[str], toc: dict[str, str], max_bytes: int,
              reading: Reading) -> Iterator[Section]:
    """Each spine item's sections, one chapter inflated and parsed at a time. A chapter without
    text (a cover image) is not counted; `reading.units` ends as the count of chapters read."""
    count = 0
    try:
        for name in spine:
            root = parse(decode(read_member(zf, name, max_bytes, fmt_label=LABEL)))
            if root is None:
                continue
            title = toc.get(name) or _first_heading(root)
            sections = list(html_sections(root, Place(chapter=count + 1, chapter_title=title)))
            if not any(s.text.strip() for s in sections):
                continue
            count += 1
            yield from sections
        reading.units = count
    finally:
        zf.close()


def _xml(data: bytes, name: str) -> Any:
    """A package file parsed as XML without DTDs, entities or network (a hostile EPUB cannot
    make lxml fetch or expand anything); recovers from small errors."""
    import lxml.etree

    parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, recover=True,
                                  huge_tree=False)
    try:
        root = lxml.etree.fromstring(data, parser=parser)
    except lxml.etree.XMLSyntaxError as e:
        raise Unreadable(f"corrupt {LABEL}", f"{name}: {e}") from None
    if root is None:
        raise Unreadable(f"corrupt {LABEL}", f"{name}: not XML")
    return root


def _resolve(base: str, href: str) -> str:
    """A manifest or TOC href as a member name: relative to the package's folder, %-decoded,
    without its #fragment."""
    href = unquote(urldefrag(href)[0])
    return posixpath.normpath(posixpath.join(base, href)) if base else posixpath.normpath(href)


def _package_name(zf: zipfile.ZipFile, names: set[str], max_bytes: int) -> str:
    """The OPF's member name from META-INF/container.xml (or the only .opf in the zip)."""
    if "META-INF/container.xml" in names:
        container = _xml(read_member(zf, "META-INF/container.xml", max_bytes, fmt_label=LABEL),
                         "META-INF/container.xml")
        for rootfile in container.xpath("//*[local-name()='rootfile']"):
            full = rootfile.get("full-path")
            kind = rootfile.get("media-type") or "application/oebps-package+xml"
            if full and kind == "application/oebps-package+xml" and unquote(full) in names:
                return unquote(full)
    opfs = sorted(n for n in names if n.lower().endswith(".opf"))
    if len(opfs) == 1:
        return opfs[0]
    raise Unreadable(f"corrupt {LABEL}", f"{zf.filename}: no package document (META-INF/container.xml "
                                         "names none); not an EPUB, or a damaged one")


def _refuse_drm(zf: zipfile.ZipFile, names: set[str], max_bytes: int) -> None:
    """Refuse an EPUB whose content is encrypted: encryption.xml listing any file with an
    algorithm other than font obfuscation, or Apple's FairPlay (sinf.xml)."""
    detail = "DRM-protected (its content is encrypted); situate cannot read it: use a DRM-free copy"
    if "META-INF/sinf.xml" in names:
        raise Unreadable(f"encrypted {LABEL}", detail)
    if "META-INF/encryption.xml" not in names:
        return
    name = "META-INF/encryption.xml"
    root = _xml(read_member(zf, name, max_bytes, fmt_label=LABEL), name)
    for data in root.xpath("//*[local-name()='EncryptedData']"):
        methods = data.xpath(".//*[local-name()='EncryptionMethod']/@Algorithm")
        uris = data.xpath(".//*[local-name()='CipherReference']/@URI")
        fonts_only = methods and all(m in FONT_OBFUSCATION for m in methods)
        if uris and not fonts_only:
            raise Unreadable(f"encrypted {LABEL}", f"{detail} ({len(uris)} encrypted file(s), e.g. "
                                                   f"{uris[0]})")


def _toc(zf: zipfile.ZipFile, opf: Any, manifest: dict[str, tuple[str, str, str]], names: set[str],
         max_bytes: int) -> dict[str, str]:
    """Chapter file -> its title in the book's table of contents: the EPUB 3 navigation document
    (nav epub:type="toc"), else the EPUB 2 NCX. First entry per file wins. Best effort: a broken
    TOC gives no titles, not an error."""
    titles: dict[str, str] = {}
    nav = next((href for href, _, props in manifest.values() if "nav" in props.split()), "")
    ncx = next((href for href, kind, _ in manifest.values() if kind == "application/x-dtbncx+xml"), "")
    spine_toc = opf.xpath("//*[local-name()='spine']/@toc")
    if spine_toc and spine_toc[0] in manifest:
        ncx = manifest[spine_toc[0]][0]
    try:
        if nav and nav in names:
            root = parse(decode(read_member(zf, nav, max_bytes, fmt_label=LABEL)))
            base = posixpath.dirname(nav)
            navs = root.xpath("//nav") if root is not None else []
            toc = [n for n in navs if "toc" in (n.get("epub:type") or n.get("type") or n.get("role") or "")]
            for a in (toc or navs)[0].iter("a") if navs else ():
                label = " ".join(a.text_content().split())
                if a.get("href") and label:
                    titles.setdefault(_resolve(base, a.get("href")), label)
        if not titles and ncx and ncx in names:
            root = _xml(read_member(zf, ncx, max_bytes, fmt_label=LABEL), ncx)
            base = posixpath.dirname(ncx)
            for point in root.xpath("//*[local-name()='navPoint']"):
                label = " ".join("".join(point.xpath("./*[local-name()='navLabel']//text()")).split())
                src = point.xpath("./*[local-name()='content']/@src")
                if src and label:
                    titles.setdefault(_resolve(base, src[0]), label)
    except Unreadable:
        return {}
    return titles


def _first_heading(root: Any) -> str:
    for xpath in ("//h1", "//h2", "//h3", "//title"):
        for el in root.xpath(xpath):
            text = " ".join(el.text_content().split())
            if text:
                return text
    return ""


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes)


READERS = (FileReader("epub", "e-book", (".epub",), _read),)
