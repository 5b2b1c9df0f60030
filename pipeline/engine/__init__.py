"""The engine: a run's rounds on a Dask cluster, and the single-process oracle they match.

protocol.py is what every algorithm provides (the Strategy and its records); round/ is one
round (the worker's phase functions, the graph, the sums and what they cost, the shards and
their objective); run/ is the driver (the round order, run state, folder and checkpoints, the
bounded requests, the torch collective's segments); reference.py runs the same phase functions
in one process. It reads a RunConfig (pipeline/setup/), gets its cluster from
pipeline/launchers/ and tells whoever watches through Callbacks (run/callbacks.py).
"""
