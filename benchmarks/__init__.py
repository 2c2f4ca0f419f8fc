"""Benchmarks: ``python -m benchmarks``."""
