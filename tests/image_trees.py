"""ImageFolder trees of small PNGs for tests/datasets/test_image_reading.py and
tests/datasets/test_image_prepare.py, which both import it by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

RNG_SEED = 7


def _grey(rng: np.random.Generator, height: int = 5, width: int = 6) -> np.ndarray:
    return rng.integers(0, 256, size=(height, width), dtype=np.uint8)


def _write(path: Path, pixels: np.ndarray, mode: str | None = None) -> Path:
    """Save `pixels` ((H, W) grey or (H, W, 3) RGB) with Pillow; the format from the suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(pixels)
    (image.convert(mode) if mode else image).save(path)
    return path


def _tree(root: Path, classes=("zebra", "ant", "moth"), per_class: int = 3) -> dict:
    """Grey 5x6 PNGs, `per_class` a class: {class name: [(H, W) arrays in file order]}."""
    rng = np.random.default_rng(RNG_SEED)
    written = {}
    for name in classes:
        written[name] = [_grey(rng) for _ in range(per_class)]
        for i, pixels in enumerate(written[name]):
            _write(root / name / f"img{i}.png", pixels)
    return written


def _expected(written: dict) -> tuple[np.ndarray, np.ndarray]:
    """The tree's images (N, 1, H, W) and labels in class-name order, then file order."""
    names = sorted(written)
    x = np.stack([p for name in names for p in written[name]])[:, None]
    y = np.array([i for i, name in enumerate(names) for _ in written[name]], dtype=np.int64)
    return x, y
