"""Settings sized for another store: the lines `dane train` prints when a preset or a config
made for a large store runs on a small one (a gradient sample larger than a shard, local
steps that go over a shard many times a round). The run goes on as set: each line says
what happens instead and which setting to change."""

from __future__ import annotations

from ..engine.plan import RunSetup

# Local work of more than this many passes over a shard a round is worth a line: the
# presets' recipes do one or a few passes, a 200-step one on a tiny store hundreds.
MANY_PASSES = 20


def store_fit_notes(setup: RunSetup) -> list[str]:
    """One line per setting that does not fit the run's store (none where all fit)."""
    config, store = setup.config, setup.store
    smallest = min(stop - start for start, stop in store.shards)
    rows = max(round(smallest * (1 - config.val_fraction)), 1)
    notes = []
    sample = getattr(config, "grad_sample", 0) or 0
    if sample > rows:
        notes.append(
            f"note: --grad-sample {sample} is more than a shard's {rows} training rows: DANE's "
            "gradient phase reads each whole shard (set --grad-sample 0 to say so)"
        )
    steps, batch = getattr(config, "local_steps", 0) or 0, config.batch_size
    passes = steps * min(batch, rows) / rows
    # Only where a solver takes K steps (not the exact ones, not sgd/gd/agd), K given as such.
    stepped = hasattr(getattr(setup.strategy, "solver", None), "steps")
    given = getattr(config, "local_epochs", None) is None
    if stepped and given and passes > MANY_PASSES:
        notes.append(
            f"note: --local-steps {steps} of --batch-size {batch} rows go over a shard's "
            f"{rows} training rows {passes:.0f} times a round; --local-epochs sets the local "
            "work in passes over a shard"
        )
    return notes
