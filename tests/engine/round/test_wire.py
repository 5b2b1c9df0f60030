"""Our dataclasses cross Dask comms with each tensor as its own out-of-band frame (wire.py)."""

from __future__ import annotations

import copyreg
import io
import pickle
import sys

import cloudpickle
import numpy as np
import pytest
import torch
from distributed.protocol import (
    dask_serialize,
    deserialize,
    dumps,
    loads,
    serialize,
    to_serialize,
)

from dask_dane.models.registry import ModelSpec
from dask_dane.pipeline.algorithms import make_strategy
from dask_dane.pipeline.engine.protocol import Broadcast, LocalOutput
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round import comm, wire
from dask_dane.pipeline.engine.round.aggregate import Partial, shard_leaf
from dask_dane.pipeline.engine.round.tasks import PhaseEnd, RoundInput, RoundResult
from dask_dane.pipeline.engine.round.worker import WorkerPhase, nodes_of
from dask_dane.pipeline.engine.run.bounded import cluster_identity
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.training import train


def _tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    wide = torch.randn(6, 10, dtype=torch.float64, generator=generator)
    return {
        "float32": torch.randn(3, 5, generator=generator),
        "float64": wide,
        "bfloat16": torch.randn(17, generator=generator).to(torch.bfloat16),
        "int64": torch.arange(-4, 9),
        "strided": wide.t()[::2],  # non-contiguous, a view into a bigger storage
        "empty": torch.empty(0, 4),
        "scalar": torch.tensor(2.5),
    }


def _partial(tensors: dict[str, torch.Tensor]) -> Partial:
    return Partial(
        tensor_sums=tensors, metric_sums={"loss": 1.0}, num_samples=3, num_shards=1,
        compute_by_worker={"a": 0.5}, rows=3, diagnostics={0: {"x": 1.0}},
        buffer_sums={"bn": tensors["float32"]},
    )  # fmt: skip


def _report(tensors: dict[str, torch.Tensor]) -> Partial:
    output = LocalOutput(tensors=tensors, kept=dict(tensors), shard_state={"v": tensors})
    return shard_leaf(output=output, num_samples=3, compute_s=0.1, worker="a", shard=0,
                       buffers=tensors)  # fmt: skip


def _instances(tensors: dict[str, torch.Tensor]) -> dict[str, object]:
    """One of each dataclass that travels, its tensors nested in dicts, lists and dataclasses."""
    broadcast = Broadcast(tensors=tensors, decision=[tensors["bfloat16"]])
    layout = comm.layout(["a", "b"])
    strategy = make_strategy("dane", {})
    spec = ModelSpec(name="small-cnn", sample_shape=(1, 8, 8), num_classes=10)
    return {
        "RoundInput": RoundInput(strategy=strategy, spec=spec, seed=1, index=1, layout=layout,
                                 num_shards=2, round_data=(tensors["int64"],), buffers=tensors),
        "RoundInput unopened": RoundInput(strategy=strategy, spec=spec, seed=1, index=1,
                                          layout=layout, num_shards=2),
        "PhaseEnd": PhaseEnd(broadcast=broadcast, metrics={}, comm_bytes=8, communicated=True,
                             compute_by_worker={}, rows=1, buffers=tensors),
        "RoundResult": RoundResult(weights=tensors["float32"].flatten(), state=[broadcast],
                                   shard_states=[tensors], buffers=tensors),
        "WorkerPhase": WorkerPhase(nodes={(0, 0): _partial(tensors), (1, 0): _partial(tensors)},
                                   shard_states={0: tensors}),
        "Partial": _partial(tensors),
        "leaf": _report(tensors),
        "LocalOutput": _report(tensors).output,
        "Broadcast": broadcast,
    }  # fmt: skip


