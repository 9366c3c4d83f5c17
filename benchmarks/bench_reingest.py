"""Re-ingest benchmark: what a scheduled ingest of an unchanged corpus costs next to the first one.

Runs, in one process and one temporary Prefect server, on a copy of the codebase dataset:
1. the first ingest (fresh collection, fresh context cache) — the reference;
2. re-ingests of the unchanged corpus (median of --repeats) — must make no context call, embed
   nothing and write nothing, in at most 10% of the reference's wall time;
3. a re-ingest after changing 3 documents, deleting 2 and adding 1 (with prune) — exactly those
   4 documents are processed, the 2 are deleted, and every document's stored rows are exactly
   its current chunks.

Usage: .venv/bin/python benchmarks/bench_reingest.py [--embedder minilm] [--context structural]
       [--repeats 3] [--out benchmarks/REINGEST_RESULTS.md]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CODEBASE = ROOT / "data" / "benchmarks" / "codebase" / "codebase_chunks.json"
sys.path.insert(0, str(ROOT))

for _k, _v in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}.items():
    os.environ.setdefault(_k, _v)

NEW_DOC = "doc_added_by_bench"


def mutate(corpus: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Change 3 documents, delete 2, add 1; returns the new corpus and which ids got what.

    The changes cover the three ways a document changes: an edited chunk (same chunk ids), a
    removed last chunk (one stale id to delete) and an appended chunk (one new id).
    """
    data = copy.deepcopy(corpus)
    multi = [d for d in data if len(d["chunks"]) >= 3]
    edited, shrunk, grown = multi[0], multi[1], multi[2]
    edited["chunks"][0]["content"] += "\n# edited: handles the empty case too\n"
    edited["content"] = "".join(c["content"] for c in edited["chunks"])
    dropped = shrunk["chunks"].pop()
    shrunk["content"] = shrunk["content"].replace(dropped["content"], "")
    extra = 'def added_helper(value):\n    """Appended in the re-ingest benchmark."""\n    return value\n'
    grown["chunks"].append({"chunk_id": f"{grown['doc_id']}_extra",
                            "original_index": max(c["original_index"] for c in grown["chunks"]) + 1,
                            "content": extra})
    grown["content"] += extra
    changed = {edited["doc_id"], shrunk["doc_id"], grown["doc_id"]}
    candidates = [d["doc_id"] for d in data if d["doc_id"] not in changed]
    deleted = [candidates[-1], candidates[-2]]
    data = [d for d in data if d["doc_id"] not in deleted]
    chunks = ["Retry budget for the flaky network client: give up after five attempts.\n",
              "def retry_budget(attempts):\n    return min(attempts, 5)\n"]
    data.append({"doc_id": NEW_DOC, "original_uuid": NEW_DOC, "content": "".join(chunks),
                 "chunks": [{"chunk_id": f"{NEW_DOC}_{i}", "original_index": i, "content": c}
                            for i, c in enumerate(chunks)]})
    return data, {"changed": sorted(changed), "deleted": sorted(deleted), "added": [NEW_DOC]}


@contextmanager
def processed_documents() -> Iterator[list[str]]:
    """The ids of the documents the ingest flow situates while in the block, sorted at the end.

    A window task situates its documents through `situate.tasks.contexts.cache.situate_document`;
    this wraps it for the block (in-process runs with the thread runner, as here).
    """
    import situate.tasks.contexts.cache as ingest

    seen: list[str] = []
    lock = threading.Lock()
    real = ingest.situate_document

    def recording(contextualizer: Any, doc: Any, cache: Any) -> Any:
        with lock:
            seen.append(doc.id)
        return real(contextualizer, doc, cache)

    ingest.situate_document = recording
    try:
        yield seen
    finally:
        ingest.situate_document = real
        seen.sort()


def expected_rows(corpus_path: Path) -> dict[str, list[tuple[str, int, str]]]:
    """doc id -> sorted (chunk id, index, text) the store must hold for the corpus file."""
    from situate.tasks.corpus.load import load_corpus

    return {d.id: sorted((c.id, c.index, c.text) for c in d.chunks)
            for d in load_corpus(corpus_path).documents}


def stored_rows(uri: str, collection: str, doc_ids: list[str]) -> dict[str, list[tuple[str, int, str]]]:
    """The same, read back from Milvus one document at a time (a filter on doc_id)."""
    from situate.storage.milvus import MilvusStore

    with MilvusStore(uri) as store:
        return {d: sorted((r["id"], r["chunk_index"], r["text"]) for r in store.rows(
            collection, fields=("id", "chunk_index", "text"), filter=f"doc_id == {json.dumps(d)}"))
            for d in doc_ids}


