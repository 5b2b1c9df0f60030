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

.PHONY: setup train test coverage test-fast mutation lint clean docs

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

# The whole suite, printing its slowest tests (docs/testing.md: where the time goes): the
# tests that start no process on both cores (pytest-xdist, a file to a process: 84 s there
# against 134 s on one), then the cluster tests one at a time (their workers already use
# both cores: on two pytest processes they ran slower).
# BESIDE_PURE_PASS (optional): a command run beside the pure pass and waited for (its output
# printed, its failure failing the target) before the cluster pass starts: no test of the
# pure pass bounds a time, and the cluster pass runs alone.
# The command is passed to `sh -c` through the environment, never pasted into the recipe: a
# recipe line is parsed whole before any of it runs, so an empty value pasted into `( ... )`
# was a syntax error even behind an `if`, and a value holding quotes would break the quoting.
# Through the environment, an empty or unset variable is an empty string that `[ -n ]` skips.
BESIDE_PURE_PASS ?=
export BESIDE_PURE_PASS
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	@set -e; log=$$(mktemp); beside=; \
	if [ -n "$$BESIDE_PURE_PASS" ]; then sh -c "$$BESIDE_PURE_PASS" > "$$log" 2>&1 & beside=$$!; fi; \
	pure=0; $(PY) -m pytest -m "not cluster" -n 2 --dist loadfile --durations=10 || pure=$$?; \
	if [ -n "$$beside" ]; then \
	  echo "== the command beside the pure pass:"; wait $$beside || pure=$$?; cat "$$log"; fi; \
	rm -f "$$log"; exit $$pure
	$(PY) -m pytest -m cluster --durations=40

# The same suite with line and branch coverage (docs/testing.md). Apart from `make test`:
# tracing made the in-process tests about 20 % slower (measured on two of their files).
coverage: $(STAMP)
	$(PY) -m pytest --cov --cov-report=term

# The development loop: every test that starts no process (no cluster, no subprocess).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not cluster" -q

# Mutation testing (docs/testing.md): mutmut 2 mutates the files in place, one mutant at a
# time. Each mutant runs only the fast tests that execute its line (tests/mutation/: a map
# from one coverage run, and a warm process that forks per mutant instead of importing torch
# again); `mutmut results` lists the survivors.
# The algorithms, the accounting and the aggregation, and (issue 35 item 8) a user's model
# from its file to its export: loading, checks, objective, augmentation, image stores.
# (tests/mutation/coverage_map.py's MUTATED and forkserver.py's MUTATED_MODULES name the same.)
MUTATE_CORE := pipeline/engine/round/comm.py,pipeline/engine/round/aggregate.py,pipeline/algorithms/
MUTATE_MODEL := models/user.py,pipeline/setup/model_check.py,pipeline/engine/round/objective.py
MUTATE_DATA := pipeline/engine/round/augment.py,datasets/images.py,datasets/cifar.py,pipeline/trained.py
MUTATE ?= $(MUTATE_CORE),$(MUTATE_MODEL),$(MUTATE_DATA)
MUTATION_MAP ?= .mutation-map.json
MUTATION_SOCKET ?= .mutation.sock
# Test one mutant in N (a fixed, hash-chosen sample; tests/mutation/mutmut_config.py); 1: all.
MUTATION_SAMPLE ?= 1
mutation: $(STAMP)
	$(PY) -m pip install -q 'mutmut<3'
	$(PY) tests/mutation/coverage_map.py $(MUTATION_MAP)
	$(PY) tests/mutation/forkserver.py serve $(MUTATION_SOCKET) $(CURDIR) & echo $$! > .mutation-server.pid; \
	sleep 10; \
	DANE_MUTATION_MAP=$(MUTATION_MAP) DANE_MUTATION_SOCKET=$(MUTATION_SOCKET) \
	DANE_MUTATION_SAMPLE=$(MUTATION_SAMPLE) PYTHONPATH=tests/mutation \
	$(PY) tests/mutation/run.py run --paths-to-mutate $(MUTATE) --tests-dir tests \
		--runner '$(PY) tests/mutation/forkserver.py run $(MUTATION_SOCKET) -x -q -p no:cacheprovider -m "not cluster" tests/engine/round/test_comm.py tests/algorithms/test_algorithms.py tests/engine/test_oracles.py'; \
	status=$$?; kill $$(cat .mutation-server.pid); rm -f .mutation-server.pid; exit $$status

# The documentation site, offline, warnings as errors (docs/conf.py). Its tools are the `docs`
# extra (also in `test`). -E: a fresh read every time, since the CLI reference and the settings
# are generated from the code, which Sphinx does not watch.
docs: $(STAMP)
	$(PY) -c 'import sphinx, myst_parser, furo, numpydoc' 2>/dev/null || $(PY) -m pip install -q -e '.[docs]'
	$(VENV)/bin/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
