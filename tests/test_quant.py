"""Tests of jaxmma.operands._quant (MX and NVFP4 block quantization).

The oracle is exact rational arithmetic (``fractions.Fraction``) written here from the
recipes of ``docs/block_scaling.md``: the OCP MX shared exponent and the NVIDIA
round-up / nearest variants, NVIDIA's NVFP4 two-level scales, round-to-nearest-even and
stochastic rounding of the elements. Element bits come from ml_dtypes, not from jaxmma.
"""

from __future__ import annotations

import dataclasses
import doctest
import inspect
import math
import pathlib
import re
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _suite import params

import jaxmma
from jaxmma import operands
from jaxmma.instructions import _mma
from jaxmma.operands import _quant as Q

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "block_scaling.md"

# format -> (exponent of the smallest normal, mantissa bits, max finite, overflow result)
GRID = {
    "e4m3": (-6, 3, Fraction(448), "nan"),
    "e5m2": (-14, 2, Fraction(57344), "inf"),
    "e3m2": (-2, 2, Fraction(28), "max"),
    "e2m3": (0, 3, Fraction(15, 2), "max"),
    "e2m1": (0, 1, Fraction(6), "max"),
    "ue4m3": (-6, 3, Fraction(448), "nan"),
    "f32": (-126, 23, Fraction(2**24 - 1, 2**23) * 2**127, "inf"),
}
EMAX = {"e4m3": 8, "e5m2": 15, "e3m2": 4, "e2m3": 2, "e2m1": 2}  # OCP MX Table 1
ML = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
}


def ilog2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > a else e


def frac(x) -> Fraction:
    return Fraction(float(x))


def round_grid(fmt, q: Fraction, mode: str, r: int = 0, saturate: bool = True):
    """|q| rounded onto fmt: returns (Fraction magnitude, or 'nan'/'inf'/'max' on overflow).

    mode: 'rn' (ties to even), 'rz', 'rp' (up in magnitude), 'sr' (stochastic with the
    uint32 r: the top 32 bits of the dropped fraction, sticky ORed in, plus r, carry up).
    """
    emin, m, mx, over = GRID[fmt]
    a = abs(q)
    if a == 0:
        return Fraction(0)
    ulp = Fraction(2) ** (max(ilog2(a), emin) - m)
    n, rem = divmod(a, ulp)
    n = int(n)
    if mode == "rn":
        up = 2 * rem > ulp or (2 * rem == ulp and n % 2 == 1)
        away = True
    elif mode == "rz":
        up = away = False
    elif mode == "rp":
        up = away = rem > 0
    else:
        scaled = rem / ulp * 2**32
        top = int(scaled) | (scaled != int(scaled))
        up = away = top + r >= 2**32
    v = (n + up) * ulp
    if v > mx:
        if saturate or not away or over == "max":
            return mx
        return over
    return v


def element_bits(fmt, v, negative: bool) -> int:
    """Bits of a rounded magnitude (or 'nan'/'inf') via ml_dtypes."""
    if v == "nan":
        f = math.nan
    elif v == "inf":
        f = math.inf
    else:
        f = float(v)
    f = -f if negative else f
    bits = int(np.array([f], np.float32).astype(ML[fmt]).view(np.uint8)[0])
    if v == "nan" and negative:
        bits |= 0x80
    return bits


def f32_rn(x: Fraction) -> int:
    """f32 bits of x rounded to nearest even (subnormals, overflow to Inf)."""
    v = round_grid("f32", x, "rn", saturate=False)
    if v == "inf":
        return 0x7F800000 | ((x < 0) << 31)
    return int(np.array([float(v) * (-1 if x < 0 else 1)], np.float32).view(np.uint32)[0])


def ue8m0_exponent(amax: Fraction, fmt: str, how: str) -> int:
    if amax == 0:
        return -127
    if how == "floor":  # OCP MX: floor(log2(amax)) - emax_elem
        e = ilog2(amax) - EMAX[fmt]
    else:
        q = amax / GRID[fmt][2]
        e = ilog2(q)
        if how == "ceil" and Fraction(2) ** e < q:
            e += 1
        if how == "nearest" and q >= Fraction(3, 2) * Fraction(2) ** e:
            e += 1
    return max(-127, min(127, e))


