"""A run's plan and parameters without orchestration: the options each run takes, the plan and
bill of an ingest, its capacity check, the order of its windows, the resources it shares, and the
evaluation sets `situate synth` makes. Imports no Prefect, so all of it is tested without a
server; situate.flows wraps it in Prefect's flows and tasks."""
