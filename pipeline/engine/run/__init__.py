"""A run from first round to last: the driver (loop, pipelined and fetch, or segments for the
torch collective), where a run stands on disk (run_state, rundir, checkpoint, metrics), its
requests to the cluster (bounded), shard placement (shard_memory) and its failures (errors).
"""
