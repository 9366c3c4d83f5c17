"""situate.tasks: the work of a run as plain typed functions (load, chunk, situate, embed,
rerank, retrieve, score); imports only the core."""
