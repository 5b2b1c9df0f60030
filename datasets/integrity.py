"""A digest over a store's metadata: attributes and array layouts, checked when it opens.

Chunks carry their own CRC32C checksums (store/write.py), but a store's metadata has none of its
own in zarr: an edited `shards`, `normalization` or array shape would load as plausible,
wrong data. write_store records this digest last; open_store recomputes it. Only the fields
that decide what is read are hashed, each in a form no zarr version changes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import zarr

DIGEST_KEY = "metadata_sha256"
ARRAYS = ("train/x", "train/y", "test/x", "test/y")


def metadata_digest(group: zarr.Group, attrs: dict[str, Any]) -> str:
    """SHA-256 of the attributes (less the digest) and each array's shape, dtype, chunks and
    fill value, as canonical JSON."""
    payload = {
        "attributes": {k: v for k, v in attrs.items() if k != DIGEST_KEY},
        "arrays": {name: _layout(group[name]) for name in ARRAYS},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _layout(array: Any) -> dict[str, Any]:
    return {
        "shape": [int(n) for n in array.shape],
        "dtype": str(array.dtype),
        "chunks": [int(n) for n in array.chunks],
        "fill_value": repr(array.fill_value),
    }


def check_digest(group: zarr.Group, attrs: dict[str, Any], path: str) -> None:
    """ValueError if the store's metadata no longer matches the digest written with it.

    Stores written before digests existed have none and are read as before.
    """
    if DIGEST_KEY not in attrs:
        return
    if attrs[DIGEST_KEY] != metadata_digest(group, attrs):
        raise ValueError(
            f"{path}: its metadata changed after it was written (digest mismatch: attributes "
            f"or array layout edited or damaged); re-create it with `dane prepare ... --out "
            f"{path} --force`"
        )
