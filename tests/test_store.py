"""The store on Milvus Lite: the ChunkStore contract, and what is particular to a local file (it
is reopened with the same rows) and to the Milvus schema (the rows `document_rows` builds)."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from situate.storage.milvus import MilvusStore
from situate.storage.rows import (
    _IDENTIFIER,
    MAX_CONTEXT,
    MAX_TEXT,
    compound_identifiers,
    document_rows,
    lexical_text,
)
from tests.store_contract import EMB, EMBEDDER, ROWS, C, MilvusContract, corpus, embedded, stored


class TestMilvusLite(MilvusContract):
    @pytest.fixture
    def store(self, tmp_path):
        s = MilvusStore(str(tmp_path / "m.db"))
        yield s
        s.close()


def test_reopening_the_file_reads_the_same_rows(tmp_path):
    s = MilvusStore(str(tmp_path / "m.db"))
    s.ensure_collection(C, EMB.dim, EMBEDDER)
    s.write(C, corpus())
    rows = stored(s)
    s.close()
    again = MilvusStore(str(tmp_path / "m.db"))
    assert again.count(C) == ROWS and stored(again) == rows
    assert again.leg_search(C, "bm25", "jitter", None, 1)[0].doc_id == "c.rs"
    again.close()


def test_its_spec_reopens_it_with_its_settings_and_never_its_token(tmp_path):
    """What goes to a Dask worker instead of the store: the URI, the retry budget and the
    lexical index's directory; the token stays in this process (the worker reads its own), and
    the store itself does not pickle (a MilvusClient's channel cannot travel)."""
    import pickle

    from situate.core.errors import InputError, StoreError
    from situate.core.protocols import StoreSpec
    from situate.storage import reopen

    secret = "tok-5ecret-never-sent"
    s = MilvusStore(str(tmp_path / "m.db"), secret, retry_attempts=3, cache_dir=str(tmp_path / "c"))
    try:
        assert s.spec == StoreSpec(str(tmp_path / "m.db"), 3, str(tmp_path / "c"))
        assert secret.encode() not in pickle.dumps(s.spec) and secret not in repr(s.spec)
        with pytest.raises(StoreError, match="not sent to another process: send its spec"):
            pickle.dumps(s)
        again = reopen(s.spec)
        assert (again.retry.max_attempts, again.cache_dir) == (3, str(tmp_path / "c"))
        again.close()
    finally:
        s.close()
    with pytest.raises(InputError, match="carries a user name and password") as refused:
        StoreSpec("http://root:pa55word@127.0.0.1:19530")
    assert "pa55word" not in str(refused.value) and "***@127.0.0.1" in str(refused.value)


def test_lexical_text_adds_the_parts_of_compound_identifiers():
    assert "diff executor" in lexical_text("DiffExecutor")
    assert "run target" in lexical_text("run_target")
    assert lexical_text("plain words") == "plain words"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZbY9_0 -.é\nÅxQ_"), max_size=60))
def test_compound_identifiers_are_the_pattern_s_matches_over_the_whole_text(text):
    # Tried on runs of identifier characters only, the pattern finds what it finds in the text.
    assert compound_identifiers(text) == _IDENTIFIER.findall(text)


def test_document_rows_are_the_schema_fields_cut_to_their_limits():
    doc = embedded("a.py", ["def run_target(x): pass", "é" * 20_000], context="ctx " + "é" * 5_000,
                   title="A module")
    rows = document_rows(doc)
    assert [r["id"] for r in rows] == [s.chunk.id for s in doc.situated]
    assert set(rows[0]) == {"id", "doc_id", "chunk_index", "text", "context", "doc_hash",
                            "chunk_hash", "metadata", "lexical", "dense"}
    first, second = rows
    assert first["metadata"] == {"k": "a.py", "title": "A module"}
    assert first["doc_hash"] == doc.fingerprint and first["dense"] == list(doc.vectors[0])
    assert first["lexical"] == lexical_text(doc.situated[0].indexed_text)
    assert "run target" in first["lexical"]
    # Cut in characters at 4 bytes each, so any UTF-8 text fits its field's byte limit.
    assert first["context"] == doc.situated[0].context[:MAX_CONTEXT // 4]
    assert second["text"] == "é" * 20_000  # never cut
    assert second["lexical"] == doc.situated[1].indexed_text[:MAX_TEXT // 4]


def test_each_leg_scores_the_candidates_it_did_not_return_and_hybrid_fuses_those_scores(tmp_path):
    from situate.core.fusion import cdbsf
    from situate.tasks.retrieval.search import hybrid

    s = MilvusStore(str(tmp_path / "m.db"))
    s.ensure_collection(C, EMB.dim, EMBEDDER)
    s.write(C, corpus())
    query, vector = "how is a job deleted after success", EMB._one("how is a job deleted after success")
    legs = {m: s.leg_search(C, m, query, vector, 10) for m in ("dense", "bm25")}
    every = [h.id for h in legs["dense"]]
    assert len(every) == ROWS and len(legs["bm25"]) == 2  # BM25 returns the chunks sharing "job"
    # a leg's own score of a chunk is the same whether it returned it or was asked for it alone
    for m in ("dense", "bm25"):
        assert s.leg_scores(C, m, query, vector, every) == pytest.approx(
            {**dict.fromkeys(every, 0.0), **{h.id: h.score for h in legs[m]}})
    assert s.leg_scores(C, "bm25", query, vector, []) == {}
    # hybrid: the three chunks BM25 did not return count with their BM25 of 0, not its lowest z
    missing = [i for i in every if i not in {h.id for h in legs["bm25"]}]
    pairs = [[(h.id, h.score) for h in legs[m]] for m in ("dense", "bm25")]
    exact = cdbsf(pairs, [{}, dict.fromkeys(missing, 0.0)])
    hits = hybrid(s, C, query, vector, 10, fusion="cdbsf")
    assert [(h.id, h.score) for h in hits] == [(i, pytest.approx(v)) for i, v in exact]
    assert dict(exact) != pytest.approx(dict(cdbsf(pairs)))
    s.close()


def test_lexical_text_is_the_same_in_every_process():
    """The BM25 field is cut to a length: the identifier parts must come in one order, not a set's
    order, which changes with the interpreter's hash seed."""
    import subprocess
    import sys

    code = ("from situate.storage.rows import lexical_text; "
            "print(lexical_text(' '.join(f'Name{i}Part run_target_{i} DiffExecutor{i}' "
            "for i in range(40))))")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)},
                              check=True).stdout for seed in (1, 2, 3)}
    assert len(outputs) == 1


