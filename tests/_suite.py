"""The quick run and the full sweep (see conftest.py): which mode, which seed, samples."""

import os
import random
import subprocess
import sys


def full_sweep() -> bool:
    """Whether this run is the full sweep (``pytest --full`` or ``JAXMMA_FULL=1``)."""
    return os.environ.get("JAXMMA_FULL", "") not in ("", "0")


def seed() -> int:
    """The seed of this run's samples (``JAXMMA_TEST_SEED``, set by conftest.py)."""
    return int(os.environ["JAXMMA_TEST_SEED"])


def sample(items, key, *, salt=""):
    """One item per ``key(item)`` group, drawn with this run's seed; every item in the full
    sweep. The draw depends only on the seed, ``salt`` and the groups, so every xdist
    worker picks the same items."""
    items = list(items)
    if full_sweep():
        return items
    groups = {}
    for i, it in enumerate(items):
        groups.setdefault(repr(key(it)), []).append(i)
    rng = random.Random(f"{seed()}:{salt}")
    picked = {rng.choice(g) for _, g in sorted(groups.items())}
    return [it for i, it in enumerate(items) if i in picked]


def params(items, key, *, salt="", ids=None):
    """``items`` as pytest parameters, those outside this run's :func:`sample` marked
    ``full`` (run only in the full sweep): the quick run checks one item per ``key``
    group, a different one from day to day. Tuple items fill several argument names."""
    import pytest

    items = list(items)
    keep = {id(x) for x in sample(items, key, salt=salt)}
    out = []
    for x in items:
        marks = (pytest.mark.sampled,) if id(x) in keep else (pytest.mark.full,)
        kw = {"id": ids(x)} if ids is not None else {}
        values = x if isinstance(x, tuple) else (x,)
        out.append(pytest.param(*values, marks=marks, **kw))
    return out


#: the quick run keeps one in this many cases of a parametrized test (at least one)
CASE_SHARE = 64


def thin(names):
    """The indices of ``names`` (test ids, ``function[case]``) that the quick run keeps:
    of each parametrized function's cases a ``1 / CASE_SHARE`` share (at least one),
    drawn with this run's seed, the same in every process; every index in the full
    sweep. Functions with one case are kept whole."""
    names = list(names)
    if full_sweep():
        return list(range(len(names)))
    groups = {}
    for i, name in enumerate(names):
        groups.setdefault(name.split("[", 1)[0], []).append(i)
    keep = set()
    for base, idx in sorted(groups.items()):
        rng = random.Random(f"{seed()}:{base}")
        keep.update(rng.sample(idx, -(-len(idx) // CASE_SHARE)))
    return sorted(keep)


#: XLA:CPU options that compile the suite's many small programs faster; jaxmma's results
#: are bit-identical (the golden files check it; the CPU's own transcendental functions,
#: tanh and rsqrt among them, are not: docs/xla_gpu.md): no backend optimization, no expensive LLVM
#: passes, and the elemental loop emitter instead of the MLIR fusion emitters (about 45 %
#: less compile time per program on XLA:CPU of jax 0.10, the whole quick run 414 -> 302 s
#: with an empty compile cache on 2 cores)
FAST_XLA = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
NO_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_knows(flag: str) -> bool:
    """Whether the installed XLA accepts ``flag`` (it aborts on an unknown flag, so the
    probe runs in a child process: half a second, once per run)."""
    env = dict(os.environ, XLA_FLAGS=flag, JAX_PLATFORMS="cpu")
    probe = "import jax; jax.numpy.zeros(1).block_until_ready()"
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True)
    return run.returncode == 0


def xla_flags() -> str:
    """The ``XLA_FLAGS`` of a test run: :data:`FAST_XLA`, and the loop emitter where the
    installed XLA still has the switch (newer XLA:CPU versions retire it)."""
    flags = list(FAST_XLA)
    if _xla_knows(NO_FUSION_EMITTERS):
        flags.append(NO_FUSION_EMITTERS)
    return " ".join(flags)


#: the measured list of slow test functions (see :func:`halve_slow`)
SLOW_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow.txt")
#: functions never halved: the checks against hardware captures
ALWAYS = ("tests/test_golden.py::", "tests/test_gemm_golden.py::", "::test_matches_the_h100")


def slow_functions() -> list[str]:
    """The test functions (node ids without parameters) listed in tests/slow.txt."""
    with open(SLOW_FILE) as f:
        lines = (line.strip() for line in f)
        return [line for line in lines if line and not line.startswith("#")]


def halve_slow(names) -> set:
    """Of ``names`` (node ids), those the quick run leaves out: of the slow functions
    (tests/slow.txt) half, drawn with this run's seed (a different half from day to
    day; every one in the full sweep). Checks against hardware captures are never left
    out."""
    if full_sweep():
        return set()
    slow = sorted(s for s in slow_functions() if not any(a in s for a in ALWAYS))
    random.Random(f"{seed()}:slow").shuffle(slow)
    out = set(slow[1::2])
    return {n for n in names if n.split("[", 1)[0] in out}


def _write_slow(durations_path: str, least: float = 1.0) -> None:
    """Print tests/slow.txt from the output of ``pytest tests -n 2 -q --durations=0``
    (a quick run from an empty compile cache): the functions whose cases together took
    ``least`` seconds or more."""
    total: dict = {}
    with open(durations_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0].endswith("s") and parts[1] in (
                "call", "setup", "teardown"
            ):  # fmt: skip
                base = parts[2].split("[", 1)[0]
                total[base] = total.get(base, 0.0) + float(parts[0][:-1])
    print("# Test functions that took 1 s or more (their cases together) in a quick run from")
    print("# an empty compile cache on 2 cores; the quick run keeps half of them, drawn with")
    print("# the seed (tests/_suite.py halve_slow). Regenerate:")
    print("#   pytest tests -n 2 -q --durations=0 > durations.txt")
    print("#   python tests/_suite.py durations.txt > tests/slow.txt")
    for base in sorted(b for b, t in total.items() if t >= least):
        print(base)


if __name__ == "__main__":
    _write_slow(sys.argv[1])
