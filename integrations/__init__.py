"""situate's search as the retrievers of application frameworks, each an optional extra that
delegates every query to `situate.api.Retriever` (ranked exactly as `situate evaluate` ranks):
`situate.integrations.langchain` (`pip install 'situate[langchain]'`) and
`situate.integrations.llamaindex` (`pip install 'situate[llamaindex]'`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

# What other libraries call these retrievers' keywords (langchain-milvus, LlamaIndex's
# MilvusVectorStore, pymilvus): a user coming from them is told the name here.
KNOWN_AS = {"milvus_uri": "uri", "connection_uri": "uri", "url": "uri", "uri_path": "uri",
            "collection_name": "collection", "top_k": "k", "similarity_top_k": "k",
            "search_kwargs": "k", "search_mode": "mode", "search_type": "mode"}


def refuse_unknown(owner: str, given: Iterable[str], accepted: Sequence[str]) -> None:
    """One line (a TypeError, Python's word for it) for the first keyword `owner` does not take,
    naming the one meant: a misspelt or borrowed keyword is otherwise ignored in silence, and the
    retriever opens the default store instead of the one asked for."""
    unknown = [name for name in given if name not in accepted]
    if not unknown:
        return
    name = unknown[0]
    meant = KNOWN_AS.get(name) or next(iter(difflib.get_close_matches(name, accepted, n=1)), None)
    use = f"use {meant}=" if meant in accepted else "no such option"
    raise TypeError(f"{owner} takes no keyword {name!r}: {use} (it takes "
                    f"{', '.join(accepted)})")
