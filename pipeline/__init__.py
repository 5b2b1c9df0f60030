"""The driver side: configuration, cluster, round graphs, reference runner, checkpoints.

Code outside the engine (bench/, above all) imports each name from the module that defines
it, e.g. `from dask_dane.pipeline.setup.config import RunConfig`.
"""
