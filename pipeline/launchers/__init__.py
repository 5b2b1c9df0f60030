"""How a run gets its Dask cluster: started here (LocalCluster, dask-cuda's LocalCUDACluster,
a dask-jobqueue cluster of batch jobs) or reached at an address or scheduler file.

cluster.py makes the client; jobqueue.py starts and watches the batch jobs; cluster_checks.py
refuses a missing GPU, says a taken dashboard port in one line and routes the cluster's logs;
worker_count.py weighs the workers against the shards; errors.py holds a lost cluster's
error and the missing main guard, caught before any worker starts.
"""
