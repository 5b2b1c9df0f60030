"""Benchmarks that run training through the Dask pipeline many times on one cluster."""
