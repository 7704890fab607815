PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make demo` installs only the demo extra (a few seconds); `make test` the test extra,
# which holds everything the demo needs, so a tested venv also runs the demo
DEMO_STAMP := $(VENV)/.installed-demo
# faster XLA:CPU compilation of the many small programs; jaxmma's results are bit-identical
# (the CPU's own transcendental functions are not: docs/xla_gpu.md)
FAST_XLA := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true

# a persistent compilation cache shared by the test workers, the notebook kernels and the
# demo: a program compiled once is read back by every later process (bit-identical; JAX keys
# each entry by the program, the XLA flags and the versions). No size limit: JAX's limit
# locks the whole cache on every read and write, which serialized the two test workers
# (a day's quick run adds 60-90 MB; `make clean` empties it).
JAX_CACHE := JAX_COMPILATION_CACHE_DIR="$(CURDIR)/.cache/jax" \
	JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0

.PHONY: demo test test-all lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[demo]"
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(JAX_CACHE) XLA_FLAGS="$(FAST_XLA)" $(BIN)/python -m jaxmma

# the type check of the public faces (pyproject.toml, [tool.mypy], names the modules)
lint: $(STAMP)
	$(BIN)/ruff check jaxmma tests benchmarks docs
	$(BIN)/ruff format --check jaxmma tests benchmarks docs
	$(BIN)/mypy

# the quick run: one golden record per opcode and shape of each file, one case per family of
# the heavy parametrizations (JAXMMA_TEST_SEED picks them: today's date unless set)
test: $(STAMP) lint
	$(JAX_CACHE) $(BIN)/python -m pytest -n 2 --dist worksteal tests

# the full sweep: every golden record and every case (tests marked 'full' included)
test-all: $(STAMP) lint
	$(JAX_CACHE) $(BIN)/python -m pytest -n 2 --dist worksteal tests --full

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .cache
