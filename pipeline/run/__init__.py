"""A run from first round to last: the driver, its cluster, its directory and its faults.

loop starts a run and pipelined drives its rounds; reference is the single-process oracle
they match; run_state, rundir, checkpoint and metrics keep where a run stands on disk;
cluster, cluster_logs and dashboard are the Dask side; errors are the failures of a valid run.
"""
