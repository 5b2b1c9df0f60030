"""What sending tensors as distributed's frames saves: a round's dataclasses at model size.

A RoundResult (the weights and BatchNorm's buffers) and a WorkerPhase (one subtree sum of
the weights, what a worker sends the others each phase), at ResNet-18's size (11,689,512
float32 parameters, 20 BatchNorm layers; built synthetically) and at small-cnn's (38,282,
153 kB), each sent both ways in the same run: in-band (pickled whole, each tensor through
torch.save's bytes: the form before frames, `use_frames(False)`) and as frames (each tensor
its own out-of-band frame). Two measures, each the median of `repeats`, the two forms
alternating so that a busy moment of the machine hits both:
- local: distributed's comm dumps and loads of the object in this process, and the bytes
  and frames they make;
- transfer: a task on worker A makes the object; a task on worker B takes it as its input
  (a 2-worker LocalCluster, processes on loopback). Timed from B's task submitted to its
  result, and as B's own log of the incoming transfer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from ...pipeline.engine.run.bounded import cluster_identity

# name: (float32 parameters, BatchNorm layers' channels)
MODELS: dict[str, tuple[int, tuple[int, ...]]] = {
    "resnet18": (11_689_512, (64,) * 5 + (128,) * 5 + (256,) * 5 + (512,) * 5),
    "small-cnn": (38_282, ()),
}
KINDS = ("RoundResult", "WorkerPhase")
FORMS = ("in-band", "frames")
DEFAULT_REPEATS = 7


def _buffers(channels: tuple[int, ...]) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for i, c in enumerate(channels):
        found[f"bn{i}.running_mean"] = torch.zeros(c)
        found[f"bn{i}.running_var"] = torch.ones(c)
        found[f"bn{i}.num_batches_tracked"] = torch.tensor(100)
    return found


def make_object(kind: str, model: str, seed: int) -> Any:
    """One round's object of `kind` at `model`'s size (a task: runs on worker A)."""
    from ...pipeline.engine.round.aggregate import Partial
    from ...pipeline.engine.round.tasks import RoundResult
    from ...pipeline.engine.round.worker import WorkerPhase

    size, channels = MODELS[model]
    weights = torch.randn(size, generator=torch.Generator().manual_seed(seed))
    buffers = _buffers(channels)
    if kind == "RoundResult":
        return RoundResult(weights=weights, state=None, metrics={"train_loss": 1.0},
                           buffers=buffers)  # fmt: skip
    total = Partial(
        tensor_sums={"weights": weights}, metric_sums={"train_loss": 1.0}, num_samples=100,
        num_shards=2, compute_by_worker={"a": 1.0}, rows=100, diagnostics={},
        buffer_sums=buffers,
    )  # fmt: skip
    return WorkerPhase(nodes={(1, 0): total})


def take(obj: Any) -> int:
    """Worker B's task: it only needs its input here."""
    return 1


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 6)


def _local_once(obj: Any) -> dict[str, float]:
    from distributed.protocol import dumps, loads, to_serialize

    start = time.perf_counter()
    frames = dumps({"data": to_serialize(obj)})
    middle = time.perf_counter()
    loads(frames)
    done = time.perf_counter()
    sizes = [memoryview(f).nbytes for f in frames]
    return {"dumps_s": middle - start, "loads_s": done - middle, "bytes": sum(sizes),
            "largest_frame": max(sizes), "frames": len(frames)}  # fmt: skip


def local_rows(kind: str, model: str, repeats: int) -> list[dict[str, Any]]:
    """The comm's dumps and loads of one object in this process, in each form."""
    from ...pipeline.engine.round.wire import use_frames

    obj = make_object(kind, model, 0)
    runs: dict[str, list[dict[str, float]]] = {form: [] for form in FORMS}
    for _ in range(repeats + 1):  # the first of each form warms up, not counted
        for form in FORMS:
            previous = use_frames(form == "frames")
            try:
                runs[form].append(_local_once(obj))
            finally:
                use_frames(previous)
    rows = []
    for form, found in runs.items():
        kept = found[1:]
        row = {k: _median([r[k] for r in kept]) for k in ("dumps_s", "loads_s")}
        total = [r["dumps_s"] + r["loads_s"] for r in kept]
        sizes = {k: int(kept[0][k]) for k in ("bytes", "largest_frame", "frames")}
        rows.append({"kind": kind, "model": model, "form": form, **row,
                     "total_s": _median(total), **sizes})  # fmt: skip
    return rows


def _last_transfer(dask_worker: Any) -> dict[str, float]:
    log = dask_worker.transfer_incoming_log
    return dict(log[-1]) if log else {}


