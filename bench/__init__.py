"""Benchmarks: scripts, not timed tests. Run with ``make bench``."""
