"""`python -m dask_dane.cli`: the `dane` command, as the tests and scripts run it."""

from .entry import main

main()
