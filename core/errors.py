"""The project's error tree. Every message says what went wrong, where, and what to do.

The store's errors carry what they are about (collection, URI, embedders) as attributes and say
what to do in plain words; the CLI words the same advice as commands and flags
(`situate.cli.messages`), so no layer below it names a flag.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from situate.core.uri import is_missing_lite_file, shown


class SituateError(Exception):
    """Base of all errors a user can act on; the CLI prints the message alone and exits 2.

    An error pickles as what it is (its message and what it carries), whatever its constructor
    takes: a server process of `situate api --processes N` hands the one that stopped its start
    to the command, which says it as a lone process would."""

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


def _rebuilt(kind: type[SituateError], args: tuple[object, ...],
             state: dict[str, object]) -> SituateError:
    """A pickled error as it was, without calling its constructor again."""
    error = kind.__new__(kind)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class InputError(SituateError):
    """A corpus, evaluation set or option that cannot be used as given."""


class ProviderError(SituateError):
    """A contextualizer, embedder or reranker that is misconfigured or refused the request."""


class StoreError(SituateError):
    """Milvus could not be reached or refused an operation."""


class CollectionNotFound(StoreError, InputError):
    """A read needs a collection that is not there (`detail`: why, e.g. no Lite file at all): the
    store's answer, and a name the caller gave that does not exist (an InputError to an app)."""

    def __init__(self, collection: str, uri: str, detail: str = "") -> None:
        self.collection, self.uri, self.detail = collection, shown(uri), detail
        super().__init__(f"collection {collection!r} not found at {self.uri}{detail}: ingest a corpus "
                         "into it first")

    @classmethod
    def unless_lite_file(cls, collection: str, uri: str) -> None:
        """Raised for a Milvus Lite file that does not exist: it holds no collection, and opening
        it (to ask) would create it."""
        if is_missing_lite_file(uri):
            raise cls(collection, uri, " (no Milvus Lite file there)")


def suggestion(name: str, others: Iterable[str]) -> str:
    """What a store holds instead of `name`, for a CollectionNotFound's detail: the closest names
    (`minee`: did you mean 'mine'?), else every name when there are few, else nothing."""
    others = sorted(set(others) - {name})
    close = difflib.get_close_matches(name, others, n=3)
    if close:
        return f" (did you mean {' or '.join(repr(c) for c in close)}?)"
    if not others:
        return " (it holds no collection)"
    if len(others) <= FEW:
        return f" (it holds {', '.join(repr(c) for c in others)})"
    return ""


# Up to this many collections are listed when none is close to the name asked for.
FEW = 8


class CollectionNotServed(InputError):
    """A search for another collection than the one a retriever (a server) serves."""

    def __init__(self, asked: str, served: str) -> None:
        self.asked, self.served = asked, served
        super().__init__(f"collection {asked!r} is not served here: this one serves {served!r}; "
                         "leave collection out, or open (serve) that collection")


class EmbedderMismatch(StoreError):
    """A collection holds vectors of another embedder (or dimension) than the one asked for."""

    def __init__(self, collection: str, uri: str, stored: str, wanted: str,
                 stored_dim: int | None = None, wanted_dim: int | None = None) -> None:
        self.collection, self.uri, self.stored, self.wanted = collection, shown(uri), stored, wanted
        self.stored_dim, self.wanted_dim = stored_dim, wanted_dim
        super().__init__(f"{self.holds()}: use another collection or the embedder it was built with")

    def holds(self) -> str:
        if self.wanted_dim is not None:
            return (f"collection {self.collection!r} at {self.uri} holds {self.stored_dim}-d vectors "
                    f"from {self.stored or 'another embedder'}, not {self.wanted_dim}-d from "
                    f"{self.wanted}")
        return (f"collection {self.collection!r} at {self.uri} holds vectors from {self.stored}, "
                f"not {self.wanted}")


class StoreUnreachable(StoreError):
    """A Milvus server did not answer within the retry budget."""

    def __init__(self, uri: str, what: str, attempts: int, seconds: float, cause: str,
                 stopped: bool = False, wrote: bool = False) -> None:
        self.uri, self.what, self.wrote = shown(uri), what, wrote
        self.attempts, self.seconds, self.cause, self.stopped = attempts, seconds, cause, stopped
        super().__init__(self.says("start it"))

    def says(self, start: str) -> str:
        """The message with `start` as its advice ("start it", or the CLI's words)."""
        plural = "s" if self.attempts != 1 else ""
        tail = "; what was written is kept and the rest will be written then" if self.wrote else ""
        return (f"Milvus at {self.uri} did not answer ({self.what}) after {self.attempts} "
                f"attempt{plural} over {self.seconds:.0f} s{' (stopped)' if self.stopped else ''} "
                f"({self.cause}): {start} and run the same command again{tail}")
