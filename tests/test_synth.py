"""`situate synth`: the held-out generator takes out exactly the query sentences and nothing else;
the LLM generator, through the loopback OpenAI fake and the real SDK, writes a set `situate
evaluate` reads, keeps what holds (a quote not in its chunk dropped and counted), plans its bill
within 2% of what the fake charges, and a killed run resumes without paying twice."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from situate.core.errors import InputError
from situate.core.records import Chunk
from situate.tasks.retrieval.metrics import load_eval_set, normalize_quote
from tests.conftest import SAMPLE_CORPUS, SAMPLE_EVAL
from tests.fakes import openai_chat_server
from tests.fakes.openai_chat_server import FakeOpenAIChat

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-openai-chat"


# --- held-out -----------------------------------------------------------------------------------

def _restore(kept: str, removed: list[dict]) -> str:
    """The original text: each removed span put back at its offset (offsets of the original)."""
    out = kept
    for r in sorted(removed, key=lambda r: r["start"]):
        out = out[:r["start"]] + r["text"] + out[r["start"]:]
    return out


def test_held_out_removes_exactly_the_query_sentences_and_nothing_else(tmp_path):
    from situate.tasks.synth.heldout import build_heldout

    out = tmp_path / "out"
    stats = build_heldout(SAMPLE_CORPUS, out, n=100, seed=3)
    lines = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()]
    assert stats.queries == len(lines) >= 8 and stats.ingest_path == str(out / "corpus")
    removed: dict[str, list[dict]] = {}
    for line in lines:
        r = line["removed"]
        # the span is the query's sentence (plus the blanks after it); a code query names the
        # definition of its golden line first
        if line["kind"] == "code":
            name, sentence = re.fullmatch(r"`([^`]+)`: (.*)", line["query"]).groups()
            assert name in line["golden_quotes"][0]["quote"]
        else:
            sentence = line["query"]
        # (a sentence wrapped over comment lines: the markers of the lines after the first go)
        unwrapped = re.sub(r"\n\s*(?:///?|#|\*|--)[ \t]?", " ", r["text"])
        assert normalize_quote(unwrapped) == normalize_quote(sentence)
        assert line["golden_quotes"][0]["doc_id"] == r["doc_id"]
        removed.setdefault(r["doc_id"], []).append(r)
    assert {"code", "prose"} <= {line["kind"] for line in lines}
    originals = sorted(p for p in SAMPLE_CORPUS.rglob("*") if p.is_file())
    written = sorted(p for p in (out / "corpus").rglob("*") if p.is_file())
    assert [p.relative_to(SAMPLE_CORPUS) for p in originals] == \
        [p.relative_to(out / "corpus") for p in written]
    for f in originals:
        rel = f.relative_to(SAMPLE_CORPUS).as_posix()
        new = (out / "corpus" / rel).read_bytes()
        if rel not in removed:
            assert new == f.read_bytes(), rel  # untouched files byte for byte
            continue
        kept = new.decode()
        assert _restore(kept, removed[rel]) == f.read_text(), rel
        for r in removed[rel]:
            assert normalize_quote(r["text"]) not in normalize_quote(kept)  # gone from the index
    # The set is valid for `situate evaluate`, and every golden quote is once in what stays.
    queries = load_eval_set(out / "eval.jsonl")
    assert len(queries) == len(lines)
    for line in lines:
        g = line["golden_quotes"][0]
        kept = (out / "corpus" / g["doc_id"]).read_text()
        assert normalize_quote(kept).count(normalize_quote(g["quote"])) == 1
    # Seeded: the same run gives the same set; another seed another spread of the same size cap.
    again = build_heldout(SAMPLE_CORPUS, tmp_path / "again", n=100, seed=3)
    assert (tmp_path / "again" / "eval.jsonl").read_text() == (out / "eval.jsonl").read_text()
    assert again.queries == stats.queries
    few = build_heldout(SAMPLE_CORPUS, tmp_path / "few", n=3, seed=3)
    assert few.queries == 3 and len({json.loads(x)["removed"]["doc_id"] for x in (
        tmp_path / "few" / "eval.jsonl").read_text().splitlines()}) == 3  # spread over documents


RUST = """//! A crate-level comment that is not a definition's.

/// Computes the delay before the next attempt of a failed job.
/// Grows exponentially up to a cap.
pub fn next_delay(attempt: u32) -> u64 {
    100 * 2u64.pow(attempt)
}

