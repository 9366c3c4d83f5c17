"""BM25 beside Milvus Lite: the lexical leg of a search computed by an index made for it, derived
from the collection's rows.

Milvus Lite (a `.db` file, or `milvus-lite server`) scores BM25 in a Python loop over every
posting of every query term, segment by segment, each segment with statistics of its own
(`benchmarks/bm25_statistics/FINDINGS.md`): 51 ms a query at 40,000 chunks, about a second at
100,000, and a collection kept up to date scores differently from a fresh ingest of the same rows.
`Bm25` scores the same terms (the stored `lexical` field, `rows.lexical_text`, split as Lite's
standard analyzer splits it, situate's stop words left out) with the same formula (Lucene's
idf, k1 = 1.5, b = 0.75, a query term counted as often as it occurs) over statistics of the whole
collection as it is: N, document frequencies and the average length count the live rows only,
whatever segments Lite cut them into. So one segment's scores are Lite's own, to the bit, and a
collection kept up to date scores exactly as a fresh ingest of the same rows.

The engine was chosen by measurement (`benchmarks/bench_lexical.py`, docs/benchmarks): tantivy
and SQLite FTS5 answer fast but fix k1 at 1.2 (tantivy also rounds document lengths to a byte
and counts deleted documents until a merge), so neither gives Lite's scores; bm25s gives them but
precomputes every (document, term) score, so any change to the statistics means rebuilding all
of them. Here the term frequencies are a compressed sparse column matrix (scipy), scored at query
time (numpy over the query terms' postings), so a change is rows appended and rows masked.

A process that writes to the collection (an ingest) keeps the index as it writes: each row it
upserts and each id or document it deletes goes into a copy of the index as the collection was
before its first write (`LexicalLeg.upserted`, `deleted`). When the ingest ends and records its
manifest's token, that copy is caught up from the manifest like any other index (only documents
whose fingerprint or chunk ids differ from the manifest's are read from the collection, none when
every write went through) and saved: the rows are not read back.

The index keeps each row's dense vector too (float32, by row position; saved uncompressed in the
same file, and mapped from it, not read, by the processes that load it): a hybrid search on
Milvus Lite scores the other leg's candidates, and ranks Lite's dense hits, by their cosines
computed from them (`situate.storage.cosines`, Lite's own arithmetic), so that Lite returns ids
alone and only the hits' rows are read from it. Building the rows of every hit Lite returns, and
of every candidate read by id, is most of the CPU it spends on a hybrid query.

Milvus stays the store of record. An index is stamped with what it was built from (the physical
collection behind the alias: its generation; the manifest token an ingest records when it ends;
the row count), saved atomically (a temporary file, then `os.replace`), and trusted only while
its stamp is the collection's: else it is caught up from the ingest's manifest (the documents
whose fingerprint changed, read by id) or rebuilt from the rows, before it answers
(`LexicalLeg`). Hits are read from Milvus by id, so nothing it ranks can return a chunk that is
gone.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import os
import re
import struct
import threading
import time
import zipfile
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from situate.core.records import StoredDocument
from situate.storage.cosines import cosines, float32
from situate.storage.rows import STOP_WORDS, lexical_text

if TYPE_CHECKING:
    from scipy.sparse import csc_matrix

log = logging.getLogger("situate.storage.lexical")

# Milvus Lite's BM25 (milvus_lite/index/sparse_inverted.py): its defaults, which situate's schema
# keeps (no bm25_k1/bm25_b parameters on the index).
K1 = 1.5
B = 0.75
_WORD = re.compile(r"\w+")
_STOP = frozenset(STOP_WORDS)
# Rows read per page when an index is built from the collection (on Milvus Lite, a slice holds
# three quarters of it at most): Lite assembles the whole collection again for every call, so
# fewer, larger pages (a row's lexical text is
# about 1-4 KB and its 384-d vector 1.5 KB: a page of about 90 MiB at most, far under gRPC's
# 256 MiB; fewer rows a page for wider vectors, `MilvusStore._build_page`).
BUILD_PAGE = 16_384
# Rows fetched by id per call when an index catches up with changed documents.
FETCH_BATCH = 1_000
# How long a checked stamp is trusted before the collection is asked again: a search within this
# long of another process's write may rank by the index as it was before that write (its hits are
# still read from Milvus, so a chunk deleted meanwhile is never returned).
POLL_SECONDS = 1.0
# Between polls the generation and the token alone are compared while the token is one an ingest
# recorded (every writer clears it before writing, so the same token is the same rows): counting
# the rows costs Lite a pass over the collection (about 150 ms at 100,000 rows), so they are
# counted again only this often, in case something other than situate wrote to the collection.
COUNT_SECONDS = 30.0
# Dead rows (deleted, or replaced by a newer version) kept in the matrix before it is compacted.
DEAD_SHARE = 0.25
# Rows appended to the index that a process's writes go into (`LexicalLeg.upserted`) before they
# are sealed into its matrix: at least this many, and at least a quarter of the matrix (so that
# sealing, which copies the matrix, costs time linear in the rows written).
SEAL_ROWS = 16_384
FORMAT = 3  # of the saved file; another number is rebuilt
RECENT = 16  # queries whose scores an index keeps


def terms(text: str) -> list[str]:
    """The BM25 terms of `text` as Milvus Lite's standard analyzer cuts them (`\\w+`,
    lowercased) with situate's stop words left out."""
    return [t for t in _WORD.findall(text.lower()) if t not in _STOP]


