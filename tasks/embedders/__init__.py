"""Embedders by name behind one interface: MiniLM and other local models (each in a process of
its own), e5-small, any sentence-transformers model, and API embedders through pymilvus-model."""
