"""API keys: the one place they are resolved (environment, else a Prefect Secret block) and the
one function that keeps secrets out of every message, reply, log line, artifact and cache
(`redact`): the keys and tokens situate knows, the user information of a URI, credentials in a
query string and an `Authorization` value, wherever they appear.

`redact` takes linear time in what it reads, and reads a bounded part of any text: every pattern
is bounded (a scheme of at most 32 characters, a parameter name of at most 64, no quantifier
inside another), and a text longer than REDACTED_CHARS keeps its first and last halves of that
with a marker between them. A log line or an error built from what a client sent (a path of
100 KB, a query string of `a.a.a.`) therefore costs microseconds, never seconds."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from situate.core.errors import InputError, ProviderError

# provider -> (environment variable, Prefect Secret block name)
KEYS: dict[str, tuple[str, str]] = {
    "anthropic": ("ANTHROPIC_API_KEY", "anthropic-api-key"),
    "cohere": ("COHERE_API_KEY", "cohere-api-key"),
    "voyage": ("VOYAGE_API_KEY", "voyage-api-key"),
    "openai": ("OPENAI_API_KEY", "openai-api-key"),
}
# Other variables whose values are secrets (never printed).
SECRET_VARIABLES = ("SITUATE_MILVUS_TOKEN", "SITUATE_API_TOKEN")

# Looks up a Prefect Secret block by name; registered by the flows layer (the core imports no
# Prefect). None: environment variables only.
_secret_loader: Callable[[str], str | None] | None = None
_resolved: set[str] = set()
# Shorter values are not searched for (they would mask ordinary words); every token situate
# accepts is longer, and a URI's user information is masked by its shape whatever its length.
MIN_SECRET = 4
# The most characters of one text `redact` reads and returns: its first and last halves of this,
# with a marker between them (a longer text is a client's payload or a runaway traceback).
REDACTED_CHARS = 16_384
# Characters read past each kept half, so that a secret or a URI's user information crossing the
# cut is still matched whole (and masked) before the text is cut.
_MARGIN = 2_048
# Each pattern is bounded on the left (a scheme of at most 32 characters, a parameter name of at
# most 64 around its credential word) and has no quantifier inside another: each start position
# is tried in bounded time, so a text of n characters is read in O(n) (an unbounded scheme made
# `a.a.a.a.` quadratic: 7.6 s for 32 KB).
# scheme://USERINFO@host: the user information, whatever it holds.
_USERINFO = re.compile(r"\b([a-z][a-z0-9+.-]{0,31}://)[^\s/@?#'\"<>]+@", re.IGNORECASE)
# A query-string or form value whose name says it is a credential.
_CREDENTIAL_PARAM = re.compile(
    r"([?&;][\w.-]{0,64}?(?:token|key|secret|password|passwd|pwd|auth|signature|sig|credential)"
    r"[\w.-]{0,64}=)[^&\s#'\"<>]+", re.IGNORECASE)
# An HTTP Authorization value.
_AUTHORIZATION = re.compile(r"\b(bearer)(\s{1,16})[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)


# Reads a Prefect block's fields by name (`--credentials-block`); registered by the flows layer.
_block_loader: Callable[[str], Mapping[str, Any]] | None = None
# A field of a credentials block whose name says it holds a secret (masked wherever it appears).
_SECRET_FIELD = re.compile(r"key|secret|token|password|connection_string|signature|sas|value",
                           re.IGNORECASE)


def set_secret_loader(loader: Callable[[str], str | None] | None) -> None:
    global _secret_loader
    _secret_loader = loader


def set_block_loader(loader: Callable[[str], Mapping[str, Any]] | None) -> None:
    global _block_loader
    _block_loader = loader


def block_credentials(name: str | None) -> dict[str, Any] | None:
    """The fields of the Prefect block `name` (`--credentials-block`), its secrets remembered
    (`remember`) before anything can show them; None without a name. InputError (one line) when
    no block loader is registered or the block cannot be read."""
    if not name:
        return None
    if _block_loader is None:
        raise InputError(f"--credentials-block {name}: blocks are read through Prefect; "
                         "import situate.flows first")
    fields = dict(_block_loader(name))
    remember(*_secret_values(fields))
    fields["_block"] = name
    return fields


def _secret_values(fields: Mapping[str, Any], inside: bool = False) -> list[str]:
    """The string values of `fields` held under a secret-sounding name, at any depth (a service
    account's `private_key` inside `service_account_info`)."""
    out: list[str] = []
    for key, value in fields.items():
        secret = inside or bool(_SECRET_FIELD.search(str(key)))
        if isinstance(value, Mapping):
            out += _secret_values(value, secret)
        elif isinstance(value, str) and secret:
            out += secret_lines(value)
    return out


def secret_lines(value: str) -> list[str]:
    """A secret and each line of it: a PEM key may be shown escaped or a line at a time."""
    return [value, *(line for line in value.replace("\\n", "\n").splitlines()
                     if "-----" not in line)]


def has_key(provider: str) -> bool:
    """Whether the provider's key is in the environment (decides defaults; never loads blocks,
    which would need the Prefect API)."""
    return bool(os.environ.get(KEYS[provider][0], "").strip())


def api_key(provider: str, *, required: bool = True, user: str = "") -> str:
    """The key for `provider`: its environment variable, else its Prefect Secret block.

    Raises a ProviderError naming both places when `required` and neither has one; `user` names
    what needs it ("reranker 'cohere'", "embedder 'voyage'") for that message.
    """
    env, block = KEYS[provider]
    value = os.environ.get(env, "").strip()
    if not value and _secret_loader is not None:
        try:
            value = (_secret_loader(block) or "").strip()
        except Exception:  # noqa: BLE001 - any failure means "no usable block"
            value = ""
    if value:
        remember(value)
        return value
    if required:
        raise ProviderError(f"{user or provider} needs an API key: set {env} (or store it in a "
                            f"Prefect Secret block named '{block}')")
    return ""


def remember(*values: str) -> None:
    """Add secrets that `redact` masks from now on in this process (a token given as a flag, the
    password of a Milvus URI)."""
    _resolved.update(v.strip() for v in values if v and len(v.strip()) >= MIN_SECRET)


def redact(text: str, *secrets: str) -> str:
    """`text` with every secret replaced by ***: the ones given, every key and token resolved or
    remembered so far, the values of the key and token variables, any URI's user information, a
    credential-named query parameter's value and an Authorization value.

    A text longer than REDACTED_CHARS is cut: its first and last REDACTED_CHARS // 2 characters
    are kept, each masked with some text beyond it read too, with `[... N characters cut ...]`
    between them. Linear time in what is read, which is bounded (see the module's docstring)."""
    known = {*secrets, *_resolved,
             *(os.environ.get(env, "") for env, _ in KEYS.values()),
             *(os.environ.get(name, "") for name in SECRET_VARIABLES)}
    found = sorted((s.strip() for s in known if s and len(s.strip()) >= MIN_SECRET),
                   key=len, reverse=True)
    if len(text) <= REDACTED_CHARS:
        return _masked(text, found)
    half = REDACTED_CHARS // 2
    head = _masked(text[:half + _MARGIN], found)[:half]
    tail = _masked(text[-(half + _MARGIN):], found)[-half:]
    return f"{head}[... {len(text) - 2 * half:,} characters cut ...]{tail}"


def _masked(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    text = _USERINFO.sub(r"\1***@", text)
    text = _CREDENTIAL_PARAM.sub(r"\1***", text)
    return _AUTHORIZATION.sub(r"\1\2***", text)


class _Redacting:
    """A log record factory that masks secrets in every record as it is made (its message and
    its traceback), whichever library logs it and whichever handler writes it."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self.inner = inner

    def __call__(self, *args: object, **kwargs: object) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report
            return record
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(text)
        return record


_install_lock = threading.Lock()


def install_log_redaction() -> None:
    """Mask secrets in every log record of this process from now on (`redact`); idempotent."""
    with _install_lock:
        factory = logging.getLogRecordFactory()
        if not isinstance(factory, _Redacting):
            logging.setLogRecordFactory(_Redacting(factory))
