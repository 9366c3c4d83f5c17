"""situate's search as the retrievers of application frameworks, each an optional extra that
delegates every query to `situate.api.Retriever` (ranked exactly as `situate evaluate` ranks):
`situate.integrations.langchain` (`pip install 'situate[langchain]'`) and
`situate.integrations.llamaindex` (`pip install 'situate[llamaindex]'`)."""