class Counters:
    """Counts what reaches the embedder and the store, by wrapping the two calls in this process."""

    def __init__(self) -> None:
        self.embedded = 0
        self.upserted = 0
        self.deleted_calls = 0

    def install(self) -> None:
        from situate.storage.milvus import MilvusStore
        from situate.tasks.embedders.base import Embedder

        def wrap(cls: type, name: str, count: Callable[[tuple], None]) -> None:
            original = getattr(cls, name)

            def counted(self_: Any, *args: Any, **kwargs: Any) -> Any:
                count(args)
                return original(self_, *args, **kwargs)

            setattr(cls, name, counted)

        wrap(Embedder, "embed_documents", lambda a: self._add("embedded", len(a[0])))
        # `write` builds each batch's rows and upserts them (lists) through `upsert`, and deletes a
        # changed document's stale chunks through `delete_ids`: counting those two sees every row.
        wrap(MilvusStore, "upsert", lambda a: self._add("upserted", len(a[1])))
        wrap(MilvusStore, "delete_ids", lambda a: self._add("deleted_calls", int(bool(a[1]))))
        wrap(MilvusStore, "delete_documents", lambda a: self._add("deleted_calls", int(bool(a[1]))))

    def _add(self, name: str, n: int) -> None:
        setattr(self, name, getattr(self, name) + n)

    def take(self) -> dict[str, int]:
        out = {"embedded": self.embedded, "upserted": self.upserted, "delete_calls": self.deleted_calls}
        self.embedded = self.upserted = self.deleted_calls = 0
        return out


def cold_reingest(params: dict[str, Any]) -> dict[str, Any]:
    """The unchanged re-ingest as a scheduled deployment run does it: a fresh process (`situate
    ingest`), which must import everything and load nothing it does not need, against the same
    Prefect server."""
    import subprocess

    # Milvus Lite: one process per file, and the child needs it (every run closed its store)
    from milvus_lite.server_manager import server_manager_instance
    from prefect.settings import PREFECT_API_URL

    server_manager_instance.release_all()
    cmd = [str(Path(sys.executable).with_name("situate")), "ingest", params["corpus"], "--collection",
           params["collection"], "--context", params["context"], "--embedder", params["embedder"],
           "--prune"]
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    fields = dict(line.split(None, 1) for line in proc.stdout.splitlines()[1:] if line.strip())
    return {"seconds": seconds, "command": " ".join(cmd[1:]),
            "chunks_written": int(fields["chunks_written"]), "unchanged": int(fields["unchanged"])}


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from prefect.testing.utilities import prefect_test_harness

    os.environ["SITUATE_MILVUS_URI"] = str(work / "milvus.db")
    os.environ["SITUATE_CACHE_DIR"] = str(work / "cache")
    os.environ["SITUATE_RESULTS_DIR"] = str(work / "results")
    from situate.core.settings import get_settings
    from situate.flows.ingest import ingest_flow
    from situate.pipeline.options import IngestOptions

    get_settings.cache_clear()
    counters = Counters()
    counters.install()
    corpus = work / "codebase_chunks.json"
    original = json.loads(CODEBASE.read_text())
    corpus.write_text(json.dumps(original))
    params = {"corpus": str(corpus), "collection": "reingest", "context": args.context,
              "embedder": args.embedder, "prune": True}

    def ingest() -> tuple[float, dict[str, Any], list[str], dict[str, int]]:
        t = time.perf_counter()
        with processed_documents() as docs:
            summary = ingest_flow(IngestOptions.build(**params)).model_dump()
        seconds = time.perf_counter() - t
        return seconds, summary, docs, counters.take()

    out: dict[str, Any] = {}
    with prefect_test_harness(server_startup_timeout=180):
        first_s, first, first_docs, first_counts = ingest()
        out["first"] = {"seconds": first_s, "summary": first, "processed": len(first_docs),
                        "counts": first_counts}
        repeats = [ingest() for _ in range(args.repeats)]
        out["unchanged"] = [{"seconds": s, "summary": r, "processed": docs, "counts": c}
                            for s, r, docs, c in repeats]
        out["cold"] = cold_reingest(params)
        mutated, what = mutate(original)
        corpus.write_text(json.dumps(mutated))
        mut_s, mut, mut_docs, mut_counts = ingest()
        expected = expected_rows(corpus)
        stored = stored_rows(str(work / "milvus.db"), "reingest", sorted(expected) + what["deleted"])
    out["mutated"] = {"seconds": mut_s, "summary": mut, "processed": mut_docs, "counts": mut_counts,
                      "what": what,
                      "rows_match": all(stored[d] == expected[d] for d in expected),
                      "deleted_rows_left": sum(len(stored[d]) for d in what["deleted"]),
                      "expected_rows": sum(len(v) for v in expected.values())}
    return out


