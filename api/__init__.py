"""situate's search, from an application: `Retriever`, the warm search path `situate evaluate`
measures, and the types it answers with. The HTTP and MCP servers (`situate.api.http`,
`situate.api.mcp`) are faces over it, imported only when served.

    from situate.api import Retriever

    with Retriever("codebase") as retriever:
        for hit in retriever.search("how is the retry delay computed?", k=5):
            print(hit.score, hit.doc_id, hit.index, hit.text[:80])
"""

from situate.api.config import RetrieverConfig
from situate.api.retriever import CollectionDescription, Retriever
from situate.core.errors import InputError, SituateError, StoreError, StoreUnreachable
from situate.core.records import Hit

__all__ = ["CollectionDescription", "Hit", "InputError", "Retriever", "RetrieverConfig",
           "SituateError", "StoreError", "StoreUnreachable"]
