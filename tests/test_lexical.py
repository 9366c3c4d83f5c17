"""The lexical index beside Milvus Lite (`situate.storage.lexical`): Lite's own BM25 to the bit on
one segment, statistics of the whole collection as it is after updates, the same ranking in a
Lite file and a `milvus-lite server` holding other collections, and an index that is never served
stale: rebuilt when missing or damaged, caught up or reloaded when the collection changed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from situate.core.records import Chunk, Document, EmbeddedDocument, Situated, sha256
from situate.storage.lexical import Bm25, LexicalLeg
from situate.storage.manifest import Manifest
from situate.storage.milvus import MilvusStore
from situate.storage.rows import document_rows
from tests.fakes.milvus_server import MilvusServer

WORDS = ("alpha beta gamma delta run_target DiffExecutor epsilon zeta eta theta iota kappa "
         "lambda mu the of and parse_query QueryParser").split()
QUERIES = ["alpha beta", "diff executor gamma gamma", "run target", "kappa mu lambda alpha zeta",
           "the theta", "query parser parse", "DiffExecutor", "nothing matches this"]
C = "lex"


def documents(n: int, seed: int, prefix: str = "d") -> list[EmbeddedDocument]:
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    out = []
    for d in range(n):
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(3, 40))) for _ in range(4)]
        chunks = tuple(Chunk(f"{prefix}{d}", i, t) for i, t in enumerate(texts))
        doc = Document(f"{prefix}{d}", "".join(texts), chunks, "", {})
        v = nrng.standard_normal((4, 8)).astype(np.float32)
        out.append(EmbeddedDocument(doc, sha256(doc.hash), tuple(Situated(c, "") for c in chunks),
                                    list(v)))
    return out


def fresh(uri: str, docs: list[EmbeddedDocument], collection: str = C, **kw) -> MilvusStore:
    store = MilvusStore(uri, **kw)
    store.ensure_collection(collection, 8, "random:8")
    store.write(collection, docs)
    store.flush(collection)
    return store


def answers(store: MilvusStore, collection: str = C) -> list:
    return [(store.ranking(collection, "bm25", q, None, 25),
             [(h.id, h.score, h.text) for h in store.leg_search(collection, "bm25", q, None, 7)])
            for q in QUERIES]


def test_one_segment_scores_are_milvus_lites_own_to_the_bit(tmp_path):
    """On a collection in one segment, the index ranks and scores every query exactly as Milvus
    Lite's own BM25 does (`native_bm25`), the scores of chosen ids (a hybrid's leg scores)
    included, 0 for a chunk that shares no term with the query."""
    store = fresh(str(tmp_path / "a.db"), documents(40, 1))
    native = MilvusStore.__new__(MilvusStore)
    native.__dict__.update(store.__dict__)
    native.native_bm25 = True
    assert store.lexical_here and not native.lexical_here
    for q in QUERIES:
        assert store.ranking(C, "bm25", q, None, 30) == native.ranking(C, "bm25", q, None, 30)
        ids = [i for i, _ in native.ranking(C, "bm25", "alpha", None, 20)]
        assert store.leg_scores(C, "bm25", q, None, ids) == \
            native.leg_scores(C, "bm25", q, None, ids)
    store.close()


def test_a_collection_kept_up_to_date_scores_as_a_fresh_ingest(tmp_path):
    """A third of the documents rewritten, some deleted, others added, in runs flushed apart
    (several Lite segments, whose own BM25 scores differ from a fresh ingest): the index ranks
    and scores as on a fresh collection of the final rows, and as Lite does there."""
    first = documents(30, 2)
    changed = documents(10, 3)  # the same ids d0..d9, new texts
    added = documents(5, 4, prefix="n")
    kept = fresh(str(tmp_path / "kept.db"), first)
    kept.write(C, changed)
    kept.delete_documents(C, ["d12", "d13"])
    kept.flush(C)
    kept.write(C, added)
    kept.flush(C)
    final = changed + [d for d in first[10:] if d.doc.id not in ("d12", "d13")] + added
    again = fresh(str(tmp_path / "fresh.db"), final)
    assert answers(kept) == answers(again)
    native = MilvusStore(str(tmp_path / "fresh.db"), native_bm25=True)
    assert [native.ranking(C, "bm25", q, None, 25) for q in QUERIES] == \
        [a[0] for a in answers(again)]
    # Lite's own scores on the kept collection are not a fresh ingest's (segments)
    lite_kept = MilvusStore(str(tmp_path / "kept.db"), native_bm25=True)
    assert [lite_kept.ranking(C, "bm25", q, None, 25) for q in QUERIES] != \
        [a[0] for a in answers(again)]
    for s in (kept, again, native, lite_kept):
        s.close()


def test_the_same_rows_rank_alike_in_a_file_and_in_a_server_with_other_collections(tmp_path):
    """A `milvus-lite server` holding other collections (and the same rows written in another
    order) ranks every query as the Lite file does."""
    docs = documents(30, 5)
    file_store = fresh(str(tmp_path / "f.db"), docs)
    expected = answers(file_store)
    file_store.close()
    server = MilvusServer(tmp_path / "server")
    server.start()
    try:
        store = MilvusStore(server.uri)
        assert store.lexical_here
        for other in ("other_a", "other_b"):
            store.ensure_collection(other, 8, "random:8")
            store.write(other, documents(20, 6, prefix="o"))
            store.flush(other)
        store.ensure_collection(C, 8, "random:8")
        store.write(C, docs[15:])
        store.flush(C)
        store.write(C, docs[:15])
        assert answers(store) == expected
        store.close()
    finally:
        server.stop()


def _ingest_end(store: MilvusStore, cache, collection: str = C) -> str:
    """What an ingest does at its end: the manifest written, its token recorded."""
    manifest = Manifest(cache, store.uri, collection)
    token = manifest.save(store.stored_documents(collection))
    store.set_manifest_token(collection, token)
    return token


def test_an_index_is_saved_at_the_end_of_an_ingest_and_loaded_by_the_next_process(tmp_path):
    cache = tmp_path / "cache"
    uri = str(tmp_path / "a.db")
    store = fresh(uri, documents(20, 7), cache_dir=str(cache))
    _ingest_end(store, cache)
    expected = answers(store)
    path = store.lexical_path(C)
    assert path is not None and path.is_file()
    store.close()
    store = MilvusStore(uri, cache_dir=str(cache))
    assert answers(store) == expected
    assert store._lexical_leg(C).last == "loaded"
    store.close()


def test_a_stale_or_missing_index_is_rebuilt_never_served(tmp_path):
    """The collection changed after the index was saved (a run stopped between its Milvus
    writes and its index: no token recorded), the index deleted, or damaged: the next process
    answers as a fresh ingest of the rows, from an index rebuilt from them."""
    cache = tmp_path / "cache"
    uri = str(tmp_path / "a.db")
    docs = documents(20, 8)
    store = fresh(uri, docs, cache_dir=str(cache))
    _ingest_end(store, cache)
    path = store.lexical_path(C)
    # a run that writes and is killed before its end: rows changed, no token, index as before
    store.add_drift(C, 10)
    store.write(C, documents(5, 9))
    store.close()
    final = documents(5, 9) + docs[5:]
    expected = answers(fresh(str(tmp_path / "fresh.db"), final))
    store = MilvusStore(uri, cache_dir=str(cache))
    assert answers(store) == expected
    assert store._lexical_leg(C).last == "rebuilt"
    store.close()
    # an ingest that ended elsewhere (another machine's cache): a token, not the saved file's
    elsewhere = MilvusStore(uri, cache_dir=str(tmp_path / "elsewhere"))
    elsewhere.add_drift(C, 4)
    elsewhere.delete_documents(C, ["d19"])
    _ingest_end(elsewhere, tmp_path / "elsewhere")
    elsewhere.close()
    final = [d for d in final if d.doc.id != "d19"]
    expected = answers(fresh(str(tmp_path / "fresh2.db"), final))
    store = MilvusStore(uri, cache_dir=str(cache))
    assert answers(store) == expected
    assert store._lexical_leg(C).last == "rebuilt"
    store.close()
    # the same after an ingest ends again, then the file deleted, then damaged
    store = MilvusStore(uri, cache_dir=str(cache))
    _ingest_end(store, cache)
    store.close()
    for spoil in (lambda: path.unlink(), lambda: path.write_bytes(b"not an index")):
        spoil()
        store = MilvusStore(uri, cache_dir=str(cache))
        assert answers(store) == expected
        assert store._lexical_leg(C).last == "rebuilt"
        assert path.is_file()  # saved again, under the stamp
        store.close()


def _counting_reads(store: MilvusStore) -> list[int]:
    read: list[int] = []
    leg = store._lexical_leg(C)
    fetch = leg._fetch
    leg._fetch = lambda ids: read.append(len(ids)) or fetch(ids)
    return read


def test_an_ingest_catches_the_index_up_from_its_manifest(tmp_path):
    """Documents changed by a process that did not follow its writes (no cache directory): the
    next ingest's end brings the saved index up to date by reading only those (the manifest
    says which changed), and the result is a fresh ingest's."""
    cache = tmp_path / "cache"
    uri = str(tmp_path / "a.db")
    docs = documents(30, 10)
    store = fresh(uri, docs, cache_dir=str(cache))
    _ingest_end(store, cache)
    store.close()
    other = MilvusStore(uri)
    other.add_drift(C, 8)
    other.write(C, documents(2, 11))
    other.delete_documents(C, ["d29"])
    other.close()
    store = MilvusStore(uri, cache_dir=str(cache))
    read = _counting_reads(store)
    _ingest_end(store, cache)
    assert store._lexical_leg(C).last == "caught up" and sum(read) == 8
    final = documents(2, 11) + docs[2:29]
    assert answers(store) == answers(fresh(str(tmp_path / "fresh.db"), final))
    store.close()