def report(args: argparse.Namespace, out: dict[str, Any]) -> tuple[str, bool]:
    first, unchanged, mut = out["first"], out["unchanged"], out["mutated"]
    median = statistics.median(u["seconds"] for u in unchanged)
    ratio = median / first["seconds"]
    zero = all(u["processed"] == [] and u["counts"] == {"embedded": 0, "upserted": 0, "delete_calls": 0}
               and u["summary"]["contexts_generated"] == 0 and u["summary"]["contexts_from_cache"] == 0
               for u in unchanged)
    w = mut["what"]
    exact = (mut["processed"] == sorted(w["changed"] + w["added"])
             and mut["summary"]["deleted_documents"] == 2 and mut["rows_match"]
             and mut["deleted_rows_left"] == 0 and mut["summary"]["rows"] == mut["expected_rows"])
    ok = zero and ratio <= 0.10 and exact
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    lines = [
        "# Re-ingest benchmark", "",
        f"Command: `.venv/bin/python benchmarks/bench_reingest.py --embedder {args.embedder} "
        f"--context {args.context} --repeats {args.repeats}`  ",
        f"Machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.  ",
        f"Corpus: a copy of `codebase_chunks.json` ({first['summary']['documents']} documents, "
        f"{first['summary']['rows']} chunks); Milvus Lite; flows run in this one process, one "
        "temporary Prefect server, so both timings include the same Prefect overhead.", "",
        "| run | wall s | docs situated | texts embedded | rows upserted | contexts generated | "
        "contexts from cache | rows |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def row(name: str, r: dict[str, Any], processed: int) -> str:
        s = r["summary"]
        return (f"| {name} | {r['seconds']:.2f} | {processed} | {r['counts']['embedded']} | "
                f"{r['counts']['upserted']} | {s['contexts_generated']} | {s['contexts_from_cache']} | "
                f"{s['rows']} |")

    lines.append(row("first ingest (reference)", first, first["processed"]))
    for n, u in enumerate(unchanged, start=1):
        lines.append(row(f"unchanged re-ingest #{n}", u, len(u["processed"])))
    lines.append(row("3 changed, 2 deleted, 1 added (--prune)", mut, len(mut["processed"])))
    lines += [
        "",
        f"- Unchanged re-ingest, median of {len(unchanged)}: **{median:.2f} s = {100 * ratio:.1f}% of the "
        f"first ingest** ({first['seconds']:.2f} s); target ≤ 10%: {'met' if ratio <= 0.10 else 'NOT met'}.",
        f"- Unchanged re-ingest made zero context calls, embedded zero texts and wrote zero rows: "
        f"{'yes' if zero else 'NO'}.",
        f"- Mutated corpus: situated exactly {', '.join(mut['processed'])} (expected the changed "
        f"{', '.join(w['changed'])} and the added {', '.join(w['added'])}); deleted "
        f"{mut['summary']['deleted_documents']} documents ({', '.join(w['deleted'])}), "
        f"{mut['deleted_rows_left']} of their rows left; rows {mut['summary']['rows']} "
        f"(expected {mut['expected_rows']}); every document's rows, queried by doc_id, equal its "
        f"current chunks: {'yes' if mut['rows_match'] else 'NO'}.",
        f"- Stage seconds, first ingest: {first['summary']['seconds']}; unchanged re-ingest #1: "
        f"{unchanged[0]['summary']['seconds']}.",
        f"- The same unchanged re-ingest in a fresh process, as a scheduled deployment run does it "
        f"(`situate {out['cold']['command'].split(' ', 1)[0]} ...` against the same Prefect server): "
        f"{out['cold']['seconds']:.2f} s = {100 * out['cold']['seconds'] / first['seconds']:.1f}% of "
        f"the first ingest; {out['cold']['chunks_written']} chunks written, "
        f"{out['cold']['unchanged']} documents unchanged.",
        "", f"Result: {'PASS' if ok else 'FAIL'}.", "",
    ]
    return "\n".join(lines), ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--context", default="structural")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "REINGEST_RESULTS.md"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="situate-reingest-") as tmp:
        out = run(args, Path(tmp))
    text, ok = report(args, out)
    Path(args.out).write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