def oracle_mx(x, fmt, how, rounding="rn", rbits=None, saturate=True):
    """x: float32 [nb, block] (block axis last) -> (element bits, scale bits)."""
    el = np.zeros(x.shape, np.uint32)
    sc = np.zeros(x.shape[0], np.uint32)
    for i, row in enumerate(x):
        if not np.all(np.isfinite(row)):
            sc[i] = 0xFF
            el[i] = 0xFFFFFFFF  # not compared
            continue
        e = ue8m0_exponent(max(abs(frac(v)) for v in row), fmt, how)
        sc[i] = e + 127
        for j, v in enumerate(row):
            q = frac(v) / Fraction(2) ** e
            mode = "rn" if rounding == "rn" else "sr"
            r = int(rbits[i, j]) if rbits is not None else 0
            el[i, j] = element_bits(fmt, round_grid(fmt, q, mode, r, saturate), np.signbit(v))
    return el, sc


def global_scale(x) -> Fraction:
    vals = [abs(frac(v)) for v in np.ravel(x) if np.isfinite(v)]
    amax = max(vals, default=Fraction(0))
    if amax == 0:
        return Fraction(1)
    g = round_grid("f32", amax / 2688, "rn")
    return g if g != 0 else Fraction(2) ** -149


def ue4m3_value(bits: int) -> Fraction:
    return frac(np.array([bits & 0x7F], np.uint8).view(ml_dtypes.float8_e4m3fn)[0])


def oracle_nvfp4(x, g: Fraction, how, rounding="rn", rbits=None):
    el = np.zeros(x.shape, np.uint32)
    sc = np.zeros(x.shape[0], np.uint32)
    smode = {"nearest": "rn", "ceil": "rp", "floor": "rz"}[how]
    for i, row in enumerate(x):
        if not np.all(np.isfinite(row)):
            sc[i] = 0x7F
            el[i] = 0xFFFFFFFF
            continue
        amax = max(abs(frac(v)) for v in row)
        s = round_grid("ue4m3", amax / (6 * g), smode, saturate=True)
        sc[i] = element_bits("e4m3", s, False)
        s = ue4m3_value(int(sc[i]))
        for j, v in enumerate(row):
            if s == 0:
                el[i, j] = 0
                continue
            mode = "rn" if rounding == "rn" else "sr"
            r = int(rbits[i, j]) if rbits is not None else 0
            q = round_grid("e2m1", frac(v) / (s * g), mode, r)
            el[i, j] = element_bits("e2m1", q, np.signbit(v))
    return el, sc


def sample(rng, nblocks, block, grid_max=6.0):
    """Blocks of many kinds: random scales of magnitude, amax exactly max * 2**k, exact
    midpoints, f32 subnormals, zero blocks, NaN and Inf."""
    x = np.zeros((nblocks, block), np.float32)
    for i in range(nblocks):
        base = float(2.0 ** rng.integers(-40, 40))
        kind = i % 8
        if kind == 0:
            x[i] = rng.standard_normal(block) * base
        elif kind == 1:
            x[i] = np.sign(rng.standard_normal(block)) * 2.0 ** rng.uniform(-14, 0, block) * base
        elif kind == 2:
            x[i] = rng.standard_normal(block) * base
            x[i, rng.integers(block)] = grid_max * base
        elif kind == 3:  # midpoints of a coarse grid: ties
            x[i] = (rng.integers(-16, 17, block) + 0.5) * base / 4
        elif kind == 4:
            x[i] = rng.standard_normal(block) * 2.0**-140
        elif kind == 5:
            x[i] = 0.0
            x[i, 0] = -0.0
        elif kind == 6:
            x[i] = rng.standard_normal(block) * base
            x[i, rng.integers(block)] = (np.nan, np.inf, -np.inf)[rng.integers(3)]
        else:
            x[i] = rng.standard_normal(block) * float(2.0 ** rng.integers(-130, 120))
    return x


