"""The exact division of the quantizers (``_quant._divide``) against two references.

* The long division that ``_divide`` replaced (one quotient bit per step, 34-56 steps),
  kept here only as a reference: compared on millions of random significands and
  exponents for every format and rounding mode the quantizers use, with quotients from
  far below the smallest subnormal to far above the largest value, exact ties and their
  neighbours, and the stochastic random bits' extremes.
* Exact rational arithmetic (``fractions.Fraction``), written here from the rounding
  rules, on a sample.

Then the quantizers end to end (NVFP4 global and block scales, elements; MX scales with
``ceil`` / ``nearest``) on random raw float32 bits with NaN, Inf, zeros and subnormals,
with ``_divide`` swapped for the reference.
"""

from __future__ import annotations

import functools
import zlib
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxmma
from jaxmma import bits
from jaxmma.operands import _quant as Q

U32 = jnp.uint32


def _reference_divide(fmt, xsig, xexp, dsig, dexp, mode, rbits=None):
    """Bit-by-bit long division (the quantizers' division before the short one)."""
    f = bits.FORMATS[fmt]
    m = f.mant_bits
    emin = f.min_exp + m
    lx, ld = Q._msb(xsig), Q._msb(dsig)
    xn = xsig << (31 - lx).astype(U32)
    dn = dsig << (31 - ld).astype(U32)
    lead = (lx + xexp) - (ld + dexp) - (xn < dn).astype(jnp.int32)
    u = jnp.maximum(lead, emin) - m
    t = xexp - dexp - u

    def bit(j):
        inside = (j >= 0) & (j < 32)
        return jnp.where(inside, (xsig >> j.clip(0, 31).astype(U32)) & U32(1), U32(0))

    s = t - m - 1
    r = jnp.where(
        s >= 0,
        jnp.where(s < 32, xsig << s.clip(0, 31).astype(U32), U32(0)),
        jnp.where(-s < 32, xsig >> (-s).clip(0, 31).astype(U32), U32(0)),
    )
    n = jnp.zeros_like(xsig)
    frac = jnp.zeros_like(xsig)
    for w in range(m, -33, -1):
        r = (r << U32(1)) | bit(w - t)
        q = r >= dsig
        r = jnp.where(q, r - dsig, r)
        if w >= 0:
            n = (n << U32(1)) | q.astype(U32)
        else:
            frac = (frac << U32(1)) | q.astype(U32)
    low = -32 - t
    lost = jnp.where(
        low >= 32,
        xsig,
        jnp.where(low > 0, xsig & ((U32(1) << low.clip(0, 31).astype(U32)) - U32(1)), U32(0)),
    )
    sticky = (r != 0) | (lost != 0)
    if mode == "rn":
        half = (frac >> U32(31)) != 0
        rest = ((frac & U32(0x7FFFFFFF)) != 0) | sticky
        inc = half & (rest | ((n & U32(1)) != 0))
        away = jnp.ones(n.shape, bool)
    elif mode == "rz":
        inc = away = jnp.zeros(n.shape, bool)
    elif mode == "rp":
        inc = away = (frac != 0) | sticky
    else:
        inc = away = (frac | sticky.astype(U32)) > ~rbits
    return Q._f32_from_exact(n + inc.astype(U32), u), away


def _reference_quotient_bits(fmt, x, dsig, dexp, mode, rbits, saturate):
    """Its former form: the quotient encoded toward zero and away from it."""
    fl = Q._f32_fields(x)
    nz = fl.sig != 0
    dsig = jnp.broadcast_to(dsig, x.shape)
    dexp = jnp.broadcast_to(dexp, x.shape)
    v, away = _reference_divide(fmt, jnp.where(nz, fl.sig, U32(1)), fl.exp, dsig, dexp, mode, rbits)
    signed = lax.bitcast_convert_type(
        lax.bitcast_convert_type(v, U32) | (fl.sign << U32(31)), jnp.float32
    )
    up = bits.encode(fmt, signed, rounding="rna", saturate=saturate)
    down = bits.encode(fmt, signed, rounding="rz", saturate=saturate)
    plain = bits.encode(fmt, x, rounding="rn", saturate=saturate)
    return jnp.where(nz, jnp.where(away, up, down), plain)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _both(fmt, mode, xsig, xexp, dsig, dexp, rbits):
    rb = rbits if mode == "stochastic" else None
    v, a = Q._divide(fmt, xsig, xexp, dsig, dexp, mode, rb)
    w, b = _reference_divide(fmt, xsig, xexp, dsig, dexp, mode, rb)
    v, w = lax.bitcast_convert_type(v, U32), lax.bitcast_convert_type(w, U32)
    return jnp.sum(v != w), jnp.sum(a != b), v, a


