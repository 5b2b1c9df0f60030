"""presets/scripts/scale-sweep.sh (issue 34's sweep): every configuration it writes is the
shipped `fashion-mnist-dane-scale` preset with exactly the settings its name says replaced, and each
is one `dane bench shards` accepts; its DDP rows train where the run's workers do."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields

import pytest
import torch

from dask_dane import presets
from dask_dane.bench.ddp.single import SingleSpec
from dask_dane.bench.training.ddp_rows import ddp_spec
from dask_dane.bench.training.shards import read_config
from dask_dane.pipeline.setup.config import RunConfig

SCRIPT = presets.SCRIPTS_DIR / "scale-sweep.sh"


def differences(config, base) -> dict:  # type: ignore[no-untyped-def]
    return {
        f.name: getattr(config, f.name)
        for f in fields(config)
        if getattr(config, f.name) != getattr(base, f.name)
    }


@pytest.mark.cluster  # a bash process that starts `python -m dask_dane.cli`
def test_the_sweep_configurations_change_only_what_their_names_say(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "ROUNDS": "10", "DEVICE": "cpu"}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path), "--configs-only"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    configs = {p.stem: read_config(p) for p in (tmp_path / "cfg").glob("*.toml")}
    preset = read_config(presets.preset_path("fashion-mnist-dane-scale"))
    base = configs["fedexp"]
    # The sweep's runs differ from the preset only in where and how long they run.
    assert differences(base, preset) == {"device": "cpu"}
    assert base.rounds == preset.rounds == 10 and base.server_lr_rule == "fedexp"
    nesterov = {"server_lr_rule": "fixed", "server_nesterov": True}
    assert differences(configs["nesterov"], base) == {
        **nesterov, "server_lr": 0.7, "server_momentum": 0.9,
    }  # fmt: skip
    # outer lr 1 is the default: FedExP's rule replaced, the step itself not scaled
    assert differences(configs["nesterov05"], base) == {**nesterov, "server_momentum": 0.5}
    assert configs["nesterov05"].server_lr == 1.0
    assert differences(configs["qsr"], base) == {"local_steps_schedule": "qsr"}
    assert differences(configs["qsr-nesterov05"], configs["nesterov05"]) == {
        "local_steps_schedule": "qsr"
    }
    fedavg = differences(configs["fedavg"], base)
    assert fedavg["algorithm"] == "fedavg" and fedavg.keys() <= {
        "algorithm", "grad_sample", "correction",
    }  # fmt: skip
    assert differences(configs["fedexp-s1"], base) == {"seed": 1}
    assert differences(configs["fedexp-s2"], base) == {"seed": 2}


def test_the_ddp_rows_train_on_the_device_the_runs_workers_use():
    # A DDP row on a GPU machine must not be timed on the CPU beside workers on the GPU.
    assert ddp_spec(RunConfig(store="x.zarr", device="cpu"), 8, 1.0, 6400).device == "cpu"
    assert ddp_spec(RunConfig(store="x.zarr", device="auto"), 8, 1.0, 6400).device == "auto"
    auto = SingleSpec(store="x.zarr", device="auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert auto.torch_device().type == expected
    assert SingleSpec(store="x.zarr").torch_device().type == "cpu"  # the default stays
    with pytest.raises(ValueError, match="--device must be cpu, cuda or auto"):
        SingleSpec(store="x.zarr", device="tpu").validate()