def test_an_ingest_keeps_the_index_as_it_writes_and_reads_no_row_back(tmp_path):
    """A process that writes with a cache directory puts its upserts and deletes into the index
    as it writes them: its end reads no row back (a fresh ingest's, and an update's), and the
    index is a fresh ingest's of the final rows."""
    cache = tmp_path / "cache"
    uri = str(tmp_path / "a.db")
    docs = documents(30, 10)
    store = MilvusStore(uri, cache_dir=str(cache))
    store.ensure_collection(C, 8, "random:8")
    read = _counting_reads(store)
    rebuilt: list[int] = []
    rows = store._lexical_leg(C)._rows
    store._lexical_leg(C)._rows = lambda: rebuilt.append(1) or rows()
    store.write(C, docs)
    store.flush(C)
    rebuilt.clear()  # the empty collection's index, read before the first write
    _ingest_end(store, cache)
    assert (store._lexical_leg(C).last, sum(read), rebuilt) == ("written", 0, [])
    store.add_drift(C, 8)
    store.write(C, documents(2, 11))
    store.delete_documents(C, ["d29"])
    _ingest_end(store, cache)
    assert (store._lexical_leg(C).last, sum(read), rebuilt) == ("written", 0, [])
    final = documents(2, 11) + docs[2:29]
    expected = answers(fresh(str(tmp_path / "fresh.db"), final))
    assert answers(store) == expected
    store.close()
    reopened = MilvusStore(uri, cache_dir=str(cache))
    assert answers(reopened) == expected and reopened._lexical_leg(C).last == "loaded"
    reopened.close()


