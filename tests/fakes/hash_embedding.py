"""The deterministic bag-of-words embedding, shipped in the package for plugins' tests too."""

from situate.testing.fakes import CountingEmbedding, HashEmbedding

__all__ = ["CountingEmbedding", "HashEmbedding"]
