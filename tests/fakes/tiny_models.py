"""Tiny sentence-transformers models built and saved locally for tests: a randomly initialised
one-layer BERT over a character vocabulary, as an embedder (Transformer + mean Pooling) or as a
CrossEncoder (BertForSequenceClassification, one label). Nothing is downloaded; building one
takes a second or two."""

from __future__ import annotations

import string
from pathlib import Path

# Every lower-case word is cut into known word pieces: its first character, then "##" pieces.
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
         + list(string.ascii_lowercase + string.digits + string.punctuation)
         + ["##" + c for c in string.ascii_lowercase + string.digits])


def _config(seed: int, hidden: int, **extra: int) -> object:
    import torch
    from transformers import BertConfig

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=hidden, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=256,
                        initializer_range=0.5, **extra)
    return config


def _tokenizer(directory: Path) -> object:
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    return BertTokenizerFast(vocab={piece: i for i, piece in enumerate(VOCAB)}, do_lower_case=True)


def build_embedder(directory: Path, seed: int = 0, hidden: int = 16,
                   prompts: dict[str, str] | None = None) -> Path:
    """A tiny SentenceTransformer (`hidden`-d vectors, optionally saved with its query and document
    `prompts`) saved at `directory`; returns it."""
    from transformers import BertModel

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import Pooling, Transformer
    from sentence_transformers import SentenceTransformer

    config = _config(seed, hidden)
    base = directory.with_name(directory.name + "-bert")
    tokenizer = _tokenizer(base)
    BertModel(config).save_pretrained(base)
    tokenizer.save_pretrained(base)
    transformer = Transformer(str(base), max_seq_length=128)
    SentenceTransformer(modules=[transformer, Pooling(hidden)], device="cpu",
                        prompts=prompts).save(str(directory))
    return directory


def build_cross_encoder(directory: Path, seed: int = 0, hidden: int = 16, num_labels: int = 1) -> Path:
    """A tiny CrossEncoder (one relevance score a pair, or `num_labels`) saved at `directory`."""
    from transformers import BertForSequenceClassification

    config = _config(seed, hidden, num_labels=num_labels)
    tokenizer = _tokenizer(directory)
    BertForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
