"""One round of training: the worker's tasks, the graph that wires them, and what they move.

The shards and their objective (shards, objective, augment), the phase functions (tasks) and
the worker's tasks (worker), the graph, the sums and what they cost (aggregate, comm,
transport, wire), the gloo group and scoring; nothing here imports the settings or driver.
"""
