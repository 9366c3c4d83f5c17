"""A connection to Milvus and how each call over it is made: Milvus Lite (a local path), a Milvus
Standalone/Distributed server or Zilliz Cloud (an http(s) URI and an optional token), all through
`MilvusClient`.

Against a server, every call is retried under situate's one retry policy while the server is
down or restarting (connection refused or reset, gRPC UNAVAILABLE / DEADLINE_EXCEEDED, "not
ready"), never on a refused request; pymilvus reconnects by itself once the server answers again.
When the budget runs out the call fails with one StoreError line saying what to do
(`situate.storage.faults` says which errors are worth another attempt).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from situate.core.errors import InputError, StoreError, StoreUnreachable
from situate.core.retry import RetryPolicy
from situate.core.secrets import redact, remember
from situate.core.uri import credentials, is_lite, shown, uri_problem
from situate.storage.faults import (
    IN_CALL,
    handled,
    install_quiet_filter,
    is_transient,
    reason,
    translate,
)

# How long a call waits for a server that is down or restarting: 8 attempts, waits doubling from
# 0.5 s up to 10 s, with jitter (about 18-36 s of waiting in all). Constructor arguments override.
RETRY_ATTEMPTS = 8
RETRY_BASE = 0.5
RETRY_CAP = 10.0
# gRPC's own server default refuses pings from an idle client more often than every 5 minutes
# (two strikes, then GOAWAY "too_many_pings", which gRPC prints to stderr as an E-line), and so do
# Milvus Lite's embedded server and `milvus-lite server`; pymilvus pings every 10 s, idle or not.
# Ping only while a call is in flight, at most every 5 minutes: a long-lived client (`situate api`,
# `situate mcp`, a deployment's worker) then stays quiet between queries. A connection that died
# meanwhile fails its next call, which the store's retries reconnect.
_QUIET_KEEPALIVE = {"grpc.keepalive_permit_without_calls": False,
                    "grpc.keepalive_time_ms": 300_000}
# gRPC backs off reconnecting to a refused address up to 120 s, so a server that came back would
# wait that long for the client to try again; keep its reconnect backoff short instead,
# and ping as quietly as Milvus Lite's files.
_SERVER_GRPC_OPTIONS = {"grpc.initial_reconnect_backoff_ms": 250,
                        "grpc.min_reconnect_backoff_ms": 250,
                        "grpc.max_reconnect_backoff_ms": 2_000,
                        **_QUIET_KEEPALIVE}

T = TypeVar("T")
log = logging.getLogger("situate.storage.milvus")


def import_client_library() -> None:
    """Import pymilvus now, in this thread. Its first import configures logging
    (`logging.config.dictConfig` in `pymilvus.settings`), which flushes and closes every handler
    while it holds the logging module's lock; during a Prefect flow run one of those handlers is
    Prefect's API log handler, whose flush waits for Prefect's log worker, and a worker that logs
    meanwhile waits for that lock: neither moves again. The flows that open stores
    (`situate.flows.ingest`, `situate.flows.evaluate`) call this when imported, before any run
    of their process starts, so that no store opened during a run (in a run's thread, or in
    `Resources.open_in_background`'s) imports it first."""
    import pymilvus  # noqa: F401


def check_uri(uri: str) -> str:
    """`uri` if pymilvus can open it, else one InputError saying only why not."""
    problem = uri_problem(uri)
    if problem is not None:
        raise InputError(f"Milvus URI {shown(uri.strip())!r} {problem}")
    return uri


class Connection:
    """One MilvusClient, and every call made over it (`_call`)."""

    def __init__(self, uri: str, token: str = "", db_name: str = "", *,
                 retry_attempts: int | None = None, retry_base: float | None = None,
                 retry_cap: float | None = None, stop: threading.Event | None = None) -> None:
        """Open a client on URI (a Milvus Lite path, or a server's http(s) URI).

        Against a server, each call is retried while the server is down: `retry_attempts` in
        all, waits doubling from `retry_base` seconds up to `retry_cap` (defaults: the module's
        RETRY_* constants); `stop` ends the waits at once when a run is stopped.
        """
        from pymilvus import MilvusClient

        install_quiet_filter()
        check_uri(uri)
        remember(*credentials(uri))
        self.uri = shown(uri)  # as messages and logs show it: without user information
        self._uri = uri
        self.retry = RetryPolicy(RETRY_ATTEMPTS if retry_attempts is None else retry_attempts,
                                 RETRY_BASE if retry_base is None else retry_base,
                                 RETRY_CAP if retry_cap is None else retry_cap)
        self.stop = stop
        if is_lite(uri):
            Path(uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {"uri": uri}
        kwargs["grpc_options"] = dict(_QUIET_KEEPALIVE if is_lite(uri) else _SERVER_GRPC_OPTIONS)
        if token:
            kwargs["token"] = token
        if db_name:
            kwargs["db_name"] = db_name
        try:
            self.client = self._call("connecting", lambda: MilvusClient(**kwargs),
                                     as_store_error=False)
            self._closed = False
            if is_lite(uri):
                _lite_files.opened(uri)
        except StoreError:
            raise
        except Exception as e:  # pymilvus raises several unrelated types on connect
            hint = (" (Milvus Lite allows one process per file: stop the other process or run "
                    "`milvus-lite server` and use its http:// URI)" if is_lite(uri) else
                    " (is the server running and the token right?)")
            raise StoreError(f"cannot open Milvus at {self.uri}: "
                             f"{redact(str(getattr(e, 'message', e)))}{hint}") from None

    def __reduce__(self) -> Any:
        # A client's channel does not travel: another process opens the store from its spec.
        raise StoreError(f"the store at {self.uri} is not sent to another process: send its "
                         "spec and open it there again (situate.storage.reopen)")

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- calls -----------------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T], *, write: bool = False,
              as_store_error: bool = True) -> T:
        """`fn()`, one call to Milvus: against a server, retried under the policy while the
        server is down or restarting. Every failure leaves as one StoreError line (`as_store_error`
        False: errors other than an unreachable server are raised as they are)."""
        start = time.monotonic()
        attempts = 0
        try:
            if self.is_local:
                with handled():
                    return fn()
            retrying = self.retry.retrying(is_transient, log=log, what=f"Milvus at {self.uri}, {what}",
                                           reason=reason, stop=self.stop)
            for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    with handled():
                        return fn()
        except StoreError:
            raise
        except Exception as e:
            if not self.is_local and is_transient(e):
                raise StoreUnreachable(
                    self.uri, what, attempts, time.monotonic() - start, reason(e),
                    stopped=self.stop is not None and self.stop.is_set(),
                    wrote=write or IN_CALL.writing > 0) from None
            if not as_store_error:
                raise
            raise translate(e, what, self.uri) from None
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    @property
    def is_local(self) -> bool:
        """Milvus Lite (a file path) rather than a server URI."""
        return is_lite(self.uri)

    def close(self) -> None:
        """Close the client; the last one of a process on a Milvus Lite file also stops the
        file's in-process server, so that another process can open the file at once (pymilvus's
        own `close` leaves it running, holding the file's lock, until the process ends)."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        try:
            self.client.close()
        except Exception:  # closing a dead connection is not worth an error
            pass
        if self.is_local:
            _lite_files.release(self._uri)


class _LiteFiles:
    """How many open connections of this process use each Milvus Lite file: pymilvus runs one
    in-process server per file and shares it among them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def opened(self, uri: str) -> None:
        key = os.path.abspath(uri)  # as milvus-lite keys its servers
        with self._lock:
            self._open[key] = self._open.get(key, 0) + 1

    def release(self, uri: str) -> None:
        key = os.path.abspath(uri)
        with self._lock:
            left = self._open.get(key, 0) - 1
            if left > 0:
                self._open[key] = left
                return
            self._open.pop(key, None)
            try:
                from milvus_lite.server_manager import server_manager_instance
            except ImportError:  # pragma: no cover - milvus-lite is a dependency
                return
            # Under the lock: a connection opening the file meanwhile waits for the stop.
            server_manager_instance.release_server(uri)  # keyed as pymilvus opened it


