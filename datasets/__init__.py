"""Data sources, partitioners and the zarr store format (see docs/architecture.md section 3)."""
