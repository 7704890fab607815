"""The exact f32 multiply and fused multiply-add of ``jaxmma.arith._ieee``.

Oracles: NumPy's float64 product of two float32 values is exact (48 significant bits),
so casting it to float32 is the correctly rounded FMUL (subnormals included); FFMA is
checked against exact fractions rounded to the nearest float32 (ties to even), for both
FFMAs: the general engine's (``arith.ffma_f32``) and the int32 one of
``arith._fma32`` that the XLA:GPU function sequences chain; the two are also compared
on raw bits over a grid of special values and near-cancelling random inputs.
"""

import itertools
import math
from fractions import Fraction

import jax
import numpy as np
import pytest

from jaxmma import arith
from jaxmma.arith import _fma32

F32_MAX = Fraction(float(np.finfo(np.float32).max))
HALF_ULP_MAX = Fraction(2) ** (127 - 24)


def _inputs(n, seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    exp = rng.integers(-40, 41, n) + 127
    mod = (rng.integers(0, 2, n) << 31) | (exp << 23) | rng.integers(0, 2**23, n)
    tiny = rng.integers(0, 2**23, n) | (rng.integers(0, 30, n) << 23)  # subnormal results
    pick = rng.integers(0, 4, n)
    x = np.where(pick == 0, raw, np.where(pick == 1, tiny, mod)).astype(np.uint32)
    x[:8] = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 1, 0x7F7FFFFF, 0x00800000]
    return x


def test_fmul_is_correctly_rounded():
    x, y = _inputs(100_000, 1), _inputs(100_000, 2)
    got = np.asarray(jax.jit(arith.fmul_f32)(x, y))
    with np.errstate(all="ignore"):
        prod = x.view(np.float32).astype(np.float64) * y.view(np.float32).astype(np.float64)
        want = prod.astype(np.float32).view(np.uint32)
    nan = np.isnan(prod)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.all(got[nan] == 0x7FFFFFFF) and nan.any()
    assert np.any((want & 0x7F800000) == 0) and np.any(want == 0x80000000)  # subnormals, -0


def _short(n, seed, exps):
    """f32 bits whose significands have 13 significant bits: products of two have 25 or
    26, so a third of them are ties of the rounding to 24."""
    rng = np.random.default_rng(seed)
    sig = ((rng.integers(0, 2**12, n) | 2**12) << 11) & 0x7FFFFF
    return ((rng.integers(0, 2, n) << 31) | (rng.choice(exps, n) << 23) | sig).astype(np.uint32)


def test_fmul_ties_round_to_even_also_below_the_normal_range():
    n = 40_000
    x = _short(n, 5, np.arange(1, 255))
    y = _short(n, 6, np.concatenate([np.arange(1, 255), [0, 0, 1, 2]]))
    y[::9] = x[::9] & 0x807FFFFF  # subnormal y: products far below the normal range
    got = np.asarray(jax.jit(arith.fmul_f32)(x, y))
    with np.errstate(all="ignore"):
        prod = x.view(np.float32).astype(np.float64) * y.view(np.float32).astype(np.float64)
        want = prod.astype(np.float32)
    assert np.array_equal(got, want.view(np.uint32))
    # the cases exist: ties (the exact product halfway between two floats), ties below
    # the normal range, overflow to Inf, underflow to -0
    below = np.nextafter(np.abs(want), np.float32(0)).astype(np.float64)
    above = np.nextafter(np.abs(want), np.float32(np.inf)).astype(np.float64)
    mag = np.abs(prod)
    tie = (mag - below == np.abs(want) - mag) | (above - mag == mag - np.abs(want))
    tie &= np.isfinite(want) & (mag != np.abs(want))
    assert tie.sum() > 1000 and (tie & (np.abs(want) < 2.0**-126)).sum() > 10
    assert np.isinf(want).any() and (got == 0x80000000).any()


def test_fmul_specials():
    inf, nan, one, zero = 0x7F800000, 0x7FC00001, 0x3F800000, 0
    tiny, neg = 1, 0x80000000  # the least subnormal; the sign bit
    got = np.asarray(arith.fmul_f32(
        np.array([inf, zero | neg, nan, inf, tiny, tiny | neg, 0x7F7FFFFF, one], np.uint32),
        np.array([zero, inf, one, one | neg, tiny, 0x3F000000, 0x40000000, zero | neg], np.uint32),
    ))  # fmt: skip
    assert got.tolist() == [0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, inf | neg, 0, neg, inf, neg]


