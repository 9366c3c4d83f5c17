"""situate core: records, errors and settings shared by every layer; imports nothing above it
(no Prefect, no Milvus)."""