def check_bits(q, el, sc):
    got_el = np.asarray(q.elements)
    keep = el != 0xFFFFFFFF
    np.testing.assert_array_equal(np.asarray(q.scales).reshape(sc.shape), sc)
    np.testing.assert_array_equal(got_el[keep], el[keep])


# ---------------------------------------------------------------------------------------
# MX
@pytest.mark.parametrize("how", Q.SCALE_ROUNDINGS)
@pytest.mark.parametrize("fmt", Q.MX_FORMATS)
def test_mx_matches_the_oracle(fmt, how):
    rng = np.random.default_rng(hash((fmt, how)) % 2**32)
    x = sample(rng, 16, 32, float(GRID[fmt][2]))
    q = Q.quantize_mx(jnp.asarray(x), fmt, scale_rounding=how)
    assert (q.fmt, q.scale_fmt, q.block, q.axis) == (fmt, "ue8m0", 32, -1)
    check_bits(q, *oracle_mx(x, fmt, how))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_mx_without_saturation(fmt):
    # the OCP floor scale leaves amax / scale up to 2**(emax + 1) > max finite
    rng = np.random.default_rng(3)
    x = sample(rng, 8, 32, float(GRID[fmt][2]))
    x[0, 0] = float(GRID[fmt][2]) * 1.9  # above max finite after scaling
    q = Q.quantize_mx(jnp.asarray(x), fmt, saturate=False)
    check_bits(q, *oracle_mx(x, fmt, "floor", saturate=False))


def test_mx_stochastic_matches_the_oracle():
    rng = np.random.default_rng(5)
    key = jax.random.key(11)
    for fmt in ("e4m3", "e2m1"):
        x = sample(rng, 8, 32)
        q = Q.quantize_mx(jnp.asarray(x), fmt, rounding="stochastic", key=key)
        rbits = np.asarray(jax.random.bits(key, x.shape, jnp.uint32))
        check_bits(q, *oracle_mx(x, fmt, "floor", "stochastic", rbits))


def test_mx_other_axis_and_block():
    # B of a matrix product is blocked along axis -2 (K); a sparse k64 form has block 64
    rng = np.random.default_rng(8)
    x = sample(rng, 8, 64).T.copy()  # [64, 8]
    q = Q.quantize_mx(jnp.asarray(x), "e5m2", axis=0, block=64, scale_rounding="ceil")
    assert q.axis == -2 and q.scales.shape == (1, 8)
    el, sc = oracle_mx(x.T, "e5m2", "ceil")
    np.testing.assert_array_equal(np.asarray(q.scales)[0], sc)
    keep = el != 0xFFFFFFFF
    np.testing.assert_array_equal(np.asarray(q.elements).T[keep], el[keep])


def test_shared_exponent_rules():
    # amax = 448 * 2**3: OCP floor(log2(3584)) - 8 = 11 - 8 = 3; ceil: 3584 / 448 = 8 -> 3
    # amax = 449 * 2**3: floor 3; ceil 4 (449/448 > 1); nearest 3
    # amax = 1.5 * 448: nearest rounds the tie up (2**1); amax = 0 -> -127
    amax = jnp.array([3584.0, 3592.0, 672.0, 0.0, 2.0**-149], jnp.float32)
    got = {h: Q.shared_exponent(amax, "e4m3", h).tolist() for h in Q.SCALE_ROUNDINGS}
    assert got["floor"] == [3, 3, 1, -127, -127]
    assert got["ceil"] == [3, 4, 1, -127, -127]
    assert got["nearest"] == [3, 3, 1, -127, -127]
    assert Q.shared_exponent(jnp.float32(3e38), "e2m1", "floor").tolist() == 125


# ---------------------------------------------------------------------------------------
# NVFP4
@pytest.mark.parametrize("how", Q.SCALE_ROUNDINGS)
def test_nvfp4_matches_the_oracle(how):
    rng = np.random.default_rng(21 + len(how))
    x = sample(rng, 16, 16)
    q = Q.quantize_nvfp4(jnp.asarray(x), scale_rounding=how)
    g = global_scale(x)
    assert frac(q.global_scale) == g
    assert (q.fmt, q.scale_fmt, q.block) == ("e2m1", "ue4m3", 16)
    check_bits(q, *oracle_nvfp4(x, g, how))


