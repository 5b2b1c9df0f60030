"""A user's own model by import path: resolution, the calling convention, the checks before
any work, and a model that travels to workers by value (models/user.py, model_check.py)."""

from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch
from run_configs import run_config
from torch import nn

from dask_dane.models.registry import ModelSpec, build_model
from dask_dane.models.user import call_builder, from_bytes, resolve
from dask_dane.pipeline.setup.run_setup import prepare_run


def test_a_file_model_is_built_with_the_keywords_it_names(model_file):
    spec = ModelSpec(name=f"{model_file}:Wide", sample_shape=(3, 8, 8), num_classes=4)

    model = build_model(spec)

    assert model.body[1].in_features == 3 * 64 and model.body[1].out_features == 4


def test_through_bare_kwargs_only_num_classes_is_passed():
    seen = {}

    def torchvision_style(*, weights=None, progress=True, **kwargs):
        seen.update(kwargs, weights=weights)
        return nn.Linear(2, kwargs["num_classes"])

    call_builder(torchvision_style, sample_shape=(3, 32, 32), num_classes=10, name="tv")

    assert seen == {"num_classes": 10, "weights": None}


def test_a_package_path_resolves_to_its_callable():
    assert resolve("torch.nn:Linear") is nn.Linear


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("{dir}/absent.py:build", "no file"),
        ("{file}:missing", "has no 'missing'"),
        ("{file}:NOT_CALLABLE", "is a int, not a callable"),
        ("{file}:fails_when_called", "failed (RuntimeError: no weights here)"),
        ("{file}:not_a_module", "returned a int, not a torch.nn.Module"),
        ("{file}:wrong_output", "gives outputs of shape (2, 11) for 2 samples"),
        ("no_such_package_xyz.models:net", "cannot import no_such_package_xyz"),
    ],
)
def test_a_bad_model_is_one_clear_error_before_any_work(
    name, message, model_file, digits_stores, tmp_path
):
    model = name.format(dir=tmp_path, file=model_file)
    config = run_config(digits_stores[2], model=model, out=tmp_path / "run")

    with pytest.raises(ValueError) as raised:
        prepare_run(config)

    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "run").exists()


def test_a_batchnorm_model_needs_two_rows_a_batch(model_file, digits_stores):
    config = run_config(digits_stores[2], model=f"{model_file}:build", batch_size=1)

    with pytest.raises(ValueError, match="pass --batch-size 2 or more"):
        prepare_run(config)


def test_a_file_model_travels_as_code_not_as_a_path(model_file, digits_stores):
    setup = prepare_run(run_config(digits_stores[2], model=f"{model_file}:build"))
    data = setup.spec.builder
    model_file.unlink()  # a worker that never saw the file
    for name in [m for m in sys.modules if m.startswith("dask_dane_user_my_models")]:
        del sys.modules[name]

    model = build_model(setup.spec)

    assert len(data) > 0
    assert isinstance(model[1], nn.BatchNorm2d)


def test_a_worker_without_the_package_names_itself_and_the_module(tmp_path, monkeypatch):
    package = tmp_path / "gone_pkg_for_test.py"
    package.write_text("from torch import nn\ndef net(num_classes):\n    return nn.Linear(2, 2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gone_pkg_for_test

    data = cloudpickle.dumps(gone_pkg_for_test.net)  # by reference: an installed package
    del sys.modules["gone_pkg_for_test"]
    package.unlink()

    with pytest.raises(ValueError, match="cannot import module gone_pkg_for_test") as raised:
        from_bytes(data, "gone_pkg_for_test:net")

    assert str(raised.value).startswith("worker ")
    assert "install it on every worker" in str(raised.value)


def test_initial_buffers_are_the_models_own(model_file, digits_stores):
    from dask_dane.pipeline.setup.run_setup import initial_state

    setup = prepare_run(run_config(digits_stores[2], model=f"{model_file}:build"))

    weights, buffers = initial_state(setup.spec, 0)

    assert sorted(buffers) == ["1.num_batches_tracked", "1.running_mean", "1.running_var"]
    assert torch.equal(buffers["1.running_var"], torch.ones(6))
    assert weights.numel() == sum(p.numel() for p in build_model(setup.spec).parameters())


def test_a_local_package_travels_by_value_but_dask_dane_never(tmp_path, monkeypatch):
    package = tmp_path / "local_nets_for_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(
        "from torch import nn\ndef net(num_classes):\n    return nn.Linear(3, num_classes)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    resolve("local_nets_for_test.nets:net")
    resolve("dask_dane.models.lenet:lenet")

    registry = cloudpickle.list_registry_pickle_by_value()
    assert "local_nets_for_test" in registry
    assert "dask_dane" not in registry


@pytest.mark.parametrize("algorithm", ["gd", "agd"])
def test_full_batch_algorithms_refuse_running_statistics(algorithm, model_file, digits_stores):
    config = run_config(digits_stores[2], model=f"{model_file}:build", algorithm=algorithm)

    with pytest.raises(ValueError, match=f"--algorithm {algorithm} takes none"):
        prepare_run(config)


def test_a_resume_after_the_model_file_changed_is_one_error_before_any_work(
    model_file, digits_stores, tmp_path, run_cli, capsys
):
    # The file's network widened from 6 to 7 channels after the run was saved: the driver
    # refuses the resume, naming both sizes, instead of a worker failing to load the weights.
    from dask_dane.pipeline.engine.run.run_state import open_run, save_run
    from dask_dane.pipeline.engine.run.rundir import RunDir
    from dask_dane.pipeline.training import begin_run

    model = f"{model_file}:build"
    run_dir = RunDir(tmp_path / "run")
    setup = prepare_run(run_config(digits_stores[2], model=model, out=run_dir.root))
    state = open_run(setup, run_dir, resume=False)
    begin_run(setup.config, run_dir, state, resume=False)
    save_run(run_dir, state, setup, improved=False)
    saved_weights = build_model(setup.spec)
    count = sum(p.numel() for p in saved_weights.parameters())
    original = model_file.read_text()
    model_file.write_text(original.replace("6", "7"))
    changed = prepare_run(run_config(digits_stores[2], model=model, out=run_dir.root))
    new_count = sum(p.numel() for p in build_model(changed.spec).parameters())

    with pytest.raises(ValueError) as refused:
        open_run(changed, run_dir, resume=True)

    capsys.readouterr()
    status = run_cli(["train", "--out", str(run_dir.root), "--resume"])  # as a user types it
    stderr = capsys.readouterr().err
    message = str(refused.value)
    assert status == 2 and stderr == f"error: {message}\n"
    assert "\n" not in message and "the model changed since the run was saved" in message
    assert f"holds {count:,} weights and 3 buffers" in message
    assert f"now builds {new_count:,} weights and 3 buffers" in message and new_count != count
    model_file.write_text(original)  # restored: it resumes
    assert open_run(prepare_run(setup.config), run_dir, resume=True).round == 0
