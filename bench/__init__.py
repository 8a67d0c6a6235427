"""Benchmark scripts: each prints its figures (never timed assertions in tests)."""
