"""A Milvus error that no retry can cure reaches the user as one StoreError line naming the call;
a collection the server released (as a restarted server does) is loaded by the search itself."""

from __future__ import annotations

import pytest

from situate.core.errors import StoreError
from situate.storage.milvus import MilvusStore


def test_an_error_milvus_raises_becomes_one_store_error(tmp_path):
    uri = str(tmp_path / "m.db")
    store = MilvusStore(uri)
    try:
        store.ensure_collection("c", 4, "fake")
        with pytest.raises(StoreError) as caught:  # no such collection: refused, not retried
            store.leg_search("gone", "bm25", "q", None, 5)
        message = str(caught.value)
        assert message.startswith(f"Milvus at {uri}: bm25 search in 'gone' failed: ")
        assert "does not exist" in message and "\n" not in message
    finally:
        store.close()


def test_a_search_loads_a_released_collection(tmp_path):
    from tests.store_contract import EMB, EMBEDDER, embedded

    store = MilvusStore(str(tmp_path / "m.db"))
    try:
        store.ensure_collection("c", EMB.dim, EMBEDDER)
        store.write("c", [embedded("d", ["alpha beta", "gamma delta"])])
        for leg in ("dense", "bm25"):
            store.client.release_collection("c")  # a restarted server's state
            vector = EMB.encode_queries(["alpha"])[0]
            hits = store.leg_search("c", leg, "alpha", vector, 5)
            assert [h.doc_id for h in hits][:1] == ["d"]
            store.client.release_collection("c")
            assert store.leg_scores("c", leg, "alpha", vector, [hits[0].id])
    finally:
        store.close()


def test_every_error_pickles_as_what_it_is_and_the_command_says_it_alike():
    """A server process of `situate api --processes N` hands its start's error to the command:
    each kind comes back with its message and what it carries, whatever its constructor takes."""
    import pickle

    from situate.cli.messages import user_message
    from situate.core.errors import (
        CollectionNotFound,
        CollectionNotServed,
        EmbedderMismatch,
        InputError,
        StoreUnreachable,
    )

    for error in (CollectionNotFound("c", "http://situate:pw@127.0.0.1:1", " (it holds 'd')"),
                  EmbedderMismatch("c", "m.db", "minilm", "e5", 384, 768),
                  EmbedderMismatch("c", "m.db", "minilm", "e5"),
                  StoreUnreachable("http://127.0.0.1:1", "a search", 2, 3.0, "refused",
                                   wrote=True),
                  CollectionNotServed("a", "b"), InputError("plain"), StoreError("plain")):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and back.args == error.args
        assert back.__dict__ == error.__dict__ and "pw" not in str(back)
        assert user_message(back) == user_message(error)
