"""One `RetrieverConfig`: the Retriever's settings, checked once when made, which the Python
constructor, `Retriever.open`, the servers and the CLI's search options all take."""

from __future__ import annotations

import uuid

import pytest

from situate.api import InputError, Retriever, RetrieverConfig
from situate.storage import open_store
from situate.testing.store import EMB, EMBEDDER, ROWS, C, corpus


@pytest.fixture
def uri():
    uri = f"memory://config-{uuid.uuid4().hex}"
    store = open_store(uri)
    store.ensure_collection(C, EMB.dim, EMBEDDER)
    store.write(C, corpus())
    return uri


def test_a_config_opens_the_retriever_the_keywords_open(uri):
    config = RetrieverConfig(collection=C, uri=uri, mode="bm25", embedder="hash")
    with Retriever.open(config) as opened, Retriever(C, uri, mode="bm25", embedder="hash") as r:
        assert opened.config == r.config == config and opened.describe().rows == ROWS
        query = "how is a job deleted after success"
        assert [h.id for h in opened.search(query, 3)] == [h.id for h in r.search(query, 3)]


def test_an_empty_setting_is_the_settings_value(monkeypatch, uri):
    from situate.core.settings import get_settings

    monkeypatch.setenv("SITUATE_FUSION", "rrf")
    monkeypatch.setenv("SITUATE_MILVUS_URI", uri)
    get_settings.cache_clear()
    try:
        config = RetrieverConfig.checked(collection=C, fusion=None)
        assert (config.fusion, config.uri, config.mode) == ("rrf", uri, "hybrid")
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(("values", "message"), [
    ({"mode": "fuzzy"}, "unknown retrieval mode 'fuzzy'"),
    ({"mode": 3}, "retrieval mode must be text, not int"),
    ({"collection": 5}, "collection must be a name, not int"),
    ({"collection": "bad-name!"}, "invalid collection name 'bad-name!'"),
    ({"workers": 0}, "workers=0 is not a number of model processes"),
    ({"fusion": "max"}, "SITUATE_FUSION='max' is not a fusion"),
    ({"uri": "ftp://host"}, "store URI 'ftp://host' has an unknown scheme 'ftp'"),
    ({"uri": "data/m.db.bak"}, "store URI 'data/m.db.bak' is neither a Milvus Lite file name"),
])
def test_each_setting_is_checked_once_when_the_config_is_made(values, message):
    """The constructor and `Retriever.open` are refused alike: the config refuses first."""
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RetrieverConfig.checked(**{"collection": C, "uri": "memory://x", **values})
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Retriever(**{"collection": C, "uri": "memory://x", **values})


def test_the_search_commands_options_are_the_configs_fields():
    """`situate search`, `api` and `mcp` take every field of the config that has a flag, and give
    the config itself to the Retriever (with what the face sets: its model process)."""
    from situate.api.config import SET_BY_FACE
    from situate.cli.options import ApiOptions, McpOptions, SearchOptions
    from situate.pipeline.options import fields

    flagged = {name for name, _, flag, _ in fields(RetrieverConfig) if flag is not None}
    assert flagged == set(RetrieverConfig.model_fields) - SET_BY_FACE
    for model in (SearchOptions, ApiOptions, McpOptions):
        assert {name for name, _, flag, _ in fields(model) if flag is not None} >= flagged
    options = SearchOptions.build(query="walrus", collection=C, uri="memory://x", mode="bm25",
                                  embedder="hash", fusion="rrf")
    config = options.config(model_process=True)
    assert config == RetrieverConfig(collection=C, uri="memory://x", mode="bm25", embedder="hash",
                                     fusion="rrf", model_process=True)
    served = ApiOptions.build(collection=C, uri="memory://x", workers=3).config()
    assert (served.workers, served.collection, served.model_process) == (3, C, False)


def test_the_constructors_keywords_are_the_configs_fields():
    """`Retriever(collection, uri, **keywords)` takes every field of the config (and the token,
    a secret the config never holds), its signature made from the fields: a field added to the
    config is a keyword, with its type and default; an unknown keyword is Python's TypeError."""
    import inspect

    signature = inspect.signature(Retriever.__init__)
    keywords = set(signature.parameters) - {"self", "token"}
    assert keywords == set(RetrieverConfig.model_fields)
    assert signature.parameters["workers"].default == 1
    assert signature.parameters["mode"].default == "hybrid"
    assert signature.parameters["retry_attempts"].annotation == int | None
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Retriever(C, "memory://x", nope=1)
