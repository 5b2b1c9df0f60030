"""What a run's rounds pass through, counted (issue 71's targets): the package's functions
(comprehensions and lambdas left out), their files and the classes a reader meets, traced on
an in-process cluster (threads) from Callbacks.on_start to on_end of a 2-round DANE run.

    .venv/bin/python tests/house/count_round.py STORE dask|torch [OUT.json]

The `dask_dane` on sys.path is counted: PYTHONPATH=DIR, with DIR/dask_dane a checkout of
another commit, counts that commit (its `train` in engine/run/loop.py or pipeline/training.py).
Not a test: a measurement, printed and written as JSON.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import threading
from pathlib import Path

import dask_dane

ROOT = str(Path(dask_dane.__file__).parent)
SKIP = re.compile(r"<(genexpr|listcomp|dictcomp|setcomp|lambda)>")
ROUND_WORK = ("pipeline/engine/round", "pipeline/engine/protocol", "pipeline/algorithms", "models")
DRIVER = ("pipeline/engine/run", "pipeline/engine/plan", "pipeline/training")
# One round from its submission to its new weights, the measure: what runs beneath
# these (the graph's build on the driver, a worker's phase and update tasks; a rank's round
# under the torch collective), scoring and recording left out.
ROUND_ENTRIES = {"build_round", "run_worker_phase", "update_on_worker", "_one_round"}
seen: dict[str, set[str]] = {"functions": set(), "classes": set(), "round": set()}
recording = threading.Event()


def _profile(frame, event, arg) -> None:
    if event != "call" or not recording.is_set():
        return
    code = frame.f_code
    name = code.co_filename
    ours = name.startswith(ROOT + "/") and not {".venv", "tests", "observe"} & set(
        Path(name[len(ROOT) + 1 :]).parts
    )
    if ours and not SKIP.search(code.co_qualname):
        relative = name[len(ROOT) + 1 :]
        seen["functions"].add(f"{relative}:{code.co_qualname}")
        if _in_a_round(frame):
            seen["round"].add(f"{relative}:{code.co_qualname}")
        if "." in code.co_qualname and "<locals>" not in code.co_qualname:
            seen["classes"].add(f"{relative}:{code.co_qualname.split('.')[0]}")
    if code.co_name == "__init__" and "self" in frame.f_locals:  # dataclasses' __init__ too
        cls = type(frame.f_locals["self"])
        if cls.__module__.startswith("dask_dane.") and ".observe." not in cls.__module__:
            module = cls.__module__.removeprefix("dask_dane.").replace(".", "/")
            seen["classes"].add(f"{module}.py:{cls.__qualname__}")


def _in_a_round(frame) -> bool:
    """Whether the frame is a round's entry or runs beneath one."""
    while frame is not None:
        if frame.f_code.co_name in ROUND_ENTRIES and frame.f_code.co_filename.startswith(ROOT):
            return True
        frame = frame.f_back
    return False


def _train(store: str, collective: str) -> None:
    from distributed import Client, LocalCluster

    from dask_dane.pipeline.engine.run.callbacks import Callbacks
    from dask_dane.pipeline.setup.config import RunConfig

    try:
        from dask_dane.pipeline.training import train
    except ImportError:  # before the engine became a layer
        from dask_dane.pipeline.engine.run.loop import train
    with (
        tempfile.TemporaryDirectory() as out,
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False) as cluster,
        Client(cluster) as client,
    ):
        config = RunConfig(
            store=store, out=out + "/run", algorithm="dane", model="mlp", rounds=2,
            collective=collective, local_steps=2, batch_size=16,
        ).validate()  # fmt: skip
        callbacks = Callbacks(
            on_start=lambda *a: recording.set(), on_end=lambda *a: recording.clear()
        )
        train(config, client=client, callbacks=callbacks)


def _part(functions: list[str], prefixes: tuple[str, ...]) -> dict[str, int]:
    inside = [f for f in functions if f.startswith(prefixes)]
    return {"functions": len(inside), "files": len({f.split(":")[0] for f in inside})}


def main() -> None:
    store, collective = sys.argv[1], sys.argv[2]
    sys.setprofile(_profile)
    threading.setprofile(_profile)  # the in-process workers' threads, started after this
    _train(store, collective)
    sys.setprofile(None)
    functions = sorted(seen["functions"])
    result = {
        "package": ROOT,
        "collective": collective,
        "run": _part(functions, ("",)),
        "round_work": _part(functions, ROUND_WORK),
        "one_round": _part(sorted(seen["round"]), ("",)),
        "round_list": sorted(seen["round"]),
        "driver": _part(functions, DRIVER),
        "classes": sorted(seen["classes"]),
        "function_list": functions,
    }
    shown = ("collective", "run", "round_work", "one_round", "driver")
    print(json.dumps({k: result[k] for k in shown}))
    print(f"classes: {len(result['classes'])}")
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
