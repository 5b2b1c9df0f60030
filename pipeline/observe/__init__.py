"""What watches a run: observers that only subscribe to the engine's Callbacks.

progress defines Callbacks and the API's progress lines; tracking chains TensorBoard and
MLflow onto them; dashboard is the scheduler's /dane page, reading the events the driver
publishes after each round. None of them takes part in a round's work.
"""
