"""`dane bench local-step`: a worker's local step beside a plain PyTorch loop, in one process."""
