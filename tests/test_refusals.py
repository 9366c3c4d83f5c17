"""One wording per refusal: a collection that is not there names the ones that are (the closest,
or all of them when there are few), on a Milvus Lite file and in memory alike."""

from __future__ import annotations

import pytest

from situate.core.errors import CollectionNotFound, suggestion


def test_the_closest_names_then_the_few_then_nothing():
    assert suggestion("minee", ["mine", "codebase"]) == " (did you mean 'mine'?)"
    assert suggestion("zzz", ["mine", "codebase"]) == " (it holds 'codebase', 'mine')"
    assert suggestion("zzz", []) == " (it holds no collection)"
    assert suggestion("zzz", [f"c{i}" for i in range(20)]) == ""  # too many to list


@pytest.mark.parametrize("kind", ["memory", "lite"])
def test_an_unknown_collection_suggests_the_one_that_exists(kind, tmp_path):
    from situate.storage import open_store

    uri = "memory://refusals" if kind == "memory" else str(tmp_path / "m.db")
    store = open_store(uri)
    try:
        store.ensure_collection("mine", 8, "hash")
        with pytest.raises(CollectionNotFound) as missing:
            store.require("minee")
        line = str(missing.value)
        assert "collection 'minee' not found at" in line and "(did you mean 'mine'?)" in line
        assert "\n" not in line
        with pytest.raises(CollectionNotFound, match=r"\(it holds 'mine'\)"):
            store.require("other")
    finally:
        store.close()
