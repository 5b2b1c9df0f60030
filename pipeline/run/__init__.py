"""A run from first round to last: the driver, its cluster, its directory and its faults.

loop starts a run and pipelined (with fetch) drives its rounds; run_state, rundir,
checkpoint and metrics keep where a run stands on disk; cluster, cluster_checks, jobqueue and
shard_memory are the Dask side; errors are the failures of a valid run. The single-process
oracle they match is pipeline/reference.py; what watches a run is pipeline/observe/.
"""
