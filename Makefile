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

# The import contracts of pyproject.toml: the core's layers, no cycle (type-only imports
# included), no feature reaching into another's private modules.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site, into site/; --strict (set in mkdocs.yml too) makes a warning an
# error, and the build's hooks fail it when the API reference leaves out a public name.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck docs unit

# The whole suite under coverage, failing below the branch coverage it has reached (the gate is
# fail_under in pyproject.toml). It costs about 1.4x the suite's time, so it is a target of its
# own: under coverage, `make test` came to 14 minutes on a 2-core machine. coverage starts
# pytest rather than pytest-cov starting inside it: guardrail's pytest plugin imports the
# package before any plugin could begin measuring.
coverage: $(STAMP)
	$(BIN)/coverage run -m pytest -q
	$(BIN)/coverage report

# The suite without the tests marked slow (fuzzing, long property runs, the corpus replays),
# stopping at the first failure: the loop while editing. `make test`, and CI, run them all.
test-quick: $(STAMP)
	$(BIN)/pytest -q -m "not slow" -x

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
