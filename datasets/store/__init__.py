"""The zarr v3 store: one group with train/{x,y}, test/{x,y} and attributes (see
docs/reference/formats.md).

A store is a local folder or lives at an fsspec URL (location.py). A local store is written
into a temporary sibling folder and renamed into place only when complete, so a reader never
sees half a store and an interrupted `prepare` leaves nothing behind; a remote one is
written in place with its attributes last, and removed if the write fails.

Writing and reading live apart (docs/architecture.md section 2), each in a module of this
package read in one sitting:
- format.py: the format's version, arrays and StoreInfo, shared by both sides;
- write.py: write_store (partition, chunk, checksum, rename into place);
- read.py: open_store (the metadata read and checked once, on the driver);
- rows.py: read_rows / read_shard (a shard's rows, checked where they are loaded) and
  the per-shard label counts.
This module is the public face: import from here.
"""

from __future__ import annotations

from .format import ARRAYS, FORMAT_VERSION, SHARED_STORE, StoreInfo
from .read import open_store
from .rows import label_histograms, labels_no_shard_holds, read_rows, read_shard
from .write import CHUNK_BYTES, write_store

__all__ = [
    "ARRAYS",
    "CHUNK_BYTES",
    "FORMAT_VERSION",
    "SHARED_STORE",
    "StoreInfo",
    "label_histograms",
    "labels_no_shard_holds",
    "open_store",
    "read_rows",
    "read_shard",
    "write_store",
]