def _operands(fmt, n, seed):
    """Random (xsig, xexp, dsig, dexp, rbits): quotients over the format's whole range
    and beyond, a quarter of them exact ties or one unit of xsig away from one."""
    rng = np.random.default_rng(seed)
    f = bits.FORMATS[fmt]
    m = f.mant_bits
    # significands: f32 ones (24 bits, and subnormal-sized), up to 27 bits; divisors:
    # a 4-bit (ue4m3) times a 24-bit (f32) significand, 3 x 24 bits, any up to 28 bits
    width = rng.integers(1, 28, n)
    xsig = (rng.integers(0, 2**27, n, dtype=np.uint64) >> (27 - width).astype(np.uint64)) | 1
    xsig = np.where(rng.random(n) < 0.5, rng.integers(2**23, 2**24, n), xsig)
    kind = rng.integers(0, 4, n)
    dsig = np.select(
        [kind == 0, kind == 1, kind == 2],
        [
            rng.integers(1, 16, n) * rng.integers(2**23, 2**24, n),
            3 * rng.integers(1, 2**24, n),
            rng.integers(1, 16, n),
        ],
        rng.integers(1, 2**28, n),
    )
    xsig, dsig = xsig.astype(np.uint32), dsig.astype(np.uint32)
    lx = np.floor(np.log2(xsig.astype(np.float64))).astype(np.int64)
    ld = np.floor(np.log2(dsig.astype(np.float64))).astype(np.int64)
    top = int(np.floor(np.log2(f.max))) + 3
    lead = rng.integers(f.min_exp - m - 40, top, n)  # the quotient's exponent
    dexp = rng.integers(-160, 130, n)
    xexp = lead + dexp + ld - lx
    # ties of the rounding: quotient = (2j + 1) / 2 units, xsig = (2j + 1) * dsig' / 2
    tie = rng.random(n) < 0.25
    small = rng.integers(1, 2 ** min(10, 24 - m), n) | 1  # odd; xsig below stays < 2**27
    halves = rng.integers(0, 2 ** (m + 2), n) | 1  # the quotient in half units, odd
    unit = rng.integers(f.min_exp - m - 3, top - m, n)  # exponent of one unit
    xs_t = (halves * small).astype(np.int64) + rng.integers(-1, 2, n) * (rng.random(n) < 0.5)
    xs_t = np.maximum(xs_t, 1)
    xsig = np.where(tie, xs_t, xsig).astype(np.uint32)
    dsig = np.where(tie, small, dsig).astype(np.uint32)
    xexp = np.where(tie, unit - 1 + dexp, xexp)
    # random bits, with their extremes
    rbits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    pick = rng.random(n)
    rbits = np.where(pick < 0.05, np.uint32(0), rbits)
    rbits = np.where(pick > 0.95, np.uint32(0xFFFFFFFF), rbits)
    return (
        xsig,
        xexp.astype(np.int32),
        dsig,
        dexp.astype(np.int32),
        rbits.astype(np.uint32),
    )


#: (format, mode, count): every combination the quantizers use, and a few more
CASES = [
    ("e2m1", "rn", 1 << 20),
    ("e2m1", "stochastic", 1 << 20),
    ("ue4m3", "rn", 1 << 19),
    ("ue4m3", "rp", 1 << 18),
    ("ue4m3", "rz", 1 << 18),
    ("ue8m0", "rn", 1 << 18),
    ("ue8m0", "rp", 1 << 18),
    ("f32", "rn", 1 << 18),
    ("e2m1", "rp", 1 << 16),
    ("e2m1", "rz", 1 << 16),
    ("e4m3", "stochastic", 1 << 16),
    ("e5m2", "rn", 1 << 16),
    ("e2m3", "stochastic", 1 << 16),
    ("f32", "stochastic", 1 << 16),
]


