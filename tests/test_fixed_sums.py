"""The fixed-width engine's three-part block sum (blocks of 32 products: two int32 groups
and C) rounds as the general multi-limb sum does, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmma.arith import _fixed, _numerics

MODELS = {
    "f32-rz": ("f32", _numerics.BlockModel(F=25, L=32, e_zero_f32=-133, e_zero_f16=-21)),
    "f16-rn": ("f16", _numerics.BlockModel(F=25, L=32, e_zero_f32=-133, e_zero_f16=-21)),
    "e8m13": (
        "f32",
        _numerics.BlockModel(F=13, L=32, e_zero_f32=-133, e_zero_f16=-21, f32_mantissa=13),
    ),
}


def _parts(rng, n, case):
    big = lambda: rng.integers(-(2**31) + 1, 2**31, n, dtype=np.int64)  # noqa: E731
    if case == "random":
        p = [big(), big(), big()]
    elif case == "small_c":
        p = [big(), big(), rng.integers(-5, 5, n)]
    elif case == "extremes":  # the sum needs all 33 bits
        p = [np.full(n, 2**31 - 1), np.full(n, 2**31 - 1), big()]
        p = [x * rng.choice([-1, 1], n) if i < 2 else x for i, x in enumerate(p)]
    else:  # cancellation to small and zero sums
        a = big()
        p = [a, -a, rng.integers(-3, 4, n)]
    return [np.asarray(x, np.int64) for x in p]


@pytest.mark.parametrize("case", ["random", "small_c", "extremes", "cancel"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_three_part_rounding_matches_the_general_sum(case, model):
    rng = np.random.default_rng(abs(hash((case, model))) % 2**32)
    n = 100_000
    p64 = _parts(rng, n, case)
    parts = [jnp.asarray(x.astype(np.int32)) for x in p64]
    unit = jnp.asarray(rng.integers(-180, 120, n).astype(np.int32))
    dtype, bm = MODELS[model]
    neg, mag, shift = jax.jit(_fixed.sum_three)(*parts)
    total = sum(p64)  # exact in int64, independent of the engine
    np.testing.assert_array_equal(np.asarray(neg), total < 0)
    m, s = np.asarray(mag, np.int64), np.asarray(shift)
    t = np.abs(total)
    np.testing.assert_array_equal(s, (t >= 2**32).astype(s.dtype))  # 33 bits: one shifted out
    np.testing.assert_array_equal(m, np.where(s == 0, t, (t >> 1) | (t & 1)))  # sticky bit
    fast = _fixed.round_sum(neg, mag, unit + shift, dtype, bm)
    slow = _numerics.round_block(*_fixed._sum_parts(parts), unit, dtype, bm)
    np.testing.assert_array_equal(np.asarray(fast), np.asarray(slow))
