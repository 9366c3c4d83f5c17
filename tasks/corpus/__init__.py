"""Corpora in: loading the three forms (pre-chunked JSON, JSONL, a directory or file), cleaning
what Milvus cannot store, and chunking documents."""
