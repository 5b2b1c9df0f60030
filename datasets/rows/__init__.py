"""A shard's rows as a worker holds them, beside the store they come from: the features as
stored, converted a chunk at a time (features.py), and the windows of a shard streamed from
the store (streamed.py). The round (pipeline/engine/round/) reads them; they know nothing of it."""
