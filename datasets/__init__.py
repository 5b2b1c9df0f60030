"""Data sources, partitioners and the zarr store format (see docs/reference/formats.md)."""
