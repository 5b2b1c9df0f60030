"""The `cifar10:DIR` and `cifar100:DIR` sources: CIFAR's python-pickle batches, as downloaded
(Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html, the "python version").

- CIFAR-10: data_batch_1 .. data_batch_5, test_batch and batches.meta, in DIR or in
  DIR/cifar-10-batches-py.
- CIFAR-100: train, test and meta, in DIR or in DIR/cifar-100-python; the labels are the 100
  fine labels (`fine_labels`), the class names `fine_label_names`.

Each batch is a dict with bytes keys: b"data" holds (N, 3072) uint8 rows (1024 red, then 1024
green, then 1024 blue values, each a 32x32 image row by row), stored as (N, 3, 32, 32); the
labels are a list of N ints. The official train / test split is kept (--test-fraction does
not apply), and the class names are recorded in the store's `class_names` attribute.

The batches are pickles, and loading a pickle runs whatever functions it names. They are
read with an Unpickler that builds dicts, lists, bytes, numbers and NumPy arrays only and
refuses every other global (os.system, builtins.eval, ...) with a ValueError naming it.
"""

from __future__ import annotations

import codecs
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .raw import RawDataset, SourceOptions

ROW_BYTES = 3 * 32 * 32


@dataclass(frozen=True, kw_only=True)
class CifarLayout:
    """The files of one CIFAR variant and the keys its batches use."""

    name: str  # as in the source name: cifar10 | cifar100
    title: str
    folder: str  # the folder the archive extracts to
    train: tuple[str, ...]
    test: str
    meta: str
    label_key: bytes
    names_key: bytes
    num_classes: int

    @property
    def files(self) -> tuple[str, ...]:
        return (*self.train, self.test, self.meta)


LAYOUTS = {
    "cifar10": CifarLayout(
        name="cifar10",
        title="CIFAR-10",
        folder="cifar-10-batches-py",
        train=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test="test_batch",
        meta="batches.meta",
        label_key=b"labels",
        names_key=b"label_names",
        num_classes=10,
    ),
    "cifar100": CifarLayout(
        name="cifar100",
        title="CIFAR-100",
        folder="cifar-100-python",
        train=("train",),
        test="test",
        meta="meta",
        label_key=b"fine_labels",
        names_key=b"fine_label_names",
        num_classes=100,
    ),
}


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a function or class outside the allowed few."""


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """`_codecs.encode` as protocol-2 pickles of bytes call it, for latin-1 only."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise RefusedGlobal(f"_codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, "latin1")


def _allowed_globals() -> dict[tuple[str, str], object]:
    """What a pickle of dicts, lists, bytes and NumPy arrays names, under NumPy 1 and 2."""
    try:
        from numpy._core import multiarray, numeric  # NumPy >= 2
    except ImportError:  # pragma: no cover - NumPy 1.26
        from numpy.core import multiarray, numeric
    allowed: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
    }
    for package in ("numpy.core", "numpy._core"):  # pickles name the one they were made with
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only the globals of `_allowed_globals`."""

    def find_class(self, module: str, name: str) -> object:
        found = _allowed_globals().get((module, name))
        if found is None:
            raise RefusedGlobal(f"{module}.{name}")
        return found


def load_pickle(path: Path) -> object:
    """Unpickle `path` (bytes keys, as Python 2 wrote them) with RestrictedUnpickler.

    Raises
    ------
    ValueError
        If the file names a global outside dicts, lists, bytes and NumPy arrays (it is then
        not run), or cannot be read as a pickle.
    """
    try:
        with open(path, "rb") as file:
            return RestrictedUnpickler(file, encoding="bytes").load()
    except RefusedGlobal as err:
        raise ValueError(
            f"{path} is not a CIFAR batch: its pickle calls {err}, which could run code, and "
            "was refused (CIFAR batches hold only dicts, lists and arrays); re-download it"
        ) from None
    except Exception as err:  # truncated, not a pickle, wrong opcodes: many exception types
        brief = " ".join(str(err).split())  # some messages span lines: the error is one
        raise ValueError(
            f"{path} cannot be read as a pickle ({type(err).__name__}: {brief}); re-download it"
        ) from None


def _find_folder(root: Path, layout: CifarLayout) -> Path:
    """The folder holding `layout`'s files, DIR or DIR/<archive folder>; ValueError if not."""
    if not root.is_dir():
        raise ValueError(f"{layout.title} folder {root} does not exist; {_fix(layout)}")
    folder = root / layout.folder if (root / layout.folder).is_dir() else root
    missing = [f for f in layout.files if not (folder / f).is_file()]
    if not missing:
        return folder
    for other in LAYOUTS.values():
        if other is not layout and any(
            all((place / f).is_file() for f in other.files) for place in (root, root / other.folder)
        ):
            raise ValueError(
                f"{root} holds {other.title}'s batches, not {layout.title}'s; use "
                f"`{other.name}:{root}`"
            )
    raise ValueError(f"{folder} lacks {', '.join(missing)}; {_fix(layout)}")


