"""Long texts embedded to their end (tasks/embedders/spans.py), on a tiny model built here (128 tokens)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes.tiny_models import build_embedder


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(build_embedder(tmp_path_factory.mktemp("m") / "tiny")), device="cpu")


class Plain:
    """The model alone: truncates at its length."""

    def __init__(self, model):
        self.model, self.dim = model, 16

    def encode_documents(self, texts):
        return self.model.encode(texts, normalize_embeddings=True)

    encode_queries = encode_documents


def test_spans_are_exact_substrings_within_the_size(model):
    from situate.tasks.embedders.spans import split_spans

    text = " ".join(f"word{i}" for i in range(300))
    pieces = split_spans(model.tokenizer, text, 126)
    spans = [w for w, _ in pieces]
    assert [n for _, n in pieces][:-1] == [126] * (len(pieces) - 1) and 0 < pieces[-1][1] <= 126
    assert len(spans) > 1 and all(w in text for w in spans)
    assert spans[0].startswith("word0") and spans[-1].endswith("word299")
    assert all(len(model.tokenizer(w, add_special_tokens=False)["input_ids"]) <= 126 for w in spans)
    assert split_spans(model.tokenizer, "short text", 126) == [("short text", 1)]


def test_texts_split_together_are_split_as_each_alone(model):
    """`split_all` tokenizes every text that may not fit in one call: each text gets the spans
    it gets alone, short, long and mixed in any order."""
    from situate.tasks.embedders.spans import split_all

    def alone(text: str, size: int) -> list[tuple[str, int]]:
        marks = model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                                truncation=False)["offset_mapping"]
        if len(marks) <= size:
            return [(text, 1)]
        return [(text[marks[j][0]:marks[min(j + size, len(marks)) - 1][1]], min(size, len(marks) - j))
                for j in range(0, len(marks), size)]

    texts = ["short", " ".join(f"w{i}" for i in range(400)), "x" * 200,
             "a " * 126 + "end", " ".join(f"word{i}" for i in range(127)), ""]
    assert split_all(model.tokenizer, texts, 126) == [alone(t, 126) for t in texts]
    assert [len(w) > 1 for w in split_all(model.tokenizer, texts, 126)][:2] == [False, True]
    assert split_all(model.tokenizer, [], 126) == []


def test_the_tail_of_a_long_text_changes_its_vector(model):
    from situate.tasks.embedders.spans import SpanPooled

    head = " ".join(f"word{i}" for i in range(200))
    a, b = head + " zebra finch lives here", head + " quartz mining town"
    plain = Plain(model)
    assert np.allclose(*plain.encode_documents([a, b]))  # cut at 128 tokens: the tails are lost
    pooled = SpanPooled(plain, model)
    va, vb = pooled.encode_documents([a, b])
    assert not np.allclose(va, vb, atol=1e-4)
    assert np.linalg.norm(va) == pytest.approx(1.0, abs=1e-5)


def test_a_long_text_is_the_token_weighted_mean_of_its_spans_and_a_short_one_is_unchanged(model):
    from situate.tasks.embedders.spans import SpanPooled, split_spans

    plain = Plain(model)
    pooled = SpanPooled(plain, model)
    long = " ".join(f"token{i}" for i in range(233))
    vectors = pooled.encode_documents([long, "a short text"])
    pieces = split_spans(model.tokenizer, long, pooled.size)
    parts = plain.encode_documents([w for w, _ in pieces])
    assert pieces[-1][1] < pieces[0][1]  # a short last span: its weight is what it holds
    mean = (parts * np.array([n for _, n in pieces], dtype=np.float32)[:, None]).sum(axis=0)
    assert np.allclose(vectors[0], mean / np.linalg.norm(mean), atol=1e-5)
    assert np.allclose(vectors[1], plain.encode_documents(["a short text"])[0], atol=1e-6)


def test_a_query_is_read_as_one_span_its_first(model):
    """A query costs one span however long it is sent: its vector is its first span's (a
    short one's is unchanged)."""
    from situate.tasks.embedders.spans import SpanPooled, split_spans

    plain = Plain(model)
    pooled = SpanPooled(plain, model)
    long = " ".join(f"token{i}" for i in range(2_000))
    asked: list[list[str]] = []
    encode = plain.encode_queries
    plain.encode_queries = lambda texts: asked.append(list(texts)) or encode(texts)
    vectors = pooled.encode_queries([long, "a short query"])
    first = split_spans(model.tokenizer, long, pooled.size)[0][0]
    assert sum(len(texts) for texts in asked) == 2 and first in asked[0] + asked[-1]
    assert np.allclose(vectors[0], plain.encode_documents([first])[0], atol=1e-6)
    assert np.allclose(vectors[1], plain.encode_documents(["a short query"])[0], atol=1e-6)
