"""The local steps' gradient clip: the GPU's form (a tensor scale, no host sync) gives the bits
of the CPU's (the norm read as a number), so a run clips alike on either device."""

from __future__ import annotations

import pytest
import torch

from dask_dane.pipeline.algorithms.parts.step_clip import clip_by_number_, clip_by_tensor_


def _both(grad: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    by_number, by_tensor = grad.clone(), grad.clone()
    clip_by_number_(by_number, clip)
    clip_by_tensor_(by_tensor, clip)
    return by_number, by_tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_both_forms_give_the_same_bits_at_and_around_the_norm(dtype):
    gen = torch.Generator().manual_seed(0)
    for size, scale in [(1, 1e-3), (17, 1.0), (650, 30.0), (88_378, 1e3)]:
        grad = torch.randn(size, generator=gen, dtype=dtype) * scale
        norm = float(torch.linalg.vector_norm(grad))
        # The clip just above, at and just below the norm (a float32 norm against a float64
        # clip: compared in float32 the last two would tie), and well away from it.
        for clip in (norm * (1 + 1e-9), norm, norm * (1 - 1e-9), 0.3, norm * 0.3, 1e-30):
            by_number, by_tensor = _both(grad, clip)

            assert torch.equal(by_number, by_tensor), (size, clip)
            assert torch.linalg.vector_norm(by_tensor) <= min(norm, clip) * (1 + 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_both_forms_give_the_same_bits_on_many_random_gradients_and_clips(dtype):
    gen = torch.Generator().manual_seed(1)
    for _ in range(2000):
        scale = 10 ** (8 * float(torch.rand(1, generator=gen)) - 4)
        grad = torch.randn(64, generator=gen, dtype=dtype) * scale
        clip = float(torch.linalg.vector_norm(grad)) * float(torch.rand(1, generator=gen)) * 2

        by_number, by_tensor = _both(grad, clip)

        assert torch.equal(by_number, by_tensor), clip


def test_a_short_gradient_is_left_as_it_is_and_a_long_one_scaled_to_the_clip():
    short, long = _both(torch.tensor([0.3, 0.4]), 1.0)[1], _both(torch.tensor([3.0, 4.0]), 1.0)[1]

    assert torch.equal(short, torch.tensor([0.3, 0.4]))
    assert torch.allclose(long, torch.tensor([0.6, 0.8]))


def test_a_zero_or_nan_gradient_is_left_and_an_infinite_one_scaled_as_the_number_scales_it():
    for grad in (
        torch.zeros(3),
        torch.tensor([float("nan"), 1.0]),
        torch.tensor([float("inf"), 1.0]),
    ):
        by_number, by_tensor = _both(grad, 1.0)

        assert torch.equal(by_number.nan_to_num(7.0), by_tensor.nan_to_num(7.0))
    assert torch.equal(_both(torch.zeros(3), 1.0)[1], torch.zeros(3))
