"""The `dane` command line: the Typer app (commands.py), its shared options and help (options.py),
and what it prints (console.py, watch.py, store_info.py). `dane` runs `main` (entry.py)."""

from .commands import app
from .entry import main

__all__ = ["app", "main"]
