"""The LangChain and LlamaIndex retrievers refuse a keyword they do not take, with one line naming
the one meant, before they open anything: LangChain's models ignore unknown fields by default, so
`milvus_uri=` (langchain-milvus's name) was dropped in silence and the default store opened."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["langchain", "llamaindex"])
def make(request):
    if request.param == "langchain":
        from situate.integrations.langchain import SituateRetriever

        return lambda **kw: SituateRetriever(collection="mine", **kw)
    from situate.integrations.llamaindex import SituateRetriever

    return lambda **kw: SituateRetriever("mine", **kw)


@pytest.mark.parametrize(("given", "meant"), [
    ("milvus_uri", "uri"), ("collection_name", "collection"), ("top_k", "k"),
    ("similarity_top_k", "k"), ("mdoe", "mode")])
def test_an_unknown_keyword_is_one_line_naming_the_right_one(make, tmp_path, monkeypatch, given,
                                                              meant):
    monkeypatch.chdir(tmp_path)  # nothing may be opened: no data/milvus.db appears here
    with pytest.raises(TypeError) as refused:
        make(**{given: str(tmp_path / "m.db") if meant == "uri" else 5})
    line = str(refused.value)
    assert f"takes no keyword {given!r}: use {meant}=" in line and "\n" not in line, line
    assert not (tmp_path / "data").exists()


def test_a_keyword_unlike_any_says_what_is_taken(make):
    with pytest.raises(TypeError, match=r"'colour': no such option \(it takes collection, uri, k"):
        make(colour="red")
