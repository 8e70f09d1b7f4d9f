# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-quick lint typecheck docs unit coverage package-check bench bench-save bench-quick clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The demo needs guardrail and its runtime dependencies only (half a minute on a fresh clone), not
# the development toolchain `make test` installs; a .venv that has the toolchain reuses it.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -f $(STAMP) -a $(STAMP) -nt pyproject.toml || $(BIN)/python -m pip install --quiet -e .
	touch $@

demo: $(DEMO_STAMP)
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

# The suite spread over the machine's cores by pytest-xdist; worksteal moves waiting tests to an
# idle worker, as a few tests take tens of seconds. The fixtures that take many seconds (the
# corpus replays, the benchmark run) are built once for all workers (computed_once in
# tests/conftest.py). One file while editing: $(BIN)/pytest -q tests/test_x.py
XDIST := -n auto --dist worksteal

unit: $(STAMP)
	$(BIN)/pytest -q $(XDIST)

test: lint typecheck docs unit

# The artefacts a user installs, tested as installed: the sdist and the wheel built from it,
# checked as the package index would (twine, check-wheel-contents), then the wheel installed with
# an extra and without the dev tools into a clean virtual environment (build/package-env), where
# the command, the demo and a smoke test (tests/smoke_installed.py, which checks that it imports
# the installed package, not the source tree) run. A file missing
# from the wheel (the corpus, py.typed) fails here, not for a user. CI runs it after `make test`.
PKG_ENV := build/package-env
package-check: $(STAMP)
	rm -rf dist $(PKG_ENV)
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(BIN)/check-wheel-contents dist/*.whl
	$(PYTHON) -m venv $(PKG_ENV)
	$(PKG_ENV)/bin/python -m pip install --quiet "$$(ls dist/*.whl)[otel]"
	cd $(PKG_ENV) && bin/guardrail --version && bin/guardrail demo > demo.txt
	grep -q "refund" $(PKG_ENV)/demo.txt
	cd $(PKG_ENV) && bin/python $(CURDIR)/tests/smoke_installed.py

# The whole suite under coverage, failing below the branch coverage it has reached (the gate is
# fail_under in pyproject.toml); the examples, the command, the store workers and the xdist
# workers are subprocesses, measured through coverage's subprocess patch and combined. coverage
# starts pytest rather than pytest-cov starting inside it: guardrail's pytest plugin imports the
# package before any plugin could begin measuring. A target of its own: it more than doubles the
# suite's time.
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
