"""Retrieval over any `ChunkStore`: the search modes (dense, BM25, hybrid fused here, reranked),
evaluation sets and their metrics, and the Pass@k chart."""