def term_counts(text: str) -> Counter[str]:
    """`Counter(terms(text))`, counted before the stop words are taken out (a few distinct words
    instead of every token)."""
    counts = Counter(_WORD.findall(text.lower()))
    for stop in _STOP.intersection(counts):
        del counts[stop]
    return counts


class Vocabulary(dict[str, int]):
    """Term -> column: a term not seen before is given the next column when it is first looked
    up with `[]` (`get` adds nothing), so that an upsert maps a row's terms to columns in one
    call, not a Python step a term."""

    def __missing__(self, term: str) -> int:
        column = self[term] = len(self)
        return column


@dataclass(frozen=True)
class Stamp:
    """What an index was built from: the physical collection (its generation), the manifest
    token recorded when the last ingest ended ("" while a run writes, or after one stopped), and
    the row count."""

    physical: str
    token: str
    rows: int

    @property
    def provable(self) -> bool:
        """Whether the stamp names one state of the collection: only an ingest that ended records
        a token, and any write clears it first, so without one the rows may change under the
        same stamp (an index built then is used, never saved)."""
        return bool(self.token)


class Bm25:
    """Term frequencies of a collection's rows, scored as Milvus Lite scores BM25, with
    statistics over the live rows only.

    Rows are appended (an upsert appends the new version and marks the old one dead) and masked
    (a delete); appended rows wait, as flat arrays of term ids, counts, lengths and vector
    components (a few bytes a term, as in the matrix), until the next search or save seals them
    into the matrix, and the matrix drops its dead rows when they pass DEAD_SHARE of it. Not safe for
    concurrent writes: `LexicalLeg` swaps in a new one, or writes under its lock."""

    def __init__(self) -> None:
        from scipy.sparse import csc_matrix

        self.vocab = Vocabulary()
        self.ids: list[str] = []  # row position -> chunk id
        self.docs: list[str] = []  # row position -> document id
        self.position: dict[str, int] = {}  # live chunk id -> row position
        self.fingerprints: dict[str, str] = {}  # document id -> doc_hash of its rows
        self.by_doc: dict[str, list[str]] = {}  # document id -> its live chunk ids
        self.matrix: csc_matrix = csc_matrix((0, 0), dtype=np.float32)
        self.lengths = np.zeros(0, dtype=np.float32)
        self.live = np.zeros(0, dtype=bool)
        self.df = np.zeros(0, dtype=np.int64)
        self.total = 0.0  # summed length of the live rows
        # Each row's dense vector (float32, by row position), while every row came with one
        # (`dense`): a hybrid search on Milvus Lite scores its candidates from them.
        self.dense = True
        self.vectors: np.ndarray | None = None  # the sealed rows'
        self._clear_pending()
        self._csr: Any = None  # the matrix by rows, made when a sealed row is deleted
        self._recent: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._recent_lock = threading.Lock()
        self._denominators_of: tuple[int, float, int] | None = None
        self._denominators_cache = np.zeros(0, dtype=np.float32)

    # --- writes ------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        return len(self.position)

    @property
    def pending(self) -> int:
        """Rows appended since the last seal."""
        return len(self._pending_lengths)

    def _clear_pending(self) -> None:
        # the appended rows as a CSR block: term ids and counts, where each row's start,
        # its length (0 once deleted), the deleted ones (offsets), the vectors' components
        self._pending_indices = array("i")
        self._pending_data = array("f")
        self._pending_indptr = array("q", [0])
        self._pending_lengths = array("f")
        self._pending_dead: list[int] = []
        self._pending_vectors = array("f")
        self._pending_dim = 0

    def upsert(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Add rows (`id`, `doc_id`, `doc_hash`, `lexical`, and `dense`, the row's vector),
        each replacing any row of its id. A row without its vector (or with one of another
        dimension) leaves the index without vectors (`dense` False)."""
        n = 0
        self._recent.clear()
        vocab, indices, data = self.vocab, self._pending_indices, self._pending_data
        for row in rows:
            row_id, doc_id = str(row["id"]), str(row["doc_id"])
            if row_id in self.position:
                self.delete([row_id])
            counts = term_counts(row["lexical"])
            indices.extend(map(vocab.__getitem__, counts))  # new terms get new columns
            data.extend(counts.values())
            self._pending_indptr.append(len(indices))
            length = counts.total()
            self._pending_lengths.append(length)
            position = len(self.ids)
            self.ids.append(row_id)
            self.docs.append(doc_id)
            self.position[row_id] = position
            self.by_doc.setdefault(doc_id, []).append(row_id)
            self.fingerprints[doc_id] = str(row.get("doc_hash") or "")
            self._keep_vector(row.get("dense"))
            self.total += length
            n += 1
        return n

    def _keep_vector(self, vector: Any) -> None:
        if not self.dense:
            return
        if vector is None:
            self._lose_vectors()
            return
        kept = float32(vector).reshape(-1)
        dim = (self.vectors.shape[1] if self.vectors is not None
               else self._pending_dim or kept.shape[0])
        if kept.shape[0] != dim or not dim:
            self._lose_vectors()
            return
        self._pending_dim = dim
        self._pending_vectors.frombytes(kept.tobytes())

    def _lose_vectors(self) -> None:
        self.dense, self.vectors, self._pending_vectors = False, None, array("f")

    def delete(self, ids: Iterable[str]) -> int:
        n = 0
        self._recent.clear()
        for row_id in ids:
            position = self.position.pop(row_id, None)
            if position is None:
                continue
            doc_id = self.docs[position]
            held = self.by_doc.get(doc_id, [])
            if row_id in held:
                held.remove(row_id)
            if not held:
                self.by_doc.pop(doc_id, None)
                self.fingerprints.pop(doc_id, None)
            sealed = self.live.shape[0]
            if position < sealed:
                self.live[position] = False
                self.total -= float(self.lengths[position])
                self._forget_terms(position)
            else:
                offset = position - sealed
                self.total -= self._pending_lengths[offset]
                self._pending_lengths[offset] = 0
                self._pending_dead.append(offset)
            n += 1
        return n

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        return sum(self.delete(list(self.by_doc.get(d, ()))) for d in doc_ids)

    def _forget_terms(self, position: int) -> None:
        """A sealed row's terms no longer counted in the document frequencies."""
        row = self._row_terms(position)
        if row.size:
            np.subtract.at(self.df, row, 1)

    def _row_terms(self, position: int) -> np.ndarray:
        if self._csr is None:
            self._csr = self.matrix.tocsr()
        csr = self._csr
        found: np.ndarray = csr.indices[csr.indptr[position]:csr.indptr[position + 1]]
        return found

    def seal(self) -> None:
        """Appended rows into the matrix (one stack), and dead rows dropped when too many."""
        from scipy.sparse import csc_matrix, csr_matrix, vstack

        count = self.pending
        if count:
            width = len(self.vocab)
            indptr = np.frombuffer(self._pending_indptr, dtype=np.int64)
            data = np.frombuffer(self._pending_data, dtype=np.float32)
            if self._pending_dead:  # a row deleted before it was sealed has no terms left
                data = data.copy()
                for offset in self._pending_dead:
                    data[indptr[offset]:indptr[offset + 1]] = 0
            block = csr_matrix((data, np.frombuffer(self._pending_indices, dtype=np.int32),
                                indptr), shape=(count, width))
            if self._pending_dead:
                block.eliminate_zeros()
            # both by columns: scipy stacks them directly (a row matrix below a column one
            # went through coordinates: 2 s for 1,000 rows below 100,000)
            added = block.tocsc()
            del block
            old = self.matrix
            built = not old.shape[0]
            if built:  # a first seal (a build from the rows): no copy to stack
                self.matrix = added
            elif old.shape[1] == width:
                self.matrix = vstack([old, added], format="csc", dtype=np.float32)
            else:  # new terms: the old matrix widened with empty columns
                widened = csc_matrix((old.data, old.indices, np.concatenate(
                    [old.indptr, np.full(width - old.shape[1], old.indptr[-1],
                                         dtype=old.indptr.dtype)])), shape=(old.shape[0], width))
                self.matrix = vstack([widened, added], format="csc", dtype=np.float32)
            df = np.zeros(width, dtype=np.int64)
            df[:self.df.shape[0]] = self.df
            df += np.diff(added.indptr).astype(np.int64)
            self.df = df
            del added
            first = self.live.shape[0]
            appended_alive = np.fromiter(
                (self.position.get(self.ids[p]) == p for p in range(first, first + count)),
                dtype=bool, count=count)
            self.lengths = np.concatenate(
                [self.lengths, np.frombuffer(self._pending_lengths, dtype=np.float32)])
            self.live = np.concatenate([self.live, appended_alive])
            if self.dense:
                vectors = np.frombuffer(self._pending_vectors, dtype=np.float32).reshape(
                    count, self._pending_dim)
                # the first block is the pending array itself, not a copy of it
                self.vectors = (vectors if self.vectors is None
                                else np.concatenate([self.vectors, vectors]))
            self._clear_pending()
            self._csr = None
            if built and count >= SEAL_ROWS:
                _give_back_freed()
        dead = self.live.shape[0] - self.rows  # every live row is sealed now: O(1), per search
        if dead and dead > DEAD_SHARE * self.live.shape[0]:
            self.compact()

    def compact(self) -> None:
        """The matrix without its dead rows."""
        keep = np.flatnonzero(self.live)
        self.matrix = self.matrix[keep]
        self.lengths = self.lengths[keep]
        if self.vectors is not None:
            self.vectors = np.ascontiguousarray(self.vectors[keep])
        self.ids = [self.ids[i] for i in keep]
        self.docs = [self.docs[i] for i in keep]
        self.position = {row_id: i for i, row_id in enumerate(self.ids)}
        self.live = np.ones(len(self.ids), dtype=bool)
        self._csr = None

    # --- searches ----------------------------------------------------------------------------

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(row positions that share a term with `query`, their BM25 scores), the scores
        in float32 as Milvus Lite computes them; the last few queries' kept (a hybrid search
        asks for a query's top, then for its scores of the other leg's candidates)."""
        self.seal()
        key = (query, len(self.ids), self.rows)
        with self._recent_lock:
            found = self._recent.get(key)
        if found is not None:
            return found
        found = self._scores(query)
        with self._recent_lock:
            self._recent[key] = found
            while len(self._recent) > RECENT:
                self._recent.pop(next(iter(self._recent)))
        return found

    def _scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """`scores`, computed. The query's identifiers are split as the rows' were
        (`lexical_text`); each term counts as often as it occurs, in the order it first occurs
        (the order Lite adds them in, so the sums are Lite's to the bit)."""
        self.seal()
        n = self.rows
        if not n:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        denominators = self._denominators(n)
        total = np.zeros(self.live.shape[0], dtype=np.float32)
        matrix = self.matrix
        for term, weight in Counter(terms(lexical_text(query))).items():
            j = self.vocab.get(term)
            if j is None or j >= matrix.shape[1]:
                continue
            start, end = matrix.indptr[j], matrix.indptr[j + 1]
            rows = matrix.indices[start:end]
            tf = matrix.data[start:end]
            df = int(self.df[j])
            idf = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
            contribution = idf * ((tf * (K1 + 1.0)) / (tf + denominators[rows]))
            if weight != 1:
                contribution *= weight
            total[rows] += contribution
        # every live row sharing a term scores above 0 (idf and tf are); dead rows add 0
        found = np.flatnonzero(total)
        return found, total[found]

    def _denominators(self, n: int) -> np.ndarray:
        """Each row's `k1 * (1 - b + b * length / avgdl)`, computed in float32 as Lite computes
        it (its lengths are a float32 array, and NumPy computes a float32 with a Python float in
        float32), so that the scores are Lite's to the bit; infinite for a dead row, whose terms
        then add 0. Kept until the statistics change."""
        key = (n, self.total, self.live.shape[0])
        if self._denominators_of != key:
            avgdl = self.total / n if self.total > 0 else 1.0
            denominators = K1 * (1.0 - B + B * self.lengths / avgdl)
            denominators[~self.live] = np.inf
            self._denominators_cache = denominators
            self._denominators_of = key
        return self._denominators_cache

    def top(self, query: str, limit: int) -> list[tuple[str, float]]:
        """The `limit` best (chunk id, score), best first, equal scores by id: every chunk tying
        with the last one kept is weighed, so the cut is the same on every call."""
        found, scores = self.scores(query)
        if not found.size:
            return []
        if found.size > limit:
            cut = np.partition(scores, found.size - limit)[found.size - limit]
            keep = scores >= cut
            found, scores = found[keep], scores[keep]
        ranked = sorted(((self.ids[p], float(s)) for p, s in zip(found, scores, strict=True)),
                        key=lambda h: (-h[1], h[0]))
        return ranked[:limit]

    def scores_of(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        """Each of `ids`' score for `query`: 0 for a chunk sharing no term with it (or unknown).
        Looked up in the query's matches (row positions in order) by binary search: a common
        term matches tens of thousands of rows, too many to make a dict of per query."""
        found, scores = self.scores(query)
        ids = list(ids)
        if not found.size:
            return dict.fromkeys(ids, 0.0)
        positions = np.fromiter((self.position.get(i, -1) for i in ids), dtype=np.int64,
                                count=len(ids))
        at = np.minimum(np.searchsorted(found, positions), found.size - 1)
        matched = found[at] == positions
        return {i: float(scores[a]) if m else 0.0
                for i, a, m in zip(ids, at.tolist(), matched.tolist(), strict=True)}

    def cosines(self, query_vector: Sequence[float], ids: Iterable[str]) -> dict[str, float]:
        """The cosine of `query_vector` with the stored vector of each of `ids` the index holds,
        as Milvus Lite computes it (`situate.storage.cosines`); empty without vectors. An id it
        does not hold (a row written since it was built) is left out: the caller reads it."""
        self.seal()
        if not self.dense or self.vectors is None:
            return {}
        found = [(i, p) for i in ids if (p := self.position.get(i)) is not None]
        if not found:
            return {}
        vectors = self.vectors[np.fromiter((p for _, p in found), dtype=np.int64,
                                           count=len(found))]
        return dict(zip((i for i, _ in found), cosines(query_vector, vectors), strict=True))

    # --- catching up and saving --------------------------------------------------------------

    def changed_documents(self, documents: Mapping[str, StoredDocument]) -> tuple[list[str],
                                                                                    list[str]]:
        """(documents to read again, documents gone) for the index to hold what `documents`
        says the collection holds: those whose fingerprint or chunk ids differ, those absent."""
        stale = [d for d, s in documents.items()
                 if self.fingerprints.get(d) != (s.fingerprint or "")
                 or sorted(self.by_doc.get(d, ())) != sorted(s.ids(d))]
        gone = [d for d in self.by_doc if d not in documents]
        return stale, gone

    def save(self, path: Path, stamp: Stamp) -> None:
        """The index (live rows only) written to `path` under `stamp`, atomically: a reader finds
        the old file or the new one."""
        self.seal()
        if self.live.shape[0] != self.rows:
            self.compact()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        vectors = self.vectors if self.dense and self.vectors is not None else None
        meta = {"format": FORMAT, "stamp": [stamp.physical, stamp.token, stamp.rows],
                "ids": self.ids, "docs": self.docs, "fingerprints": self.fingerprints,
                "vocab": sorted(self.vocab, key=self.vocab.__getitem__),
                "dense": vectors is not None or not self.ids}
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                # uncompressed, the vectors last: a process that loads the file maps them
                # (`_mapped`) instead of reading them into its memory
                np.savez(f, data=self.matrix.data, indices=self.matrix.indices,
                         indptr=self.matrix.indptr, shape=np.asarray(self.matrix.shape),
                         lengths=self.lengths, df=self.df,
                         stamp=_json_bytes({"format": FORMAT, "stamp": meta["stamp"]}),
                         meta=_json_bytes(meta),
                         vectors=vectors if vectors is not None
                         else np.zeros((0, 0), dtype=np.float32))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @staticmethod
    def saved_stamp(path: Path) -> Stamp | None:
        """The stamp of the index saved at `path`, read alone (a few bytes of the file); None
        when there is none, or it cannot be read."""
        try:
            with np.load(path, allow_pickle=False) as f:
                saved = json.loads(bytes(f["stamp"]).decode())
            if saved.get("format") != FORMAT:
                return None
            physical, token, rows = saved["stamp"]
            return Stamp(physical, token, int(rows))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @classmethod
    def load(cls, path: Path) -> tuple[Bm25, Stamp] | None:
        """The index saved at `path` and its stamp; None when there is none, or it cannot be
        read (rebuilt then)."""
        from scipy.sparse import csc_matrix

        try:
            with np.load(path, allow_pickle=False) as f:
                meta = json.loads(bytes(f["meta"]).decode())
                if meta.get("format") != FORMAT:
                    return None
                self = cls()
                shape = tuple(int(x) for x in f["shape"])
                self.matrix = csc_matrix((f["data"], f["indices"], f["indptr"]), shape=shape)
                self.lengths = f["lengths"]
                self.df = f["df"]
            if meta.get("dense") and meta["ids"]:
                self.vectors = _mapped(path, "vectors.npy")
                if self.vectors.ndim != 2 or self.vectors.shape[0] != len(meta["ids"]):
                    return None
            else:
                self._lose_vectors()
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, struct.error):
            return None
        self.ids, self.docs = meta["ids"], meta["docs"]
        self.fingerprints = meta["fingerprints"]
        self.vocab = Vocabulary(zip(meta["vocab"], range(len(meta["vocab"])), strict=True))
        self.position = {row_id: i for i, row_id in enumerate(self.ids)}
        for row_id, doc_id in zip(self.ids, self.docs, strict=True):
            self.by_doc.setdefault(doc_id, []).append(row_id)
        self.live = np.ones(len(self.ids), dtype=bool)
        self.total = float(self.lengths.sum(dtype=np.float64))
        physical, token, rows = meta["stamp"]
        return self, Stamp(physical, token, int(rows))


class LexicalLeg:
    """The BM25 leg of one collection of a Milvus Lite store: an index trusted only while its
    stamp is the collection's, and brought up to date before it answers.

    `stamp()` asks the collection for its stamp; `rows(fields)` streams its rows; `fetch(ids)`
    reads rows by id; `manifest(token, rows)` gives what the last ingest recorded the collection
    holds (None when it cannot say). With `path`, the index is kept on disk between processes.

    A search (`current`) asks for the stamp at most every POLL_SECONDS, or at once after this
    process wrote to the collection. A different stamp: the file at `path`, when another process
    (the ingest) saved it under that stamp, is loaded; else the index catches up from the
    manifest (documents whose fingerprint changed are read by id, those gone dropped); else it
    is rebuilt from the rows. The new index is built beside the old one and swapped in under a
    lock: searches under way finish on the old one."""

    def __init__(self, stamp: Callable[[bool], Stamp],
                 rows: Callable[[], Iterator[Mapping[str, Any]]],
                 fetch: Callable[[list[str]], list[Mapping[str, Any]]],
                 manifest: Callable[[str, int], Mapping[str, StoredDocument] | None],
                 path: Path | None = None, poll: float = POLL_SECONDS) -> None:
        self._stamp_of = stamp
        self._rows = rows
        self._fetch = fetch
        self._manifest = manifest
        self.path = path
        self.poll = poll
        self._lock = threading.Lock()
        self._index: Bm25 | None = None
        self._stamp: Stamp | None = None
        self._checked = -math.inf
        self._counted = -math.inf
        self.last: str = ""  # how the index in use was made: loaded, caught up, rebuilt, kept
        # The index this process's writes go into (see `upserted`); None before the first write,
        # and once it is caught up; `_unwritable` when a write could not go into it.
        self._written: Bm25 | None = None
        self._unwritable = False
        self._write_lock = threading.Lock()

    def written(self) -> None:
        """This process wrote to the collection: the next search asks for the whole stamp."""
        self._checked = self._counted = -math.inf

    def writing(self) -> None:
        """This process is about to write to the collection: at its first write, the index as
        the collection is now is copied for the writes to go into (`upserted`, `deleted`).
        Where that index cannot be had (the store cannot say its stamp), the writes are not
        followed and the index is caught up or rebuilt from the collection as before."""
        if self._written is None and not self._unwritable:
            try:
                base = self.current()
            except Exception as e:  # noqa: BLE001 - the write itself reports the store's failure
                log.debug(f"lexical index not followed through this process's writes ({e})")
                base = None
            with self._write_lock:
                if self._written is None and not self._unwritable:
                    self._written = _copy(base) if base is not None else None
                    self._unwritable = base is None
        self.written()

    def upserted(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Rows this process upserted (each with its `lexical` text): into the written index."""
        with self._write_lock:
            index = self._written
            if index is None:
                return
            try:
                index.upsert(rows)
            except KeyError:  # rows without their lexical text: caught up from the manifest
                self._written, self._unwritable = None, True
                return
            if index.pending >= max(SEAL_ROWS, index.live.shape[0] // 4):
                index.seal()

    def deleted(self, ids: Iterable[str] = (), documents: Iterable[str] = ()) -> None:
        """Rows (by id) and documents (every row of theirs) this process deleted."""
        with self._write_lock:
            if self._written is not None:
                self._written.delete(ids)
                self._written.delete_documents(documents)

    def forget_writes(self) -> None:
        """The written index dropped (the collection was dropped, or rebuilt in another
        generation): the next index is made from the collection."""
        with self._write_lock:
            self._written, self._unwritable = None, False

    def current(self) -> Bm25:
        """The index as the collection is now."""
        index = self._index
        if index is not None and time.monotonic() - self._checked < self.poll:
            return index
        with self._lock:
            now = time.monotonic()
            if self._index is not None and now - self._checked < self.poll:
                return self._index
            if (self._index is not None and self._stamp is not None and self._stamp.provable
                    and now - self._counted < COUNT_SECONDS):
                light = self._stamp_of(False)
                if (light.physical, light.token) == (self._stamp.physical, self._stamp.token):
                    self.last = "kept"
                    self._checked = time.monotonic()
                    return self._index
            stamp = self._stamp_of(True)
            if self._index is None or self._stamp != stamp:
                self._index = self._made(stamp)
                self._stamp = stamp
                if stamp.provable:  # what this process wrote is in it, or was not needed
                    self.forget_writes()
            else:
                self.last = "kept"
            self._checked = self._counted = time.monotonic()
            return self._index

    def refresh(self) -> Bm25:
        """The index brought up to the collection's stamp now, and saved under it (an ingest
        calls this once its manifest token is recorded, so that every other process loads it
        rather than rebuild)."""
        self.written()
        return self.current()

    def _made(self, stamp: Stamp) -> Bm25:
        started = time.monotonic()
        index = None
        if self.path is not None and stamp.provable:
            # the whole file is read only when it is the one wanted, or the only start there is
            saved = Bm25.saved_stamp(self.path)
            wanted = saved == stamp
            loaded = (Bm25.load(self.path) if saved is not None and (
                wanted or (self._index is None and self._written is None)) else None)
            if loaded is not None and loaded[1] == stamp:
                self.last = "loaded"
                return loaded[0]
            if loaded is not None and self._index is None:
                self._index, self._stamp = loaded
        if stamp.provable:
            index = self._caught_up(stamp)
        if index is None:
            index = Bm25()
            index.upsert(self._rows())
            self.last = "rebuilt"
        index.seal()
        if index.rows != stamp.rows:
            log.info(f"lexical index holds {index.rows} rows, the collection {stamp.rows}: "
                     "rebuilt from its rows")
            index = Bm25()
            index.upsert(self._rows())
            index.seal()
            self.last = "rebuilt"
        if self.path is not None and stamp.provable and index.rows == stamp.rows:
            try:
                index.save(self.path, stamp)
            except OSError as e:  # served from memory; the next process builds it again
                log.warning(f"lexical index not saved at {self.path} ({e})")
        log.debug(f"lexical index {self.last} in {time.monotonic() - started:.2f} s")
        return index

    def _caught_up(self, stamp: Stamp) -> Bm25 | None:
        """The index in memory (or last saved) moved to what the manifest says the collection
        holds, copy on write: None when there is no manifest for this stamp, or nothing to
        start from."""
        with self._write_lock:
            written, base = self._written, self._written or self._index
            if base is None:
                return None
            documents = self._manifest(stamp.token, stamp.rows)
            if documents is None:
                return None
            index = _copy(base)
            if written is not None:
                self._written, self._unwritable = None, False
        stale, gone = index.changed_documents(documents)
        index.delete_documents(gone)
        ids = [i for d in stale for i in documents[d].ids(d)]
        index.delete_documents(stale)
        for start in range(0, len(ids), FETCH_BATCH):
            index.upsert(self._fetch(ids[start:start + FETCH_BATCH]))
        self.last = "caught up" if written is None or stale or gone else "written"
        return index


def _give_back_freed() -> None:
    """The memory freed after a build from the rows handed back to the system: the pages read
    are decoded in reader threads (`MilvusStore.rows`), whose malloc arenas keep what they freed
    (about 130 MiB after 100,000 rows) unless trimmed; a few milliseconds, once a build. glibc
    only; elsewhere nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _mapped(path: Path, member: str) -> np.ndarray:
    """The array `member` of the uncompressed `.npz` at `path`, mapped read-only from the file
    rather than read (the pages every process on the machine maps are one copy, read as they
    are touched). A file replaced later (`os.replace`) leaves the mapping on the old one."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"{member} is compressed")
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        if header[:4] != b"PK\x03\x04":
            raise ValueError(f"no local header for {member}")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        f.seek(info.header_offset + 30 + name_length + extra_length)
        version = np.lib.format.read_magic(f)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(f)
        offset = f.tell()
    if fortran or dtype != np.float32:
        raise ValueError(f"{member} is not a C-ordered float32 array")
    if not all(shape):
        return np.zeros(shape, dtype=np.float32)
    return np.memmap(path, dtype=np.float32, mode="r", offset=offset, shape=shape)


def _json_bytes(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def _copy(index: Bm25) -> Bm25:
    """A copy that can be changed while searches read the original."""
    index.seal()
    other = Bm25.__new__(Bm25)
    other.vocab = Vocabulary(index.vocab)
    other.ids = list(index.ids)
    other.docs = list(index.docs)
    other.position = dict(index.position)
    other.fingerprints = dict(index.fingerprints)
    other.by_doc = {d: list(v) for d, v in index.by_doc.items()}
    other.matrix = index.matrix
    other.lengths = index.lengths
    other.live = index.live.copy()
    other.df = index.df.copy()
    other.total = index.total
    other.dense = index.dense
    other.vectors = index.vectors  # never changed in place: sealing and compacting make anew
    other._clear_pending()
    other._csr = index._csr
    other._recent = {}
    other._recent_lock = threading.Lock()
    other._denominators_of = None
    other._denominators_cache = index._denominators_cache
    return other