_lite_files = _LiteFiles()


C = TypeVar("C", bound=Connection)


def vectors_decoded(result: T) -> T:
    """`result`, what pymilvus's `query` or `get` returns with `strict_float32`, with its float
    vectors decoded now as one copy of their bytes each: pymilvus (3.0) builds each vector field's
    float32 array with `np.array` over the protobuf's repeated floats, one Python float at a time
    (0.4 s for 12,000 rows of 384 floats; 26 ms this way), the most of the CPU a build of the
    lexical index from the rows spent reading them. A result of another shape, or vectors encoded
    otherwise than packed, is left to pymilvus."""
    lazy = getattr(result, "_lazy_field_data", None)
    arrays = getattr(result, "_float_vector_np_array", None)
    if (lazy is None or not isinstance(arrays, dict) or not getattr(result, "_strict_float32", False)
            or getattr(result, "_has_materialized_float_vector", True)):
        return result
    from pymilvus import DataType

    decoded = {}
    for field in lazy:
        if field.type == DataType.FLOAT_VECTOR:
            values = _packed_floats(field.vectors.float_vector)
            if values is None:
                return result
            decoded[field.field_name] = values
    arrays.update(decoded)
    result._has_materialized_float_vector = True  # type: ignore[attr-defined]
    return result


def _packed_floats(message: Any) -> Any:
    """The floats of a protobuf `FloatArray` (its field 1, packed: tag 0x0a, the length as a
    varint, then little-endian float32s) as a read-only float32 array over its serialized bytes;
    None if it is not encoded so."""
    import numpy as np

    count = len(message.data)
    raw = message.SerializeToString()
    if not count:
        return np.zeros(0, dtype=np.float32)
    body = 4 * count
    header = 1 + max(1, (body.bit_length() + 6) // 7)  # the tag, then the body's length
    if raw[:1] != b"\x0a" or len(raw) != header + body:
        return None
    return np.frombuffer(raw, dtype="<f4", offset=header, count=count).astype(np.float32, copy=False)
