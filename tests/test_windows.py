"""Long texts embedded to their end (tasks/embedders/windows.py), on a tiny model built here (128 tokens)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes.tiny_models import build_embedder


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(build_embedder(tmp_path_factory.mktemp("m") / "tiny")), device="cpu")


class Plain:
    """The model alone: truncates at its window."""

    def __init__(self, model):
        self.model, self.dim = model, 16

    def encode_documents(self, texts):
        return self.model.encode(texts, normalize_embeddings=True)

    encode_queries = encode_documents


def test_windows_are_exact_substrings_within_the_size(model):
    from situate.tasks.embedders.windows import split_windows

    text = " ".join(f"word{i}" for i in range(300))
    pieces = split_windows(model.tokenizer, text, 126)
    windows = [w for w, _ in pieces]
    assert [n for _, n in pieces][:-1] == [126] * (len(pieces) - 1) and 0 < pieces[-1][1] <= 126
    assert len(windows) > 1 and all(w in text for w in windows)
    assert windows[0].startswith("word0") and windows[-1].endswith("word299")
    assert all(len(model.tokenizer(w, add_special_tokens=False)["input_ids"]) <= 126 for w in windows)
    assert split_windows(model.tokenizer, "short text", 126) == [("short text", 1)]


def test_the_tail_of_a_long_text_changes_its_vector(model):
    from situate.tasks.embedders.windows import Windowed

    head = " ".join(f"word{i}" for i in range(200))
    a, b = head + " zebra finch lives here", head + " quartz mining town"
    plain = Plain(model)
    assert np.allclose(*plain.encode_documents([a, b]))  # cut at 128 tokens: the tails are lost
    windowed = Windowed(plain, model)
    va, vb = windowed.encode_documents([a, b])
    assert not np.allclose(va, vb, atol=1e-4)
    assert np.linalg.norm(va) == pytest.approx(1.0, abs=1e-5)


def test_a_long_text_is_the_token_weighted_mean_of_its_windows_and_a_short_one_is_unchanged(model):
    from situate.tasks.embedders.windows import Windowed, split_windows

    plain = Plain(model)
    windowed = Windowed(plain, model)
    long = " ".join(f"token{i}" for i in range(233))
    vectors = windowed.encode_queries([long, "a short query"])
    pieces = split_windows(model.tokenizer, long, windowed.size)
    parts = plain.encode_documents([w for w, _ in pieces])
    assert pieces[-1][1] < pieces[0][1]  # a short last window: its weight is what it holds
    mean = (parts * np.array([n for _, n in pieces], dtype=np.float32)[:, None]).sum(axis=0)
    assert np.allclose(vectors[0], mean / np.linalg.norm(mean), atol=1e-5)
    assert np.allclose(vectors[1], plain.encode_documents(["a short query"])[0], atol=1e-6)
