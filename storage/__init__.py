"""situate.storage: where chunks and contexts are kept (Milvus, the context disk cache);
imports only the core."""
