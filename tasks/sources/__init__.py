"""Sources of documents by URL: git repositories and websites (`situate.tasks.sources.base`)."""
