"""Benchmark of `--context anthropic`: cost, robustness and speed against the loopback fake service.

Every figure is measured in this run and set beside a reference computed in the same run from the
workload's token counts (never from the code path that bills):

1. codebase corpus, 50 ms latency, concurrency 8: cache writes (one per cacheable document, none
   under the floor), every chunk contextualized, bill vs the minimum the pricing rules allow;
2. Anthropic's assumed shape (8k-token documents, 800-token chunks): $ per million document
   tokens at Claude 3 Haiku prices (published: $1.02) and at Haiku 4.5 prices;
3. 10% of requests failing (429/529/500/dropped): completeness, no duplicates, nothing refused;
4. a second run: zero API calls; a run killed with SIGKILL halfway: the restart pays only for the
   chunks not yet answered, and both runs together pay for at most chunks + concurrency answers
   (each answer is cached as it arrives: only those on the wire at the kill are lost);
5. throughput at 200 ms latency, concurrency 16, vs the ideal schedule;
6. `--batch`: completeness and bill vs the interactive bill;
7. `--group-chunks`: completeness and bill vs per-chunk mode, context lengths held equal.

Usage: .venv/bin/python benchmarks/bench_claude.py [--quick] [--out FILE]
(writes benchmarks/results/claude.json unless --out says otherwise)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from situate.core.records import Chunk, Document, Usage  # noqa: E402
from situate.storage.cache import DiskContextCache  # noqa: E402
from situate.tasks.contexts.base import ContextConfig, ContextResult  # noqa: E402
from situate.tasks.contexts.cache import situate_corpus_cached, situate_document  # noqa: E402
from situate.tasks.contexts.claude import (  # noqa: E402
    MODELS,
    AnthropicContextualizer,
    Pricing,
    chunk_prompt,
    document_block,
    fence_of,
    price,
)
from situate.tasks.corpus.load import load_corpus  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, Faults, count_tokens  # noqa: E402

CORPUS = ROOT / "data" / "benchmarks" / "codebase" / "codebase_chunks.json"
RESULTS = ROOT / "benchmarks" / "results" / "claude.json"
KEY = "sk-ant-bench-not-a-real-key"
OUTPUT_TOKENS = 100  # every context is this long, in every mode (Anthropic's assumption too)
HAIKU45, HAIKU3 = "claude-haiku-4-5", "claude-3-haiku-20240307"
KILL_CONCURRENCY = 8  # of the run the SIGKILL scenario kills


# --- the reference: the minimum bill of a workload, from its token counts ------------------------

def minimum_bill(docs: Sequence[Document], pricing: Pricing, floor: int,
                 batch: bool = False) -> float:
    """The least the pricing rules allow for one guide-prompt request per chunk.

    Per document: its prefix P (the document block) and per chunk a suffix S_i and an output O.
    Either everything uncached (n * P at the input price), or, when P reaches the model's minimum
    cacheable length, one 5-minute cache write of P and n - 1 reads of it; whichever is cheaper.
    """
    total = 0.0
    for doc in docs:
        n = len(doc.chunks)
        if n == 0:
            continue
        fence = fence_of(doc)
        p = count_tokens(document_block(doc.text, fence))
        s = sum(count_tokens(chunk_prompt(c.text, fence)) for c in doc.chunks)
        fixed = s * pricing.input + n * OUTPUT_TOKENS * pricing.output
        options = [n * p * pricing.input]
        if p >= floor:
            options.append(p * pricing.cache_write + (n - 1) * p * pricing.cache_read)
        total += (fixed + min(options)) / 1e6
    return total * (0.5 if batch else 1.0)


def doc_tokens(docs: Sequence[Document]) -> int:
    return sum(count_tokens(d.text) for d in docs)


# --- running the contextualizer the way the flow does --------------------------------------------

def make(fake: FakeAnthropic, model: str = HAIKU45, concurrency: int = 8, **kwargs: Any
         ) -> AnthropicContextualizer:
    extra = {"base_url": fake.base_url, "retry_base_seconds": 0.05, "batch_poll_seconds": 0.05,
             **kwargs.pop("extra", {})}
    return AnthropicContextualizer(ContextConfig(name="anthropic", model=model,
                                                 concurrency=concurrency, extra=extra, **kwargs),
                                   api_key=KEY)


def run(cz: AnthropicContextualizer, docs: Sequence[Document], cache: DiskContextCache | None
        ) -> tuple[list[ContextResult], float]:
    """Every document through `situate_document`, documents fanned out over threads like the
    flow's task mapping; one contextualizer shared."""
    start = time.perf_counter()
    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda d: situate_document(cz, d, cache), docs))
    return results, time.perf_counter() - start