def test_a_write_the_index_did_not_follow_is_caught_up_from_the_manifest(tmp_path):
    """Another process deletes a document while this one writes: the manifest at this one's end
    names it gone, and the index it kept drops it too."""
    cache = tmp_path / "cache"
    uri = str(tmp_path / "a.db")
    docs = documents(30, 10)
    store = fresh(uri, docs, cache_dir=str(cache))
    _ingest_end(store, cache)
    store.add_drift(C, 8)
    store.write(C, documents(2, 11))
    other = MilvusStore(uri)
    other.delete_documents(C, ["d29"])
    _ingest_end(store, cache)
    assert store._lexical_leg(C).last == "caught up"
    final = documents(2, 11) + docs[2:29]
    assert answers(store) == answers(fresh(str(tmp_path / "fresh.db"), final))
    store.close()


def test_a_serving_process_notices_another_writer_and_swaps_the_new_index_in(tmp_path):
    """A server searching a collection while another process ingests into it: once that ingest
    ends (its token recorded, its index saved), the server's next search (after the poll) loads
    the new index and answers as a fresh ingest would."""
    cache = tmp_path / "cache"
    server = MilvusServer(tmp_path / "server")
    server.start()
    try:
        docs = documents(20, 12)
        serving = fresh(server.uri, docs, cache_dir=str(cache))
        _ingest_end(serving, cache)
        before = answers(serving)
        leg = serving._lexical_leg(C)
        leg.poll = 0.0
        writer = MilvusStore(server.uri, cache_dir=str(cache))
        writer.add_drift(C, 8)
        writer.write(C, documents(2, 13))
        _ingest_end(writer, cache)
        old = leg._index
        serving.ranking(C, "bm25", "alpha", None, 5)
        assert leg._index is not old and leg.last == "loaded"
        after = answers(serving)
        assert after != before
        expected = answers(fresh(str(tmp_path / "fresh.db"), documents(2, 13) + docs[2:]))
        assert after == expected
        writer.close()
        serving.close()
    finally:
        server.stop()


