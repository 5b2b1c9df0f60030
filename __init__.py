"""dask-dane: train models with DANE (Distributed Approximate NEwton) on a Dask cluster.

The public Python API, the CLI's names as functions:

    import dask_dane
    result = dask_dane.train("store.zarr", model="my_net.py:build", algorithm="dane", rounds=10)
    result.model, result.history, result.test_accuracy, result.run_dir
    dask_dane.prepare("store.zarr", train=(x, y), test=(x_test, y_test), shards=4)
    model = dask_dane.load("runs/my-run")

Its names are imported on first use, so that `dane --help` does not wait for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["TrainResult", "__version__", "load", "prepare", "train"]

if TYPE_CHECKING:
    from .pipeline.api import TrainResult, prepare, train
    from .pipeline.trained import load_model as load


def __getattr__(name: str) -> Any:
    if name in ("TrainResult", "prepare", "train"):
        from .pipeline import api

        return getattr(api, name)
    if name == "load":
        from .pipeline.trained import load_model

        return load_model
    raise AttributeError(f"module 'dask_dane' has no attribute {name!r}")
