"""The int32 conversions between f32, f16 and bf16 (``jaxmma.arith._int32.convert``) give
the bits of the general exact engine (``_numerics.convert_general``: a one-term sum
rounded once) and, on every finite value, the round-to-nearest-even conversions of NumPy
and ml_dtypes, an oracle outside the project."""

import itertools

import jax
import ml_dtypes
import numpy as np
import pytest

from jaxmma.arith import _int32, _numerics

EVERY_16 = np.arange(1 << 16, dtype=np.uint32)
EDGES = [
    0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF, 0x7F800001, 1, 0x80000001,
    0x7F7FFFFF, 0x477FF000, 0x477FEFFF, 0x47800000, 0x33000000, 0x33000001, 0xB3000001,
    0xB3000000, 0x387FC000, 0x387FE000, 0x00800000, 0x007FFFFF, 0x7F7F8000, 0x7F7F7FFF,
]  # fmt: skip
NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
WIDTH = {"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16}


def _f32_sample():
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 2**32, 60_000, dtype=np.uint64).astype(np.uint32)
    # exponents around the f16 / bf16 ranges, their subnormals and overflow
    e = rng.integers(90, 150, 60_000).astype(np.uint32)
    near = rng.integers(0, 2**23, 60_000).astype(np.uint32) | (e << 23)
    near |= rng.integers(0, 2, 60_000).astype(np.uint32) << 31
    return np.concatenate([raw, near, np.array(EDGES, np.uint32)])


@pytest.mark.parametrize("src,dst", list(itertools.permutations(["f32", "f16", "bf16"], 2)))
def test_int32_conversion_is_the_general_one(src, dst):
    x = _f32_sample() if src == "f32" else EVERY_16
    fast = np.asarray(jax.jit(lambda b: _int32.convert_bits(b, src, dst))(x))
    general = np.asarray(jax.jit(lambda b: _numerics.convert_general(b, src, dst))(x))
    differ = np.flatnonzero(fast != general)
    assert differ.size == 0, [hex(int(x[i])) for i in differ[:8]]
    # the public dispatcher takes the int32 path
    np.testing.assert_array_equal(np.asarray(_numerics.convert(x, src, dst)), fast)
    # NumPy / ml_dtypes: the same value and sign on every non-NaN input, canonical NaN else
    values = x.astype(WIDTH[src]).view(NUMPY[src])
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to Inf is the point
        isnan = np.isnan(values.astype(np.float32))
        want = values.astype(NUMPY[dst]).view(WIDTH[dst]).astype(np.uint32)
    np.testing.assert_array_equal(fast[~isnan], want[~isnan])
    assert np.all(fast[isnan] == _int32.CANONICAL_NAN[dst])