/// Holds the parameters of the backoff curve in milliseconds.
#[derive(Debug)]
pub struct Backoff {
    base: u64,
}
"""
PY = '''def lease(queue, worker):
    """Hand the oldest ready job of the queue to one worker only. Nobody else gets it."""
    return queue.pop()


class Queue:
    """A durable queue of jobs kept in one SQLite file on disk."""

    name = "jobs"
'''


@pytest.mark.parametrize(("line", "name"), [
    ("pub fn next_delay(attempt: u32) -> u64 {", "next_delay"),
    ('pub unsafe extern "C" fn hook(ptr: *const c_void) {', "hook"),
    ("impl<T: Debug> Display for Point<T> {", "Point"),
    ("pub(crate) const EVENT_TOKEN: usize = 1;", "EVENT_TOKEN"),
    ("func (s *Server) Serve(l net.Listener) error {", "Serve"),
    ("public static class Builder extends Base {", "Builder"),
    ("size_t Size() const override;", "Size"),
    ("void Column::Save(OutputStream* output) {", None),  # qualified: defined elsewhere
    ("export const load = async (path) => {", "load"),
    ("module.exports.parse = function (text) {", "parse"),
    ("render(props) {", "render"),
    ("async def fetch(url):", "fetch"),
    # statements, calls and assignments define nothing
    ("Ok(ExitKind::Diff {", None), ("libc::close(fd);", None), ("return compute(x);", None),
    ("let uid = unsafe { libc::getuid() };", None), ("if (open_elements_.size() != 1)", None),
    ("FILE *file = stdin;", None), ('builder.env("WINDOWID", id);', None),
])
def test_definition_name(line, name):
    from situate.tasks.synth.candidates import definition_name

    assert definition_name(line) == name


WRAPPED = {
    "lib.rs": (
        "/// Computes the delay before the next attempt of a failed\n"
        "/// job, doubling it each time. Capped at a minute.\n"
        "pub fn next_delay(attempt: u32) -> u64 {\n"
        "    // Shift the base left by the attempt number to double it.\n"
        "    BASE << attempt\n"
        "}\n"),
    "Queue.java": (
        "/**\n"
        " * A durable queue of jobs kept in one SQLite file\n"
        " * on disk, shared by every worker.\n"
        " */\n"
        "public class Queue {\n"
        "}\n"),
    # A description without a full stop ends at the first block tag: no sentence, no query.
    "handler.js": (
        "/**\n"
        " * TODO: add method description\n"
        " * @param {Error} err - Error to get info for.\n"
        " */\n"
        "function getAllInfo(err) {\n"
        "  return err.stack;\n"
        "}\n"),
    "jobs.py": (
        "def lease(queue, worker):\n"
        '    """Hand the oldest ready job of the queue to\n'
        "    one worker only, and nobody else.\n"
        "\n"
        "    The lease expires.\n"
        '    """\n'
        "    return queue.pop()\n"),
}


