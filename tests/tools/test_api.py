"""The Python API: docs/python.md run as written, and train / prepare / load on their own."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from doc_runs import python_notebook  # beside the test folders in tests/

import dask_dane

pytestmark = pytest.mark.cluster


def test_the_worked_example_runs_as_written(tmp_path_factory):
    # docs/python.md's notebook cells, run once as pasted (tests/doc_runs.py); the page's
    # script block runs as pasted in tests/docs/test_docs_code_runs.py.
    done, folder = python_notebook(tmp_path_factory)

    assert done.returncode == 0, done.stderr[-3000:]
    trained = float(re.search(r"test accuracy (\S+) after 4 rounds", done.stdout).group(1))
    by_hand = float(re.search(r"accuracy by hand: (\S+)", done.stdout).group(1))
    exported = float(re.search(r"exported accuracy: (\S+)", done.stdout).group(1))
    assert trained > 0.8
    assert by_hand == pytest.approx(exported, abs=1e-12)
    assert by_hand == pytest.approx(trained, abs=0.011)  # the store's normalisation, rounded
    assert (folder / "digits.pt2").is_file()


def test_unknown_settings_are_refused_by_name(tmp_path):
    with pytest.raises(TypeError, match="keyword argument 'local_rate'; did you mean 'local_lr'"):
        dask_dane.train(None, local_rate=0.1, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_prepare_infers_the_task_and_classes(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)

    labels = dask_dane.prepare(
        tmp_path / "c.zarr", train=(x[:30], np.arange(30) % 3), test=(x[30:], np.arange(10) % 3)
    )
    targets = dask_dane.prepare(
        tmp_path / "r.zarr", train=(x[:30], x[:30, 0]), test=(x[30:], x[30:, 0]), shards=3
    )

    from dask_dane.datasets.store import open_store

    assert (open_store(labels).task, open_store(labels).num_classes) == ("classification", 3)
    assert (open_store(targets).task, open_store(targets).num_shards) == ("regression", 3)


def test_train_returns_the_model_of_the_last_checkpoint(digits_stores, cluster_client, tmp_path):
    result = dask_dane.train(
        digits_stores[2], model="small-cnn", algorithm="fedavg", client=cluster_client,
        out=tmp_path / "run", rounds=2, local_steps=5,
    )  # fmt: skip

    loaded = dask_dane.load(tmp_path / "run")
    assert [row["round"] for row in result.history] == [1, 2]
    assert result.test_accuracy == result.history[-1]["test_accuracy"]
    assert not result.model.training
    for a, b in zip(result.model.parameters(), loaded.parameters(), strict=True):
        assert torch.equal(a, b)
