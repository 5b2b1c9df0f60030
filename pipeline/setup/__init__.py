"""What a run is, resolved before any work: its settings, its configuration, and the model,
store and strategy they name (config, settings, run_setup, model_check)."""
