"""The images source's decoded pixels, kept in a scratch file instead of in memory.

Images are decoded in file order (in worker processes for large trees: images.py's
iter_decoded) and each one's bytes are appended to an unnamed temporary file as it arrives,
with its shape. Only once every file is decoded is it known which were skipped, whether
sizes agree and whether grey and colour mix; then the rows are LazyRows that read each
image back and widen grey to RGB (copied to R, G and B) when the tree mixes them, so the
store is the one stacking every image in memory would give.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterable

import numpy as np

from .lazy import LazyRows, Reader


class DecodedImages:
    """(C, H, W) uint8 images of possibly different channels and sizes, appended in order."""

    def __init__(self) -> None:
        # Open as long as the rows are wanted; closed (and gone) when this object is.
        self._file = tempfile.TemporaryFile(prefix="dane-images-")  # noqa: SIM115
        # Compact per-image records (a Python tuple an image would cost ~100 bytes each).
        self._offsets = array("q")
        self._shapes = array("i")  # C, H, W of each image, flat
        self._end = 0

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, image: np.ndarray) -> None:
        data = np.ascontiguousarray(image, dtype=np.uint8).tobytes()
        self._file.write(data)
        self._offsets.append(self._end)
        self._shapes.extend(image.shape)
        self._end += len(data)

    def extend(self, images: Iterable[np.ndarray]) -> None:
        for image in images:
            self.append(image)

    def shapes(self) -> np.ndarray:
        """(N, 3): each image's channels, height and width."""
        return np.frombuffer(self._shapes, dtype=np.int32).reshape(-1, 3)

    def rows(self) -> LazyRows:
        """Every image as rows of one shape: RGB for all when grey and colour mix."""
        self._file.flush()
        shapes = self.shapes()
        sample = (int(shapes[:, 0].max()), int(shapes[0, 1]), int(shapes[0, 2]))
        return LazyRows(self._read_into(sample), np.arange(len(self)), sample, np.uint8)

    def _read_into(self, sample: tuple[int, int, int]) -> Reader:
        fd, shapes = self._file.fileno(), self.shapes()

        def read(positions: np.ndarray) -> np.ndarray:
            out = np.empty((len(positions), *sample), dtype=np.uint8)
            for i, position in enumerate(positions):
                shape = tuple(shapes[position])
                data = os.pread(fd, int(np.prod(shape)), self._offsets[position])
                # A grey image broadcast over 3 channels: R = G = B, as np.repeat gives.
                out[i] = np.frombuffer(data, dtype=np.uint8).reshape(shape)
            return out

        return read
