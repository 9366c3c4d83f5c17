"""Which parts of a structural context help retrieval, on the codebase benchmark and a held-out
corpus: an ablation run in one process (one model load, each distinct text embedded once).

Variants: no context; the structural context with the list of the document's names (12); without
the document summary; without the names; path and enclosing definitions only; and the same placed
after the chunk instead of before it (what a 256-token embedder then truncates is the context, not
the chunk). Dense, BM25 and hybrid retrieval through the same MilvusStore the pipeline uses.

    .venv/bin/python benchmarks/bench_contexts.py [--out benchmarks/results/contexts.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from situate.core.records import EmbeddedDocument  # noqa: E402
from situate.storage.milvus import MilvusStore  # noqa: E402
from situate.tasks.contexts.base import NoContext  # noqa: E402
from situate.tasks.contexts.structural import StructuralContextualizer  # noqa: E402
from situate.tasks.corpus.load import load_corpus  # noqa: E402
from situate.tasks.embedders.base import Embedders  # noqa: E402
from situate.tasks.retrieval.metrics import load_eval_set, mean_pass_at_k  # noqa: E402
from situate.tasks.retrieval.search import answer  # noqa: E402

CODEBASE = ROOT / "data" / "benchmarks" / "codebase"
VARIANTS = {
    "none": (NoContext(), "before"),
    "structural": (StructuralContextualizer(max_names=12), "before"),
    "no-summary": (StructuralContextualizer(max_names=12, summary=False), "before"),
    "no-names": (StructuralContextualizer(max_names=0), "before"),
    "path+inside": (StructuralContextualizer(max_names=0, summary=False), "before"),
    "structural-after": (StructuralContextualizer(max_names=12), "after"),
    "after-names6": (StructuralContextualizer(max_names=6), "after"),
    "after-no-names": (StructuralContextualizer(max_names=0), "after"),  # the default since then
    "after-path+inside": (StructuralContextualizer(max_names=0, summary=False), "after"),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "contexts.json"))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    args = ap.parse_args()
    emb = Embedders().get("minilm")
    vectors: dict[str, list[float]] = {}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        held = Path(tmp) / "heldout"
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "heldout.py"), str(held)],
                       check=True, capture_output=True)
        corpora = {"codebase": (CODEBASE / "codebase_chunks.json", CODEBASE / "evaluation_set.jsonl"),
                   "heldout": (held / "corpus", held / "eval.jsonl")}
        store = MilvusStore(f"{tmp}/m.db")
        for corpus_name, (corpus_path, eval_path) in corpora.items():
            docs = load_corpus(corpus_path).documents
            queries = load_eval_set(eval_path)
            for variant in args.variants:
                contextualizer, placement = VARIANTS[variant]
                rows = []
                for d in docs:
                    situated = contextualizer.situate(d, d.chunks).situated
                    texts = []
                    for s in situated:
                        if not s.context:
                            texts.append(s.chunk.text)
                        elif placement == "before":
                            texts.append(f"{s.context}\n\n{s.chunk.text}")
                        else:
                            texts.append(f"{s.chunk.text}\n\n{s.context}")
                    rows.append((d, tuple(situated), texts))
                todo = list(dict.fromkeys(t for _, _, ts in rows for t in ts if t not in vectors))
                for t, v in zip(todo, emb.embed_documents(todo), strict=True):
                    vectors[t] = v
                collection = f"{corpus_name}_{variant.replace('-', '_').replace('+', '_')}"
                store.ensure_collection(collection, emb.dim, emb.id)
                # The dense vector is the placement's text; the store indexes chunk + context for
                # BM25, which is order-blind, so the placement changes the dense leg only.
                store.write(collection, [EmbeddedDocument(d, "", situated, [vectors[t] for t in ts])
                                         for d, situated, ts in rows])
                scores = {}
                for mode in ("dense", "bm25", "hybrid"):
                    hits = [answer(store, collection, q.query, mode, 20, emb) for q in queries]
                    cases = [(q.golden, [(h.doc_id, h.text) for h in hs]) for q, hs in zip(queries, hits,
                                                                                           strict=True)]
                    scores[mode] = {str(k): round(mean_pass_at_k(cases, k), 2) for k in (5, 10, 20)}
                results.append({"corpus": corpus_name, "variant": variant, "pass_at_k": scores})
                print(corpus_name, variant, json.dumps(scores), flush=True)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
