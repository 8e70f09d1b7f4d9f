# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-quick lint typecheck docs unit coverage bench bench-save bench-quick clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/guardrail demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site, into site/; --strict (set in mkdocs.yml too) makes a warning an
# error, and the build's hooks fail it when the API reference leaves out a public name.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

# The suite spread over the machine's cores by pytest-xdist; worksteal moves waiting tests to an
# idle worker, as a few tests take tens of seconds. The fixtures that take many seconds (the
# corpus replays, the benchmark run) are built once for all workers (computed_once in
# tests/conftest.py). One file while editing: $(BIN)/pytest -q tests/test_x.py
XDIST := -n auto --dist worksteal

unit: $(STAMP)
	$(BIN)/pytest -q $(XDIST)

test: lint typecheck docs unit

# The whole suite under coverage, failing below the branch coverage it has reached (the gate is
# fail_under in pyproject.toml); the examples, the command, the store workers and the xdist
# workers are subprocesses, measured through coverage's subprocess patch and combined. coverage
# starts pytest rather than pytest-cov starting inside it: guardrail's pytest plugin imports the
# package before any plugin could begin measuring. A target of its own: it doubles the suite's
# time.
coverage: $(STAMP)
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest -q $(XDIST)
	$(BIN)/coverage combine -q
	$(BIN)/coverage report

# The loop while editing the core: no test marked slow (fuzzing, long property runs, the corpus
# replays, the benchmark harness), none of tests/integrations, no runtime's package imported
# (--core fails the run if one is), stopping at the first failure. `make test`, and CI, run all.
test-quick: $(STAMP)
	$(BIN)/pytest -q --core -m "not slow" -x

# The full run writes its table and plot to benchmarks/results/local/, which git ignores;
# bench-save writes the tracked benchmarks/results/ the README quotes.
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

bench-save: $(STAMP)
	$(BIN)/python benchmarks/run.py --save

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/run.py --quick

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build dist site *.egg-info .coverage .coverage.* htmlcov
