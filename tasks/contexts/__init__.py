"""Contexts: the `Contextualizer` interface and registry, the cache-aware driver every provider
goes through, cost models for dry runs, and the providers (structural, Claude)."""
