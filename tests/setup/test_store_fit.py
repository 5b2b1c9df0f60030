"""Settings made for a larger store, on a small one (pipeline/setup/store_fit.py): a gradient
sample larger than a shard and local steps that go over a shard many times a round each get
one line naming the setting and what happens instead; settings that fit get none."""

from __future__ import annotations

from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.setup.store_fit import store_fit_notes


def _notes(store, **settings) -> list[str]:
    config = RunConfig(store=str(store), model="small-cnn", **settings).validate()
    return store_fit_notes(prepare_run(config))


def test_a_large_presets_sample_and_steps_on_a_small_store_each_get_a_line(digits_stores):
    # digits in 4 shards: about 405 training rows a shard, as fashion-mnist-dane-best's 4000-row
    # sample and 200 steps of 64 rows (31 passes a round) met a small store.
    sample, steps = _notes(digits_stores[4], algorithm="dane", grad_sample=4000,
                           local_steps=200, batch_size=64)  # fmt: skip

    assert sample.startswith("note: --grad-sample 4000 is more than a shard's ")
    assert "reads each whole shard" in sample
    assert steps.startswith("note: --local-steps 200 of --batch-size 64 rows go over a shard's")
    assert "--local-epochs" in steps


def test_settings_that_fit_the_store_get_no_line(digits_stores):
    assert _notes(digits_stores[4], algorithm="dane", grad_sample=256, local_steps=20) == []
    # K set in passes, or no K steps at all (an exact solve; plain SGD): nothing to say of K.
    assert _notes(digits_stores[4], algorithm="fedavg", local_epochs=1.0) == []
    assert _notes(digits_stores[4], algorithm="sgd", local_steps=500) == []