def _fix(layout: CifarLayout) -> str:
    return (
        f"use `{layout.name}:DIR` with DIR the extracted python version of {layout.title} "
        f"({layout.folder}/ or its files {', '.join(layout.files)})"
    )


def _read_batch(path: Path, layout: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """One batch file: images (N, 3, 32, 32) uint8 and int64 labels; ValueError if malformed."""
    batch = load_pickle(path)
    if not isinstance(batch, dict):
        raise ValueError(
            f"{path} is not a CIFAR batch (it holds a {type(batch).__name__}, not a dict); "
            "re-download it"
        )
    missing = [repr(k) for k in (b"data", layout.label_key) if k not in batch]
    if missing:
        keys = ", ".join(repr(k) for k in batch) or "none"
        raise ValueError(
            f"{path} lacks key(s) {', '.join(missing)} (it has {keys}); re-download it"
        )
    data, labels = batch[b"data"], np.asarray(batch[layout.label_key])
    if not (
        isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
    ) or data.shape[1:] != (ROW_BYTES,):
        what = f"{data.dtype} of shape {data.shape}" if isinstance(data, np.ndarray) else "no array"
        raise ValueError(
            f"{path}: b'data' is {what}; a CIFAR batch holds (N, {ROW_BYTES}) uint8 rows "
            "(32x32 RGB images); re-download it"
        )
    if labels.shape != (len(data),) or (len(data) and not np.issubdtype(labels.dtype, np.integer)):
        raise ValueError(
            f"{path}: {layout.label_key!r} has shape {labels.shape} ({labels.dtype}), not "
            f"{len(data)} integer labels, one per row of b'data'; re-download it"
        )
    if len(data) and (labels.min() < 0 or labels.max() >= layout.num_classes):
        raise ValueError(
            f"{path}: labels range over [{labels.min()}, {labels.max()}], {layout.title} has "
            f"{layout.num_classes} classes (0 .. {layout.num_classes - 1}); re-download it"
        )
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _class_names(path: Path, layout: CifarLayout) -> list[str]:
    """The class names in the meta file, in label order; ValueError if malformed."""
    meta = load_pickle(path)
    names = meta.get(layout.names_key) if isinstance(meta, dict) else None
    if (
        not isinstance(names, list)
        or len(names) != layout.num_classes
        or not all(isinstance(n, bytes | str) for n in names)
    ):
        raise ValueError(
            f"{path} does not hold {layout.num_classes} class names under "
            f"{layout.names_key!r}; re-download it"
        )
    return [n.decode("utf-8", "replace") if isinstance(n, bytes) else n for n in names]


def load_cifar(options: SourceOptions, *, layout: CifarLayout) -> RawDataset:
    """CIFAR-10 or CIFAR-100 from `options.path`: uint8 (N, 3, 32, 32), the official split."""
    if options.path is None:
        raise ValueError(f"source {layout.name} needs a folder: {_fix(layout)}")
    folder = _find_folder(Path(options.path), layout)
    names = _class_names(folder / layout.meta, layout)
    train = [_read_batch(folder / f, layout) for f in layout.train]
    x_test, y_test = _read_batch(folder / layout.test, layout)
    return RawDataset(
        source=layout.name,
        task="classification",
        num_classes=layout.num_classes,
        x_train=np.concatenate([x for x, _ in train]),
        y_train=np.concatenate([y for _, y in train]),
        x_test=x_test,
        y_test=y_test,
        attrs={"class_names": names},
    )


def load_cifar10_source(options: SourceOptions) -> RawDataset:
    """CIFAR-10 (`cifar10:DIR`): 50000 train / 10000 test images of 32x32, 10 classes."""
    return load_cifar(options, layout=LAYOUTS["cifar10"])


def load_cifar100_source(options: SourceOptions) -> RawDataset:
    """CIFAR-100 (`cifar100:DIR`): 50000 train / 10000 test images, 100 fine labels."""
    return load_cifar(options, layout=LAYOUTS["cifar100"])
