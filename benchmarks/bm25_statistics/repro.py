"""Minimal reproduction for issue 21: do Milvus-Lite BM25 statistics follow deletes and upserts?

Usage:  .venv/bin/python benchmarks/bm25_statistics/repro.py lite|server  [--json out.json]

For each candidate maintenance action, compares the BM25 scores of a fixed query on
  (a) a "mutated" collection: first ingested from a drifted corpus, then brought up to date by
      upserts (same pk, changed text / unchanged text), a delete by id, a delete by filter, an insert;
  (b) a "fresh" collection holding exactly the final rows (inserted in one batch, then flushed,
      like a fresh situate ingest whose process exits).
identical = same hit set and every score equal (exact float equality).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bm25_scores, compare, create, data_files, dense_scores, make_backend  # noqa: E402

QUERY = "apple pie recipe"
DVEC = [0.1, 0.2, 0.3, 0.4]


def vec(i: int) -> list[float]:
    return [1.0 + i % 3, 0.5 * (i % 5), 0.25 * (i % 7) + 0.1, 1.0]


DRIFTED = {
    "c0": ("doc0", "apple pie recipe with cinnamon and sugar"),
    "c1": ("doc1", "apple orchard tour in the autumn"),                 # deleted by id
    "c2": ("doc2", "banana bread recipe and an apple pie"),             # deleted by filter doc_id
    "c3": ("doc3", "apple apple pie"),                                  # upsert: text changed
    "c4": ("doc4", "pie crust tips for every baker"),                   # upsert: text unchanged
    "c5": ("doc5", "the weather today is sunny and warm"),
    "c6": ("doc6", "stock market news and quarterly results"),
    "c7": ("doc7", "a recipe for tomato soup"),
    "c8": ("doc8", "how to repair a bicycle tire"),
    "c9": ("doc9", "notes on a trip to the mountains in spring"),
}
FINAL = dict(DRIFTED)
del FINAL["c1"], FINAL["c2"]
FINAL["c3"] = ("doc3", "cherry tart recipe with a very long description of pastry butter flour "
                       "eggs sugar and a hot oven for forty minutes")
FINAL["c10"] = ("doc10", "apple cider recipe")                         # new row


def rows(d: dict) -> list[dict]:
    return [{"id": k, "doc_id": v[0], "lexical": v[1], "dense": vec(int(k[1:]))}
            for k, v in d.items()]


def mutate(client, name: str) -> None:
    """Bring a collection ingested from DRIFTED up to date (what situate's incremental write does)."""
    client.upsert(name, [r for r in rows(FINAL) if r["id"] in ("c3", "c4", "c10")])
    client.delete(name, ids=["c1"])
    client.delete(name, filter='doc_id == "doc2"')


def oracle(stats_docs: dict, score_ids: list, k1: float = 1.5, b: float = 0.75) -> dict:
    """BM25 as milvus_lite/index/sparse_inverted.py computes it, with N/df/avgdl taken from
    `stats_docs` (id -> text) and scores for `score_ids` (a subset of stats_docs)."""
    import math
    import re
    from collections import Counter
    tok = lambda t: re.findall(r"\w+", t.lower())
    tfs = {k: Counter(tok(t)) for k, t in stats_docs.items()}
    N = len(tfs)
    avgdl = sum(sum(c.values()) for c in tfs.values()) / N
    q = Counter(tok(QUERY))
    out = {}
    for k in score_ids:
        s = 0.0
        dl = sum(tfs[k].values())
        for term, w in q.items():
            df = sum(1 for c in tfs.values() if term in c)
            tf = tfs[k].get(term, 0)
            if not df or not tf:
                continue
            idf = math.log((N - df + 0.5) / (df + 0.5) + 1.0)
            s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)) * w
        if s:
            out[k] = s
    return out


def check_oracle(label: str, got: dict, units: list) -> bool:
    """units: list of (stats_docs, ids scored with those stats)."""
    pred = {}
    for stats_docs, ids in units:
        pred.update(oracle(stats_docs, ids))
    ok = set(pred) == set(got) and all(abs(pred[k] - got[k]) < 1e-5 * max(1, pred[k]) for k in got)
    print(f"   oracle[{label}]: {'MATCH' if ok else 'MISMATCH'} pred={ {k: round(v, 5) for k, v in sorted(pred.items())} }")
    return ok