def test_a_bm25_index_updated_in_place_equals_one_built_at_once():
    """Rows replaced, deleted before and after sealing, and the matrix compacted: the scores are
    those of an index built from the final rows alone."""
    rng = random.Random(14)

    def row(i: int, salt: int) -> dict:
        return {"id": f"c{i}", "doc_id": f"d{i // 3}", "doc_hash": str(salt),
                "lexical": " ".join(rng.choices(WORDS, k=rng.randint(1, 30)))}

    rows = {i: row(i, 0) for i in range(90)}
    index = Bm25()
    index.upsert(rows.values())
    index.seal()
    for i in range(0, 90, 3):
        rows[i] = row(i, 1)
        index.upsert([rows[i]])
    index.delete([f"c{i}" for i in (1, 4, 7)])
    for i in (1, 4, 7):
        rows.pop(i)
    index.delete_documents(["d20"])
    for i in (60, 61, 62):
        rows.pop(i)
    index.seal()
    index.upsert([row(200, 2)])
    index.delete(["c200"])
    rows[201] = row(201, 3)
    index.upsert([row(201, 2), rows[201]])  # a waiting row replaced before it is sealed
    once = Bm25()
    once.upsert(rows.values())
    for q in QUERIES:
        assert index.top(q, 50) == once.top(q, 50)
    index.compact()
    for q in QUERIES:
        assert index.top(q, 50) == once.top(q, 50)
        assert index.scores_of(q, ["c2", "c1", "c5"]) == once.scores_of(q, ["c2", "c1", "c5"])


def test_rows_waiting_to_be_sealed_take_about_what_the_sealed_index_takes():
    """A rebuild appends every row of the collection before one seal: the waiting rows are kept
    as flat arrays (a few bytes a term, as in the matrix), not an object per row, so they take
    about what the sealed index takes, and sealing them at most doubles it for a moment."""
    import tracemalloc

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(20_000)]
    rows = [{"id": f"c{i}", "doc_id": f"d{i // 10}", "doc_hash": "h",
             "lexical": " ".join(words[j] for j in rng.integers(0, len(words), 120)),
             "dense": rng.standard_normal(8).astype(np.float32)} for i in range(20_000)]
    Bm25()  # scipy imported before counting
    tracemalloc.start()
    try:
        index = Bm25()
        index.upsert(rows)
        waiting = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        index.seal()
        sealed, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert waiting <= 1.25 * sealed, (waiting, sealed)
    assert peak <= 2.5 * sealed, (peak, sealed)
    assert index.rows == len(rows) and index.pending == 0


def test_leg_without_a_cache_directory_builds_in_memory(tmp_path):
    store = fresh(str(tmp_path / "a.db"), documents(10, 15))
    assert store.lexical_path(C) is None
    assert store.ranking(C, "bm25", "alpha", None, 5)
    assert isinstance(store._lexical_leg(C), LexicalLeg)
    assert store._lexical_leg(C).last == "rebuilt"
    store.close()