def total(results: Sequence[ContextResult]) -> Usage:
    usage = Usage()
    for r in results:
        usage.add(r.usage)
    return usage


def invoice(fake: FakeAnthropic, pricing: Pricing) -> float:
    """The service's own count of tokens, priced: what the account would be charged."""
    out = 0.0
    for tier, counts in fake.usage.items():
        u = Usage(input_tokens=counts["input_tokens"], output_tokens=counts["output_tokens"],
                  cache_write_tokens=counts["cache_creation_input_tokens"],
                  cache_read_tokens=counts["cache_read_input_tokens"])
        out += price(u, pricing, batch=tier == "batch")
    return out


def complete(results: Sequence[ContextResult], docs: Sequence[Document]) -> dict[str, int]:
    """Chunks with a context, and rows that are not unique (a chunk situated twice)."""
    ids = [s.chunk.id for r in results for s in r.situated]
    with_context = sum(1 for r in results for s in r.situated if s.context)
    return {"chunks": sum(len(d.chunks) for d in docs), "with_context": with_context,
            "rows": len(ids), "duplicate_rows": len(ids) - len(set(ids))}


def cacheable_docs(docs: Sequence[Document], floor: int) -> int:
    """Documents whose prefix reaches the floor and that have two chunks or more."""
    return sum(1 for d in docs if len(d.chunks) >= 2
               and count_tokens(document_block(d.text, fence_of(d))) >= floor)


def within(measured: float, reference: float, tolerance: float = 0.01) -> bool:
    return abs(measured - reference) <= tolerance * reference


# --- the scenarios -------------------------------------------------------------------------------

def bench_min_bill(docs: list[Document], latency: float) -> dict[str, Any]:
    info = MODELS[HAIKU45]
    with FakeAnthropic(api_key=KEY, latency=latency, output_tokens=OUTPUT_TOKENS) as fake:
        results, seconds = run(make(fake, concurrency=8), docs, None)
        bill = total(results)
        reference = minimum_bill(docs, info.pricing, info.min_cache_tokens)
        above = {d.id for d in _cacheable_set(docs, info.min_cache_tokens)}
        uncacheable = [d for d in docs if d.id not in above]
        return {
            "latency_s": latency, "concurrency": 8, "seconds": round(seconds, 2),
            "documents": len(docs), **complete(results, docs),
            "cache_writes": len(fake.writes()), "duplicate_cache_writes": fake.duplicate_writes(),
            "cacheable_documents": cacheable_docs(docs, info.min_cache_tokens),
            "documents_under_floor": len(uncacheable),
            "document_tokens": doc_tokens(docs),
            "document_tokens_under_floor": doc_tokens(uncacheable),
            "bill_usd": round(bill.cost_usd, 6),
            "service_invoice_usd": round(invoice(fake, info.pricing), 6),
            "minimum_bill_usd": round(reference, 6),
            "usd_per_million_document_tokens": round(bill.cost_usd / doc_tokens(docs) * 1e6, 3),
            "requests": bill.requests,
            "met": (within(bill.cost_usd, reference) and fake.duplicate_writes() == 0
                    and len(fake.writes()) == cacheable_docs(docs, info.min_cache_tokens)
                    and complete(results, docs)["with_context"]
                    == sum(len(d.chunks) for d in docs)),
        }


def _cacheable_set(docs: Sequence[Document], floor: int) -> list[Document]:
    return [d for d in docs
            if count_tokens(document_block(d.text, fence_of(d))) >= floor]


