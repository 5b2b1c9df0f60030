"""`python -m dask_dane`: the `dane` command, for where the console script is not on PATH."""

from .cli import main

main()