@pytest.mark.parametrize("k", [1, 3])
def test_the_cut_weighs_every_tie(k):
    index = Bm25()
    index.upsert({"id": f"c{i}", "doc_id": "d", "doc_hash": "", "lexical": "same words"}
                 for i in (5, 3, 9, 1))
    assert [i for i, _ in index.top("same", k)] == ["c1", "c3", "c5", "c9"][:k]


def test_between_counts_a_poll_compares_the_token_and_a_count_finds_a_foreign_write(
        tmp_path, monkeypatch):
    """Between counts, a poll asks only for the generation and the token (counting costs Lite a
    pass over the rows); rows written by something that does not clear the token are found at
    the next count, and the index is rebuilt then."""
    import situate.storage.lexical as lexical

    cache = tmp_path / "cache"
    docs = documents(10, 16)
    store = fresh(str(tmp_path / "a.db"), docs, cache_dir=str(cache))
    _ingest_end(store, cache)
    leg = store._lexical_leg(C)
    leg.poll = 0.0
    store.ranking(C, "bm25", "alpha", None, 5)
    asked: list[bool] = []
    stamp = leg._stamp_of
    leg._stamp_of = lambda counted: asked.append(counted) or stamp(counted)
    store.ranking(C, "bm25", "alpha", None, 5)
    assert asked == [False] and leg.last == "kept"
    extra = documents(1, 17, prefix="x")[0]  # written past situate's store: the token stays
    store.client.upsert(C, document_rows(extra))
    monkeypatch.setattr(lexical, "COUNT_SECONDS", 0.0)
    store.ranking(C, "bm25", "alpha", None, 5)
    assert leg.last == "rebuilt"
    assert all(s.chunk.id in leg._index.position for s in extra.situated)
    store.close()


def test_an_index_that_cannot_be_saved_is_served_from_memory(tmp_path, caplog):
    """A cache directory that cannot be written (here a file in its place): the ingest's end and
    every search still answer, from an index held in memory, with one warning."""
    cache = tmp_path / "cache"
    cache.write_text("not a directory")
    docs = documents(10, 18)
    store = fresh(str(tmp_path / "a.db"), docs, cache_dir=str(cache))
    _ingest_end(store, tmp_path / "manifests")
    assert answers(store) == answers(fresh(str(tmp_path / "b.db"), docs))
    assert "not saved" in caplog.text
    store.close()


