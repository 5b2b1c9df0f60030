"""`dane info`: the lines that describe a store (source, shapes, dtypes, shards, labels)."""

from __future__ import annotations

from collections.abc import Iterator


def store_lines(store: str) -> Iterator[str]:
    """What a store holds, line by line; its label histograms per shard for classification."""
    from ..datasets.images import format_class_names, read_class_names
    from ..datasets.store import label_histograms, labels_no_shard_holds, open_store

    meta = open_store(store)
    yield f"store:          {meta.path}"
    yield f"source:         {meta.source}"
    yield f"task:           {meta.task} ({meta.num_classes} classes)"
    if (class_names := read_class_names(meta.path)) is not None:
        yield f"class names:    {format_class_names(class_names)}"
    for split, rows in (("train", meta.num_train), ("test", meta.num_test)):
        yield (
            f"{split + ':':<16}x {(rows, *meta.sample_shape)} {meta.x_dtype}, "
            f"y ({rows},) {meta.y_dtype}"
        )
    yield f"partition:      {meta.partition}"
    yield f"shards:         {meta.num_shards}"
    histograms = label_histograms(meta) if meta.task == "classification" else None
    for i, (start, stop) in enumerate(meta.shards):
        line = f"  shard {i:>3}: rows [{start}, {stop})  {stop - start} samples"
        if histograms is not None:
            line += "  labels " + " ".join(str(int(c)) for c in histograms[i])
        yield line
    if histograms is not None:
        missing = labels_no_shard_holds(histograms)
        yield "labels no shard holds: " + (
            " ".join(map(str, missing)) + "  (never trained on)" if missing else "none"
        )
