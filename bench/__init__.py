"""Benchmark harness for kbroker: same-run comparisons against reference brokers.

Not part of the test suite; run it with `python bench/run.py` (see bench/README.md).
"""
