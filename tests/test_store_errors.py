"""A Milvus error that no retry can cure reaches the user as one StoreError line naming the call."""

from __future__ import annotations

import pytest

from situate.core.errors import StoreError
from situate.storage.milvus import MilvusStore


def test_an_error_milvus_raises_becomes_one_store_error(tmp_path):
    uri = str(tmp_path / "m.db")
    store = MilvusStore(uri)
    try:
        store.ensure_collection("c", 4, "fake")
        store.client.release_collection("c")  # searching a released collection is refused
        with pytest.raises(StoreError) as caught:
            store.search("c", "dense", "q", [0.1, 0.2, 0.3, 0.4], 5)
        message = str(caught.value)
        assert message.startswith(f"Milvus at {uri}: dense search in 'c' failed: ")
        assert "released" in message and "\n" not in message
    finally:
        store.close()