def test_nvfp4_given_global_scale_and_stochastic():
    rng = np.random.default_rng(4)
    x = sample(rng, 8, 16)
    key = jax.random.key(3)
    g = np.float32(0.0123)
    q = Q.quantize_nvfp4(jnp.asarray(x), global_scale=g, rounding="stochastic", key=key)
    rbits = np.asarray(jax.random.bits(key, x.shape, jnp.uint32))
    check_bits(q, *oracle_nvfp4(x, frac(g), "nearest", "stochastic", rbits))


def test_nvfp4_global_scale():
    # 2688 * 1.5 -> 1.5; the recipe's amax / (6 * 448) rounded to nearest f32
    assert float(Q.nvfp4_global_scale(jnp.array([1.0, -4032.0, np.inf]))) == 1.5
    x = np.float32(1000.0)
    assert frac(Q.nvfp4_global_scale(jnp.array([x]))) == round_grid("f32", frac(x) / 2688, "rn")
    assert float(Q.nvfp4_global_scale(jnp.zeros(4))) == 1.0
    assert float(Q.nvfp4_global_scale(jnp.array([2.0**-149]))) == 2.0**-149


# ---------------------------------------------------------------------------------------
# Stochastic rounding, dequantization
def test_stochastic_is_reproducible_and_unbiased():
    x = jnp.asarray(np.linspace(-5.7, 5.9, 32, dtype=np.float32).reshape(1, 32))
    key = jax.random.key(0)
    q1 = Q.quantize_mx(x, "e2m1", rounding="stochastic", key=key)
    q2 = Q.quantize_mx(x, "e2m1", rounding="stochastic", key=key)
    np.testing.assert_array_equal(np.asarray(q1.elements), np.asarray(q2.elements))
    q3 = Q.quantize_mx(x, "e2m1", rounding="stochastic", key=jax.random.key(1))
    assert not np.array_equal(np.asarray(q1.elements), np.asarray(q3.elements))

    def one(k):
        return Q.dequantize(Q.quantize_mx(x, "e2m1", rounding="stochastic", key=k))

    n = 4000
    vals = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(2), n)))
    # every draw is one of the two neighbours; the mean is x within 5 standard errors
    # (variance <= ulp**2 / 4 with ulp <= 2 here)
    err = np.abs(vals.mean(axis=0) - np.asarray(x))
    assert np.all(err <= 5 * 1.0 / np.sqrt(n)), err.max()
    assert np.all(np.abs(vals - np.asarray(x)) < 2.0)
    rn = np.asarray(Q.dequantize(Q.quantize_mx(x, "e2m1")))
    assert np.abs(vals.mean(axis=0) - x).mean() < 0.2 * np.abs(rn - x).mean()


@pytest.mark.parametrize("fmt", [*Q.MX_FORMATS, "nvfp4"])
def test_dequantize_is_exact_and_a_fixed_point(fmt):
    rng = np.random.default_rng(9)
    x = sample(rng, 8, 32 if fmt != "nvfp4" else 16)
    quant = (lambda v: Q.quantize_nvfp4(v)) if fmt == "nvfp4" else (lambda v: Q.quantize_mx(v, fmt))
    q = quant(jnp.asarray(x))
    d = np.asarray(Q.dequantize(q))
    g = frac(q.global_scale) if q.global_scale is not None else Fraction(1)
    el, sc = np.asarray(q.elements), np.asarray(q.scales)[:, 0]
    efmt = "e2m1" if fmt == "nvfp4" else fmt
    for i in range(x.shape[0]):
        if sc[i] in (0xFF, 0x7F):
            assert np.all(np.isnan(d[i]))
            continue
        s = ue4m3_value(int(sc[i])) if fmt == "nvfp4" else Fraction(2) ** (int(sc[i]) - 127)
        for j in range(x.shape[1]):
            e = frac(np.array([el[i, j]], np.uint8).view(ML[efmt])[0])
            assert int(d[i, j : j + 1].view(np.uint32)[0]) == f32_rn(e * s * g) or e == 0
    if fmt == "nvfp4":  # e2m1 * s * g is rounded: not a grid of the next quantization
        return
    # MX values (exact) quantize to themselves, with the same OCP floor scales
    d_fin = np.where(np.isfinite(d), d, 0.0).astype(np.float32)
    q2 = quant(jnp.asarray(d_fin))
    np.testing.assert_array_equal(
        np.asarray(Q.dequantize(q2)).view(np.uint32), d_fin.view(np.uint32)
    )
    finite = sc != 0xFF
    np.testing.assert_array_equal(np.asarray(q2.scales)[finite, 0], sc[finite])
    np.testing.assert_array_equal(np.asarray(q2.elements)[finite], el[finite])


