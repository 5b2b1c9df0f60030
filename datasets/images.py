"""The `images:DIR` source: a torchvision ImageFolder tree, DIR/<class>/<image>, as uint8 arrays.

Classes are the folder names in sorted order (label i = the i-th name). When DIR/train and
DIR/test both exist they are the split, each with the same class folders; otherwise the
images are split by --test-fraction (stratified). Files are searched recursively inside a
class folder; hidden names (.DS_Store) and OS_METADATA (Thumbs.db, ...) are ignored. Images
are decoded with Pillow in several processes, in sorted file order, stored (N, C, H, W) uint8:
- channels: --channels 1 (mode "L") or 3 ("RGB"); without it grey images (L, LA, 1, I, F)
  give one channel and every other mode (RGB, RGBA, P, CMYK, ...) is converted to RGB; a tree
  that mixes grey and colour is stored as RGB (grey copied to R, G and B, as torchvision's
  loader does), never refused. 16-bit and float images are clipped to 0..255 by Pillow.
- size: --image-size H[xW] resizes each image (bilinear, antialiased when shrinking);
  without it all images must have one size.
- a file Pillow cannot read is an error naming it; --skip-bad skips it (RawDataset.skipped).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

import numpy as np

from .image_rows import DecodedImages
from .lazy import LazyRows, take_rows
from .raw import RawDataset, SkippedFiles, SourceOptions, split_train_test

FILES_PER_TASK = 128  # files a worker process decodes per task
FILES_PER_WORKER = 1000  # a process more per this many files: starting one costs ~0.5 s
MAX_WORKERS = 8
GREY_BANDS = ("1", "L", "I", "F")  # first band of Pillow's grey modes (L, LA, 1, I, I;16, F)
SKIP_HINT = "remove it or pass --skip-bad to skip such files"
LISTED_CLASSES = 20  # `dane info` shows this many class names, then a count
# Windows Explorer and macOS write these beside images; never images, they are ignored.
OS_METADATA = frozenset({"thumbs.db", "ehthumbs.db", "desktop.ini", "__macosx"})


def parse_image_size(text: str) -> tuple[int, int]:
    """`"28"` -> (28, 28); `"32x48"` -> (32, 48), as (height, width); ValueError if malformed."""
    parts = text.lower().split("x")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise ValueError(
            f"--image-size must be H or HxW in pixels, e.g. 28 or 32x48 (got {text!r})"
        )
    height, width = (int(p) for p in (parts * 2)[:2])
    if height < 1 or width < 1:
        raise ValueError(f"--image-size must be at least 1 pixel each way (got {text!r})")
    return height, width


def image_source_options(kind: str, *, image_size: str | None, channels: int | None) -> dict:
    """SourceOptions fields from `prepare`'s --image-size and --channels; ValueError if bad.

    --image-size is the synthetic source's side (one number, default 8) or the size the
    images source resizes to (H or HxW; default: keep the files' size).
    """
    size = None if image_size is None else parse_image_size(image_size)
    if kind == "synthetic" and size is not None and size[0] != size[1]:
        raise ValueError(
            f"synthetic images are square: give --image-size one number (got {image_size})"
        )
    if channels not in (None, 1, 3):
        raise ValueError(f"--channels must be 1 (grey) or 3 (RGB) (got {channels})")
    return {"image_size": 8 if size is None else size[0], "resize": size, "channels": channels}


def format_class_names(names: list[str]) -> str:
    """The class names for `dane info`: the first LISTED_CLASSES, then how many there are."""
    shown = ", ".join(names[:LISTED_CLASSES])
    return shown if len(names) <= LISTED_CLASSES else f"{shown}, ... ({len(names)} classes)"


def read_class_names(store: str) -> list[str] | None:
    """The `class_names` attribute of a store (images, cifar10, cifar100 sources), or None."""
    import zarr

    names = zarr.open_group(store, mode="r", zarr_format=3).attrs.get("class_names")
    return [str(n) for n in names] if isinstance(names, list) else None


def _ignored(name: str) -> bool:
    """Whether a file or folder name is hidden or an operating system's metadata."""
    return name.startswith(".") or name.lower() in OS_METADATA


def _visible(folder: Path) -> list[Path]:
    """The entries of `folder` that are not _ignored, sorted by name."""
    return sorted(p for p in folder.iterdir() if not _ignored(p.name))


def _class_names(folder: Path) -> list[str]:
    """The class folders of `folder`, sorted; ValueError if there are none."""
    names = [p.name for p in _visible(folder) if p.is_dir()]
    if not names:
        raise ValueError(
            f"image folder {folder} holds no class folders; lay it out as "
            f"{folder}/<class>/<image> (one folder per class)"
        )
    if len(names) == 1:
        raise ValueError(
            f"image folder {folder} holds one class folder ({names[0]}); a classifier needs at "
            "least two: point images:DIR at the folder that holds the class folders"
        )
    return names


def _class_files(folder: Path) -> list[Path]:
    """Every file under a class folder (recursively), _ignored names skipped; ValueError if none."""
    found = (p for p in folder.rglob("*") if p.is_file())
    files = sorted(p for p in found if not any(map(_ignored, p.relative_to(folder).parts)))
    if not files:
        raise ValueError(f"class folder {folder} holds no images; add images or remove it")
    return files


def _split_folders(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    """The class names, and each split folder's images as (path, split: 0 train / 1 test)."""
    has_train, has_test = (root / "train").is_dir(), (root / "test").is_dir()
    if has_train != has_test:
        there, absent = ("train", "test") if has_train else ("test", "train")
        raise ValueError(
            f"image folder {root} has {there}/ but no {absent}/; add {root}/{absent} with the "
            "same class folders, or rename it to split by --test-fraction"
        )
    if not has_train:
        return _class_names(root), [(root, 0)]
    train, test = _class_names(root / "train"), _class_names(root / "test")
    for name in sorted(set(train) ^ set(test)):
        there, absent = ("train", "test") if name in train else ("test", "train")
        raise ValueError(
            f"class {name!r} is in {root / there} but not in {root / absent}; give both splits "
            "the same class folders"
        )
    return train, [(root / "train", 0), (root / "test", 1)]


def _decode(path: str, mode: str | None, size: tuple[int, int] | None) -> np.ndarray | str:
    """One image as a (C, H, W) uint8 array, or the one-line problem with it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            target = mode or ("L" if image.getbands()[0] in GREY_BANDS else "RGB")
            image = image.convert(target)  # decodes the pixels: damage shows here
            if size is not None:
                image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            array = np.asarray(image, dtype=np.uint8)
    except UnidentifiedImageError:
        return f"{path} is not an image Pillow can read; {SKIP_HINT}"
    except Exception as err:  # truncated or corrupt data, decompression bombs, OS errors
        return f"{path} cannot be decoded ({' '.join(str(err).split())}); replace it, {SKIP_HINT}"
    return array[None].copy() if array.ndim == 2 else array.transpose(2, 0, 1).copy()


def _decode_chunk(
    paths: list[str], mode: str | None, size: tuple[int, int] | None
) -> list[np.ndarray | str]:
    """One worker task: the images of `paths`, in order."""
    return [_decode(p, mode, size) for p in paths]


def iter_decoded(
    paths: list[str],
    *,
    mode: str | None,
    size: tuple[int, int] | None,
    num_workers: int | None = None,
) -> Iterator[np.ndarray | str]:
    """Decode `paths` in order, over up to MAX_WORKERS processes, FILES_PER_TASK files a task,
    yielding each result as its task is done (the caller stores it, so the images need not
    all be in memory at once).

    Each result is a (C, H, W) uint8 array or the one-line problem with that file. Fewer than
    2 * FILES_PER_WORKER files are decoded in this process (a pool would cost more than it
    saves: small images decode in about 0.1 ms each).
    """
    chunks = [paths[i : i + FILES_PER_TASK] for i in range(0, len(paths), FILES_PER_TASK)]
    if num_workers is None:
        num_workers = min(os.cpu_count() or 1, MAX_WORKERS, len(paths) // FILES_PER_WORKER)
    main_file = getattr(sys.modules["__main__"], "__file__", None)
    if main_file is not None and not os.path.exists(main_file):  # `python -`: spawn cannot
        num_workers = 1  # start a worker where the main script cannot be read again
    if num_workers <= 1:
        for chunk in chunks:
            yield from _decode_chunk(chunk, mode, size)
        return
    # spawn: forking a process that holds threads (torch, zarr) can deadlock
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(num_workers, mp_context=context) as pool:
        for done in pool.map(_decode_chunk, chunks, repeat(mode), repeat(size)):
            yield from done


def decode_images(
    paths: list[str],
    *,
    mode: str | None,
    size: tuple[int, int] | None,
    num_workers: int | None = None,
) -> list[np.ndarray | str]:
    """Every result of iter_decoded, in a list."""
    return list(iter_decoded(paths, mode=mode, size=size, num_workers=num_workers))


def _same_size(shapes: np.ndarray, paths: list[str]) -> None:
    """ValueError naming two files of different sizes, if there are any."""
    differ = np.flatnonzero((shapes[:, 1:] != shapes[0, 1:]).any(axis=1))
    if len(differ):
        (height, width), other = shapes[0, 1:], shapes[differ[0]]
        raise ValueError(
            f"images differ in size: {paths[0]} is {height}x{width} and {paths[differ[0]]} is "
            f"{other[1]}x{other[2]} (height x width); pass --image-size H[xW] "
            "to resize them all"
        )


def _read_images(
    files: list[tuple[str, int, int]], names: list[str], options: SourceOptions
) -> tuple[LazyRows, np.ndarray, np.ndarray, SkippedFiles]:
    """Decode (path, label, split) rows: images (N, C, H, W), labels, splits, files skipped.

    The images go to a scratch file as they are decoded (image_rows.py) and come back lazily.
    """
    mode = {None: None, 1: "L", 3: "RGB"}[options.channels]
    decoded, kept, problems = DecodedImages(), [], []
    results = iter_decoded([f for f, _, _ in files], mode=mode, size=options.resize)
    for file, result in zip(files, results, strict=True):
        if isinstance(result, str):
            problems.append((file[0], result))
        else:
            decoded.append(result)
            kept.append(file)
    if problems and not options.skip_bad:
        raise ValueError(problems[0][1])
    labels = np.array([label for _, label, _ in kept], dtype=np.int64)
    for label, name in enumerate(names):
        if not (labels == label).any():
            raise ValueError(
                f"class {name!r} has no readable images (all its files were skipped); add "
                "images or remove its folder"
            )
    if options.resize is None:
        _same_size(decoded.shapes(), [path for path, _, _ in kept])
    splits = np.array([split for _, _, split in kept], dtype=np.int8)
    return decoded.rows(), labels, splits, SkippedFiles(tuple(path for path, _ in problems))


def load_images_source(options: SourceOptions) -> RawDataset:
    """An ImageFolder tree (`images:DIR`): uint8 (N, C, H, W) images, class names recorded.

    See the module docstring for the layout, the split, the channels and the sizes.
    """
    if options.path is None:
        raise ValueError("source images needs a folder: use `images:DIR` or --path DIR")
    if options.channels not in (None, 1, 3):
        raise ValueError(f"--channels must be 1 (grey) or 3 (RGB) (got {options.channels})")
    root = Path(options.path)
    if not root.is_dir():
        raise ValueError(
            f"image folder {root} does not exist; use `images:DIR` with DIR/<class>/<image>"
        )
    names, split_folders = _split_folders(root)
    files = [
        (str(path), label, split)
        for folder, split in split_folders
        for label, name in enumerate(names)
        for path in _class_files(folder / name)
    ]
    x, y, splits, skipped = _read_images(files, names, options)
    if len(split_folders) == 2:
        train = splits == 0
        x_train, y_train = take_rows(x, train), y[train]
        x_test, y_test = take_rows(x, ~train), y[~train]
    else:
        x_train, y_train, x_test, y_test = split_train_test(
            x, y, test_fraction=options.test_fraction, seed=options.seed
        )
    if len(x_test) == 0 or len(x_train) == 0:
        raise ValueError(
            f"image folder {root}: {len(x)} images give {len(x_train)} train and {len(x_test)} "
            "test images; add images or change --test-fraction"
        )
    counted = {"skipped_files": len(skipped.paths)} if options.skip_bad else {}
    return RawDataset(
        source=f"images:{root.name}",
        task="classification",
        num_classes=len(names),
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        attrs={"class_names": names, **counted},
        skipped=skipped if options.skip_bad else None,
    )
