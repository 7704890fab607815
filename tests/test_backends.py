"""The GEMMs of ``benchmarks/same_bits.py`` give, on this backend, the bits an H100 gave.

``tests/golden/backends/h100-jax0.11.2-gemm.npz`` holds what ``same_bits.py --save``
computed with JAX 0.11.2 on an NVIDIA H100 (GPU backend, 2026-11-23): 17 families at a
ragged size, inputs with zeros, signed zeros, subnormals, infinities and NaN.
"""

import importlib.util
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden", "backends", "h100-jax0.11.2-gemm.npz")


def _same_bits():
    path = os.path.join(ROOT, "benchmarks", "same_bits.py")
    spec = importlib.util.spec_from_file_location("same_bits", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SAME_BITS = _same_bits()


def test_every_case_was_captured():
    assert set(np.load(GOLDEN).files) == set(SAME_BITS.CASES)


@pytest.mark.parametrize("name", sorted(SAME_BITS.CASES))
def test_gpu_bits_reproduced(name):
    want = np.load(GOLDEN)[name]
    got = SAME_BITS.run_case(name)
    assert got.shape == want.shape
    differ = np.flatnonzero(got != want)
    assert differ.size == 0, f"{name}: {differ.size} of {got.size} elements differ"
