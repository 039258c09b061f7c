"""Benchmarks, each a module printing one JSON object: run them from the repository root as
`python -m benchmarks.<name>` (their commands are in each module's docstring; figures in RESULTS.md)."""
