"""dask-dane: train models with DANE (Distributed Approximate NEwton) on a Dask cluster.

The public Python API, the CLI's names as functions:

    import dask_dane
    store = dask_dane.prepare("store.zarr", "digits", shards=4)  # or train=(x, y), test=...
    result = dask_dane.train(store, model="my_net.py:build", algorithm="dane", rounds=10)
    result.model, result.history, result.test_accuracy, result.run_dir
    model = dask_dane.load("runs/my-run")

train
    Train a model on a store with an algorithm; returns a TrainResult.
prepare
    Write a sharded store from a named source or from NumPy arrays.
load
    The trained nn.Module of a run directory.
TrainResult
    What train returns: the model, the metrics rows, the summary and the run directory.
Callbacks
    Functions train calls at the start, after each round and with each round's weights.

Its names are imported on first use, so that `import dask_dane` and `dane --help` do not
wait for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Callbacks", "TrainResult", "__version__", "load", "prepare", "train"]

if TYPE_CHECKING:
    from .pipeline.api import TrainResult, load, prepare, train
    from .pipeline.engine.run.callbacks import Callbacks

# name: the module under the package that defines it, imported on first use.
_LAZY = {
    "Callbacks": "pipeline.engine.run.callbacks",  # torch-free: reaching it costs nothing
    "TrainResult": "pipeline.api",
    "load": "pipeline.api",
    "prepare": "pipeline.api",
    "train": "pipeline.api",
}


def __getattr__(name: str) -> Any:
    """An API name, imported on first use."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # found directly next time, without this hook
        return value
    raise AttributeError(f"module 'dask_dane' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the API's among them before their first use."""
    # The lazy names are listed before they are imported: dir(), help() and tab completion.
    return sorted({*globals(), *__all__})
