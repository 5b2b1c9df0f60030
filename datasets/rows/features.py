"""A shard's features kept as the store holds them, converted and normalised per slice.

Images are stored as uint8; held as float32 (or float64) they take 4x (8x) their bytes on the
worker and on its GPU. StoredRows keeps the stored tensor and hands out rows already in the
run's dtype and normalised with the store's per-channel mean and std, one minibatch or one
full-pass chunk at a time, on the device the rows live on (as FFCV and DALI do).

The conversion is elementwise (x.to(dtype) - mean) / std, so a slice converted alone holds
exactly the values the same rows had when the whole shard was converted at once: weights are
bit for bit what they were when shards were held converted.
"""

from __future__ import annotations

import torch

Rows = int | slice | torch.Tensor

# torch's CPU allocator starts every tensor on a 64-byte boundary, and MKL orders a product's
# sums by where its operands start: a tensor that computes off a boundary (a view into rows
# read into NumPy's memory, a frame where a message put it: wire.py) can give other bits
# than the same values where torch put them, and a worker other bits than the reference.
ALIGNMENT = 64


def on_boundary(tensor: torch.Tensor, alignment: int = ALIGNMENT) -> torch.Tensor:
    """The tensor, or where it starts off an `alignment`-byte boundary on the CPU, a copy of
    it (torch's own allocation, which starts on an ALIGNMENT one)."""
    if tensor.device.type == "cpu" and tensor.data_ptr() % alignment:
        return tensor.clone(memory_format=torch.contiguous_format)
    return tensor


class FeatureRows:
    """What StoredRows and StreamedRows (streamed.py) share: rows handed out in the run's
    `dtype` and normalised with `mean` and `std` (None: no normalisation), from the rows as
    stored (`_stored`); the objective reads shape, dtype, device, element_size, len and
    indexing of them, as of the converted tensor."""

    dtype: torch.dtype
    mean: torch.Tensor | None
    std: torch.Tensor | None

    @property
    def shape(self) -> torch.Size:
        raise NotImplementedError

    def _stored(self, rows: slice | torch.Tensor) -> torch.Tensor:
        """The given rows in their stored dtype."""
        raise NotImplementedError

    def element_size(self) -> int:
        """Bytes per element of the rows handed out (the run's dtype), for memory budgets."""
        return torch.empty((), dtype=self.dtype).element_size()

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, rows: Rows) -> torch.Tensor:
        """The given rows, in the run's dtype and normalised: a new tensor, never a view that
        a caller could write through into the held rows (unless nothing needed converting)."""
        if isinstance(rows, int):  # one row: normalised as a batch of one (channels at dim 1)
            return self[rows : rows + 1 or None][0]
        picked = self._stored(rows).to(self.dtype)
        if self.mean is None:  # a view of the held rows where nothing needed converting
            return on_boundary(picked)
        # Out of place first: with a float32 store in a float32 run `picked` may be a view.
        return torch.sub(picked, self.mean).div_(self.std)

    def dense(self) -> torch.Tensor:
        """All rows converted: a shard-sized copy (tests, single-process baselines)."""
        return self[:]

    def _normalizer_on(self, device: torch.device | str) -> list[torch.Tensor | None]:
        """(mean, std) moved to `device`."""
        return [None if t is None else t.to(device) for t in (self.mean, self.std)]


