PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# faster XLA:CPU compilation of the many small programs; results are bit-identical
FAST_XLA := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	XLA_FLAGS="$(FAST_XLA)" $(BIN)/python -m jaxmma

lint: $(STAMP)
	$(BIN)/ruff check jaxmma tests benchmarks docs
	$(BIN)/ruff format --check jaxmma tests benchmarks docs

test: $(STAMP) lint
	$(BIN)/python -m pytest -n 2 tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