def _round_f32(exact: Fraction, neg_zero: bool) -> int:
    if exact == 0:
        return 0x80000000 if neg_zero else 0
    if abs(exact) >= F32_MAX + HALF_ULP_MAX:
        return 0x7F800000 if exact > 0 else 0xFF800000
    c = np.float32(float(exact))
    cands = [c, np.nextafter(c, np.float32(np.inf)), np.nextafter(c, np.float32(-np.inf))]
    cands = [v for v in cands if np.isfinite(v)]
    best = min(
        cands,
        key=lambda v: (abs(Fraction(float(v)) - exact), int(np.float32(v).view(np.uint32)) & 1),
    )
    return int(np.float32(best).view(np.uint32))


FFMAS = {"engine": arith.ffma_f32, "int32": _fma32.ieee_fma_f32}


@pytest.mark.parametrize("fma", FFMAS)
@pytest.mark.parametrize("seed", [3, 4])
def test_ffma_rounds_once(seed, fma):
    n = 3000
    x, y, z = _inputs(n, seed), _inputs(n, seed + 10), _inputs(n, seed + 20)
    # near-cancellation: z close to -x*y for a third of the cases
    with np.errstate(all="ignore"):
        p = (x.view(np.float32).astype(np.float64) * y.view(np.float32).astype(np.float64)).astype(
            np.float32
        )
    z[::3] = (-p[::3]).view(np.uint32)
    got = np.asarray(jax.jit(FFMAS[fma])(x, y, z))
    checked = 0
    for i in range(n):
        xf, yf, zf = (float(a[i : i + 1].view(np.float32)[0]) for a in (x, y, z))
        if not all(np.isfinite(v) for v in (xf, yf, zf)):
            continue
        exact = Fraction(xf) * Fraction(yf) + Fraction(zf)
        zero_prod = xf == 0 or yf == 0
        neg_prod = math.copysign(1, xf) * math.copysign(1, yf) < 0
        neg_zero = zero_prod and neg_prod and math.copysign(1, zf) < 0
        assert int(got[i]) == _round_f32(exact, neg_zero), (hex(x[i]), hex(y[i]), hex(z[i]))
        checked += 1
    assert checked > n // 2


@pytest.mark.parametrize("fma", FFMAS)
def test_ffma_specials(fma):
    inf, nan = 0x7F800000, 0x7FC00000
    one, zero = 0x3F800000, 0
    got = np.asarray(FFMAS[fma](
        np.array([inf, inf, one, nan, inf], np.uint32),
        np.array([zero, one, one, one, one], np.uint32),
        np.array([one, 0xFF800000, inf, one, one], np.uint32),
    ))  # fmt: skip
    assert got.tolist() == [0x7FFFFFFF, 0x7FFFFFFF, inf, 0x7FFFFFFF, inf]


SPECIAL = [0, 1, 0x7FFFFF, 0x800000, 0x3F800000, 0x3F000000, 0x7F7FFFFF, 0x7F800000]
SPECIAL += [0x7FC00000, 0x7F800001, 0x400000, 0x33800000, 0x1F800000, 0x5F800000]


def test_int32_ffma_matches_the_engine_on_raw_bits():
    """Every sign of a grid of zeros, subnormals, extremes, Inf and NaN, and random
    inputs half of which nearly cancel, also with ``jax_enable_x64`` on: the same bits."""
    grid = SPECIAL + [v | 0x80000000 for v in SPECIAL]
    gx, gy, gz = (
        np.array(v, np.uint32) for v in zip(*itertools.product(grid, grid, grid), strict=True)
    )
    n = 100_000
    x, y, z = _inputs(n, 7), _inputs(n, 8), _inputs(n, 9)
    with np.errstate(all="ignore"):
        p = x.view(np.float32).astype(np.float64) * y.view(np.float32).astype(np.float64)
        p, q = p.astype(np.float32), (p * (1 + 2.0**-20)).astype(np.float32)
    z[::2] = (-p[::2]).view(np.uint32)  # cancels to its last bits
    z[1::4] = q[1::4].view(np.uint32)
    x, y, z = (np.concatenate([g, v]) for g, v in ((gx, x), (gy, y), (gz, z)))
    want = np.asarray(jax.jit(arith.ffma_f32)(x, y, z))
    got = np.asarray(jax.jit(_fma32.ieee_fma_f32)(x, y, z))
    assert np.array_equal(got, want), np.count_nonzero(got != want)
    with jax.enable_x64(True):
        got64 = np.asarray(jax.jit(_fma32.ieee_fma_f32)(x, y, z))
    assert np.array_equal(got64, want)
    # the cases exist: exact cancellation to +0, -0 from two negative zeros, subnormal
    # and Inf results, NaN
    assert (want == 0).sum() > 100 and (want == 0x80000000).any()
    assert ((want & 0x7F800000) == 0).sum() > 1000 and (want == 0xFF800000).any()
    assert (want == 0x7FFFFFFF).sum() > 100