def test_opening_a_store_imports_scipy_sparse_before_any_search_thread_does(tmp_path):
    """pymilvus imports scipy.sparse in a search's thread, the lexical index in another: at once,
    they met in Python's import locks ("deadlock detected by _ModuleLock('scipy.sparse')"
    failed a hybrid's dense leg). The store imports it where it is opened, before both."""
    import subprocess
    import sys

    script = ("import sys\n"
              "from situate.storage.milvus import MilvusStore\n"
              "assert 'scipy.sparse' not in sys.modules\n"
              f"store = MilvusStore({str(tmp_path / 'a.db')!r})\n"
              "print('scipy.sparse' in sys.modules)\n"
              "store.close()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_dense_scores_come_from_the_index_vectors_as_lite_would_give_them(tmp_path, monkeypatch):
    """On Milvus Lite the index keeps each row's vector: a dense ranking, a dense search's hits
    and a hybrid search's dense scores of BM25's candidates are the same, to the bit, as when the
    vectors are read from Lite with each hit, and a hybrid search reads from the collection only
    its hits' rows (their text, no vector). A row written by another process since the index was
    built is scored from the row read by id."""
    from concurrent.futures import ThreadPoolExecutor

    from situate.tasks.retrieval.search import hybrid

    store = fresh(str(tmp_path / "v.db"), documents(40, 7))
    reference = MilvusStore.__new__(MilvusStore)
    reference.__dict__.update(store.__dict__)
    monkeypatch.setattr(reference, "_local_vectors", lambda collection, what: None)
    assert store._local_vectors(C, "test") is not None
    reads: list[tuple[int, tuple[str, ...]]] = []
    get = store.client.get

    def counted(collection, ids, output_fields, **kw):
        reads.append((len(ids), tuple(output_fields)))
        return get(collection, ids=ids, output_fields=output_fields, **kw)

    rng = np.random.default_rng(9)
    vectors = [rng.standard_normal(8).astype(np.float32).tolist() for _ in QUERIES]
    ids = [i for i, _ in store.ranking(C, "bm25", "alpha", None, 60)]
    with ThreadPoolExecutor(4) as pool:
        for q, v in zip(QUERIES, vectors, strict=True):
            assert store.ranking(C, "dense", q, v, 30) == reference.ranking(C, "dense", q, v, 30)
            assert store.leg_scores(C, "dense", q, v, ids) == \
                reference.leg_scores(C, "dense", q, v, ids)
            assert [(h.id, h.score, h.text) for h in store.leg_search(C, "dense", q, v, 7)] == \
                [(h.id, h.score, h.text) for h in reference.leg_search(C, "dense", q, v, 7)]
            expected = hybrid(reference, C, q, lambda v=v: v, 10, pool=pool)
            monkeypatch.setattr(store.client, "get", counted)
            reads.clear()
            found = hybrid(store, C, q, lambda v=v: v, 10, pool=pool)
            monkeypatch.setattr(store.client, "get", get)
            assert [(h.id, h.score, h.text) for h in found] == \
                [(h.id, h.score, h.text) for h in expected]
            assert all("dense" not in fields for _, fields in reads), reads
            assert sum(n for n, _ in reads) <= 10
    # another process writes a document: until the next poll, the index lacks its rows (the
    # poll put off, so that a slow write on a loaded machine does not reach it)
    index = store._lexical_leg(C).current()
    store._lexical_leg(C).poll = float("inf")
    other = MilvusStore(str(tmp_path / "v.db"))
    new = documents(1, 11, prefix="new")
    other.write(C, new)
    other.flush(C)
    new_ids = [s.chunk.id for s in new[0].situated]
    assert store._lexical_leg(C).current() is index and not set(new_ids) & set(index.position)
    v = [float(x) for x in new[0].vectors[0]]
    assert store.leg_scores(C, "dense", "q", v, new_ids) == \
        reference.leg_scores(C, "dense", "q", v, new_ids)
    assert store.ranking(C, "dense", "q", v, 3)[0][0] == new_ids[0]
    for s in (store, other):
        s.close()


def test_a_saved_index_keeps_its_vectors_and_a_loading_process_maps_them(tmp_path):
    """The vectors are saved with the terms and mapped from the file by the process that loads
    it (not read into its memory); they score as before the save, and an index whose rows did
    not all come with a vector keeps none (its cosines are read from the collection)."""
    from situate.storage.lexical import Stamp

    rng = np.random.default_rng(3)
    rows = [{"id": f"c{i}", "doc_id": f"d{i // 4}", "doc_hash": "h",
             "lexical": " ".join(random.Random(i).choices(WORDS, k=9)),
             "dense": rng.standard_normal(8).tolist()} for i in range(30)]
    index = Bm25()
    index.upsert(rows)
    index.delete(["c4", "c7"])
    q = rng.standard_normal(8).tolist()
    ids = [f"c{i}" for i in range(30)]
    expected = index.cosines(q, ids)
    assert len(expected) == 28 and "c4" not in expected
    index.save(tmp_path / "x.npz", Stamp("p", "t", 28))
    loaded, _ = Bm25.load(tmp_path / "x.npz")
    assert isinstance(loaded.vectors, np.memmap) and loaded.cosines(q, ids) == expected
    loaded.upsert([{**rows[0], "dense": [1.0] * 8}])
    assert loaded.cosines(q, ["c0"]) != {"c0": expected["c0"]}
    assert loaded.cosines(q, ["c1"]) == {"c1": expected["c1"]}
    partial = Bm25()
    partial.upsert([rows[0], {k: v for k, v in rows[1].items() if k != "dense"}, rows[2]])
    assert not partial.dense and partial.cosines(q, ["c0", "c2"]) == {}
    partial.save(tmp_path / "y.npz", Stamp("p", "t", 3))
    assert not Bm25.load(tmp_path / "y.npz")[0].dense
