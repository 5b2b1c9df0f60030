"""Benchmarks that run training through the Dask pipeline many times on one cluster."""

# `dane bench`'s one-line help: here, so that `dane --help` lists it without importing the
# benchmarks (and torch) behind bench/app.py.
BENCH_HELP = "Benchmarks through the Dask pipeline (one cluster reused for every run)."