def test_dequantize_signed_zero_and_nan():
    q = Q.quantize_mx(jnp.array([-0.0, 0.0, 1.0, np.nan]), "e4m3", block=2)
    d = np.asarray(Q.dequantize(q))
    assert np.signbit(d[0]) and not np.signbit(d[1])
    assert np.all(np.isnan(d[2:]))  # the block with NaN has a NaN scale


# ---------------------------------------------------------------------------------------
# Agreement with jax.nn.scaled_dot_general's quantization
def jax_quantize(x, config):
    from jax._src.cudnn.scaled_matmul_stablehlo import quantize

    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        return quantize(jnp.asarray(x), config)


def test_agrees_with_jax_nn_mxfp8():
    # jax.nn.get_scaled_dot_general_config('mxfp8'): e4m3, blocks of 32, scale =
    # amax / 448 rounded *up* to a power of two (cast_to_e8m0_with_rounding_up on the
    # float32 quotient), elements x / scale clipped to +-448 and cast to nearest even.
    # That is quantize_mx(scale_rounding="ceil"): the float32 quotient amax / 448 never
    # rounds onto a power of two from above (448 = 7 * 2**6), so both take the same
    # ceiling, for amax in the normal range (amax >= 448 * 2**-126).
    rng = np.random.default_rng(12)
    x = sample(rng, 16, 32)[[0, 1, 2, 3, 8, 9, 10, 11]].reshape(4, 64)
    cfg = jax.nn.get_scaled_dot_general_config("mxfp8")
    xq, sq = jax_quantize(x[None], cfg)
    q = Q.quantize_mx(jnp.asarray(x), "e4m3", scale_rounding="ceil")
    np.testing.assert_array_equal(np.asarray(q.elements), np.asarray(xq[0]).view(np.uint8))
    np.testing.assert_array_equal(np.asarray(q.scales), np.asarray(sq[0]).view(np.uint8))


@pytest.mark.parametrize("g", [1.0, 2.0**-10, 2.0**6])
def test_agrees_with_jax_nn_nvfp4(g):
    # jax.nn.get_scaled_dot_general_config('nvfp4', global_scale): x / g, then the e4m3
    # scale = amax / 6 cast to nearest (clipped to 448), elements x / scale cast to e2m1
    # (nearest even, clipped to 6). With a power-of-two g every float32 step is exact or
    # cannot cross an e4m3 / e2m1 rounding boundary, so it equals the exact quotients of
    # quantize_nvfp4(scale_rounding="nearest"). Blocks whose scale rounds to 0 are left
    # out: JAX divides them by zero (0 / 0 is NaN), quantize_nvfp4 gives +0.
    rng = np.random.default_rng(13)
    x = np.concatenate(
        [
            rng.standard_normal((12, 16)) * 2.0 ** rng.integers(-5, 8, (12, 1)),
            (rng.integers(-12, 13, (4, 16)) + 0.5) / 2.0 ** rng.integers(-2, 4, (4, 1)),
        ]
    ).astype(np.float32)
    x[0, 3] = 6 * 448.0  # the largest scale
    x[1, 0] = 6 * 2.0**-9 * 0.75  # a subnormal scale
    x = x * np.float32(g)
    gs = jnp.array([g], jnp.float32)
    xq, sq = jax_quantize(x[None], jax.nn.get_scaled_dot_general_config("nvfp4", gs))
    q = Q.quantize_nvfp4(jnp.asarray(x), global_scale=g)
    np.testing.assert_array_equal(np.asarray(q.elements), np.asarray(xq[0]).view(np.uint8))
    np.testing.assert_array_equal(np.asarray(q.scales), np.asarray(sq[0]).view(np.uint8))