def _walk(a: object, b: object) -> int:
    """Assert `b` equals `a` exactly (tensors by value, dtype and shape); count the tensors."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and b.dtype == a.dtype and b.shape == a.shape
        assert torch.equal(a, b) and b.is_contiguous() and b.device == a.device
        return 1
    if isinstance(a, dict):
        assert list(a) == list(b)  # type: ignore[arg-type]
        return sum(_walk(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)  # type: ignore[arg-type]
        return sum(_walk(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[call-overload]
    if hasattr(a, "__dataclass_fields__"):
        assert type(a) is type(b)
        return sum(_walk(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    assert a == b
    return 0


@pytest.mark.parametrize("name", list(_instances(_tensors())))
def test_each_dataclass_round_trips_through_serialize_and_the_comms_dumps(name):
    obj = _instances(_tensors())[name]
    header, frames = serialize(obj)
    assert header["serializer"] == "dask"
    _walk(obj, deserialize(header, frames))
    _walk(obj, loads(dumps({"data": to_serialize(obj)}))["data"])


def test_each_tensor_is_one_out_of_band_frame_of_its_own_bytes():
    tensors = _tensors()
    header, frames = serialize(RoundResult(weights=tensors["float32"], state=None,
                                           buffers=tensors))  # fmt: skip
    sizes = [memoryview(f).nbytes for f in frames]
    # The pickle, then one frame a tensor (the weights are the buffers' float32: sent once).
    assert header["sub-header"]["tensor-frames"] == len(tensors) == len(frames) - 1
    assert sorted(sizes[1:]) == sorted(t.numel() * t.element_size() for t in tensors.values())
    assert sizes[0] < 1500  # the pickle holds no tensor's bytes
    weights = tensors["float32"]
    assert frames[1].obj is not None  # zero copy: the frame is the tensor's own memory
    assert torch.frombuffer(frames[1], dtype=torch.uint8).data_ptr() == weights.data_ptr()


def test_at_model_size_the_frames_are_the_tensors_and_in_band_is_one_pickle():
    weights = torch.randn(1_000_000)
    result = RoundResult(weights=weights, state=None)
    _, frames = serialize(result)
    assert [memoryview(f).nbytes for f in frames][1:] == [4_000_000]
    previous = wire.use_frames(False)
    try:
        header, inband = serialize(result)
    finally:
        wire.use_frames(previous)
    assert header["serializer"] == "pickle" and len(inband) == 1  # torch.save's bytes inside
    assert memoryview(inband[0]).nbytes > 4_000_000
    assert torch.equal(deserialize(header, inband).weights, weights)


def test_a_read_only_or_misaligned_frame_is_copied_into_a_tensor_of_its_own():
    tensor = torch.arange(10, dtype=torch.float32)
    raw = tensor.view(torch.uint8).numpy().tobytes()
    read_only = wire._tensor_from_frame(memoryview(raw), "float32", (10,), "cpu", False)
    shifted = memoryview(bytearray(b"x" + raw))[1:]
    misaligned = wire._tensor_from_frame(shifted, "float32", (2, 5), "cpu", False)
    assert torch.equal(read_only, tensor) and torch.equal(misaligned, tensor.reshape(2, 5))
    assert misaligned.data_ptr() % wire.ALIGNMENT == 0
    read_only += 1  # writable: its own memory
    empty = wire._tensor_from_frame(memoryview(b""), "float64", (0, 3), "cpu", False)
    assert empty.shape == (0, 3) and empty.dtype == torch.float64


def _frame_at(tensor: torch.Tensor, offset: int) -> memoryview:
    """The tensor's bytes in a writable buffer, starting `offset` bytes past a 64-byte
    boundary (where a comm's message may put a frame)."""
    raw = tensor.view(torch.uint8).numpy().tobytes()
    buffer = torch.empty(len(raw) + 2 * wire.ALIGNMENT, dtype=torch.uint8)
    start = (-buffer.data_ptr()) % wire.ALIGNMENT + offset
    buffer[start : start + len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return memoryview(buffer.numpy())[start : start + len(raw)]


@pytest.mark.parametrize("offset", range(0, 64, 8))
def test_a_tensor_from_a_frame_anywhere_computes_the_bits_it_computes_where_torch_put_it(offset):
    # MKL orders a product's sums by where its operands start: a float64 matrix-vector
    # product gives other bits for a matrix an odd multiple of 8 bytes past a 64-byte
    # boundary (on this machine). An arrived tensor must compute what the reference's,
    # which torch allocated, computes.
    torch.manual_seed(offset)
    matrix, vector = (
        torch.randn(10, 512, dtype=torch.float64),
        torch.randn(512, dtype=torch.float64),
    )
    frame = _frame_at(matrix, offset)
    arrived = wire._tensor_from_frame(frame, "float64", (10, 512), "cpu", False)

    assert arrived.data_ptr() % wire.ALIGNMENT == 0
    assert torch.equal(arrived @ vector, matrix @ vector)
    if offset == 0:  # writable and on the boundary: a view of the frame, no copy
        assert arrived.data_ptr() == np.frombuffer(frame, dtype=np.uint8).ctypes.data


def test_requires_grad_is_kept_and_plain_torch_pickling_is_untouched():
    tensor = torch.randn(4, requires_grad=True)
    back = deserialize(*serialize(Broadcast(tensors={"t": tensor})))
    assert back.tensors["t"].requires_grad and torch.equal(back.tensors["t"], tensor)
    # No global reducer for tensors: torch.save and pickle go through torch's own reduction.
    assert torch.Tensor not in copyreg.dispatch_table
    result = RoundResult(weights=torch.randn(5).bfloat16(), state=None)
    stream = io.BytesIO()
    torch.save({"result": result}, stream)
    assert b"_tensor_from_frame" not in stream.getvalue()
    assert b"_tensor_from_frame" not in pickle.dumps(result)
    stream.seek(0)
    assert torch.equal(torch.load(stream, weights_only=False)["result"].weights, result.weights)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_tensor_travels_through_the_host_and_returns_to_its_device():
    tensor = torch.randn(8, device="cuda")
    back = deserialize(*serialize(Broadcast(tensors={"t": tensor})))
    assert back.tensors["t"].device == tensor.device and torch.equal(back.tensors["t"], tensor)


@pytest.mark.cluster
def test_tensors_cross_workers_as_frames_and_the_run_equals_the_reference(
    digits_stores, cluster_client, tmp_path
):
    a, b = sorted(cluster_identity(cluster_client)["workers"])
    phase = _instances(_tensors())["WorkerPhase"]
    made = cluster_client.submit(WorkerPhase, **vars(phase), workers=[a], pure=False)
    # Made on worker a, taken by a task on worker b, then by the driver: two comms.
    taken = cluster_client.submit(nodes_of, made, workers=[b]).result()
    assert _walk(phase.nodes, taken.nodes) == 2 * (len(_tensors()) + 1)

    def registered() -> bool:  # in a worker process, by value
        from distributed.protocol import dask_serialize

        from dask_dane.pipeline.engine.round import wire, worker

        return dask_serialize.dispatch(worker.WorkerPhase) is wire.to_frames

    assert list(cluster_client.run(registered).values()) == [True, True]
    assert dask_serialize.dispatch(WorkerPhase) is wire.to_frames
    # bfloat16 sums between the workers: the run equals the single-process one to the bit.
    config = RunConfig(
        store=str(digits_stores[4]), out=str(tmp_path / "run"), algorithm="dane",
        model="small-cnn", rounds=2, seed=7, mu=0.1, local_steps=5, batch_size=16,
        transport="bfloat16",
    ).validate()  # fmt: skip
    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2)
    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert torch.equal(weights, reference.weights)


def test_the_bench_measures_both_forms_on_the_same_object():
    from dask_dane.bench.scaling.wire import local_rows

    rows = {r["form"]: r for r in local_rows("WorkerPhase", "small-cnn", repeats=1)}
    assert rows["in-band"]["frames"] < rows["frames"]["frames"]  # the pickle holds them
    assert rows["frames"]["largest_frame"] == 38_282 * 4  # the weights' sum, its own frame
    assert wire.WORKER.frames  # the in-band form was selected for its measure only


def _land_frames_past_a_boundary(offset: int | None) -> None:
    """In a worker: every frame a tensor arrives in lands `offset` bytes past a 64-byte
    boundary before wire.py reads it, as a comm's message may put it (None: undone)."""
    import numpy as np
    import torch

    from dask_dane.pipeline.engine.round import wire

    real = wire.__dict__.setdefault("_unlanded", wire._tensor_from_frame)
    if offset is None:
        wire._tensor_from_frame = real
        return

    def landed(frame, *args):  # type: ignore[no-untyped-def]
        data = np.frombuffer(memoryview(frame).cast("B"), dtype=np.uint8)
        buffer = torch.empty(data.nbytes + 2 * wire.ALIGNMENT, dtype=torch.uint8).numpy()
        start = (-buffer.ctypes.data) % wire.ALIGNMENT + offset
        buffer[start : start + data.nbytes] = data
        return real(memoryview(buffer)[start : start + data.nbytes], *args)

    wire._tensor_from_frame = landed


@pytest.mark.cluster
def test_frames_landing_off_a_64_byte_boundary_change_no_bit_of_a_run(
    digits_stores, cluster_client, tmp_path
):
    # Left where it landed, 8 bytes past a boundary, a float64 DANE run differs from the
    # reference in the last bit (5.6e-17 after 3 rounds, here); each tensor is realigned.
    config = RunConfig(
        store=str(digits_stores[4]), out=str(tmp_path / "run"), algorithm="dane",
        model="small-cnn", dtype="float64", rounds=3, seed=7, mu=0.1, local_steps=5,
        local_lr=0.05, batch_size=16,
    ).validate()  # fmt: skip
    # The function travels by value: a worker cannot import this test module by its name.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster_client.run(_land_frames_past_a_boundary, 8)
    try:
        train(config, client=cluster_client)
    finally:
        cluster_client.run(_land_frames_past_a_boundary, None)
    reference = run_reference(prepare_run(config), rounds=3, num_workers=2)
    assert torch.equal(
        load_checkpoint(RunDir(tmp_path / "run").latest)["weights"], reference.weights
    )
