"""Raw-bit comparisons the policy tests share."""

import jax
import numpy as np


def bits(x):
    """``x`` viewed as unsigned integers of its own width (raw bits)."""
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def same(a, b):
    """Two pytrees with the same leaves: dtype, shape and raw bits."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(bits(x), bits(y))