# ---------------------------------------------------------------------------------------
# Quantized operands in block-scaled mma
def forms(kind, scale_vec=None, sparse=False):
    return [
        i
        for i in jaxmma.all_instructions("mma")
        if i.kind == kind
        and (scale_vec is None or i.form.scale_vec == scale_vec)
        and bool(i.sparse) == sparse
    ]


def exact_dot(qa, qb, c):
    """RN_f32 of sum_k dequantized a * b (exact products of the quantized values) + c."""
    A = np.asarray(Q.dequantize(qa)).astype(np.float64)
    B = np.asarray(Q.dequantize(qb)).astype(np.float64)
    out = np.zeros((A.shape[0], B.shape[1]), np.uint32)
    for m in range(A.shape[0]):
        for n in range(B.shape[1]):
            s = sum((Fraction(A[m, k]) * Fraction(B[k, n]) for k in range(A.shape[1])), frac(c))
            out[m, n] = f32_rn(s)
    return out


CASES = [
    ("mxf8f6f4", None, "e4m3", "e2m3", False),
    ("mxf8f6f4", None, "e2m1", "e5m2", False),
    ("mxf4", "2X", "e2m1", "e2m1", False),
    ("mxf4nvf4", "2X", "e2m1", "e2m1", False),
    ("mxf4nvf4", "4X", "e2m1", "e2m1", False),
    ("mxf4nvf4", "4X", "e2m1", "e2m1", True),
    ("mxf8f6f4", None, "e3m2", "e4m3", True),
]


def quantized_pair(kind, scale_vec, a, b, sparse, seed=31):
    (ins,) = [i for i in forms(kind, scale_vec, sparse) if (i.atype, i.btype) == (a, b)]
    block = operands.block_size(ins)

    def quant(x, fmt, axis):
        if ins.stype == "ue4m3":
            return Q.quantize_nvfp4(x, axis=axis, block=block, global_scale=1.0)
        return Q.quantize_mx(x, fmt, axis=axis, block=block)

    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.standard_normal((16, ins.k)).astype(np.float32))
    Y = jnp.asarray(rng.standard_normal((ins.k, 8)).astype(np.float32))
    if sparse:
        X = operands.prune(ins, X)
    return ins, quant(X, a, -1), quant(Y, b, -2)


@pytest.mark.parametrize(
    "kind,scale_vec,a,b,sparse",
    # the quick run: one case of each kind and sparsity
    params(CASES, lambda c: (c[0], c[4]), salt="as_operands", ids=lambda c: "-".join(map(str, c))),
)
def test_as_operands_encodes_the_operands(kind, scale_vec, a, b, sparse):
    ins, qa, qb = quantized_pair(kind, scale_vec, a, b, sparse)
    A, B, SA, SB = operands.as_operands(ins, qa, qb)
    # 9.7.14.5.14: kind::mxf8f6f4 holds e2m1 in bits [5:2] of a byte, 6-bit types in [5:0];
    # kind::mxf4* takes packed e2m1 nibbles (one per element at the matrix level)
    shift = {"e2m1": 2}.get(a, 0) if kind == "mxf8f6f4" else 0
    np.testing.assert_array_equal(np.asarray(A), np.asarray(qa.elements) << shift)
    shift = {"e2m1": 2}.get(b, 0) if kind == "mxf8f6f4" else 0
    np.testing.assert_array_equal(np.asarray(B), np.asarray(qb.elements) << shift)
    (ma, na), (mb, nb) = operands.scale_shapes(ins)
    assert SA.shape == (ma, na) and SB.shape == (mb, nb)
    np.testing.assert_array_equal(np.asarray(SA), np.asarray(qa.scales))
    np.testing.assert_array_equal(np.asarray(SB), np.asarray(qb.scales))
    sa, sb = operands.scales_from_matrices(ins, qa, qb)  # the quantized operands directly
    np.testing.assert_array_equal(np.asarray(sa), np.asarray(SA))
    np.testing.assert_array_equal(np.asarray(sb), np.asarray(SB))


