"""Text as a golden quote is matched: one normalization shared by evaluation (a retrieved chunk
holds the quote) and by the readers' coverage measure (a chunk holds the source's sentence)."""

from __future__ import annotations

import re
import unicodedata

# A word cut at a line end by a hyphen (ASCII, U+2010, or a soft hyphen) and the line break.
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])[-\u2010\u00ad][ \t]*\r?\n\s*(?=[^\W\d_])")
_TYPOGRAPHY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
                             "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00a0": " ",
                             "\u00ad": "", "`": ""})


def normalize_quote(text: str) -> str:
    """Text as a golden quote is matched: line-end hyphenation joined, Unicode compatibility
    forms folded (a PDF's "ﬁ" ligature is "fi"), typographic quotes made plain, Markdown's code
    backticks dropped (the other formats render them away), whitespace runs
    collapsed to one space. So one quote matches the Markdown, the HTML, the DOCX and the PDF of
    the same document."""
    text = _HYPHEN_BREAK.sub("", text)
    text = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY)
    return " ".join(text.split())
