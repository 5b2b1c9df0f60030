# Quick start: `make train` (set up .venv, train DANE on the embedded digits data) and
# `make test` (the same set-up, then the whole test suite). See README.md.
PYTHON ?= python3
VENV ?= .venv
# The CPU build of torch. On a machine whose pip would pick a CUDA build, add
# TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu".
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
RUN_DIR ?= runs/quickstart

PY := $(VENV)/bin/python
STAMP := $(VENV)/.dask-dane-installed

.PHONY: setup train test test-fast mutation lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dask-dane needs Python 3.11 or newer (set PYTHON=...)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, and only where none is installed: a plain `torch` requirement would pull
	# a multi-GB CUDA build.
	$(PY) -c 'import torch' 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

train: $(STAMP)
	rm -rf $(RUN_DIR)
	$(VENV)/bin/dane train --out $(RUN_DIR)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest --cov --cov-report=term

# The development loop: every test that starts no process (no cluster, no subprocess).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not cluster" -q

# Mutation testing (docs/testing.md): mutmut 2 mutates the files in place, one mutant at a
# time, and runs the fast tests that exercise them; `mutmut results` lists the survivors.
MUTATE ?= pipeline/comm.py,pipeline/aggregate.py,pipeline/algorithms/
MUTATION_TESTS ?= tests/test_comm.py tests/test_registry.py tests/test_algorithms.py tests/test_oracles.py tests/test_convex.py \
	tests/test_safeguard.py tests/test_baselines.py tests/test_graph.py \
	tests/test_skew_fixes.py tests/test_algorithm_options.py tests/test_diagnostics.py
mutation: $(STAMP)
	$(PY) -m pip install -q 'mutmut<3'
	$(VENV)/bin/mutmut run --paths-to-mutate $(MUTATE) --tests-dir tests \
		--runner '$(PY) -m pytest -x -q -p no:cacheprovider -m "not cluster" $(MUTATION_TESTS)'

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
