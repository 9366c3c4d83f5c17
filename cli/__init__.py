"""The `situate` command line: each command with its options model (`situate.cli.main` parses
and runs them). The search faces' commands import no Prefect."""
