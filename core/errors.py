"""The project's error tree. Every message says what went wrong, where, and what to do."""


class SituateError(Exception):
    """Base of all errors a user can act on; the CLI prints the message alone and exits 2."""


class InputError(SituateError):
    """A corpus, evaluation set or option that cannot be used as given."""


class ProviderError(SituateError):
    """A contextualizer, embedder or reranker that is misconfigured or refused the request."""


class StoreError(SituateError):
    """Milvus could not be reached or refused an operation."""