def _transfer_once(client: Any, kind: str, model: str, a: str, b: str) -> dict[str, float]:
    from distributed import wait

    made = client.submit(make_object, kind, model, 0, workers=[a], pure=False)
    wait(made)
    start = time.perf_counter()
    taken = client.submit(take, made, workers=[b], pure=False)
    taken.result()
    wall = time.perf_counter() - start
    logged = client.run(_last_transfer, workers=[b])[b]
    del made, taken
    return {"wall_s": wall, "transfer_s": logged.get("duration", float("nan")),
            "sizeof_bytes": logged.get("total", 0)}  # fmt: skip


def transfer_rows(client: Any, kind: str, model: str, repeats: int) -> list[dict[str, Any]]:
    """Worker A to worker B, each form, alternating (the first of each form not counted)."""
    from ...pipeline.engine.round.wire import use_frames

    a, b = sorted(cluster_identity(client)["workers"])
    runs: dict[str, list[dict[str, float]]] = {form: [] for form in FORMS}
    for _ in range(repeats + 1):
        for form in FORMS:
            client.run(use_frames, form == "frames")
            runs[form].append(_transfer_once(client, kind, model, a, b))
    client.run(use_frames, True)
    rows = []
    for form, found in runs.items():
        kept = found[1:]
        row = {k: _median([r[k] for r in kept]) for k in ("wall_s", "transfer_s")}
        sized = int(kept[-1]["sizeof_bytes"])
        rows.append({"kind": kind, "model": model, "form": form, **row, "sizeof_bytes": sized})
    return rows


def _ratios(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """In-band over frames, per kind and model: above 1, frames are the faster or smaller."""
    out = []
    for kind in KINDS:
        for model in MODELS:
            pair = {r["form"]: r for r in rows if r["kind"] == kind and r["model"] == model}
            if len(pair) == 2:
                ratio = {k: round(pair["in-band"][k] / pair["frames"][k], 3) for k in keys}
                out.append({"kind": kind, "model": model, **ratio})
    return out


def run_wire(repeats: int = DEFAULT_REPEATS, *, log: Callable[[str], None] = print) -> dict:
    """Both measures for every kind and model; the JSON-able result."""
    from ...pipeline.launchers.cluster import make_client
    from ...pipeline.setup.config import RunConfig

    local: list[dict[str, Any]] = []
    for model in MODELS:
        for kind in KINDS:
            log(f"local: {kind} at {model} size ...")
            local += local_rows(kind, model, repeats)
    settings = RunConfig(store="unused", workers=2, threads_per_worker=1,
                         dashboard_address="127.0.0.1:0")  # fmt: skip
    transfer: list[dict[str, Any]] = []
    with make_client(settings) as client:
        for model in MODELS:
            for kind in KINDS:
                log(f"transfer: {kind} at {model} size ...")
                transfer += transfer_rows(client, kind, model, repeats)
    return {
        "repeats": repeats,
        "models": {name: {"parameters": n, "bytes": 4 * n} for name, (n, _) in MODELS.items()},
        "torch": torch.__version__,
        "local": local,
        "local_ratios": _ratios(local, ("dumps_s", "loads_s", "total_s", "bytes")),
        "transfer": transfer,
        "transfer_ratios": _ratios(transfer, ("wall_s", "transfer_s")),
    }


def markdown_table(result: dict[str, Any]) -> str:
    """Each kind and model: both forms' times and bytes, and in-band over frames."""
    lines = [
        "| object | model | form | dumps+loads ms | bytes | frames | A->B wall ms | A->B transfer ms |",  # noqa: E501
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    moved = {(r["kind"], r["model"], r["form"]): r for r in result["transfer"]}
    for r in result["local"]:
        t = moved.get((r["kind"], r["model"], r["form"]), {})
        lines.append(
            f"| {r['kind']} | {r['model']} | {r['form']} | {1e3 * r['total_s']:.2f} "
            f"| {r['bytes']:,} | {r['frames']} | {1e3 * t.get('wall_s', float('nan')):.1f} "
            f"| {1e3 * t.get('transfer_s', float('nan')):.1f} |"
        )
    for local, moved_ratio in zip(result["local_ratios"], result["transfer_ratios"], strict=True):
        lines.append(
            f"\n{local['kind']} at {local['model']} size, in-band / frames: dumps+loads "
            f"{local['total_s']}x, bytes {local['bytes']}x, A->B wall {moved_ratio['wall_s']}x, "
            f"transfer {moved_ratio['transfer_s']}x"
        )
    return "\n".join(lines)
