"""The machinery that keeps the documentation true: `generate` writes the reference pages from the
code (and the benchmarks page from the result files), `blocks` finds every code block and says
how the tests treat it."""
