"""Strict JAX configuration for the whole suite (equinox / lineax style), and the split
between the quick run (``make test``) and the full sweep (``make test-all``).

* The full sweep runs every test and every golden record: ``pytest --full`` or
  ``JAXMMA_FULL=1``.
* The quick run deselects the tests marked ``full`` (the same model checked again at more
  shapes, forms or seeds) and checks a sample of each golden file: one record of every
  opcode per file (the shape drawn with ``JAXMMA_TEST_SEED``). Of every other
  parametrized test it keeps one case in ``_suite.CASE_SHARE`` (at least one), drawn with
  the same seed, unless the test is marked ``every_case`` (the notebooks, the hardware
  golden files, the cheap table-driven checks) or its cases were drawn by hand
  (``_suite.params``). Of the slow test functions listed in tests/slow.txt (measured)
  it keeps half, a different half each day; the checks against hardware captures
  always run. The seed is today's UTC date
  unless the variable is set; the header prints it, so a failure is reproduced with
  ``JAXMMA_TEST_SEED=<seed> pytest ...``.
"""

import datetime
import os

from _suite import full_sweep, halve_slow, seed, thin, xla_flags

# Faster XLA:CPU compilation for the many small programs the suite builds; jaxmma's
# results are bit-identical (the CPU's own tanh or rsqrt are not). Set once by the
# controller, before JAX starts its backend: xdist workers, notebook kernels and the
# suite's subprocesses inherit it. A run with XLA_FLAGS set keeps them.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = xla_flags()

import jax  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

# Set once by the controller (xdist workers inherit it), so every process samples alike.
os.environ.setdefault(
    "JAXMMA_TEST_SEED", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
)


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="run the full sweep: tests marked 'full' and every golden record",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "full: duplicate coverage run only in the full sweep (--full, JAXMMA_FULL=1)"
    )
    config.addinivalue_line(
        "markers", "every_case: the quick run keeps every case of this parametrized test"
    )
    config.addinivalue_line(
        "markers", "sampled: a case the quick run drew by hand (tests/_suite.py params)"
    )
    if config.getoption("--full"):
        os.environ["JAXMMA_FULL"] = "1"  # xdist workers and notebook kernels inherit it


def pytest_report_header(config):
    mode = "full sweep" if full_sweep() else "quick run (full sweep: --full)"
    return f"jaxmma: {mode}, JAXMMA_TEST_SEED={seed()}"


#: test files whose tests take longest (a child process, notebook kernels, eager calls):
#: run first, so the two workers' last tests are short ones and finish together
LONG_FIRST = ("test_x64.py", "test_notebooks.py", "test_eager_sparse.py", "test_golden.py")


def _long_first(items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    key = lambda it: rank.get(it.nodeid.split("::", 1)[0].rsplit("/", 1)[-1], len(rank))  # noqa: E731
    items[:] = sorted(items, key=key)  # stable: the rest keep their order


def pytest_collection_modifyitems(config, items):
    _long_first(items)
    if full_sweep():
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("full") else keep).append(item)
    # the rest of the parametrized tests: a seeded share of each function's cases, unless
    # the cases were drawn by hand (params) or every one must run (every_case)
    whole = [
        it
        for it in keep
        if getattr(it, "callspec", None) is None
        or it.get_closest_marker("every_case")
        or it.get_closest_marker("sampled")
    ]
    wholes = {id(it) for it in whole}
    rest = [it for it in keep if id(it) not in wholes]
    kept = {id(rest[i]) for i in thin(it.nodeid for it in rest)}
    drop += [it for it in rest if id(it) not in kept]
    keep = [it for it in keep if id(it) in wholes or id(it) in kept]
    # half of the slow functions (tests/slow.txt), a different half each day
    out = halve_slow(it.nodeid for it in keep)
    drop += [it for it in keep if it.nodeid in out]
    keep = [it for it in keep if it.nodeid not in out]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    # -q (pyproject's addopts) hides the header: say the mode and seed at the end too
    terminalreporter.write_line(pytest_report_header(terminalreporter.config))