def anthropic_shape(docs: Sequence[Document], doc_tok: int = 8000, chunk_tok: int = 800
                    ) -> list[Document]:
    """Anthropic's assumed workload built from the corpus: the files joined in order, cut into
    documents of exactly `doc_tok` tokens, each cut into chunks of exactly `chunk_tok` tokens
    (10 per document), as the published estimate assumes."""
    joined = "".join(f"\n// ---- {d.id} ----\n{d.text}" for d in docs)
    size, piece = doc_tok * 4, chunk_tok * 4
    out = []
    for n in range(len(joined) // size):  # whole documents only
        text = joined[n * size:(n + 1) * size]
        chunks = tuple(Chunk(f"shape-{n}", i, text[i * piece:(i + 1) * piece], i * piece)
                       for i in range(size // piece))
        out.append(Document(f"shape-{n}", text, chunks))
    return out


def bench_shape(docs: list[Document], latency: float) -> dict[str, Any]:
    shaped = anthropic_shape(docs)
    out: dict[str, Any] = {"documents": len(shaped),
                           "chunks": sum(len(d.chunks) for d in shaped),
                           "document_tokens": doc_tokens(shaped),
                           "mean_chunk_tokens": round(sum(count_tokens(c.text) for d in shaped
                                                          for c in d.chunks)
                                                      / sum(len(d.chunks) for d in shaped), 1),
                           "published_usd_per_million": 1.02}
    for label, model in (("claude_3_haiku", HAIKU3), ("claude_haiku_4_5", HAIKU45)):
        info = MODELS["claude-3-haiku" if model == HAIKU3 else HAIKU45]
        with FakeAnthropic(api_key=KEY, latency=latency, output_tokens=OUTPUT_TOKENS) as fake:
            results, _ = run(make(fake, model=model), shaped, None)
            bill = total(results).cost_usd
            reference = minimum_bill(shaped, info.pricing, info.min_cache_tokens)
            out[label] = {
                "usd_per_million_document_tokens": round(bill / out["document_tokens"] * 1e6, 3),
                "minimum_usd_per_million": round(reference / out["document_tokens"] * 1e6, 3),
                "bill_usd": round(bill, 6), "cache_writes": len(fake.writes()),
                "duplicate_cache_writes": fake.duplicate_writes(),
                **complete(results, shaped),
            }
    out["met"] = out["claude_3_haiku"]["usd_per_million_document_tokens"] <= 1.02
    return out


def bench_faults(docs: list[Document], latency: float, cache_dir: Path) -> dict[str, Any]:
    info = MODELS[HAIKU45]
    faults = Faults.mixed(0.10, retry_after=0.2)
    with FakeAnthropic(api_key=KEY, latency=latency, output_tokens=OUTPUT_TOKENS, faults=faults,
                       seed=7) as fake:
        cache = DiskContextCache(cache_dir)
        results, seconds = run(make(fake, concurrency=8), docs, cache)
        bill = total(results)
        injected = {str(k): fake.responses[k] for k in (429, 529, 500, "drop")}
        refused = {str(k): v for k, v in fake.responses.items() if k in (400, 401, 403, 404)}
        stats = complete(results, docs)
        out = {
            "fault_rate": 0.10, "seconds": round(seconds, 2), "injected": injected,
            "http_requests": sum(fake.http_requests.values()),
            "answered_requests": fake.messages_ok, "refused_4xx": refused, **stats,
            "cache_entries": len(cache), "duplicate_cache_writes": fake.duplicate_writes(),
            "bill_usd": round(bill.cost_usd, 6),
            "minimum_bill_usd": round(minimum_bill(docs, info.pricing, info.min_cache_tokens), 6),
        }
        out["met"] = (stats["with_context"] == stats["chunks"] and stats["duplicate_rows"] == 0
                      and fake.messages_ok == stats["chunks"] and not refused
                      and len(cache) == stats["chunks"])
        # A second run over the same disk cache.
        fake.reset_counters()
        fake.faults = Faults()
        again, _ = run(make(fake), docs, cache)
        out["second_run"] = {"api_requests": sum(fake.http_requests.values()),
                             "contexts_from_cache": total(again).contexts_from_cache,
                             "bill_usd": total(again).cost_usd}
        out["second_run"]["met"] = out["second_run"]["api_requests"] == 0
        cache.close()
        return out


def bench_sigkill(docs: list[Document], latency: float, cache_dir: Path, corpus: str,
                  limit: int) -> dict[str, Any]:
    info = MODELS[HAIKU45]
    with FakeAnthropic(api_key=KEY, latency=latency, output_tokens=OUTPUT_TOKENS) as fake:
        chunks = sum(len(d.chunks) for d in docs)
        cmd = [sys.executable, __file__, "--child", "--base-url", fake.base_url,
               "--cache", str(cache_dir), "--corpus", corpus, "--limit", str(limit)]
        child = subprocess.Popen(cmd, env={**os.environ, "ANTHROPIC_API_KEY": KEY})
        cache = DiskContextCache(cache_dir)
        deadline = time.monotonic() + 120
        while len(cache) < chunks // 2 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        answered = len(cache)
        first_paid = invoice(fake, info.pricing)
        first_requests = fake.messages_ok
        # What is left: the reference bill of exactly the chunks missing from the cache.
        cz = make(fake)
        identity = cz.cache_identity()
        from situate.tasks.contexts.base import _key

        missing_docs = []
        for d in docs:
            left = tuple(c for c in d.chunks if cache.get(_key(identity, d, c)) is None)
            if left:
                missing_docs.append(Document(d.id, d.text, left))
        missing = sum(len(d.chunks) for d in missing_docs)
        fake.reset_counters()
        results, _ = run(cz, docs, cache)
        bill = total(results)
        reference = minimum_bill(missing_docs, info.pricing, info.min_cache_tokens)
        stats = complete(results, docs)
        full = minimum_bill(docs, info.pricing, info.min_cache_tokens)
        cache.close()
        paid = first_requests + fake.messages_ok
        return {
            "killed_with": "SIGKILL", "answered_before_kill": answered,
            "requests_before_kill": first_requests, "paid_before_kill_usd": round(first_paid, 6),
            "in_flight_lost": first_requests - answered,
            "missing_at_restart": missing, "restart_requests": fake.messages_ok,
            "restart_bill_usd": round(bill.cost_usd, 6),
            "minimum_bill_missing_usd": round(reference, 6),
            "both_runs_usd": round(first_paid + bill.cost_usd, 6),
            "single_run_minimum_usd": round(full, 6), **stats,
            "paid_both_runs": paid, "concurrency": KILL_CONCURRENCY,
            "paid_bound": chunks + KILL_CONCURRENCY,
            "met": (fake.messages_ok == missing and bill.cost_usd <= reference * 1.01
                    and paid <= chunks + KILL_CONCURRENCY
                    and stats["with_context"] == stats["chunks"]),
        }


def bench_throughput(docs: list[Document], latency: float, concurrency: int) -> dict[str, Any]:
    with FakeAnthropic(api_key=KEY, latency=latency, output_tokens=OUTPUT_TOKENS) as fake:
        results, seconds = run(make(fake, concurrency=concurrency), docs, None)
        requests = fake.messages_ok
        pure = requests / concurrency * latency
        # Whole rounds of `concurrency` requests, plus the run's first call made alone (it checks
        # the key before anything else is sent).
        ideal = math.ceil(requests / concurrency) * latency + latency
        return {"latency_s": latency, "concurrency": concurrency, "requests": requests,
                "max_in_flight": fake.max_in_flight, "seconds": round(seconds, 2),
                "ideal_seconds": round(ideal, 2),
                "requests_over_concurrency_seconds": round(pure, 2),
                "ratio_to_ideal": round(seconds / ideal, 3),
                "ratio_to_pure": round(seconds / pure, 3),
                **complete(results, docs), "met": seconds <= 1.25 * ideal}


def bench_batch(docs: list[Document], interactive_usd: float, cache_dir: Path) -> dict[str, Any]:
    info = MODELS[HAIKU45]
    with FakeAnthropic(api_key=KEY, output_tokens=OUTPUT_TOKENS, batch_delay=0.2,
                       batch_lanes=8) as fake:
        cz = make(fake, batch=True, state_dir=str(cache_dir / "state"))
        start = time.perf_counter()
        results = situate_corpus_cached(cz, docs, DiskContextCache(cache_dir / "cache")) or []
        seconds = time.perf_counter() - start
        bill = total(results)
        stats = complete(results, docs)
        return {"seconds": round(seconds, 2), "batches": fake.batches_created, **stats,
                "cache_writes": len(fake.writes()),
                "duplicate_cache_writes": fake.duplicate_writes(),
                "bill_usd": round(bill.cost_usd, 6),
                "interactive_bill_usd": round(interactive_usd, 6),
                "ratio_to_interactive": round(bill.cost_usd / interactive_usd, 4),
                "minimum_batch_bill_usd": round(
                    minimum_bill(docs, info.pricing, info.min_cache_tokens, batch=True), 6),
                "met": stats["with_context"] == stats["chunks"]
                and bill.cost_usd <= 0.5 * interactive_usd * 1.0001}


def bench_group(docs: list[Document], per_chunk_usd: float, latency: float, cache_dir: Path
                ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, omit in (("clean", 0.0), ("model_misses_5pct", 0.05)):
        with FakeAnthropic(api_key=KEY, latency=latency, output_tokens=OUTPUT_TOKENS,
                           group_omit_rate=omit, seed=3) as fake:
            results, seconds = run(make(fake, group_chunks=True), docs, None)
            bill = total(results)
            stats = complete(results, docs)
            out[label] = {"seconds": round(seconds, 2), "requests": bill.requests, **stats,
                          "bill_usd": round(bill.cost_usd, 6),
                          "output_tokens": bill.output_tokens,
                          "ratio_to_per_chunk": round(bill.cost_usd / per_chunk_usd, 4)}
    # Both savings at once: groups, through the Batches API.
    with FakeAnthropic(api_key=KEY, output_tokens=OUTPUT_TOKENS, batch_delay=0.2,
                       batch_lanes=8) as fake:
        cz = make(fake, batch=True, group_chunks=True, state_dir=str(cache_dir / "state"))
        results = situate_corpus_cached(cz, docs, None) or []
        bill = total(results)
        out["with_batch"] = {"requests": bill.requests, **complete(results, docs),
                             "bill_usd": round(bill.cost_usd, 6),
                             "ratio_to_per_chunk": round(bill.cost_usd / per_chunk_usd, 4)}
    tokens = doc_tokens(docs)
    for v in out.values():
        v["usd_per_million_document_tokens"] = round(v["bill_usd"] / tokens * 1e6, 3)
    out["per_chunk_bill_usd"] = round(per_chunk_usd, 6)
    out["met"] = all(v["with_context"] == v["chunks"] and v["duplicate_rows"] == 0
                     for v in out.values() if isinstance(v, dict)) and \
        out["clean"]["ratio_to_per_chunk"] <= 0.40
    return out


# --- the child of the SIGKILL scenario -----------------------------------------------------------

def child(base_url: str, cache_dir: str, corpus: str, limit: int) -> None:
    docs = list(load_corpus(corpus).documents)[:limit]
    config = ContextConfig(name="anthropic", model=HAIKU45, concurrency=KILL_CONCURRENCY,
                           extra={"base_url": base_url, "retry_base_seconds": 0.05})
    run(AnthropicContextualizer(config), docs, DiskContextCache(cache_dir))


# --- main ----------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    mem = "?"
    try:
        total_kb = next(int(line.split()[1]) for line in open("/proc/meminfo")
                        if line.startswith("MemTotal"))
        mem = f"{total_kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "memory": mem, "python": platform.python_version(),
            "platform": platform.platform()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a third of the corpus, lower latency")
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--out", default=str(RESULTS), help="where the JSON figures go")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.base_url, args.cache, args.corpus, args.limit or 10**9)
        return 0
    docs = list(load_corpus(args.corpus).documents)
    if args.quick:
        docs = docs[:30]
    limit = len(docs)
    fast = 0.01 if args.quick else 0.05
    figures: dict[str, Any] = {"machine": machine(), "corpus": args.corpus, "quick": args.quick,
                               "documents": len(docs),
                               "chunks": sum(len(d.chunks) for d in docs),
                               "output_tokens_per_context": OUTPUT_TOKENS}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        steps = [
            ("min_bill", lambda: bench_min_bill(docs, fast)),
            ("anthropic_shape", lambda: bench_shape(docs, fast)),
            ("faults_10pct", lambda: bench_faults(docs, fast, t / "faults")),
            ("sigkill", lambda: bench_sigkill(docs, fast, t / "kill", args.corpus, limit)),
            ("throughput", lambda: bench_throughput(docs, 0.05 if args.quick else 0.2, 16)),
            ("batch", lambda: bench_batch(docs, figures["min_bill"]["bill_usd"], t / "batch")),
            ("group_chunks", lambda: bench_group(docs, figures["min_bill"]["bill_usd"], fast,
                                                 t / "group")),
        ]
        for name, step in steps:
            start = time.perf_counter()
            figures[name] = step()
            print(f"{name:16} {'met' if figures[name].get('met') else 'NOT MET':8} "
                  f"({time.perf_counter() - start:.1f}s)", flush=True)
    print_table(figures)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def print_table(f: dict[str, Any]) -> None:
    m, s, fl, k = f["min_bill"], f["anthropic_shape"], f["faults_10pct"], f["sigkill"]
    tp, b, g = f["throughput"], f["batch"], f["group_chunks"]
    rows = [
        ("per-chunk bill, codebase (Haiku 4.5)", f"${m['bill_usd']:.4f}",
         f"min ${m['minimum_bill_usd']:.4f}", m["met"]),
        ("  cache writes / cacheable docs / duplicates",
         f"{m['cache_writes']} / {m['cacheable_documents']} / {m['duplicate_cache_writes']}",
         f"{m['documents_under_floor']} of {m['documents']} docs under 4,096 tokens", m["met"]),
        ("  $ per million document tokens", f"${m['usd_per_million_document_tokens']:.2f}",
         "published $1.02 (8k docs)", None),
        ("8k/800 shape, Claude 3 Haiku, $/M doc tokens",
         f"${s['claude_3_haiku']['usd_per_million_document_tokens']:.3f}",
         f"min ${s['claude_3_haiku']['minimum_usd_per_million']:.3f}; published $1.02", s["met"]),
        ("8k/800 shape, Haiku 4.5, $/M doc tokens",
         f"${s['claude_haiku_4_5']['usd_per_million_document_tokens']:.3f}",
         f"min ${s['claude_haiku_4_5']['minimum_usd_per_million']:.3f}", None),
        ("10% faults: chunks with context / dup rows",
         f"{fl['with_context']}/{fl['chunks']} / {fl['duplicate_rows']}",
         f"injected {fl['injected']}, refused 4xx {fl['refused_4xx'] or 0}", fl["met"]),
        ("second run: API requests", str(fl["second_run"]["api_requests"]), "0",
         fl["second_run"]["met"]),
        ("SIGKILL halfway: restart requests / bill",
         f"{k['restart_requests']} / ${k['restart_bill_usd']:.4f}",
         f"missing {k['missing_at_restart']} / min ${k['minimum_bill_missing_usd']:.4f}", k["met"]),
        ("SIGKILL halfway: answers paid over both runs", str(k["paid_both_runs"]),
         f"<= {k['chunks']} chunks + {k['concurrency']} in flight", k["met"]),
        (f"throughput {tp['latency_s'] * 1000:.0f} ms x{tp['concurrency']}: seconds",
         f"{tp['seconds']:.2f}",
         f"ideal {tp['ideal_seconds']:.2f} (x{tp['ratio_to_ideal']:.3f})", tp["met"]),
        ("--batch: bill", f"${b['bill_usd']:.4f}",
         f"interactive ${b['interactive_bill_usd']:.4f} (x{b['ratio_to_interactive']:.3f})",
         b["met"]),
        ("--group-chunks: bill", f"${g['clean']['bill_usd']:.4f}",
         f"per-chunk ${g['per_chunk_bill_usd']:.4f} (x{g['clean']['ratio_to_per_chunk']:.3f})",
         g["met"]),
        ("--group-chunks --batch: bill", f"${g['with_batch']['bill_usd']:.4f}",
         f"x{g['with_batch']['ratio_to_per_chunk']:.3f} of per-chunk, "
         f"${g['with_batch']['usd_per_million_document_tokens']:.2f}/M doc tokens", None),
    ]
    width = max(len(r[0]) for r in rows)
    print()
    for name, measured, reference, met in rows:
        flag = "" if met is None else ("  ok" if met else "  NOT MET")
        print(f"{name:<{width}}  {measured:>18}  {reference}{flag}")


if __name__ == "__main__":
    sys.exit(main())