def _released_behind_the_load(path: str, collection: str) -> list[str]:
    """What two first calls racing in Milvus Lite leave (`MilvusLite.get_collection` opens a
    collection object without a lock): the next load of `collection` loads one object, and the
    cache then holds a second, released one. Returns a list that names the collection once done."""
    from milvus_lite.engine.collection import Collection
    from milvus_lite.server_manager import server_manager_instance

    _, db, _ = server_manager_instance._servers[os.path.abspath(path)]
    name = db.resolve_collection_name(collection)
    first = db.get_collection(name)
    key = next(k for k, v in db._collections.items() if v is first)
    real = first.load
    planted: list[str] = []

    def load() -> None:
        real()
        if not planted:
            planted.append(name)
            db._collections[key] = Collection(first.name, first._data_dir, first._schema,
                                              database_properties=first._database_properties)

    first.load = load
    return planted


def test_a_load_left_released_behind_its_back_is_loaded_again_not_waited_on_forever(tmp_path):
    """pymilvus's wait after a load polls the loading progress with no end: a Lite collection
    object replaced by a released one during the load (the race above) made `situate evaluate`
    wait forever. The store reads the state back and loads again, then searches."""
    path = str(tmp_path / "m.db")
    s = MilvusStore(path)
    s.ensure_collection(C, EMB.dim, EMBEDDER)
    s.write(C, corpus())
    s.close()
    again = MilvusStore(path)
    again.client.release_collection(again.client.describe_collection(C)["collection_name"])
    planted = _released_behind_the_load(path, C)
    done = threading.Event()
    failed: list[BaseException] = []

    def load() -> None:
        try:
            again.load(C)
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)
        done.set()

    threading.Thread(target=load, daemon=True).start()
    assert done.wait(30), "the load waited on a collection that will never say it is loaded"
    assert not failed and planted
    assert again.leg_search(C, "bm25", "jitter", None, 1)[0].doc_id == "c.rs"
    again.close()


def _many(n: int, doc_id: str = "many.py") -> list[dict]:
    """`n` rows of one document in the collection's schema (`document_rows`)."""
    from situate.core.records import Chunk, Document, EmbeddedDocument, Situated
    from situate.storage.rows import document_rows

    chunks = tuple(Chunk(doc_id, i, f"row {i} of the read") for i in range(n))
    return document_rows(EmbeddedDocument(
        Document(doc_id, "t", chunks), f"fp{n}", tuple(Situated(c, "", "none") for c in chunks),
        EMB.encode_documents([c.text for c in chunks])))


def _iterator_ids(s: MilvusStore) -> list[str]:
    """The ids as Milvus's query iterator reads them: in primary-key order."""
    return [r["id"] for page in s._iterated(C, "reading", ["id"], "", 7, False) for r in page]