@pytest.mark.parametrize("case", [CASES[1], CASES[4]])
def test_quantized_operands_give_the_exact_product(case):
    # model="exact" of the emulated mma == the exact dot product of the dequantized values
    ins, qa, qb = quantized_pair(*case)
    A, B, SA, SB = operands.as_operands(ins, qa, qb)
    C = jnp.zeros((16, 8), jnp.float32)
    mma = jax.jit(lambda *o: ins.mma(*o[:3], scale_a=o[3], scale_b=o[4], model="exact"))
    D = mma(A, B, C, SA, SB)
    np.testing.assert_array_equal(np.asarray(D).view(np.uint32), exact_dot(qa, qb, 0.0))


def test_as_operands_checks_the_configuration():
    (ins,) = forms("mxf4nvf4", "4X")
    X = jnp.ones((16, 64), jnp.float32)
    Y = jnp.ones((64, 8), jnp.float32)
    good_a, good_b = Q.quantize_nvfp4(X), Q.quantize_nvfp4(Y, axis=0)
    with pytest.raises(ValueError, match="scale format 'ue4m3', got 'ue8m0'"):
        operands.as_operands(ins, Q.quantize_mx(X, "e2m1", block=16), good_b)
    with pytest.raises(ValueError, match=r"qb: .*axis -2, got -1"):
        operands.as_operands(ins, good_a, dataclasses.replace(good_b, axis=-1))
    with pytest.raises(ValueError, match="block 16, got 32"):
        operands.as_operands(ins, dataclasses.replace(good_a, block=32), good_b)
    with pytest.raises(TypeError, match="qb: expected a Quantized"):
        operands.as_operands(ins, good_a, Y)
    with pytest.raises(ValueError, match="element format 'e2m1', got 'e4m3'"):
        operands.scales_from_matrices(ins, Q.quantize_mx(X, "e4m3", block=16), good_b)
    A, B, kw = operands.scaled_matrix_operands(ins, good_a, Y, {"scale_b": good_b.scales})
    assert A.shape == (16, 64) and B is Y and set(kw) == {"scale_a", "scale_b"}
    with pytest.raises(ValueError, match="scale_a: given together"):
        operands.scaled_matrix_operands(ins, good_a, Y, {"scale_a": good_a.scales})


@pytest.mark.skipif(
    "_scaling.matrix_operands" not in inspect.getsource(_mma.matrix_mma),
    reason="needs the _mma.matrix_mma hook (_scaling.matrix_operands)",
)
def test_mma_takes_quantized_operands():
    (ins,) = forms("mxf4nvf4", "4X")
    rng = np.random.default_rng(2)
    qa = Q.quantize_nvfp4(jnp.asarray(rng.standard_normal((16, 64)).astype(np.float32)))
    qb = Q.quantize_nvfp4(jnp.asarray(rng.standard_normal((64, 8)).astype(np.float32)), axis=0)
    C = jnp.zeros((16, 8), jnp.float32)
    A, B, SA, SB = operands.as_operands(ins, qa, qb)
    want = ins.mma(A, B, C, scale_a=SA, scale_b=SB)
    np.testing.assert_array_equal(np.asarray(ins.mma(qa, qb, C)), np.asarray(want))
    got = jax.jit(lambda qa, qb: ins.mma(qa, qb, C))(qa, qb)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_doc_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/block_scaling.md block {i}", "exec"), {})


