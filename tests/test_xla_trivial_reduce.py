"""Sums over dimensions of size 1 (``tests/golden/xla/xla-trivial-reduce-*.json``, an
H100, ``jaxmma/conformance/_xla_trivial_reduce.py``): XLA:GPU's result is the element's
own bits, and gpu_replay gives them, -0, subnormals and NaN payloads included, where a
sum from +0 would not."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_trivial_reduce as XT

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "xla-trivial-reduce-*.json")))


def _cases():
    out = []
    for path in FILES:
        with open(path) as fh:
            rec = json.load(fh)
        out += [(os.path.basename(path), k, v) for k, v in rec.items() if k != "process"]
    return out


@pytest.mark.skipif(not FILES, reason="no captures")
@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"{c[0][:-5]}-{c[1]}")
def test_trivial_sums_are_the_elements(case):
    _, name, rec = case
    f, x = XT.cases()[name]
    gpu = np.array(rec["out"], np.uint32)
    assert "reduce(" not in rec["hlo"]  # the simplifier removed it
    assert np.array_equal(gpu, x.view(np.uint32).ravel())  # the GPU: the element's bits
    replay = jaxmma.gpu_replay(f, rec["hlo"])
    for fn in (replay, jax.jit(replay)):
        got = np.asarray(fn(jnp.asarray(x))).view(np.uint32).ravel()
        assert np.array_equal(got, gpu), [hex(v) for v in got]
    minus_zero = int(np.flatnonzero(gpu == 0x80000000)[0])
    assert (np.float32(0) + x.ravel()[minus_zero]).view(np.uint32) == 0  # a sum from +0: +0


@pytest.mark.skipif(not FILES, reason="no captures")
def test_trivial_sum_differentiates():
    """The reshape's derivative is the sum's: ones back through the size-1 axis."""
    _, name, rec = _cases()[0]
    f, x = XT.cases()[name]
    x = np.where(np.isfinite(x), x, 1).astype(np.float32)
    g = jax.grad(lambda v: jaxmma.gpu_replay(f, rec["hlo"])(v).sum())(jnp.asarray(x))
    assert np.array_equal(np.asarray(g), np.ones_like(x))