@pytest.mark.parametrize("fmt,mode,n", CASES)
def test_divide_equals_the_long_division(fmt, mode, n):
    ops = _operands(fmt, n, seed=zlib.crc32(f"{fmt} {mode}".encode()))
    bad_v, bad_a, _, _ = _both(fmt, mode, *ops)
    assert int(bad_v) == 0 and int(bad_a) == 0, (fmt, mode, int(bad_v), int(bad_a))


def _oracle(fmt, xsig, xexp, dsig, dexp, mode, rbits):
    """The rounded quotient as a Fraction (exponent unbounded above) and ``away``."""
    f = bits.FORMATS[fmt]
    m = f.mant_bits
    q = (
        Fraction(int(xsig))
        * Fraction(2) ** int(xexp)
        / (Fraction(int(dsig)) * Fraction(2) ** int(dexp))
    )
    e = q.numerator.bit_length() - q.denominator.bit_length()
    e = e - 1 if Fraction(2) ** e > q else e  # floor(log2 q)
    unit = Fraction(2) ** (max(e, f.min_exp + m) - m)  # min_exp: the smallest subnormal's
    n, rest = divmod(q / unit, 1)
    if mode == "rn":
        up = rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1)
        away = True
    elif mode == "rz":
        up = away = False
    elif mode == "rp":
        up = away = rest != 0
    else:
        top = rest * 2**32
        tail = int(top) | (1 if top != int(top) else 0)
        up = away = tail + int(rbits) >= 2**32
    return (n + up) * unit, away


@pytest.mark.parametrize(
    "fmt,mode",
    [
        ("e2m1", "rn"),
        ("e2m1", "stochastic"),
        ("ue4m3", "rn"),
        ("ue4m3", "rp"),
        ("ue8m0", "rn"),
        ("f32", "rn"),
    ],
)
def test_divide_equals_exact_rationals(fmt, mode):
    ops = _operands(fmt, 1500, seed=7)
    _, _, v, a = _both(fmt, mode, *ops)
    v = np.asarray(v).view(np.float32)
    a = np.asarray(a)
    for i in range(len(v)):
        want, away = _oracle(fmt, *(o[i] for o in ops[:4]), mode, ops[4][i])
        got = Fraction(float(v[i])) if np.isfinite(v[i]) else None
        if want > Fraction(float(np.finfo(np.float32).max)):
            assert got is None, (i, want, v[i])
        else:
            assert got == want, (i, [o[i] for o in ops], want, v[i])
        assert bool(a[i]) == away, (i, want)


def _raw_f32(shape, seed):
    """Random raw float32 bits: all exponents, a share of NaN, Inf, zeros, subnormals."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    normal = rng.normal(size=shape).astype(np.float32).view(np.uint32)
    raw = np.where(rng.random(shape) < 0.7, normal, raw)  # blocks of comparable values
    special = rng.choice(
        np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 1, 0x807FFFFF], np.uint32),
        shape,
    )
    raw = np.where(rng.random(shape) < 0.02, special, raw)
    return raw.view(np.float32)


def _quantizers(x, key):
    out = []
    for how in ("nearest", "ceil", "floor"):
        q = Q.quantize_nvfp4(x, scale_rounding=how)
        out += [q.elements, q.scales, q.global_scale]
    q = Q.quantize_nvfp4(x, global_scale=jnp.float32(1e-3), saturate=False)  # overflow
    out += [q.elements, q.scales]
    q = Q.quantize_nvfp4(x, global_scale=jnp.float32(0.37), rounding="stochastic", key=key)
    out += [q.elements, q.scales]
    q = Q.quantize_nvfp4(jnp.abs(x) * 1e-30, axis=-2)  # tiny: subnormal scales, g = 2**-149
    out += [q.elements, q.scales, q.global_scale]
    for fmt, how in (("e4m3", "ceil"), ("e2m1", "nearest")):
        q = Q.quantize_mx(x, fmt, scale_rounding=how)
        out += [q.elements, q.scales]
    return out


def _swap_to_former_form(monkeypatch):
    """The quantizers' divisions back to their former form (the bit-loop reference and
    two general encodings), NVFP4's short forms included."""
    monkeypatch.setattr(Q, "_divide", _reference_divide)
    monkeypatch.setattr(Q, "_quotient_bits", _reference_quotient_bits)
    monkeypatch.setattr(
        Q,
        "_e2m1_nearest_bits",
        lambda x, d, e, sat: _reference_quotient_bits("e2m1", x, d, e, "rn", None, sat),
    )
    monkeypatch.setattr(
        Q,
        "_ue4m3_scale_bits",
        lambda a, d, e, mode: _reference_quotient_bits("ue4m3", a, d, e, mode, None, True),
    )
    monkeypatch.setattr(
        Q,
        "_by_global_divisor",
        lambda sig, exp: _reference_divide("f32", sig, exp, U32(21), jnp.int32(7), "rn")[0],
    )


