"""dask-dane: train models with DANE (Distributed Approximate NEwton) on a Dask cluster."""

__version__ = "0.1.0"