class StoredRows(FeatureRows):
    """Rows of features in their stored dtype; indexing returns normalised run-dtype tensors.

    `stored`: the features as read (N, ...); `dtype`: the run's dtype; `mean`, `std`:
    per-channel tensors shaped to broadcast over a batch (None: no normalisation, as for
    tabular stores).
    """

    def __init__(
        self,
        stored: torch.Tensor,
        dtype: torch.dtype,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
    ) -> None:
        self.stored = stored
        self.dtype = dtype
        self.mean = mean
        self.std = std

    @classmethod
    def of(cls, x: torch.Tensor | FeatureRows) -> FeatureRows:
        """Features already in their final form (tests, in-memory problems), as StoredRows."""
        # A streamed shard (streamed.py) has the same interface and passes through too.
        return cls(x, x.dtype) if isinstance(x, torch.Tensor) else x

    @property
    def shape(self) -> torch.Size:
        return self.stored.shape

    @property
    def device(self) -> torch.device:
        return self.stored.device

    @property
    def nbytes(self) -> int:
        """Bytes held: the stored rows, not their converted size."""
        return self.stored.element_size() * self.stored.nelement()

    @property
    def stored_dtype(self) -> torch.dtype:
        return self.stored.dtype

    def _stored(self, rows: slice | torch.Tensor) -> torch.Tensor:
        return self.stored[rows]

    def read_all(self) -> torch.Tensor:
        """Every row in its stored dtype: the held rows themselves."""
        return self.stored

    def release(self) -> None:
        """Nothing to drop: resident rows are the shard itself (StreamedRows drops its cache)."""

    def take(self, rows: Rows) -> StoredRows:
        """The given rows, still in their stored dtype (subsets of an objective)."""
        return StoredRows(self.stored[rows], self.dtype, self.mean, self.std)

    def to(self, device: torch.device | str) -> StoredRows:
        """The same rows held on `device` (the conversion then runs there)."""
        return StoredRows(self.stored.to(device), self.dtype, *self._normalizer_on(device))

    @staticmethod
    def concat(parts: list[FeatureRows]) -> StoredRows:
        """Shards' rows in order, as one (the reference's whole training set, the validation
        rows of every shard). Streamed parts (streamed.py) are read whole, one at a time into
        the result: what asks for all rows holds them, but never twice."""
        first = parts[0]
        shape = (sum(len(p) for p in parts), *first.shape[1:])
        joined = torch.empty(shape, dtype=first.stored_dtype, device=first.device)
        start = 0
        for part in parts:
            rows = part.read_all()
            joined[start : start + len(rows)] = rows
            start += len(rows)
            del rows  # a streamed part's copy goes before the next is read
        return StoredRows(joined, first.dtype, first.mean, first.std)


def stored_rows(stored: torch.Tensor, dtype: torch.dtype, normalization: dict | None) -> StoredRows:
    """The rows a worker holds for `stored` (a tensor it owns, as read from the store).

    Stored narrower than the run's dtype (uint8 images; float32 rows in a float64 run), they
    stay as stored and are converted per slice. Otherwise converting once costs no memory and
    spares every step the conversion: they are converted and normalised in place, as read.
    Signals and images (ndim 3 or 4) get the store's per-channel normalisation; tabular rows
    are converted only.
    """
    mean, std = normalizer(stored.ndim, dtype, stored.device, normalization)
    if stored.element_size() < torch.empty((), dtype=dtype).element_size():
        return StoredRows(stored, dtype, mean, std)
    converted = stored.to(dtype)  # the read tensor itself when the dtypes agree: ours to edit
    if mean is not None:
        # In place: a second shard-sized copy would double the worker's peak memory.
        converted.sub_(mean).div_(std)
    return StoredRows(converted, dtype)


def normalizer(
    ndim: int, dtype: torch.dtype, device: torch.device, normalization: dict | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(mean, std) shaped to broadcast over a batch of rows with `ndim` dimensions: the store's
    per-channel normalisation for signals and images (ndim 3 or 4), none for tabular rows."""
    if ndim not in (3, 4) or normalization is None:
        return None, None
    shape = (1, -1, *[1] * (ndim - 2))
    mean = torch.tensor(normalization["mean"], dtype=dtype, device=device).view(shape)
    return mean, torch.tensor(normalization["std"], dtype=dtype, device=device).view(shape)


# What the objective accepts as features: a shard's rows, or a tensor used as it is.
Features = torch.Tensor | FeatureRows