# the former form, a regression guard: the short forms are checked against the general division
# in the quick run
@pytest.mark.full
def test_quantizers_equal_their_former_form_on_raw_bits(monkeypatch):
    # every row of x is one NVFP4 tensor (vmap): a tensor of random normals has a global
    # scale that puts quotients everywhere on the e2m1 grid
    x = jnp.asarray(_raw_f32((32, 64, 64), seed=3))
    keys = jax.random.split(jax.random.key(0), 32)
    run = jax.jit(jax.vmap(_quantizers))
    new = run(x, keys)
    _swap_to_former_form(monkeypatch)  # NVFP4's short forms too
    jax.clear_caches()  # the quantizers' jitted parts are traced again with the reference
    try:
        old = jax.jit(jax.vmap(_quantizers))(x, keys)
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    assert len(new) == len(old) == 20
    for i, (a, b) in enumerate(zip(new, old, strict=True)):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=str(i))


def _nvfp4_division_operands(n, seed):
    """float32 x (raw bits: NaN, Inf, zeros, subnormals) and divisors ``dsig * 2**dexp``
    like NVFP4's (a ue4m3 times a float32 significand, 1 for NaN-scale blocks), with
    quotients across e2m1's range and beyond; a quarter are e2m1 rounding ties
    ``t * d`` (t = 0.25, 0.75, ..., 5) or one float32 ulp beside one."""
    rng = np.random.default_rng(seed)
    xb = _raw_f32(n, seed).view(np.uint32)
    kind = rng.integers(0, 4, n)
    dsig = np.select(
        [kind == 0, kind == 1, kind == 2],
        [
            rng.integers(1, 16, n) * rng.integers(2**23, 2**24, n),
            rng.integers(1, 16, n) * rng.integers(1, 2**24, n),
            np.ones(n, np.int64),
        ],
        rng.integers(1, 2**10, n),
    ).astype(np.uint32)
    ld = np.floor(np.log2(dsig.astype(np.float64))).astype(np.int64)
    xe = ((xb >> 23) & 0xFF).astype(np.int64) - 150  # x ~ 2**(xe + 23)
    lead = rng.integers(-8, 8, n)  # the quotient's exponent
    dexp = xe + 23 - ld - lead
    # ties: x = t * dsig * 2**dexp exactly (dsig < 2**10 keeps it within 24 bits)
    tie = (kind == 3) & (rng.random(n) < 0.9)
    t4 = rng.choice(np.array([1, 3, 5, 7, 10, 14, 20]), n)  # 4t
    d_e = rng.integers(-140, 100, n)
    xt = (t4 * dsig.astype(np.float64)) * np.exp2(d_e - 2.0)
    with np.errstate(over="ignore"):  # only non-ties overflow (their dsig is large)
        tb = xt.astype(np.float32).view(np.uint32)
    tb = tb + rng.integers(-1, 2, n).astype(np.uint32) * (rng.random(n) < 0.5)
    tb = tb | (rng.integers(0, 2, n).astype(np.uint32) << 31)
    xb = np.where(tie, tb, xb)
    dexp = np.where(tie, d_e, dexp)
    x = jnp.asarray(xb.view(np.float32))
    return x, jnp.asarray(dsig), jnp.asarray(dexp.astype(np.int32))


