"""A run from first round to last: the driver, its directory and its faults.

loop starts a run and pipelined (with fetch) drives its rounds, or segments their torch
collective's; run_state, rundir, checkpoint and metrics keep where a run stands on disk;
bounded holds the driver's requests to its cluster and shard_memory places the shards; errors
are the failures of a valid run. The cluster comes from pipeline/launchers/; the
single-process oracle they match is ../reference.py; what watches a run is pipeline/observe/.
"""
