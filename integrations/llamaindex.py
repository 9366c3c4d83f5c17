"""situate's search as a LlamaIndex retriever (`pip install 'situate[llamaindex]'`).

    from situate.integrations.llamaindex import SituateRetriever

    retriever = SituateRetriever(collection="codebase", k=5)
    nodes = retriever.retrieve("how is the retry delay computed?")

Each `NodeWithScore` holds a `TextNode` (id: the chunk's id; text: the chunk's text) and the
hit's score; the node's metadata is the same as the LangChain retriever's (the document's
metadata, then `id`, `doc_id`, `index`, `context`, `score`). Every query is
`situate.api.Retriever.search`: the adapter only translates.
"""

from __future__ import annotations

import inspect
from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from situate.api.config import RetrieverConfig
from situate.api.retriever import Retriever, hit_metadata
from situate.core.records import Hit
from situate.integrations import refuse_unknown


class SituateRetriever(BaseRetriever):
    """A LlamaIndex `BaseRetriever` over a situate collection: `k` hits in `mode` per query.

    Opens its own warm `Retriever` (the store at `uri`, default SITUATE_MILVUS_URI, and the
    collection's embedder; or as `config`, a `RetrieverConfig`, says), or shares the one given
    as `retriever`. `close()` lets the store and
    model go."""

    def __init__(self, collection: str = "", uri: str | None = None, k: int = 10,
                 mode: str = "hybrid", retriever: Retriever | None = None,
                 config: RetrieverConfig | None = None, **kwargs: Any) -> None:
        refuse_unknown("SituateRetriever (LlamaIndex)", kwargs, _TAKES)
        if config is not None:
            collection, uri, mode = config.collection, config.uri, config.mode
        self.collection, self.uri, self.k, self.mode = collection, uri, k, mode
        self._shared = retriever is not None
        self._situate = retriever or (Retriever.open(config) if config is not None else
                                      Retriever(collection, uri, mode=mode))
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [_node(h) for h in self._situate.search(query_bundle.query_str, self.k, self.mode)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = await self._situate.asearch(query_bundle.query_str, self.k, self.mode)
        return [_node(h) for h in hits]

    def close(self) -> None:
        """Close the Retriever this one opened (a shared one is its owner's to close)."""
        if not self._shared:
            self._situate.close()


# Its own keywords, then LlamaIndex's BaseRetriever's (callback_manager, verbose, ...).
_TAKES = ["collection", "uri", "k", "mode", "retriever", "config",
          *[p for p in inspect.signature(BaseRetriever.__init__).parameters if p != "self"]]


def _node(hit: Hit) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=hit.id, text=hit.text, metadata=hit_metadata(hit)),
                         score=hit.score)
