"""Data sources, partitioners and the zarr store format (see DESIGN.md section 3)."""
