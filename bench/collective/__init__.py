"""`dane bench collective`: the Dask graph's rounds against a gloo group's, in one run."""
