"""Fakes the tests run against: loopback servers that speak the real wire formats (Anthropic,
Cohere, OpenAI), real Milvus and Prefect servers started for a test, tiny locally built models,
and a deterministic bag-of-words embedder."""
