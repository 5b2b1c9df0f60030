"""`dane bench prepare-memory`: the peak memory of `dane prepare` against the rows it writes."""
