"""Rerankers by name behind one interface: Cohere's API, or a local sentence-transformers
cross-encoder."""