def test_rows_on_lite_read_slices_ahead_of_the_caller(tmp_path):
    """On Milvus Lite a read of every row is one query a slice of the primary keys, in order,
    SLICES_AHEAD slices asked for while the caller takes one (Lite builds one while this process
    decodes another); the rows are the query iterator's, in its order. A caller that stops early
    leaves no read running."""
    from situate.storage import milvus

    s = MilvusStore(str(tmp_path / "m.db"))
    try:
        s.ensure_collection(C, EMB.dim, EMBEDDER)
        s.upsert(C, _many(120))
        alone = _iterator_ids(s)
        assert len(alone) == 120 and alone == sorted(alone)
        asked, ahead = [], threading.Event()
        real = s.client.query

        def spy(*a, **k):
            if "limit" in k:  # a slice, not the count
                asked.append(threading.current_thread().name)
                if len(asked) == 1 + milvus.SLICES_AHEAD:
                    ahead.set()
            return real(*a, **k)

        s.client.query = spy
        s.client.query_iterator = lambda *a, **k: pytest.fail("read through the iterator")
        reading = s.rows(C, fields=("id", "lexical", "dense"), page=40, strict_float32=True)
        first = next(reading)
        assert ahead.wait(10), "the next slices were not asked for while the first was taken"
        assert all(name.startswith("situate-read") for name in asked)
        rest = list(reading)
        assert [first["id"], *(r["id"] for r in rest)] == alone
        assert len(asked) == len(milvus._slices("", 120, 40)) == 4
        assert first["dense"].dtype.name == "float32" and first["lexical"]
        reading = s.rows(C, fields=("id",), page=40)
        next(reading)
        reading.close()
        assert not [t for t in threading.enumerate() if t.name.startswith("situate-read")]
    finally:
        s.close()


def test_rows_on_lite_read_a_crowded_slice_through_the_iterator(tmp_path):
    """Ids that are not situate's hex digests all fall into one slice (the first and last are
    open, so every id is in one); a slice that fills its page is read again through the query
    iterator, so no row is lost or read twice, whatever the ids."""
    s = MilvusStore(str(tmp_path / "m.db"))
    try:
        s.ensure_collection(C, EMB.dim, EMBEDDER)
        rows = _many(60)
        for n, row in enumerate(rows[:45]):  # past every hex digit: the last slice's
            row["id"] = f"zz-{n:03d}"
        rows[45]["id"] = "-first"  # before every hex digit: the first slice's
        s.upsert(C, rows)
        iterated: list[str] = []
        real = s.client.query_iterator
        s.client.query_iterator = lambda *a, **k: iterated.append(k["filter"]) or real(*a, **k)
        read = [r["id"] for r in s.rows(C, fields=("id",), page=12)]
        assert read == sorted(r["id"] for r in rows)
        assert iterated and all('id >= "' in f for f in iterated)  # the crowded slice alone
        assert [r["id"] for r in s.rows(C, fields=("id",), page=12,
                                        filter='doc_id == "many.py"')] == read
    finally:
        s.close()


def test_slices_cover_every_id_once():
    """The slices' filters: in order, the first and last open, each bound shared by the two
    slices it separates, a caller's filter kept in each; about a page's three quarters each."""
    from situate.storage.milvus import _slices

    assert _slices("", 0, 100) == _slices("", 75, 100) == [""]
    assert _slices("", 76, 100) == ['id < "800000"', 'id >= "800000"']
    three = _slices('doc_id == "a"', 200, 100)
    assert three == ['(doc_id == "a") and id < "555555"',
                     '(doc_id == "a") and id >= "555555" and id < "aaaaaa"',
                     '(doc_id == "a") and id >= "aaaaaa"']


def test_vectors_are_decoded_as_pymilvus_decodes_them(tmp_path):
    """`vectors_decoded` gives each row the vector pymilvus's own strict_float32 decoding gives
    (same ids, same float32 bits), for a query and a get; anything else it leaves as it is, and
    floats not packed as expected are left to pymilvus."""
    import numpy as np

    from situate.storage.client import _packed_floats, vectors_decoded

    s = MilvusStore(str(tmp_path / "m.db"))
    try:
        s.ensure_collection(C, EMB.dim, EMBEDDER)
        s.upsert(C, _many(30))
        for read in (lambda: s.client.query(C, filter="", output_fields=["id", "dense"], limit=50,
                                            strict_float32=True),
                     lambda: s.client.get(C, ids=[r["id"] for r in _many(30)[::7]],
                                          output_fields=["id", "dense"], strict_float32=True)):
            theirs, ours = read(), vectors_decoded(read())
            assert ours._has_materialized_float_vector and len(ours) == len(theirs) > 0
            for a, b in zip(theirs, ours, strict=True):
                assert a["id"] == b["id"] and b["dense"].dtype == np.float32
                assert a["dense"].tobytes() == b["dense"].tobytes()
        plain = [{"id": "x", "dense": [1.0]}]
        assert vectors_decoded(plain) is plain
    finally:
        s.close()

    class Unpacked:  # each float its own field: tag 0x0d, then 4 bytes
        data = [1.0, 2.0]

        def SerializeToString(self) -> bytes:  # noqa: N802
            return b"".join(b"\x0d" + np.float32(x).tobytes() for x in self.data)

    assert _packed_floats(Unpacked()) is None