def test_held_out_code_sentence_wrapped_over_lines_and_statements_skipped(tmp_path):
    """A first sentence wrapped over comment lines is one query, without the markers; the comment
    above a statement (not a definition) gives none."""
    from situate.tasks.synth.heldout import build_heldout

    src = tmp_path / "src"
    src.mkdir()
    for name, text in WRAPPED.items():
        (src / name).write_text(text)
    stats = build_heldout(src, tmp_path / "out", n=10, seed=0)
    lines = [json.loads(x) for x in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    assert {line["query"] for line in lines} == {
        "`next_delay`: Computes the delay before the next attempt of a failed job, doubling it "
        "each time.",
        "`Queue`: A durable queue of jobs kept in one SQLite file on disk, shared by every worker.",
        "`lease`: Hand the oldest ready job of the queue to one worker only, and nobody else.",
    } and stats.queries == 3
    out = tmp_path / "out" / "corpus"
    assert (out / "lib.rs").read_text() == WRAPPED["lib.rs"].replace(
        "Computes the delay before the next attempt of a failed\n/// job, doubling it each time. ",
        "")
    assert (out / "Queue.java").read_text() == WRAPPED["Queue.java"].replace(
        "A durable queue of jobs kept in one SQLite file\n * on disk, shared by every worker.", "")
    compile((out / "jobs.py").read_text(), "jobs.py", "exec")


def test_held_out_edits_a_prechunked_json_in_content_and_chunks(tmp_path):
    from situate.tasks.synth.heldout import build_heldout

    docs = [{"doc_id": "rs", "original_uuid": "u1", "content": RUST,
             "chunks": [{"chunk_id": "rs_0", "original_index": 0, "content": RUST[:200]},
                        {"chunk_id": "rs_1", "original_index": 1, "content": RUST[150:]}]},
            {"doc_id": "py", "original_uuid": "u2", "content": PY,
             "chunks": [{"chunk_id": "py_0", "original_index": 0, "content": PY}]}]
    src = tmp_path / "chunks.json"
    src.write_text(json.dumps(docs))
    stats = build_heldout(src, tmp_path / "out", n=10, seed=0)
    lines = [json.loads(x) for x in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    got = {line["query"]: line["golden_quotes"][0]["quote"] for line in lines}
    assert got == {
        "`next_delay`: Computes the delay before the next attempt of a failed job.":
            "pub fn next_delay(attempt: u32) -> u64 {",
        "`Backoff`: Holds the parameters of the backoff curve in milliseconds.":
            "pub struct Backoff {",
        "`lease`: Hand the oldest ready job of the queue to one worker only.":
            "def lease(queue, worker):",
        "`Queue`: A durable queue of jobs kept in one SQLite file on disk.": "class Queue:",
    } and stats.queries == 4
    # What to ingest is the file (a directory holding a .json would read it as one text file).
    assert stats.ingest_path == str(tmp_path / "out" / "corpus" / "chunks.json")
    edited = {d["doc_id"]: d for d in json.loads((tmp_path / "out" / "corpus" / "chunks.json")
                                                  .read_text())}
    assert edited["rs"]["content"] == RUST.replace(
        "Computes the delay before the next attempt of a failed job.\n", "\n").replace(
        "Holds the parameters of the backoff curve in milliseconds.\n", "\n")
    assert "Nobody else gets it." in edited["py"]["content"]  # only the first sentence went
    compile(edited["py"]["content"], "py", "exec")  # still Python
    for d in edited.values():
        for c in d["chunks"]:
            assert not any(q.split(": ", 1)[1] in c["content"] for q in got)
    with pytest.raises(InputError, match="cannot rewrite a JSONL corpus"):
        jsonl = tmp_path / "docs.jsonl"
        jsonl.write_text(json.dumps({"id": "a", "text": "One two three four five six. Seven."}) + "\n")
        build_heldout(jsonl, tmp_path / "j", n=5, seed=0)


# --- LLM, through the OpenAI fake --------------------------------------------------------------

_CHUNK = re.compile(r"<(chunk-[0-9a-f]+)>\n(.*?)\n</\1>", re.DOTALL)
ANSWER_TOKENS = 60
BOGUS = "a passage that no chunk of the corpus holds"


def _question_answer(chunk: str, bad: set[str]) -> str:
    """What a model following the synth prompt answers: a question in other words, a quote of
    the chunk's first words; `bad` chunks (by their first line) get a quote not in them. Padded
    to exactly ANSWER_TOKENS fake tokens (4 characters each)."""
    words = chunk.split()
    first = chunk.strip().splitlines()[0] if chunk.strip() else ""
    quote = BOGUS if first in bad else " ".join(words[:6])
    # A user names what they ask about: three words of the chunk, never eight in a row.
    topic = " ".join(words[6:9]) or "this"
    answer = {"question": f"Where is {topic} described, and how does it behave", "quote": quote}
    text = json.dumps(answer)
    pad = ANSWER_TOKENS * 4 - len(text)
    answer["question"] += "?" + " " * max(0, pad - 1)
    return json.dumps(answer)[: ANSWER_TOKENS * 4]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    bad: set[str] = set()
    original = openai_chat_server.answer_for

    def answer_for(prompt_tail, schema, tokens, omit=lambda: False):
        if schema is not None and set(schema.get("properties", {})) == {"question", "quote"}:
            m = _CHUNK.search(prompt_tail)
            return _question_answer(m.group(2) if m else "", bad)
        return original(prompt_tail, schema, tokens, omit)

    monkeypatch.setattr(openai_chat_server, "answer_for", answer_for)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIChat(api_key=KEY) as server:
        server.bad = bad
        yield server


def _options(fake: FakeOpenAIChat, tmp_path: Path, **kw: object):
    from situate.pipeline.options import SynthOptions

    values = {"corpus": str(SAMPLE_CORPUS), "out": str(tmp_path / "synth"),
              "generator": "openai:gpt-4.1-mini", "n": 20, "seed": 1,
              "llm_base_url": fake.base_url + "/v1", "cache_dir": str(tmp_path / "cache"),
              "chars_per_token": 4.0, "answer_tokens": ANSWER_TOKENS, "concurrency": 2}
    values.update(kw)
    return SynthOptions.build(**values)


def _sampled_first_lines(tmp_path: Path, n: int, seed: int) -> list[str]:
    from situate.tasks.corpus.load import load_corpus
    from situate.tasks.synth.llm import sample_chunks

    return [c.text.strip().splitlines()[0] for _, c in
            sample_chunks(load_corpus(SAMPLE_CORPUS).documents, n, seed)]


def test_llm_synth_writes_a_valid_set_drops_a_quote_not_in_its_chunk_and_plans_its_bill(
        fake, tmp_path):
    from situate.pipeline.synth import run_synth

    firsts = _sampled_first_lines(tmp_path, 20, 1)
    fake.bad.add(firsts[3])
    plan = run_synth(_options(fake, tmp_path, dry_run=True))
    assert fake.usage["requests"] == 0 and not (tmp_path / "synth").exists()
    assert plan.dry_run and plan.requests == plan.sampled == 20 and plan.cost_usd > 0

    summary = run_synth(_options(fake, tmp_path))
    assert fake.usage["requests"] == summary.requests == 20
    # The plan's dollars are the fake's bill within 2% (gpt-4.1-mini's prices).
    billed = (fake.usage["prompt_tokens"] - fake.usage["cached_tokens"]) * 0.40 \
        + fake.usage["cached_tokens"] * 0.10 + fake.usage["completion_tokens"] * 1.60
    billed /= 1e6
    assert summary.cost_usd == pytest.approx(billed, abs=1e-6)  # kept to 6 decimals
    assert plan.cost_usd == pytest.approx(billed, rel=0.02)
    # One quote is not in its chunk: dropped and counted; every other line kept.
    assert summary.dropped["quote_not_in_chunk"] == 1
    assert summary.queries == 19 and sum(summary.dropped.values()) == 1
    queries = load_eval_set(tmp_path / "synth" / "eval.jsonl")
    assert len(queries) == 19 and all(BOGUS not in q.golden[0].quote for q in queries)
    # Every golden quote matches its own chunk as `situate evaluate` matches it.
    from situate.tasks.corpus.load import load_corpus

    chunks = {(d.id, c.index): c for d in load_corpus(SAMPLE_CORPUS).documents for c in d.chunks}
    for line in (tmp_path / "synth" / "eval.jsonl").read_text().splitlines():
        item = json.loads(line)
        g = item["golden_quotes"][0]
        assert load_eval_set  # noqa: B018
        chunk = chunks[(g["doc_id"], item["chunk"])]
        from situate.tasks.retrieval.metrics import Golden

        assert Golden(doc_id=g["doc_id"], quote=g["quote"]).matches(g["doc_id"], chunk.text)
    # The second run pays nothing: every answer is cached.
    before = fake.usage["requests"]
    again = run_synth(_options(fake, tmp_path))
    assert fake.usage["requests"] == before and again.answers_from_cache == 20
    assert again.requests == 0 and again.queries == 19
    replan = run_synth(_options(fake, tmp_path, dry_run=True))
    assert replan.requests == 0 and replan.cost_usd == 0 and replan.answers_from_cache == 20


def test_verdict_drops_what_does_not_hold():
    from situate.tasks.synth.llm import copies_chunk, verdict

    chunk = Chunk("d", 0, "Each failed attempt doubles the delay before the next attempt, up to "
                          "a cap of five minutes.")
    ok = json.dumps({"question": "How long does a retry wait?", "quote": "doubles the delay"})
    assert verdict(ok, chunk) == ("", "How long does a retry wait?", "doubles the delay")
    assert verdict(json.dumps({"question": "Q?", "quote": "halves the delay"}), chunk)[0] \
        == "quote_not_in_chunk"
    assert verdict(json.dumps({"question": "", "quote": ""}), chunk)[0] == "answers_nothing"
    assert verdict("not json", chunk)[0] == "unreadable"
    # Some words of the chunk are fine (a user names what they ask about); eight in a row are not.
    reworded = "Why does a failed attempt double the wait before the next try, up to a cap?"
    assert verdict(json.dumps({"question": reworded, "quote": "doubles the delay"}), chunk)[0] == ""
    assert copies_chunk("does each failed attempt doubles the delay before the next attempt",
                        chunk.text)
    verbatim = "Each failed attempt doubles the delay before the next attempt, right?"
    assert verdict(json.dumps({"question": verbatim, "quote": "doubles the delay"}), chunk)[0] \
        == "copies_chunk"


@pytest.mark.slow
def test_a_killed_synth_resumes_without_paying_twice(fake, tmp_path):
    """`situate synth` in its own process, killed (SIGKILL) once some answers are in; run again,
    it asks only for what it never kept: the two runs together pay for each chunk once, plus at
    most the answers on the wire when it was killed."""
    fake.latency = 0.25
    cache = tmp_path / "cache"
    env = {**os.environ, "OPENAI_API_KEY": KEY, "SITUATE_CACHE_DIR": str(cache),
           "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "situate.cli.main", "synth", str(SAMPLE_CORPUS), "--out",
            str(tmp_path / "synth"), "--generator", "openai:gpt-4.1-mini", "--n", "24",
            "--seed", "2", "--llm-base-url", fake.base_url + "/v1", "--concurrency", "2"]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while fake.usage["requests"] < 8 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    paid_first = fake.usage["requests"]
    assert 8 <= paid_first < 24, proc.stderr.read() if proc.stderr else ""
    assert not (tmp_path / "synth" / "eval.jsonl").exists()  # nothing half-written

    fake.latency = 0.0
    from situate.pipeline.synth import run_synth

    summary = run_synth(_options(fake, tmp_path, n=24, seed=2, cache_dir=str(cache)))
    assert summary.answers_from_cache >= paid_first - 2  # lost: at most the 2 in flight
    assert summary.requests == 24 - summary.answers_from_cache
    assert fake.usage["requests"] - paid_first == summary.requests
    assert fake.usage["requests"] <= 24 + 2
    assert len(load_eval_set(tmp_path / "synth" / "eval.jsonl")) == summary.queries > 0


@pytest.mark.slow
def test_synth_sets_are_read_by_evaluate(fake, tmp_path, prefect_harness, state):
    """Both generators' sets through `situate evaluate` (hash embedder, sample corpus): the LLM's
    on the corpus itself, the held-out one on its own written corpus."""
    from situate.pipeline.options import SynthOptions
    from situate.pipeline.synth import run_synth
    from tests.helpers import evaluate, ingest

    run_synth(_options(fake, tmp_path, n=12))
    run_synth(SynthOptions.build(corpus=str(SAMPLE_CORPUS), out=str(tmp_path / "held"),
                                 generator="held-out"))
    ingest(corpus=str(SAMPLE_CORPUS), collection="sample", context="none", embedder="hash")
    ingest(corpus=str(tmp_path / "held" / "corpus"), collection="held", context="none",
           embedder="hash")
    llm = evaluate(eval_set=str(tmp_path / "synth" / "eval.jsonl"), collection="sample",
                   modes="bm25,hybrid", trec_dir=str(tmp_path / "trec"))
    held = evaluate(eval_set=str(tmp_path / "held" / "eval.jsonl"), collection="held",
                    modes="bm25,hybrid")
    for result in (llm.only(), held.only()):
        assert result.queries > 0 and set(result.intervals) == {"bm25", "hybrid"}
        assert result.metrics["bm25"]["recall@20"] == pytest.approx(
            result.pass_at_k["bm25"]["20"] / 100, abs=1e-3)
        assert [(d.a, d.b) for d in result.differences][:1] == [("bm25", "hybrid")]
    # The LLM's quotes are each chunk's first words: BM25 finds most of them.
    assert llm.only().pass_at_k["bm25"]["20"] >= 50
    assert (tmp_path / "trec" / "qrels.txt").is_file()
    assert (tmp_path / "trec" / "run-sample-hybrid.txt").is_file()
    assert SAMPLE_EVAL.is_file()


def test_llm_synth_through_the_anthropic_fake(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """The same generator on Claude's wire (structured output, prompt caching): a valid set, and
    the plan's dollars within 2% of the bill the fake's usage makes at Claude's prices."""
    from situate.pipeline.synth import run_synth
    from tests.fakes.anthropic_server import CHARS_PER_TOKEN, FakeAnthropic

    original = FakeAnthropic._generate

    def generate(self, params, blocks):
        fmt = (params.get("output_config") or {}).get("format") or {}
        props = set((fmt.get("schema") or {}).get("properties") or {})
        if props == {"question", "quote"}:
            m = _CHUNK.search(blocks[-1].text if blocks else "")
            return _question_answer(m.group(2) if m else "", set())
        return original(self, params, blocks)

    monkeypatch.setattr(FakeAnthropic, "_generate", generate)
    key = "sk-ant-test-key"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    with FakeAnthropic(api_key=key) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        options = _options(server, tmp_path, generator="anthropic", n=12, llm_base_url="",
                           chars_per_token=float(CHARS_PER_TOKEN))  # type: ignore[arg-type]
        plan = run_synth(options.model_copy(update={"dry_run": True}))
        summary = run_synth(options)
    assert summary.requests == plan.requests == 12 and summary.queries == 12
    assert summary.cost_usd > 0 and plan.cost_usd == pytest.approx(summary.cost_usd, rel=0.02)
    assert len(load_eval_set(tmp_path / "synth" / "eval.jsonl")) == 12
