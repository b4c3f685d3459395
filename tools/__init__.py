"""Benchmarks, sweeps of the paper's tables, plots and checks; run as python -m tools.NAME from the root."""