# ---------------------------------------------------------------------------------------
# Transformations and argument checks
def test_pytree_jit_and_vmap():
    rng = np.random.default_rng(6)
    x = jnp.asarray(sample(rng, 6, 32).reshape(3, 2, 32))
    q = Q.quantize_mx(x, "e3m2")
    leaves, tree = jax.tree.flatten(q)
    assert len(leaves) == 2
    back = jax.tree.unflatten(tree, leaves)
    assert (back.fmt, back.scale_fmt, back.block, back.axis) == ("e3m2", "ue8m0", 32, -1)
    qj = jax.jit(lambda v: Q.quantize_mx(v, "e3m2"))(x)
    qv = jax.vmap(lambda v: Q.quantize_mx(v, "e3m2"))(x)
    for other in (qj, qv):
        assert (other.fmt, other.axis, other.block) == ("e3m2", -1, 32)
        np.testing.assert_array_equal(np.asarray(other.elements), np.asarray(q.elements))
        np.testing.assert_array_equal(np.asarray(other.scales), np.asarray(q.scales))
    dj = jax.jit(Q.dequantize)(q)
    np.testing.assert_array_equal(np.asarray(dj), np.asarray(Q.dequantize(q)))
    n = jax.jit(lambda v: Q.quantize_nvfp4(v, block=32))(x)
    assert n.global_scale.shape == () and len(jax.tree.leaves(n)) == 3
    # per-example NVFP4 under vmap: one global scale per example, dequantized outside
    nv = jax.vmap(lambda v: Q.quantize_nvfp4(v, block=32))(x)
    assert nv.global_scale.shape == (3,)
    each = [Q.dequantize(Q.quantize_nvfp4(x[i], block=32)) for i in range(3)]
    np.testing.assert_array_equal(np.asarray(Q.dequantize(nv)), np.stack(each))


def test_argument_errors():
    x = jnp.ones((4, 32), jnp.float32)
    with pytest.raises(ValueError, match="fmt: expected one of"):
        Q.quantize_mx(x, "e4m3fn")
    with pytest.raises(ValueError, match="not a multiple of block=32"):
        Q.quantize_mx(x, "e4m3", axis=0)
    with pytest.raises(ValueError, match="axis: 2 is out of range"):
        Q.quantize_mx(x, "e4m3", axis=2)
    with pytest.raises(ValueError, match="block: expected a positive int"):
        Q.quantize_mx(x, "e4m3", block=0)
    with pytest.raises(ValueError, match="scale_rounding"):
        Q.quantize_mx(x, "e4m3", scale_rounding="up")
    with pytest.raises(ValueError, match="key: rounding='stochastic' needs"):
        Q.quantize_mx(x, "e4m3", rounding="stochastic")
    with pytest.raises(ValueError, match="key: only used"):
        Q.quantize_nvfp4(x, key=jax.random.key(0))
    with pytest.raises(TypeError, match="x: expected float32"):
        Q.quantize_mx(x.astype(jnp.int32), "e4m3")
    with pytest.raises(ValueError, match="global_scale: expected a scalar"):
        Q.quantize_nvfp4(x, global_scale=jnp.ones(2))
    with pytest.raises(TypeError, match="q: expected a Quantized"):
        Q.dequantize(x)


def test_doctests():
    assert doctest.testmod(Q, extraglobs={"jnp": jnp}).failed == 0


def test_storage_is_one_byte_per_element_and_raw_bits_round_trip():
    x = np.linspace(-3.0, 3.0, 64, dtype=np.float32).reshape(2, 32)
    x[1, 5] = np.nan  # a NaN block: scale 0xFF (ue8m0) / 0x7F (ue4m3)
    q = Q.quantize_mx(jnp.asarray(x), "e4m3")
    assert q.elements.dtype == jnp.uint8 and q.scales.dtype == jnp.uint8
    el, sc = Q.raw_bits(q)
    assert el.dtype == jnp.uint32 and sc.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(el), np.asarray(q.elements))
    assert int(sc[1, 0]) == 0xFF
    # element bits as ml_dtypes gives them (row 0, scale 2**(floor(log2 3) - 8))
    s = 2.0 ** (int(sc[0, 0]) - 127)
    want = (x[0] / s).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(np.asarray(q.elements)[0], want)
    n = Q.quantize_nvfp4(jnp.asarray(x))
    assert n.elements.dtype == jnp.uint8 and int(Q.raw_bits(n)[1][1, 0]) == 0x7F
    assert jaxmma.quant.raw_bits is Q.raw_bits
