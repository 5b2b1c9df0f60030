"""--augment: random horizontal flips and random crops with padding of a minibatch of images.

The recipe of every CIFAR-style CNN (He et al. 2016, from Krizhevsky et al. 2012): each image
is flipped left-right with probability 1/2 and/or shifted by up to P pixels in each
direction (padded by P, then cropped back to its size at a random offset). Images are already
normalised on the worker, so padding with 0 fills with the data set's mean colour. Draws come
from a generator the caller seeds, so that a run is reproducible bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


FORMS = "flip, crop=P, or both: flip,crop=4 (none: no augmentation)"
NO_AUGMENTATION = "none"  # no augmentation, as --help shows the default ("" means the same)


@dataclass(frozen=True)
class Augmentation:
    flip: bool = False
    crop: int = 0  # padding P of the random crop; 0: no crop

    @property
    def active(self) -> bool:
        return self.flip or self.crop > 0


def parse_augment(text: str) -> Augmentation:
    """'flip', 'crop=4', 'flip,crop=4' ('none' or '' for none); ValueError naming the bad part."""
    flip, crop = False, 0
    if text.strip().lower() == NO_AUGMENTATION:
        return Augmentation()
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if name == "flip" and not value:
            flip = True
        elif name == "crop" and value.isdigit() and int(value) > 0:
            crop = int(value)
        else:
            raise ValueError(f"--augment {text!r}: cannot read {part!r}; write {FORMS}")
    return Augmentation(flip=flip, crop=crop)


def augment_batch(
    x: torch.Tensor, augmentation: Augmentation, rng: torch.Generator
) -> torch.Tensor:
    """A flipped / cropped copy of the images x of shape (N, C, H, W); x itself is unchanged.

    The draws (N flips, then N row and N column offsets) are made on the CPU from `rng` in
    that order, whatever the device of x.
    """
    import torch
    from torch.nn import functional as F

    if not augmentation.active:
        return x
    count, _, height, width = x.shape
    out = x
    if augmentation.flip:
        flipped = torch.rand(count, generator=rng) < 0.5
        out = torch.where(flipped.to(x.device).view(-1, 1, 1, 1), x.flip(3), x)
    if augmentation.crop:
        pad = augmentation.crop
        rows = torch.randint(0, 2 * pad + 1, (count,), generator=rng).to(x.device)
        cols = torch.randint(0, 2 * pad + 1, (count,), generator=rng).to(x.device)
        padded = F.pad(out, (pad, pad, pad, pad))
        row_index = (rows.view(-1, 1) + torch.arange(height, device=x.device)).view(
            count, 1, height, 1
        )
        col_index = (cols.view(-1, 1) + torch.arange(width, device=x.device)).view(
            count, 1, 1, width
        )
        channels = x.shape[1]
        # Two gathers: the rows of each image at its offset, then the columns.
        out = padded.gather(2, row_index.expand(count, channels, height, width + 2 * pad))
        out = out.gather(3, col_index.expand(count, channels, height, width))
    return out
