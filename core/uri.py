"""Where a Milvus URI points: a Milvus Lite file (a path) or a server (`http(s)://host:port`,
Milvus Standalone, Distributed or Zilliz Cloud). The one place that tells them apart, and that
says how a URI may be shown: without the user name and password it may carry
(`http://user:password@host:19530`, which pymilvus accepts)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit


def is_lite(uri: str) -> bool:
    """A Milvus Lite file (any path), not a server URI."""
    return "://" not in uri


def is_missing_lite_file(uri: str) -> bool:
    """A Milvus Lite file that does not exist yet: it holds no collection, and opening it would
    create it."""
    return is_lite(uri) and not Path(uri).exists()


SERVER_SCHEMES = ("http", "https", "tcp", "unix")


def uri_problem(uri: str) -> str | None:
    """Why pymilvus cannot open `uri` (None: it can): a Milvus Lite file is a path ending in .db,
    a server an http(s)://host:port."""
    text = uri.strip()
    if not text:
        return "is empty: give a Milvus Lite file (a path ending in .db) or a server's http(s)://host:port"
    if is_lite(text):
        if not text.endswith(".db"):
            return ("is neither a Milvus Lite file name (those end in .db) nor a server's "
                    "http(s)://host:port: give one of those")
        return None
    scheme = text.partition("://")[0].lower()
    if scheme not in SERVER_SCHEMES:
        return (f"has an unknown scheme {scheme!r}: give a server's http(s)://host:port, or a "
                "Milvus Lite file ending in .db")
    return None


def shown(uri: str) -> str:
    """`uri` as messages and logs may show it: any user information replaced by ***
    (`http://***@host:19530`)."""
    if is_lite(uri):
        return uri
    scheme, sep, rest = uri.partition("://")
    authority, slash, tail = rest.partition("/")
    if "@" not in authority:
        return uri
    return f"{scheme}{sep}***@{authority.rpartition('@')[2]}{slash}{tail}"


def credentials(uri: str) -> tuple[str, ...]:
    """The secrets a server URI carries in its user information: the password, the user name
    and both together (`user:password`), as given and percent-decoded."""
    if is_lite(uri):
        return ()
    try:
        parts = urlsplit(uri)
    except ValueError:
        return ()
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    if not userinfo:
        return ()
    found = {userinfo, unquote(userinfo)}
    user, _, password = userinfo.partition(":")
    if password:
        found |= {password, unquote(password), user, unquote(user)}
    return tuple(s for s in found if s)
