"""The IDX file format of MNIST and Fashion-MNIST: a reader that checks what it reads.

Layout (http://yann.lecun.com/exdb/mnist/): two zero bytes, a type code, the number of
dimensions n, then n big-endian uint32 sizes, then the values in big-endian C order. Files are
read whole, gzip-compressed or not (recognised by their first bytes, not by their name).
Also the two sources that read such a directory: `idx:DIR` and `fashion-mnist`.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

from .raw import RawDataset, SourceOptions, classification_dataset

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian package dataset-fashion-mnist

# Type code -> NumPy dtype of the values (big-endian, as the format stores them).
IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
GZIP_MAGIC = b"\x1f\x8b"

# The four files of an MNIST-format directory, by part.
IDX_STEMS = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (plain or gzip) into an array of its stored shape.

    Parameters
    ----------
    path
        The file, e.g. ``train-images-idx3-ubyte.gz``.

    Returns
    -------
    numpy.ndarray
        The values in native byte order: uint8 for type code 0x08, else the stored type.

    Raises
    ------
    ValueError
        If the file is missing, is not valid gzip, has a bad magic number, or holds more or
        fewer values than its header announces; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"IDX file {path} does not exist")
    data = path.read_bytes()
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(
                f"{path} is not a valid gzip file ({err}); download it again or decompress it"
            ) from None
    refetch = "it is not an MNIST-format (IDX) file or it is damaged; download it again"
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        raise ValueError(f"{path} has bad magic number {data[:4].hex() or 'none'}: {refetch}")
    dtype, ndim = IDX_DTYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(data) < header:
        raise ValueError(f"{path} has a truncated header ({ndim} dimensions): {refetch}")
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise ValueError(
            f"{path} header announces shape {shape} ({expected} bytes of data) but the file "
            f"holds {len(data) - header} bytes: {refetch}"
        )
    values = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return values.astype(dtype.newbyteorder("="))  # a writable copy in native order


def find_idx_file(directory: Path, stem: str) -> Path:
    """`stem`, `stem.gz`, or the dotted variant (`train-images.idx3-ubyte`) in `directory`."""
    dotted = stem.replace("-idx", ".idx")
    candidates = [stem, f"{stem}.gz", dotted, f"{dotted}.gz"]
    for name in candidates:
        if (directory / name).is_file():
            return directory / name
    raise ValueError(
        f"{directory} has no {stem}[.gz]; an MNIST-format directory holds "
        f"{', '.join(s + '[.gz]' for s in IDX_STEMS.values())}"
    )


def read_idx_dir(directory: str | Path) -> dict[str, np.ndarray]:
    """The four arrays of an MNIST-format directory, keyed as in `IDX_STEMS`.

    Parameters
    ----------
    directory
        A folder with train-images-idx3-ubyte, train-labels-idx1-ubyte,
        t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each optionally gzipped).

    Returns
    -------
    dict
        ``train_images`` and ``test_images`` of shape (N, H, W) and the labels of shape (N,).

    Raises
    ------
    ValueError
        If the folder or a file is missing or malformed, or images and labels disagree.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(
            f"{directory} is not a directory; pass --path DIR with the MNIST-format IDX files "
            "(for Fashion-MNIST: `apt-get install dataset-fashion-mnist`)"
        )
    paths = {part: find_idx_file(directory, stem) for part, stem in IDX_STEMS.items()}
    arrays = {part: read_idx(path) for part, path in paths.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3:
            raise ValueError(
                f"{paths[f'{split}_images']} holds an array of shape {images.shape}; "
                "images must be (N, rows, cols)"
            )
        if labels.ndim != 1 or len(labels) != len(images):
            raise ValueError(
                f"{paths[f'{split}_labels']} holds labels of shape {labels.shape} for "
                f"{len(images)} images in {paths[f'{split}_images'].name}; the files do not "
                "belong together"
            )
    return arrays


def load_idx_source(options: SourceOptions, *, source: str = "idx") -> RawDataset:
    """An MNIST-format directory (`idx:DIR` or `--path DIR`): its own train / test split.

    Images are stored as (N, 1, H, W), uint8 when the files hold bytes.
    """
    if options.path is None:
        raise ValueError("source idx needs a directory: use `idx:DIR` or --path DIR")
    arrays = read_idx_dir(options.path)
    return classification_dataset(
        source,
        arrays["train_images"][:, None],
        arrays["train_labels"],
        arrays["test_images"][:, None],
        arrays["test_labels"],
    )


def load_fashion_mnist_source(options: SourceOptions) -> RawDataset:
    """Fashion-MNIST (Xiao et al. 2017) from IDX files: the official 60k / 10k split."""
    path = options.path or FASHION_MNIST_DIR
    if not Path(path).is_dir():
        raise ValueError(
            f"Fashion-MNIST directory {path} does not exist; install the Debian package "
            "(`apt-get install dataset-fashion-mnist`) or pass --path DIR with its IDX files"
        )
    return load_idx_source(replace(options, path=path), source="fashion-mnist")
