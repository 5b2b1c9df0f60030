"""The driver side: configuration, cluster, round graphs, reference runner, checkpoints."""
