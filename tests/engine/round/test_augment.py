"""--augment against images flipped and shifted by hand in numpy (pipeline/engine/round/augment.py).

The Dask run and the reference share `augment_batch`, so their agreement proves nothing about
it: a no-op, a flip of the wrong axis or a crop with its offsets swapped passes there. Here
the same draws (N flips, then N row and N column offsets, from a generator of the same seed,
the order the docstring promises) choose what each image must become, and numpy slicing of
the original builds it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dask_dane.pipeline.engine.round.augment import Augmentation, augment_batch, parse_augment

SEED = 7


def _images(count: int = 16, channels: int = 2, height: int = 5, width: int = 7) -> torch.Tensor:
    # Every pixel distinct and non-zero, height != width: a flip of the wrong axis, a
    # transposed shift or a padding not of zeros changes values.
    values = np.arange(1, count * channels * height * width + 1, dtype=np.float32)
    return torch.from_numpy(values.reshape(count, channels, height, width))


def _draws(count: int, augmentation: Augmentation):
    rng = torch.Generator().manual_seed(SEED)
    flips = np.zeros(count, dtype=bool)
    if augmentation.flip:
        flips = (torch.rand(count, generator=rng) < 0.5).numpy()
    rows = cols = np.full(count, augmentation.crop)  # offset P: the image unmoved
    if augmentation.crop:
        span = 2 * augmentation.crop + 1
        rows = torch.randint(0, span, (count,), generator=rng).numpy()
        cols = torch.randint(0, span, (count,), generator=rng).numpy()
    return flips, rows, cols


def _by_hand(x: np.ndarray, augmentation: Augmentation) -> np.ndarray:
    """Each image flipped left-right (its last axis) if drawn, then shifted: the output's
    pixel (i, j) is the input's (i + row - P, j + col - P), zero outside the image."""
    count, _, height, width = x.shape
    flips, rows, cols = _draws(count, augmentation)
    pad = augmentation.crop
    out = np.zeros_like(x)
    for n in range(count):
        image = x[n, :, :, ::-1] if flips[n] else x[n]
        for i in range(height):
            for j in range(width):
                src_i, src_j = i + rows[n] - pad, j + cols[n] - pad
                if 0 <= src_i < height and 0 <= src_j < width:
                    out[n, :, i, j] = image[:, src_i, src_j]
    return out


@pytest.mark.parametrize(
    "augmentation",
    [Augmentation(flip=True), Augmentation(crop=2), Augmentation(flip=True, crop=3)],
    ids=["flip", "crop=2", "flip,crop=3"],
)
def test_augment_batch_equals_images_flipped_and_shifted_by_hand(augmentation):
    x = _images()
    original = x.clone()

    out = augment_batch(x, augmentation, torch.Generator().manual_seed(SEED))

    np.testing.assert_array_equal(out.numpy(), _by_hand(x.numpy(), augmentation))
    assert torch.equal(x, original)  # the caller's batch is unchanged


def test_the_draws_both_flip_and_keep_and_shift_both_ways():
    # The oracle above is only as strong as its draws: some images flipped and some kept,
    # offsets on both sides of centre in rows and in columns.
    flips, rows, cols = _draws(16, Augmentation(flip=True, crop=3))

    assert 0 < flips.sum() < 16
    assert rows.min() < 3 < rows.max() and cols.min() < 3 < cols.max()
    assert not np.array_equal(rows, cols)


def test_no_augmentation_returns_the_batch_itself():
    x = _images(count=3)

    out = augment_batch(x, Augmentation(), torch.Generator().manual_seed(SEED))

    assert out is x


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("crop=0", "crop=0"),
        ("crop=-1", "crop=-1"),
        ("crop=x", "crop=x"),
        ("crop", "crop"),
        ("flip=1", "flip=1"),
        ("rotate", "rotate"),
        ("flip,crop=2.5", "crop=2.5"),
        ("FLIP", "FLIP"),
    ],
)
def test_parse_augment_refuses_naming_the_part_it_cannot_read(text, part):
    with pytest.raises(ValueError) as refused:
        parse_augment(text)

    assert f"cannot read {part!r}" in str(refused.value)
    assert "flip, crop=P" in str(refused.value)  # and says what to write


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("flip", Augmentation(flip=True)),
        ("crop=4", Augmentation(crop=4)),
        (" crop=12 , flip ", Augmentation(flip=True, crop=12)),
        ("none", Augmentation()),
    ],
)
def test_parse_augment_reads_each_form(text, expected):
    assert parse_augment(text) == expected
