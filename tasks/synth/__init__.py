"""Evaluation sets made from a corpus (`situate synth`): held-out sentences offline, or an LLM's
questions with the quote that answers them."""
