"""The codebase set's bill per context provider and mode, on the loopback fakes, in one run.

Providers: Claude (`--context anthropic`, claude-haiku-4-5), OpenAI (`--context openai`,
gpt-4.1-mini) and Ollama (`--context ollama`, free). Modes: per chunk, grouped
(`--group-chunks`), and for Claude Message Batches (`--batch`) with 1-hour cache entries and with
5-minute ones, on a fake whose 5-minute entries expire before the second round (as a real batch
round that takes longer than 5 minutes).

Each bill is the usage the fake reported, priced at the provider's published rates, set beside
the floor computed in the same run from the workload alone: each document's tokens paid once at
the input rate (the batch rate for batches) plus the run's own output at the output rate; and
beside the dry run's plan of the same mode (the contextualizer's own planner, told the fake's
4 characters per token and context length).

Usage: .venv/bin/python benchmarks/bench_providers.py [--out FILE]
(writes benchmarks/results/providers.json and prints the Markdown table)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from situate.core.records import Document, Usage  # noqa: E402
from situate.storage.cache import DiskContextCache  # noqa: E402
from situate.tasks.contexts.base import ContextConfig, get_contextualizer  # noqa: E402
from situate.tasks.contexts.cache import situate_documents  # noqa: E402
from situate.tasks.contexts.claude import MODELS as CLAUDE  # noqa: E402
from situate.tasks.contexts.cost import Assumptions, Estimate, get_cost_models  # noqa: E402
from situate.tasks.contexts.openai_chat import MODELS as OPENAI  # noqa: E402
from situate.tasks.corpus.load import load_corpus  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic  # noqa: E402
from tests.fakes.ollama_server import FakeOllama  # noqa: E402
from tests.fakes.openai_chat_server import FakeOpenAIChat, count_tokens  # noqa: E402

CORPUS = ROOT / "data" / "benchmarks" / "codebase" / "codebase_chunks.json"
RESULTS = ROOT / "benchmarks" / "results" / "providers.json"
KEY = "sk-bench-not-a-real-key"
OUTPUT = 50  # tokens per context, the same on every fake
CONCURRENCY = 8


def _plan(config: ContextConfig, mode: str, docs: list[Document]) -> tuple[int, float]:
    models = {m.mode: m for m in get_cost_models(config, Assumptions(
        chars_per_token=4, context_tokens=OUTPUT))}
    model = models[mode]
    total = Estimate()
    for doc in docs:
        total.add(model.estimate(doc, doc.chunks))
    return total.usage.requests, model.price(total.usage)


def _run(config: ContextConfig, docs: list[Document], state: Path) -> tuple[Usage, float, int]:
    cz = get_contextualizer(config)
    start = time.perf_counter()
    try:
        results = situate_documents(cz, docs, DiskContextCache(state / "cache"))
    finally:
        cz.close()
    usage = Usage()
    for r in results:
        usage.add(r.usage)
    contexts = sum(1 for r in results for s in r.situated if s.context)
    return usage, time.perf_counter() - start, contexts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    docs = list(load_corpus(CORPUS).documents)
    chunks = sum(len(d.chunks) for d in docs)
    doc_tokens = sum(count_tokens(d.text) for d in docs)
    rows: list[dict[str, Any]] = []
    os.environ["ANTHROPIC_API_KEY"] = KEY
    os.environ["OPENAI_API_KEY"] = KEY
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def record(provider: str, mode: str, flags: str, config: ContextConfig, input_rate: float,
                   output_rate: float, discount: float, fake: Any) -> None:
            fake.clear_cache()  # each mode starts cold: no prefix left by another mode's run
            planned_requests, planned = _plan(config, mode, docs)
            usage, seconds, contexts = _run(config, docs, root / f"{provider}-{mode}")
            floor = (doc_tokens * input_rate + usage.output_tokens * output_rate) / 1e6 * discount
            rows.append({
                "provider": provider, "model": config.name.partition(":")[2] or "claude-haiku-4-5",
                "mode": mode, "flags": flags, "contexts": contexts, "requests": usage.requests,
                "input_tokens": usage.input_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "output_tokens": usage.output_tokens, "cost_usd": round(usage.cost_usd, 6),
                "floor_usd": round(floor, 6),
                "cost_over_floor": round(usage.cost_usd / floor, 3) if floor else None,
                "planned_requests": planned_requests, "planned_usd": round(planned, 6),
                "plan_over_bill": round(planned / usage.cost_usd, 4) if usage.cost_usd else None,
                "seconds": round(seconds, 1)})
            print(f"{provider:9} {mode:22} {contexts} contexts, {usage.requests} requests, "
                  f"${usage.cost_usd:.4f} (floor ${floor:.4f}), plan ${planned:.4f}", flush=True)

        haiku = CLAUDE["claude-haiku-4-5"].pricing
        with FakeAnthropic(api_key=KEY, output_tokens=OUTPUT, latency=0.005, batch_delay=0.05,
                           batch_latency=0.002, ttl_5m=1e-6) as fake:
            # ttl_5m: every 5-minute entry is gone by the next round (and by the next request):
            # live runs get their own fake below.
            base = {"base_url": fake.base_url, "retry_base_seconds": 0.05,
                    "batch_poll_seconds": 0.05}
            for group, ttl, mode, flags in (
                    (False, "1h", "batch", "--batch"),
                    (False, "5m", "batch-5m-cache", "--batch SITUATE_BATCH_CACHE_TTL=5m"),
                    (True, "1h", "grouped+batch", "--group-chunks --batch")):
                config = ContextConfig(name="anthropic", concurrency=CONCURRENCY, batch=True,
                                       group_chunks=group, state_dir=str(root / f"state-{mode}"),
                                       extra={**base, "batch_cache_ttl": ttl})
                record("anthropic", mode, flags, config, haiku.input, haiku.output, 0.5, fake)
        with FakeAnthropic(api_key=KEY, output_tokens=OUTPUT, latency=0.005) as fake:
            for group, mode, flags in ((False, "per-chunk", ""), (True, "grouped",
                                                                  "--group-chunks")):
                config = ContextConfig(name="anthropic", concurrency=CONCURRENCY,
                                       group_chunks=group, extra={"base_url": fake.base_url})
                record("anthropic", mode, flags, config, haiku.input, haiku.output, 1.0, fake)
        mini = OPENAI["gpt-4.1-mini"].pricing
        with FakeOpenAIChat(api_key=KEY, output_tokens=OUTPUT, latency=0.005) as fake:
            for group, mode, flags in ((False, "per-chunk", ""), (True, "grouped",
                                                                  "--group-chunks")):
                config = ContextConfig(name="openai:gpt-4.1-mini", concurrency=CONCURRENCY,
                                       group_chunks=group,
                                       extra={"base_url": fake.base_url + "/v1"})
                record("openai", mode, flags, config, mini.input, mini.output, 1.0, fake)
        with FakeOllama(output_tokens=OUTPUT) as fake:
            for group, mode, flags in ((False, "per-chunk", ""), (True, "grouped",
                                                                  "--group-chunks")):
                config = ContextConfig(name="ollama:llama3.2", concurrency=CONCURRENCY,
                                       group_chunks=group, extra={"base_url": fake.base_url})
                record("ollama", mode, flags, config, 0.0, 0.0, 1.0, fake)
            truncated = fake.truncated
    out = {
        "command": "benchmarks/bench_providers.py",
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count()},
        "corpus": {"documents": len(docs), "chunks": chunks, "document_tokens": doc_tokens,
                   "tokenizer": "the fakes': 4 characters a token", "output_tokens": OUTPUT},
        "ollama_prompts_cut": truncated,
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(table(out))


def table(out: dict[str, Any]) -> str:
    lines = ["| provider | mode | flags | contexts | requests | cache write | cache read | "
             "$ bill | $ floor | bill / floor | $ plan | plan / bill |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in out["rows"]:
        lines.append(
            f"| {r['provider']} {r['model']} | {r['mode']} | `{r['flags'] or '(none)'}` | "
            f"{r['contexts']} | {r['requests']} | {r['cache_write_tokens']:,} | "
            f"{r['cache_read_tokens']:,} | {r['cost_usd']:.4f} | {r['floor_usd']:.4f} | "
            f"{r['cost_over_floor'] if r['cost_over_floor'] is not None else '-'} | "
            f"{r['planned_usd']:.4f} | "
            f"{r['plan_over_bill'] if r['plan_over_bill'] is not None else '-'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
