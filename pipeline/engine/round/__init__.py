"""One round of training: the worker tasks, the graph that wires them, and what they move.

The modules here run a round and nothing else: the shards and their objective on the
workers (shards, objective, augment), the phase functions (tasks) and the worker's tasks
(worker), the graph (graph), the reductions and what they cost (aggregate, comm, transport,
wire). They share
a layer with the algorithms they call and the protocol, and import neither the setup nor the
driver.
"""
