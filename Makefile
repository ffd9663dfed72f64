# The front door: `make demo`, `make test`. Each builds .venv first when it is missing or stale.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test test-fast lint format lock clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	$(BIN)/python -m pip check
	@touch $(STAMP)

demo: install
	$(BIN)/logmetrics demo

test: install
	$(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m "not slow"

lint: install
	$(BIN)/ruff check src tests jobs
	$(BIN)/ruff format --check src tests jobs
	$(BIN)/mypy

format: install
	$(BIN)/ruff format src tests jobs
	$(BIN)/ruff check --fix src tests jobs

# Re-resolve the pins from pyproject.toml in a scratch venv and write constraints.txt.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet -e '.[dev]'
	.lock-venv/bin/python -m pip check
	{ head -n 2 constraints.txt; .lock-venv/bin/python -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .lock-venv

clean:
	rm -rf $(VENV) .ivy2 warehouse data logs reports spark-warehouse .pytest_cache .hypothesis
