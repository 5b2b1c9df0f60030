"""Input that is almost right gets the guess of what was meant, through the real `dane`
command: exit 2, one line, the suggestion. A mistyped store beside a real one, a run folder
where a store goes (and the reverse), a path where a source name goes, a model file without
its `:NAME`, and the names users type for algorithms that are settings of another."""

from __future__ import annotations

from pathlib import Path

import image_trees
import pytest

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Path:
    """A working folder: data/photos.zarr, a run folder runs/dane-1 that trained on it, a
    folder of images, a folder of IDX files, a CIFAR-10 folder and a model file."""
    root = tmp_path_factory.mktemp("place")
    raw = load_source("synthetic", SourceOptions(samples=60, image_size=8))
    write_store(raw, PartitionSpec(num_shards=2), root / "data" / "photos.zarr", force=False)
    run = root / "runs" / "dane-1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text('[data]\nstore = "data/photos.zarr"\n')
    (run / "metrics.jsonl").write_text("")
    (root / "photos" / "cats").mkdir(parents=True)
    image_trees._tree(root / "shots")  # shots/<class>/imgN.png, as a camera's folders
    (root / "fm").mkdir()
    (root / "fm" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    (root / "cifar").mkdir()
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]:
        (root / "cifar" / name).write_bytes(b"")
    (root / "arrays.npz").write_bytes(b"")
    # Importing this file would leave `imported` behind: the hint must only parse it.
    (root / "mymodel.py").write_text(
        'open("imported", "w").close()\n\n\ndef build(num_classes):\n    return Net()\n\n\n'
        "class Net:\n    pass\n\n\ndef _helper():\n    pass\n"
    )
    return root


def _refused(dane_here, place: Path, *args: str) -> str:
    """`dane ARGS` in `place`: exit 2, one `error:` line and no traceback; that line."""
    done = dane_here(*args, cwd=place)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["info", "train"])
def test_a_mistyped_store_names_the_store_beside_it(command, dane_here, place):
    line = _refused(dane_here, place, command, "data/photo.zarr")

    assert "data/photo.zarr does not exist; did you mean data/photos.zarr?" in line
    assert "dane prepare" not in line


def test_a_missing_store_with_none_near_still_says_how_to_create_one(dane_here, place):
    line = _refused(dane_here, place, "info", "data/nothing.zarr")

    assert "does not exist; create one with `dane prepare digits --out" in line
    assert "did you mean" not in line


@pytest.mark.parametrize("command", ["info", "train"])
def test_a_folder_of_images_given_as_a_store_names_the_prepare_that_reads_it(
    command, dane_here, place
):
    line = _refused(dane_here, place, command, "shots/")

    # Before: "create one with `dane prepare digits --out shots`", over the user's photos.
    assert line == (
        "error: shots/ is a folder of images, not a store; write a store from it with "
        "`dane prepare images:shots/ --out shots.zarr`, then pass shots.zarr in its place"
    )


@pytest.mark.parametrize("command", ["info", "train"])
def test_a_run_folder_given_as_a_store_names_its_store(command, dane_here, place):
    line = _refused(dane_here, place, command, "runs/dane-1")

    assert (
        "runs/dane-1 is a run folder, not a store; its store is data/photos.zarr "
        "(from its config.toml)" in line
    )
    assert "`dane train data/photos.zarr`" in line and "`dane evaluate`" in line
    assert "dane prepare digits --out" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate"],
        ["export", "--out", "model.pt2"],
        ["watch"],
        ["report", "--out", "report.png"],
    ],
    ids=lambda args: args[0],
)
def test_a_store_given_as_a_run_folder_says_it_is_a_store(args, dane_here, place):
    line = _refused(dane_here, place, args[0], "data/photos.zarr", *args[1:])

    assert "data/photos.zarr is a store, not a run folder" in line
    assert "`dane train data/photos.zarr --out RUN`" in line
    assert not (place / "model.pt2").exists() and not (place / "report.png").exists()


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("photos", "photos is a folder; to read it as images (one sub-folder per class) pass "
         "images:photos"),
        ("fm", "fm is a folder of MNIST-format IDX files; to read them pass idx:fm"),
        ("fm/train-images-idx3-ubyte.gz", "pass the folder that holds all four: idx:fm"),
        ("cifar", "to read them pass cifar10:cifar"),
        ("cifar/data_batch_1", "is a CIFAR-10 file; pass its folder: cifar10:cifar"),
        ("arrays.npz", "arrays.npz is a file; to read its arrays pass npz:arrays.npz"),
        ("data/photos.zarr", "data/photos.zarr is a store already"),
        ("fashion-mnit", "unknown source 'fashion-mnit'; did you mean fashion-mnist?"),
        ("image:photos", "did you mean images:photos?"),
        ("images:", "source 'images:' names no path; write images:PATH"),
    ],
)  # fmt: skip
def test_prepare_of_a_path_or_a_near_name_says_the_source_meant(source, fragment, dane_here, place):
    line = _refused(dane_here, place, "prepare", source, "--out", "new.zarr")

    assert fragment in line
    assert not (place / "new.zarr").exists()


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("mymodel.py", "--model takes FILE.py:NAME; mymodel.py defines: build, Net"),
        ("nomodel.py", "--model takes FILE.py:NAME; there is no file nomodel.py"),
        ("arrays.npz", "arrays.npz is a file but not a Python file (.py)"),
        ("lenet2", "unknown model 'lenet2'; did you mean lenet?"),
    ],
)
def test_a_model_file_without_its_name_lists_what_it_defines(model, fragment, dane_here, place):
    line = _refused(dane_here, place, "train", "data/photos.zarr", "--model", model)

    assert fragment in line
    assert not (place / "imported").exists()  # the file was parsed, never run


def test_a_model_name_missing_from_its_file_lists_what_it_defines(dane_here, place, tmp_path):
    model = tmp_path / "net.py"
    model.write_text("import torch\n\n\ndef build():\n    return torch.nn.Linear(64, 10)\n")

    line = _refused(dane_here, place, "train", "data/photos.zarr", "--model", f"{model}:Nett")

    assert f"has no 'Nett'; check the name after the ':' ({model} defines: build)" in line


@pytest.mark.parametrize(
    ("typed", "fragment"),
    [
        ("fedavgm", "--algorithm fedavgm is FedAvg with server momentum: pass --algorithm "
         "fedavg --server-momentum 0.9"),
        ("FedAvgM", "pass --algorithm fedavg --server-momentum 0.9"),
        ("local-sgd", "--algorithm local-sgd is FedAvg"),
        ("localsgd", "pass --algorithm fedavg"),
        ("ddp", "--algorithm ddp is synchronous SGD"),
        ("fedsgd", "pass --algorithm sgd"),
        ("fedavgg", "unknown --algorithm 'fedavgg'; did you mean --algorithm fedavg?"),
    ],
)  # fmt: skip
def test_an_algorithm_alias_names_the_settings_it_stands_for(typed, fragment, dane_here, place):
    line = _refused(dane_here, place, "train", "data/photos.zarr", "--algorithm", typed)

    assert fragment in line
    assert not (place / "runs").exists() or sorted((place / "runs").iterdir()) == [
        place / "runs" / "dane-1"
    ]


def test_an_algorithm_alias_is_worded_with_keywords_in_python(place):
    import dask_dane

    with pytest.raises(ValueError) as refused:
        dask_dane.train(place / "data" / "photos.zarr", algorithm="fedavgm", rounds=1)

    assert str(refused.value) == (
        "algorithm=fedavgm is FedAvg with server momentum: pass algorithm=fedavg "
        "server_momentum=0.9"
    )
