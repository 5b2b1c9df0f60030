"""`dane bench cli-startup`: how long the `dane` command line takes to answer --help."""
