PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m jaxmma

lint: $(STAMP)
	$(BIN)/ruff check jaxmma tests benchmarks docs
	$(BIN)/ruff format --check jaxmma tests benchmarks docs

test: $(STAMP) lint
	$(BIN)/python -m pytest -n 2 tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
