"""How the Milvus store meets a failing server: which errors another attempt may cure, the error
in a few words, and keeping pymilvus's own error logs out of the way of the one line situate says.

`MilvusStore` marks its calls to pymilvus with `handled()` (and its writes with `writing()`);
pymilvus's log records made inside them are dropped, as the error is retried and logged once, or
becomes the StoreError the user sees.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from situate.core.errors import StoreError
from situate.core.secrets import redact
from situate.core.uri import shown


def translate(e: Exception, what: str, uri: str) -> StoreError:
    message = getattr(e, "message", None) or str(e)
    return StoreError(f"Milvus at {shown(uri)}: {what} failed: {redact(message)}")


def is_transient(error: BaseException) -> bool:
    """An error another attempt may cure: the server is down, restarting, not ready or throttling.

    With the server down pymilvus raises `MilvusException(code=2, "Fail connecting to server on
    HOST:PORT ...")` (its reconnect failed); a call cut off by the server dying raises gRPC
    UNAVAILABLE; a Milvus that is starting answers "service not ready" or marks the status
    retriable. Schema and input errors are never retried.
    """
    import grpc
    from pymilvus.exceptions import MilvusException
    from pymilvus.grpc_gen import common_pb2

    transient_grpc = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    if isinstance(error, StoreError):
        return False
    if isinstance(error, MilvusException):
        if error.is_input_error:
            return False
        code = error.code
        if isinstance(code, grpc.StatusCode):
            return code in transient_grpc
        message = str(error.message).lower()
        return (error.retriable or code == _CONNECT_FAILED
                or error.compatible_code in (common_pb2.NotReadyServe,
                                             common_pb2.NotReadyCoordActivating,
                                             common_pb2.RateLimit)
                or "server unavailable" in message or "not ready" in message)
    if isinstance(error, grpc.RpcError) and callable(getattr(error, "code", None)):
        return error.code() in transient_grpc
    return isinstance(error, ConnectionError | TimeoutError)


_CONNECT_FAILED = 2  # pymilvus Status.CONNECT_FAILED; Milvus's own code 2 is "service unavailable"
_NOT_LOADED = 101  # Milvus's CollectionNotLoaded, as Milvus Lite and Milvus servers answer it


def is_not_loaded(error: BaseException) -> bool:
    """A read refused because the collection is released (a restarted server's state)."""
    from pymilvus.exceptions import MilvusException

    return isinstance(error, MilvusException) and error.code == _NOT_LOADED


def reason(error: BaseException | None) -> str:
    """The error in a few words, for the retry log and the final message."""
    if error is None:
        return "no answer"
    details = getattr(error, "details", None)
    code = getattr(error, "code", None)
    if callable(details) and callable(code):  # a gRPC error
        return redact(f"{code().name}: {details()}")
    message = str(getattr(error, "message", "") or error).splitlines()[0]
    return redact(message[:200])


class _InCall(threading.local):
    depth = 0  # inside a MilvusStore call to pymilvus
    writing = 0  # inside a MilvusStore write


IN_CALL = _InCall()


class _QuietWhileHandled(logging.Filter):
    """pymilvus logs every failed call at ERROR with its traceback (and every failed reconnect at
    WARNING with one) before raising it. Inside a MilvusStore call the error is handled here: it
    is retried and logged once, or becomes the StoreError the user sees, so pymilvus's copy is
    dropped; pymilvus's logs from anywhere else pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return IN_CALL.depth == 0


_QUIET = _QuietWhileHandled()


def install_quiet_filter() -> None:
    """On every pymilvus logger (a logger's own filters see the records it creates)."""
    names = [n for n in list(logging.Logger.manager.loggerDict)
             if n == "pymilvus" or n.startswith("pymilvus.")]
    # Milvus Lite logs a file it cannot open (held by another process) with two tracebacks
    # before pymilvus raises; the one StoreError line says it.
    names.append("milvus_lite.server_manager")
    for name in names:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


@contextmanager
def handled() -> Iterator[None]:
    IN_CALL.depth += 1
    try:
        yield
    finally:
        IN_CALL.depth -= 1


@contextmanager
def writing() -> Iterator[None]:
    IN_CALL.writing += 1
    try:
        yield
    finally:
        IN_CALL.writing -= 1