class Log:
    def __init__(self):
        self.rows = []

    def check(self, be, label: str, m: str, f: str, extra: str = ""):
        c = be.client
        a, b = bm25_scores(c, m, QUERY), bm25_scores(c, f, QUERY)
        ident, diff, same = compare(a, b)
        da, db = dense_scores(c, m, DVEC), dense_scores(c, f, DVEC)
        dident, ddiff, _ = compare(da, db)
        cnt = c.query(m, filter="", output_fields=["count(*)"])[0]["count(*)"]
        segs = (len(data_files(be.root, m)), len(data_files(be.root, f)))
        rec = {"step": label, "bm25_identical": ident, "max_diff": round(diff, 6),
               "same_hits": same, "dense_identical": dident, "dense_max_diff": ddiff, "rows": cnt,
               "segments_mut_fresh": segs, "mutated": a, "fresh": b, "extra": extra}
        self.rows.append(rec)
        print(f"{label:55s} bm25_identical={ident!s:5s} max|d|={diff:.6f} same_hits={same!s:5s} "
              f"dense_identical={dident!s:5s}({ddiff:.1e}) rows={cnt} segs(m,f)={segs} {extra}", flush=True)
        return rec


def wait_segments(be, name: str, target: int, timeout: float = 30.0) -> int:
    t0 = time.time()
    while time.time() - t0 < timeout:
        n = len(data_files(be.root, name))
        if n <= target:
            return n
        time.sleep(0.2)
    return len(data_files(be.root, name))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("backend", choices=["lite", "server"])
    ap.add_argument("--json")
    args = ap.parse_args()
    work = os.path.join(tempfile.gettempdir(), f"situate_bm25_repro_{args.backend}")
    be = make_backend(args.backend, work)
    log = Log()
    try:
        c = be.client
        print(f"== {args.backend}: query={QUERY!r}")
        # --- Stage A: everything still in the MemTable (no flush anywhere) ---
        create(c, "mA"); create(c, "fA")
        c.insert("mA", rows(DRIFTED)); mutate(c, "mA")
        c.insert("fA", rows(FINAL))
        log.check(be, "A memtable-only: mutated vs fresh (no flush)", "mA", "fA")

        # --- Stage B: drifted ingest was flushed (previous run exited), then updated ---
        create(c, "mB"); create(c, "fB")
        c.insert("mB", rows(DRIFTED)); c.flush("mB")
        c.insert("fB", rows(FINAL)); c.flush("fB")
        mutate(c, "mB")
        r = log.check(be, "B0 after upserts+deletes (nothing)", "mB", "fB")
        T = lambda d: {k: v[1] for k, v in d.items()}
        upd = ["c3", "c4", "c10"]
        old_live = [k for k in FINAL if k not in upd]
        # hypothesis: segment 1 = ALL drifted rows (deleted + overwritten included) for statistics,
        # MemTable = only the upserted rows; fresh = the final rows.
        check_oracle("B0 mutated: seg1 stats over all 10 drifted rows + memtable stats over 3 upserts",
                     r["mutated"], [(T(DRIFTED), old_live), ({k: FINAL[k][1] for k in upd}, upd)])
        check_oracle("fresh: one unit over the 9 final rows", r["fresh"], [(T(FINAL), list(FINAL))])
        cid = c.compact("mB")
        st = c.get_compaction_state(cid)
        log.check(be, "B1 compact (no flush) + get_compaction_state", "mB", "fB", f"state={st}")
        c.release_collection("mB"); c.load_collection("mB")
        log.check(be, "B2 release + load", "mB", "fB")
        c = be.reopen_client()
        c.load_collection("mB"); c.load_collection("fB")
        log.check(be, "B3 client.close + new client", "mB", "fB")
        c.flush("mB")
        r = log.check(be, "B4 flush", "mB", "fB")
        check_oracle("B4 mutated: seg1 all 10 drifted rows + seg2 the 3 upserted rows",
                     r["mutated"], [(T(DRIFTED), old_live), ({k: FINAL[k][1] for k in upd}, upd)])
        cid = c.compact("mB")
        t0 = time.time()
        while str(c.get_compaction_state(cid)) not in ("Completed", "CompactionState.Completed") \
                and time.time() - t0 < 30:
            time.sleep(0.2)
        log.check(be, "B5 flush + compact + wait Completed", "mB", "fB",
                  f"state={c.get_compaction_state(cid)}")
        c.release_collection("mB"); c.load_collection("mB")
        log.check(be, "B6 flush + release + load", "mB", "fB")
        c = be.reopen_db()
        c.load_collection("mB"); c.load_collection("fB")
        log.check(be, "B7 close DB + reopen (Lite: release_server; server: restart)", "mB", "fB")

        # --- Stage C: size-tiered auto compaction (>=4 data files in one size bucket) ---
        create(c, "mC")
        c.insert("mC", rows(DRIFTED)); c.flush("mC")
        mutate(c, "mC"); c.flush("mC")
        log.check(be, "C0 2 segments (drifted + update)", "mC", "fB")
        keep = [r for r in rows(FINAL) if r["id"] == "c9"]
        c.upsert("mC", keep); c.flush("mC")
        log.check(be, "C1 3 data files (unchanged row re-upserted + flush)", "mC", "fB")
        c.upsert("mC", keep); c.flush("mC")
        n = wait_segments(be, "mC", 1)
        log.check(be, "C2 4th data file -> background compaction", "mC", "fB", f"files_after={n}")

        # --- Stage D: in-place refresh: re-upsert every live row (no new collection) ---
        create(c, "mD")
        c.insert("mD", rows(DRIFTED)); c.flush("mD")
        mutate(c, "mD"); c.flush("mD")
        live = c.query("mD", filter="", output_fields=["id", "doc_id", "lexical", "dense"])
        c.upsert("mD", live)
        log.check(be, "D0 re-upsert all live rows (memtable)", "mD", "fB")
        c.flush("mD")
        log.check(be, "D1 re-upsert all live rows + flush", "mD", "fB")

        # --- Stage E: rebuild = new collection, re-insert the final rows read back ---
        create(c, "mE")
        live = c.query("mB", filter="", output_fields=["id", "doc_id", "lexical", "dense"])
        c.insert("mE", live); c.flush("mE")
        log.check(be, "E0 rebuild (new collection from mB's rows) + flush", "mE", "fB")

        # --- Stage F: fresh collections: does segmentation change scores? ---
        create(c, "f1mem"); c.insert("f1mem", rows(FINAL))
        log.check(be, "F0 fresh 1 batch, memtable vs fresh 1 batch+flush", "f1mem", "fB")
        create(c, "f10mem")
        for r in rows(FINAL):
            c.insert("f10mem", [r])
        log.check(be, "F1 fresh 1-row batches (memtable) vs 1 batch+flush", "f10mem", "fB")
        create(c, "f2seg")
        fr = rows(FINAL)
        c.insert("f2seg", fr[:4]); c.flush("f2seg"); c.insert("f2seg", fr[4:]); c.flush("f2seg")
        log.check(be, "F2 fresh 2 batches with flush between vs 1 segment", "f2seg", "fB")
        create(c, "f3seg")
        for part in (fr[:3], fr[3:6], fr[6:]):
            c.insert("f3seg", part); c.flush("f3seg")
        log.check(be, "F3 fresh 3 batches, flush after each (3 segments)", "f3seg", "fB")
        create(c, "f9seg")
        for r in fr:
            c.insert("f9seg", [r]); c.flush("f9seg")
        n = wait_segments(be, "f9seg", 1, timeout=10)
        log.check(be, "F4 fresh 9 one-row flushes (auto compaction runs)", "f9seg", "fB",
                  f"files={n}")

        # --- Stage H: one segment, deletes only / unchanged re-upserts only ---
        live8 = {k: v for k, v in DRIFTED.items() if k not in ("c1", "c2")}
        create(c, "mH"); create(c, "fH")
        c.insert("mH", rows(DRIFTED)); c.flush("mH")
        c.insert("fH", rows(live8)); c.flush("fH")
        c.delete("mH", ids=["c1", "c2"])
        r = log.check(be, "H0 one flushed segment, 2 rows deleted (memtable holds only tombstones)",
                      "mH", "fH")
        check_oracle("H0 mutated: stats over all 10 rows incl. the 2 deleted", r["mutated"],
                     [(T(DRIFTED), list(live8))])
        c.flush("mH")
        log.check(be, "H1 ... + flush (delta file, same data file)", "mH", "fH")
        create(c, "mI")
        c.insert("mI", rows(live8)); c.flush("mI")
        c.upsert("mI", [r_ for r_ in rows(live8) if r_["id"] in ("c0", "c3")]); c.flush("mI")
        r = log.check(be, "I0 8 rows flushed, 2 re-upserted UNCHANGED + flush", "mI", "fH")
        check_oracle("I0: seg1 all 8 rows, seg2 the 2 re-upserted rows", r["mutated"],
                     [(T(live8), [k for k in live8 if k not in ("c0", "c3")]),
                      ({k: live8[k][1] for k in ("c0", "c3")}, ["c0", "c3"])])

        # --- Stage G: side check: does a filter change BM25 statistics? ---
        ids = ["c0", "c3"]
        flt = f'id in {json.dumps(ids)}'
        for name, where in (("f1mem", "memtable"), ("fB", "segment")):
            full = bm25_scores(c, name, QUERY)
            res = c.search(name, data=[QUERY], anns_field="sparse", limit=10, filter=flt,
                           search_params={"metric_type": "BM25"}, output_fields=["id"])
            sub = {h["id"]: abs(float(h["distance"])) for h in res[0]}
            same = all(sub[k] == full.get(k) for k in sub)
            print(f"G filter {flt} on {where}: unfiltered={ {k: full.get(k) for k in sub} } "
                  f"filtered={sub} same={same}")
            log.rows.append({"step": f"G filter on {where}", "unfiltered": {k: full.get(k) for k in sub},
                             "filtered": sub, "same": same})
    finally:
        be.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(log.rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
