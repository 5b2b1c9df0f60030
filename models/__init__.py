"""Model architectures (no training code) and flat-vector <-> parameter helpers."""