def test_nvfp4_short_divisions_equal_the_general_one():
    """NVFP4's elements (e2m1, to nearest), block scales (ue4m3, three roundings) and
    global scale (by 2688) take short exact forms; raw bits equal the general division's
    (``_quotient_bits`` / ``_divide``, tested above against the references)."""
    x, dsig, dexp = _nvfp4_division_operands(1 << 16, seed=11)
    for sat in (True, False):
        fast = jax.jit(functools.partial(Q._e2m1_nearest_bits, saturate=sat))(x, dsig, dexp)
        slow = jax.jit(lambda x, d, e, sat=sat: Q._quotient_bits("e2m1", x, d, e, "rn", None, sat))(
            x, dsig, dexp
        )
        np.testing.assert_array_equal(np.asarray(fast), np.asarray(slow))
        assert set(np.unique(np.asarray(fast)).tolist()) == set(range(16))  # every code
    # scales: amax >= +0, the divisor 6 * g = 3 * g_sig * 2**(g_exp + 1)
    amax = jnp.abs(x)
    finite = np.asarray(jnp.isfinite(amax))
    rng = np.random.default_rng(12)
    d3 = jnp.asarray((3 * rng.integers(1, 2**24, x.size)).astype(np.uint32))
    for mode in ("rn", "rp", "rz"):
        fast = jax.jit(functools.partial(Q._ue4m3_scale_bits, mode=mode))(amax, d3, dexp)
        slow = jax.jit(
            lambda a, d, e, mode=mode: Q._quotient_bits("ue4m3", a, d, e, mode, None, True)
        )(amax, d3, dexp)
        np.testing.assert_array_equal(np.asarray(fast)[finite], np.asarray(slow)[finite])
        assert len(np.unique(np.asarray(fast)[finite])) == 127  # 0x00 ... 0x7E
    # the global scale: every positive finite float32, subnormals included
    fl = Q._f32_fields(amax)
    keep = finite & np.asarray(fl.sig != 0)
    sig, exp = fl.sig[keep], fl.exp[keep]
    fast = jax.jit(Q._by_global_divisor)(sig, exp)
    slow = jax.jit(lambda s, e: Q._divide("f32", s, e, U32(21), jnp.int32(7), "rn")[0])(sig, exp)
    np.testing.assert_array_equal(
        np.asarray(fast).view(np.uint32), np.asarray(slow).view(np.uint32)
    )
    assert np.any(np.asarray(fast).view(np.uint32) < 0x800000)  # subnormal results too


@pytest.mark.full  # the former form again, end to end
def test_nvfp4_gemm_on_float_inputs_equals_its_former_form(monkeypatch):
    """A jitted NVFP4 ``matmul`` on float inputs (quantized inside; ragged K = 72 padded
    with +0 blocks; raw bits with NaN, Inf, zeros and subnormals, so NaN and zero block
    scales) and its straight-through gradient: the same raw bits with the quantizer's
    divisions in their former, general form."""
    ins = (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3"
    )
    a = jnp.asarray(_raw_f32((40, 72), seed=21))
    b = jnp.asarray(np.random.default_rng(22).standard_normal((72, 24)).astype(np.float32))
    b = b.at[:16, 3].set(0.0).at[5, 7].set(jnp.inf)  # a zero block and an Inf block

    def run(a, b):
        mm = lambda a, b: jaxmma.matmul(a, b, instruction=ins, arch="sm_120a")  # noqa: E731
        return mm(a, b), jax.grad(lambda b: jnp.sum(mm(jnp.nan_to_num(a), b)))(b)

    new = jax.jit(run)(a, b)
    _swap_to_former_form(monkeypatch)
    jax.clear_caches()
    try:
        old = jax.jit(run)(a, b)
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    for x, y in zip(new, old, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))
    assert np.isnan(np.asarray(new[0])).any() and np.isfinite(np.asarray(new[0])).any()
