"""situate's search as a LangChain retriever (`pip install 'situate[langchain]'`).

    from situate.integrations.langchain import SituateRetriever

    retriever = SituateRetriever(collection="codebase", k=5)
    docs = retriever.invoke("how is the retry delay computed?")

Each `Document`'s `page_content` is the chunk's text; its metadata holds the document's own
metadata and then `id`, `doc_id`, `index`, `context` and `score`. Every query is
`situate.api.Retriever.search`: the adapter only translates.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from situate.api.config import RetrieverConfig
from situate.api.request import SearchRequest
from situate.api.retriever import Retriever, hit_metadata
from situate.core.records import Hit
from situate.integrations import refuse_unknown


class SituateRetriever(BaseRetriever):
    """A LangChain `BaseRetriever` over a situate collection: `k` hits in `mode` per query.

    Opens its own warm `Retriever` (the store at `uri`, default SITUATE_MILVUS_URI, and the
    collection's embedder; or as `config`, a `RetrieverConfig`, says), or shares the one given
    as `retriever`. `invoke(query, k=..,
    mode=..)` overrides `k` and `mode` for one call. `close()` lets the store and model go."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    collection: str = Field(description="the situate collection searched")
    uri: str | None = Field(None, description="Milvus Lite file or server URI")
    k: int = Field(10, description="hits per query, 1 to 1000")
    mode: str = Field("hybrid", description="dense | bm25 | hybrid | rerank")
    retriever: Retriever | None = Field(None, exclude=True,
                                        description="a Retriever to share (opened if None)")
    config: RetrieverConfig | None = Field(None, exclude=True, description="the Retriever's "
                                           "whole configuration (its collection, uri and mode "
                                           "are this retriever's)")
    _situate: Retriever = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _known(cls, values: Any) -> Any:
        """An unknown keyword (`milvus_uri=`) is refused, not ignored (LangChain's default)."""
        if isinstance(values, dict):
            own = [n for n in cls.model_fields if n not in BaseRetriever.model_fields]
            refuse_unknown("SituateRetriever (LangChain)", values,
                           [*own, *BaseRetriever.model_fields])
            config = values.get("config")
            if isinstance(config, RetrieverConfig):
                values = {"collection": config.collection, "uri": config.uri,
                          "mode": config.mode, **values}
        return values

    @field_validator("k", mode="before")
    @classmethod
    def _k(cls, value: Any) -> Any:
        """Checked as every face checks it (`true` or `"5"` is not a number of hits)."""
        SearchRequest.of({"query": "k", "k": value})
        return value

    def model_post_init(self, context: Any) -> None:
        self._situate = self.retriever or (Retriever.open(self.config) if self.config else
                                           Retriever(self.collection, self.uri, mode=self.mode))

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        hits = self._situate.search(query, kwargs.get("k", self.k), kwargs.get("mode", self.mode))
        return [_document(h) for h in hits]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        hits = await self._situate.asearch(query, kwargs.get("k", self.k),
                                           kwargs.get("mode", self.mode))
        return [_document(h) for h in hits]

    def close(self) -> None:
        """Close the Retriever this one opened (a shared one is its owner's to close)."""
        if self.retriever is None:
            self._situate.close()


def _document(hit: Hit) -> Document:
    return Document(id=hit.id, page_content=hit.text, metadata=hit_metadata(hit))
