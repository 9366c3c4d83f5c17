"""The machinery every LLM context provider shares (Claude, OpenAI-compatible servers, Ollama):
the prompts and their fences (`prompts`), model facts and the bill (`models`), which requests
(`planning`), the client with its pool, schedule and retries (`client`), the reading of answers
(`answers`), the contextualizer (`contextualizer`), the dry run's bill (`estimate`) and a local
server's measured pace (`rates`). A provider module holds only its wire format, cache fields and
prices."""
