"""`situate synth CORPUS --out DIR`: an evaluation set made from the user's own corpus, in the
`golden_quotes` form `situate evaluate` reads (it survives re-chunking and every format).

A plain function, not a flow: one pass over the corpus, then either no request at all (the
held-out generator) or requests that the contexts' engine already schedules, retries and keeps
(an LLM generator); Prefect would add a server start and nothing a user needs. The plan and its
price are said (logged) before the first request; `--dry-run` stops there.
"""

from __future__ import annotations

import logging
from pathlib import Path

from situate.core.settings import get_settings
from situate.pipeline.options import SynthOptions
from situate.pipeline.providers import provider_config
from situate.tasks.contexts.base import ContextConfig
from situate.tasks.contexts.cost import Assumptions
from situate.tasks.synth.summary import BILLED, SynthSummary

log = logging.getLogger("situate.synth")


def synth_config(options: SynthOptions) -> ContextConfig:
    """The generator's configuration, as `situate ingest --context` builds it (Claude's model:
    SITUATE_ANTHROPIC_MODEL, as `--model` defaults to)."""
    return provider_config(options.generator, get_settings().anthropic_model,
                           concurrency=options.concurrency, state_dir=options.cache_dir,
                           base_url=options.llm_base_url)


def run_synth(options: SynthOptions) -> SynthSummary:
    """Write `out/eval.jsonl` (and for held-out `out/corpus`); with `dry_run`, only the plan."""
    if options.generator == "held-out":
        return _held_out(options)
    return _llm(options)


def _held_out(options: SynthOptions) -> SynthSummary:
    from situate.tasks.synth.heldout import build_heldout

    summary = SynthSummary(generator="held-out", corpus=options.corpus, out=options.out,
                           dry_run=options.dry_run, n=options.n, seed=options.seed)
    if options.dry_run:  # free and offline: the plan is the run's counts, nothing written
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            stats = build_heldout(options.corpus, scratch, options.n, options.seed,
                                  options.follow_links)
    else:
        stats = build_heldout(options.corpus, options.out, options.n, options.seed,
                              options.follow_links)
    summary.documents = stats.documents
    summary.sampled = (stats.queries + stats.dropped_ambiguous_quote + stats.dropped_repeated_query
                       + stats.dropped_across_chunks)
    summary.queries = stats.queries
    summary.dropped = {"ambiguous_quote": stats.dropped_ambiguous_quote,
                       "repeated_sentence": stats.dropped_repeated_query,
                       "across_chunks": stats.dropped_across_chunks}
    summary.files_copied, summary.files_edited = stats.files_copied, stats.files_edited
    summary.ingest_path = "" if options.dry_run else stats.ingest_path
    return summary


def _llm(options: SynthOptions) -> SynthSummary:
    import json

    from situate.storage.cache import DiskContextCache
    from situate.tasks.corpus.load import load_corpus
    from situate.tasks.synth.llm import (
        ANSWER_TOKENS,
        answer_key,
        base_cost,
        config_identity,
        generate,
        plan_cost,
        sample_chunks,
    )

    config = synth_config(options)
    corpus = load_corpus(options.corpus, options.chunk_size, options.chunk_overlap,
                         code_chunks=options.code_chunks, follow_links=options.follow_links)
    sampled = sample_chunks(corpus.documents, options.n, options.seed)
    cache_dir = Path(options.cache_dir)
    cache = DiskContextCache(cache_dir) if (cache_dir.exists() or not options.dry_run) else None
    assumptions = Assumptions(chars_per_token=options.chars_per_token,
                              context_tokens=options.answer_tokens or ANSWER_TOKENS)
    base = base_cost(config, assumptions)
    identity = config_identity(config, base)
    cached = {(d.id, c.index) for d, c in sampled
              if cache is not None and cache.get(answer_key(identity, d, c)) is not None}
    estimate, cost = plan_cost(config, sampled, cached, assumptions, base)
    u = estimate.usage
    summary = SynthSummary(
        generator=options.generator, corpus=options.corpus, out=options.out,
        dry_run=options.dry_run, n=options.n, seed=options.seed, documents=len(corpus.documents),
        sampled=len(sampled), answers_from_cache=len(cached), **u.report(BILLED),
        model=cost.options.model)
    log.warning(summary.plan_line())
    if options.dry_run:
        if cache is not None:
            cache.close()
        return summary
    assert cache is not None
    try:
        generated = generate(config, sampled, cache)
    finally:
        cache.close()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "eval.jsonl.tmp"
    tmp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in generated.lines),
                   encoding="utf-8")
    tmp.replace(out / "eval.jsonl")
    return summary.model_copy(update={
        "queries": generated.queries, "dropped": dict(generated.dropped),
        "answers_from_cache": generated.from_cache, **generated.usage.report(BILLED)})
