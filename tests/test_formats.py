"""Tests of jaxmma.bits._formats: ml_dtypes sweeps and an exact rational oracle.

The oracle below (``Spec``, ``ref_*``) is written from the format definitions with Python
integers and ``fractions.Fraction``; it shares no code with ``jaxmma.bits._formats``.
"""

from __future__ import annotations

import doctest
import functools
import math
from fractions import Fraction as Fr
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxmma import bits as F

MODES = ("rn", "rna", "rz", "rm", "rp", "stochastic")
N = 1024  # every oracle batch is padded to this length: one compiled shape for all


@pytest.fixture(autouse=True)
def _strict():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


# ---- the oracle ------------------------------------------------------------------------
class Spec(NamedTuple):
    bits: int
    e: int
    m: int
    bias: int
    signed: bool
    inf: bool
    nan: str | None  # "ieee" | "all_ones" | None
    sub: bool  # has subnormals
    max: Fr
    shift: int = 0


SPEC = {
    "f16": Spec(16, 5, 10, 15, True, True, "ieee", True, Fr(65504)),
    "bf16": Spec(16, 8, 7, 127, True, True, "ieee", True, Fr(255 * 2**120)),
    "tf32": Spec(19, 8, 10, 127, True, True, "ieee", True, Fr(2047 * 2**117), 13),
    "f32": Spec(32, 8, 23, 127, True, True, "ieee", True, Fr((2**24 - 1) * 2**104)),
    "f64": Spec(64, 11, 52, 1023, True, True, "ieee", True, Fr((2**53 - 1) * 2**971)),
    "e4m3": Spec(8, 4, 3, 7, True, False, "all_ones", True, Fr(448)),
    "e5m2": Spec(8, 5, 2, 15, True, True, "ieee", True, Fr(57344)),
    "e3m2": Spec(6, 3, 2, 3, True, False, None, True, Fr(28)),
    "e2m3": Spec(6, 2, 3, 1, True, False, None, True, Fr(15, 2)),
    "e2m1": Spec(4, 2, 1, 1, True, False, None, True, Fr(6)),
    "ue8m0": Spec(8, 8, 0, 127, False, False, "all_ones", False, Fr(2**127)),
    "ue4m3": Spec(7, 4, 3, 7, False, False, "all_ones", True, Fr(448)),
}
INTS = {
    "s8": (8, True),
    "u8": (8, False),
    "s4": (4, True),
    "u4": (4, False),
    "b1": (1, False),
    "s32": (32, True),
}
FLOATS = [n for n in SPEC if n != "f64"]
ML = {
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
    "ue8m0": ml_dtypes.float8_e8m0fnu,
}


def ref_decode(name, b):
    """('nan'|'inf'|'num', sign, Fraction magnitude) of the bit pattern ``b``."""
    s = SPEC[name]
    v = (b >> s.shift) & (2**s.bits - 1)
    sign = v >> (s.bits - 1) if s.signed else 0
    E, M = (v >> s.m) & (2**s.e - 1), v & (2**s.m - 1)
    if s.nan == "ieee" and E == 2**s.e - 1:
        return ("nan" if M else "inf"), sign, None
    if s.nan == "all_ones" and v & (2 ** (s.bits - s.signed) - 1) == 2 ** (s.bits - s.signed) - 1:
        return "nan", sign, None
    if s.sub and E == 0:
        return "num", sign, M * pow2(1 - s.bias - s.m)
    return "num", sign, (2**s.m + M) * pow2(E - s.bias - s.m)


@functools.cache
def pow2(e: int) -> Fr:
    return Fr(2**e) if e >= 0 else Fr(1, 2**-e)


def floor_log2(x: Fr) -> int:
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e if pow2(e) <= x else e - 1


def rounds_up(mode, sign, k, frac, rbits):
    """Whether ``k + frac`` (0 <= frac < 1, a magnitude) rounds to ``k + 1``."""
    if mode == "stochastic":
        t = frac * 2**32
        top = math.floor(t) | (t != math.floor(t))
        return top + rbits >= 2**32
    return {
        "rn": frac > Fr(1, 2) or (frac == Fr(1, 2) and k % 2 == 1),
        "rna": frac >= Fr(1, 2),
        "rz": False,
        "rp": frac > 0 and sign == 0,
        "rm": frac > 0 and sign == 1,
    }[mode]


def ref_nan(name, sign, payload23):
    """The documented NaN that encode writes for a float32 NaN input."""
    return {
        "f16": (sign << 15) | 0x7C00 | ((payload23 >> 13) or 1),
        "bf16": (sign << 15) | 0x7FC0,
        "tf32": (sign << 31) | 0x7FC00000 | (payload23 >> 13 << 13),
        "f32": (sign << 31) | 0x7FC00000 | payload23,
        "e4m3": (sign << 7) | 0x7F,
        "e5m2": (sign << 7) | 0x7E,
        "e3m2": 0x1F,
        "e2m3": 0x1F,
        "e2m1": 0x7,
        "ue8m0": 0xFF,
        "ue4m3": 0x7F,
    }[name]


def ref_value_bits(s: Spec, r: Fr) -> int:
    if r == 0:
        return 0
    e = floor_log2(r)
    if s.sub and e < 1 - s.bias:
        return int(r / pow2(1 - s.bias - s.m))
    return ((e + s.bias) << s.m) | int(r / pow2(e - s.m) - 2**s.m)


def ref_round(name, kind, sign, mag, mode, sat, ftz=False, rbits=0):
    """Bits of ``(-1)**sign * mag`` in format ``name`` (kind: 'num' | 'inf')."""
    s = SPEC[name]
    sign = sign if s.signed else 0
    sbit = sign << (s.bits - 1) if s.signed else 0
    nan_bits = ((2 ** (s.bits - s.signed) - 1) | sbit) if s.nan == "all_ones" else None
    inf_bits = (((2**s.e - 1) << s.m) | sbit) if s.inf else nan_bits
    max_bits = ref_value_bits(s, s.max) | sbit
    toward_inf = mode in ("rn", "rna") or (mode, sign) in (("rp", 0), ("rm", 1))
    if kind == "inf":
        r, toward_inf = None, True
    else:
        qmin = (1 if s.sub else 0) - s.bias - s.m
        q = qmin if mag == 0 else max(floor_log2(mag) - s.m, qmin)
        t = mag / pow2(q)
        k = math.floor(t)
        up = rounds_up(mode, sign, k, t - k, rbits)
        toward_inf |= mode == "stochastic" and up  # stochastic = rz or away, by the carry
        r = (k + up) * pow2(q)
    if r is None or r > s.max:
        if sat or not toward_inf or inf_bits is None:
            return max_bits << s.shift
        return inf_bits << s.shift
    if ftz and s.sub and r < pow2(1 - s.bias):
        r = Fr(0)
    return (ref_value_bits(s, r) | sbit) << s.shift


def ref_int(name, kind, sign, mag, mode, sat, rbits=0):
    bits, signed = INTS[name]
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if kind == "nan":
        return 0
    if kind == "inf":
        return (lo if sign else hi) % 2**bits
    k = math.floor(mag)
    k += rounds_up(mode, sign, k, mag - k, rbits)
    v = -k if sign else k
    if sat:
        v = min(max(v, lo), hi)
    return v % 2**bits


def on_grid(name, mag) -> bool:
    """Whether ``mag`` is a multiple of its unit in last place (exponent unbounded above)."""
    if name in INTS:
        return mag.denominator == 1
    s = SPEC[name]
    qmin = (1 if s.sub else 0) - s.bias - s.m
    q = qmin if mag == 0 else max(floor_log2(mag) - s.m, qmin)
    return (mag / pow2(q)).denominator == 1


def ref_encode(name, xbits, mode, sat, ftz=False, rbits=0, src="f32"):
    kind, sign, mag = ref_decode(src, xbits)
    if name in INTS:
        return ref_int(name, kind, sign, mag, mode, sat, rbits)
    if kind == "nan":
        return ref_nan(name, sign, xbits & 0x7FFFFF)
    return ref_round(name, kind, sign, mag, mode, sat, ftz, rbits)


# ---- inputs ----------------------------------------------------------------------------
def f32_bits(x) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float64).astype(np.float32).view(np.uint32)


def crafted(name, rng, n_values=128) -> np.ndarray:
    """float32 bit patterns around the values of a format: values, ties, nudges, edges."""
    s = SPEC[name]
    if s.bits <= 8:
        pats = range(2**s.bits)
    else:
        pats = list(rng.integers(0, 2 ** (s.bits - 1), n_values)) + [1, 2, 2**s.m - 1, 2**s.m]
    vals = sorted(
        {
            float(v)
            for k, _, v in map(lambda p: ref_decode(name, int(p) << s.shift), pats)
            if k == "num"
        }
    )
    top = float(s.max)
    ulp_top = float(s.max - pow2(floor_log2(s.max)) * (1 - Fr(1, 2**s.m))) if s.m else top
    v = np.array(vals)
    mids = (v[1:] + v[:-1]) / 2
    edges = [
        top + ulp_top / 2,
        top + ulp_top,
        2 * top,
        3.4e38,
        vals[1] / 2,
        vals[1] / 4,
        vals[1] * 0.75,
        1e-45,
        1e-40,
        0.0,
    ]
    base = np.concatenate([v, mids, edges])
    b = f32_bits(base)
    b = np.concatenate([b, b + 1, b - 1])  # +-1 float32 ulp (0 - 1 wraps to a NaN: fine)
    b = np.concatenate([b, b | 0x80000000])
    special = [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFBFFFFF]
    return np.concatenate([b, np.array(special, np.uint32)]).astype(np.uint32)


def crafted_int(rng) -> np.ndarray:
    """float32 bit patterns for integer targets: quarters (ties), range edges, huge."""
    edges = [
        2.0**31,
        2.0**32,
        2.0**40,
        1e10,
        3.4e38,
        255.5,
        256.0,
        127.5,
        128.0,
        7.5,
        8.0,
        15.5,
        16.0,
        1.5,
        0.5,
        1e-30,
    ]
    b = f32_bits(np.concatenate([np.arange(-300, 301) / 4, edges, rng.normal(0, 1e3, 50)]))
    b = np.concatenate([b, b + 1, b - 1])
    b = np.concatenate([b, b ^ 0x80000000])
    special = [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001]
    return np.concatenate([b, np.array(special, np.uint32)]).astype(np.uint32)


def inputs(name, seed=0) -> np.ndarray:
    """Up to N float32 bit patterns: crafted ones, random ones, random in-range ones."""
    rng = np.random.default_rng(seed)
    s = SPEC.get(name, SPEC["e4m3"])
    c = crafted(name, rng) if name in SPEC else crafted_int(rng)
    lo, hi = 1 - s.bias - s.m - 3, floor_log2(s.max) + 3
    e = rng.integers(max(lo, -149), min(hi, 128), 200)
    rand_in = f32_bits(np.ldexp(1 + rng.random(200), e) * rng.choice([-1, 1], 200))
    rand = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([rand, rand_in, c[rng.permutation(len(c))]])[:N]
    return np.pad(x, (0, N - len(x)))


def run_encode(name, xb, **kw):
    return np.asarray(F.encode(name, xb.view(np.float32), **kw)).astype(np.int64)


def check(name, xb, got, want, what):
    bad = [i for i in range(len(xb)) if int(got[i]) != want[i]]
    msg = ", ".join(
        f"x=0x{int(xb[i]):08x} got 0x{int(got[i]):x} want 0x{want[i]:x}" for i in bad[:5]
    )
    assert not bad, f"{name} {what}: {len(bad)} mismatches: {msg}"


# ---- the table -------------------------------------------------------------------------
def test_table():
    assert set(F.FORMATS) == set(SPEC) | set(INTS)
    for name, s in SPEC.items():
        f = F.FORMATS[name]
        assert (f.bits, f.exp_bits, f.mant_bits, f.bias, f.signed, f.has_inf) == (
            s.bits,
            s.e,
            s.m,
            s.bias,
            s.signed,
            s.inf,
        )
        assert Fr(f.max) == s.max and f.max_bits == ref_value_bits(s, s.max)
        assert f.shift == s.shift and f.subnormals == s.sub
        if f.dtype is not None:
            dt = getattr(ml_dtypes, f.dtype, None) or np.dtype(f.dtype)
            assert float(ml_dtypes.finfo(dt).max) == f.max
    for name, (bits, signed) in INTS.items():
        f = F.FORMATS[name]
        assert (f.bits, f.signed, f.kind) == (bits, signed, "bits" if name == "b1" else "int")
        if f.dtype is not None:
            assert ml_dtypes.iinfo(getattr(ml_dtypes, f.dtype, f.dtype)).max == f.max


# ---- decode / fields -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ML))
def test_decode_every_pattern_matches_ml_dtypes(name):
    bits = F.FORMATS[name].bits
    b = np.arange(2**16, dtype=np.uint32) & np.uint32(2**bits - 1)  # one shape for all
    container = np.uint16 if bits == 16 else np.uint8
    want = b.astype(container).view(ML[name]).astype(np.float32).view(np.uint32)
    got = np.asarray(F.decode(name, b)).view(np.uint32)
    np.testing.assert_array_equal(got, want)  # raw bits: NaN payloads and signed zeros


def test_decode_other_formats():
    b = np.arange(N, dtype=np.uint32)  # one shape for every call
    e4m3 = np.asarray(F.decode("e4m3", b & 0x7F)).view(np.uint32)
    np.testing.assert_array_equal(np.asarray(F.decode("ue4m3", b)).view(np.uint32), e4m3)
    r = np.random.default_rng(1).integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    r[:4] = [0x7F800001, 0xFFFFFFFF, 0x80000000, 1]
    np.testing.assert_array_equal(np.asarray(F.decode("f32", r)).view(np.uint32), r)
    got = np.asarray(F.decode("tf32", r)).view(np.uint32)
    np.testing.assert_array_equal(got, r & 0xFFFFE000)
    for name in ("s8", "u8", "s4", "u4", "b1"):
        bits, signed = INTS[name]
        v = (b + np.uint32(0x300)) & np.uint32(2**bits - 1)
        want = v.astype(np.float32) - 2**bits * (v >= 2 ** (bits - 1)) * signed
        got = F.decode(name, b + np.uint32(0x300))  # bits above the element are ignored
        np.testing.assert_array_equal(np.asarray(got), want)
    s32 = F.decode("s32", r)
    assert s32.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(s32), r.view(np.int32))


@pytest.mark.parametrize("name", FLOATS)
def test_fields_value_is_exact(name):
    s = SPEC[name]
    if s.bits <= 16:  # every pattern (tiled to one shape for all formats)
        pats = (np.arange(2**16, dtype=np.uint32) & np.uint32(2**s.bits - 1)) << s.shift
    else:
        rng = np.random.default_rng(2)
        pats = rng.integers(0, 2**32, 2**16, dtype=np.uint64).astype(np.uint32)
        pats[:4] = [0, 1 << s.shift, 0x7F800000, 0x80000000]
    f = F.fields(name, pats)
    assert (f.sign.dtype, f.exp.dtype, f.sig.dtype) == (jnp.uint32, jnp.int32, jnp.uint32)
    sign, exp, sig = (np.asarray(a) for a in f[:3])
    nan, inf = np.asarray(f.nan), np.asarray(f.inf)
    if name in ML:  # all patterns, vectorised: sig * 2**exp is exact in float64
        with np.errstate(all="ignore"):
            want = pats.astype(np.uint16 if s.bits == 16 else np.uint8).view(ML[name])
            want = want.astype(np.float64)
        np.testing.assert_array_equal(nan, np.isnan(want))
        np.testing.assert_array_equal(inf, np.isinf(want))
        fin = np.isfinite(want)
        got = np.ldexp(sig.astype(np.float64), exp) * np.where(sign == 1, -1.0, 1.0)
        np.testing.assert_array_equal(got[fin], want[fin])
        np.testing.assert_array_equal(np.signbit(got[fin]), np.signbit(want[fin]))
    # Exact rational check against the oracle (every pattern of the 8-bit formats).
    pats, sign, exp, sig = pats[:1024], sign.tolist(), exp.tolist(), sig.tolist()
    for i, p in enumerate(pats.tolist()):
        kind, rs, mag = ref_decode(name, p)
        assert (nan[i], inf[i]) == (kind == "nan", kind == "inf"), hex(p)
        assert sign[i] == rs, hex(p)
        if kind == "num":
            assert sig[i] * pow2(exp[i]) == mag, hex(p)
            if mag == 0:
                assert exp[i] == (1 if s.sub else 0) - s.bias - s.m
        if kind == "num" and mag and sig[i] < 2**s.m and s.sub:  # subnormal: no hidden bit
            assert exp[i] == 1 - s.bias - s.m


def test_fields_integers():
    rng = np.random.default_rng(6)
    for name, (bits, signed) in INTS.items():
        pats = np.arange(N, dtype=np.uint32) & np.uint32(2**bits - 1)  # one shape for all
        if bits == 32:
            pats = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
            pats[:4] = [0, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
        f = F.fields(name, pats | np.uint32(0xF0000000 if bits < 8 else 0))  # high bits ignored
        got = zip(*(np.asarray(a).tolist() for a in (f.sign, f.sig, f.exp)), strict=True)
        for p, (sg, sig, e) in zip(pats.tolist(), got, strict=True):
            v = p - 2**bits * (p >> (bits - 1)) if signed else p
            assert (-sig if sg else sig) == v and e == 0 and sg == (v < 0), (name, p)
        assert not np.any(f.nan) and not np.any(f.inf)


# ---- encode ----------------------------------------------------------------------------
def ml_dtypes_inputs(name):
    """Every value, every tie and its float32 neighbours, edges, and 65536 random floats."""
    rng = np.random.default_rng(3)
    bits = F.FORMATS[name].bits
    b = np.arange(2**bits, dtype=np.uint32)
    container = np.uint16 if bits == 16 else np.uint8
    with np.errstate(all="ignore"):
        v = np.unique(b.astype(container).view(ML[name]).astype(np.float64))
    v = v[np.isfinite(v)]
    mids = (v[1:] + v[:-1]) / 2
    top = v[-1] + (v[-1] - v[-2])
    x = f32_bits(np.concatenate([v, mids, [top, (v[-1] + top) / 2, 2 * top, 3.4e38, 1e-45]]))
    x = np.concatenate([x, x + 1, x - 1, x ^ 0x80000000])
    special = np.array(
        [
            0x7F800000,
            0xFF800000,
            0,
            0x80000000,
            0x7FC00000,
            0xFFC00000,
            0x7F800001,
            0xFF812345,
            0x7FBFFFFF,
        ],
        np.uint32,
    )
    x = np.concatenate([x, special]).astype(np.uint32)
    rand = rng.integers(0, 2**32, 2**20 - len(x), dtype=np.uint64).astype(np.uint32)
    return np.concatenate([x, rand])  # 2**20 patterns: one shape for every format


@pytest.mark.parametrize("name", sorted(ML))
def test_encode_rn_matches_ml_dtypes(name):
    x = ml_dtypes_inputs(name)
    xf = x.view(np.float32)
    with np.errstate(all="ignore"):
        want = xf.astype(ML[name])
    container = np.uint16 if F.FORMATS[name].bits == 16 else np.uint8
    want = want.view(container).astype(np.uint32)
    got = np.asarray(F.encode(name, xf))
    # Documented differences: ml_dtypes maps NaN to 0x20/0x00 (= -0/+0) in the formats
    # without NaN, where we give +max; it maps zero and negative values to NaN in ue8m0,
    # where we encode |x| and give 0x00 (2**-127) for zero; and ml_dtypes 0.6 rounds
    # float32 subnormals in [2**-127, 1.5 * 2**-127) up to 0x01 (2**-126), which is not
    # round-to-nearest. The oracle checks those inputs.
    keep = ~np.isnan(xf) if SPEC[name].nan is None else np.ones(len(x), bool)
    if name == "ue8m0":
        keep &= xf >= 2**-126
    np.testing.assert_array_equal(got[keep], want[keep])
    assert keep.sum() > 2**18


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", FLOATS + sorted(INTS))
def test_encode_matches_oracle(name, mode):
    xb = inputs(name, seed=len(name))
    rng = np.random.default_rng(4)
    rb = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    kw = {"random_bits": rb} if mode == "stochastic" else {}
    for sat in (False, True):
        got = run_encode(name, xb, rounding=mode, saturate=sat, **kw)
        want = [
            ref_encode(name, int(b), mode, sat, rbits=int(r)) for b, r in zip(xb, rb, strict=True)
        ]
        check(name, xb, got, want, f"{mode} saturate={sat}")


@pytest.mark.parametrize(
    "name", ["f16", "bf16", "tf32", "f32", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "ue4m3", "ue8m0"]
)
def test_ftz(name):
    xb = inputs(name, seed=7)
    for mode in ("rn", "rp"):
        got = run_encode(name, xb, rounding=mode, ftz=True)
        want = [ref_encode(name, int(b), mode, False, ftz=True) for b in xb]
        check(name, xb, got, want, f"{mode} ftz")


@pytest.mark.parametrize("name", ["bf16", "tf32", "e4m3", "e2m1", "ue8m0", "s4"])
def test_stochastic_properties(name):
    xb = inputs(name, seed=9)
    x = xb.view(np.float32)
    rz = run_encode(name, xb, rounding="rz")
    zeros, ones = np.zeros(N, np.uint32), np.full(N, 0xFFFFFFFF, np.uint32)
    np.testing.assert_array_equal(
        run_encode(name, xb, rounding="stochastic", random_bits=zeros), rz
    )
    up = run_encode(name, xb, rounding="stochastic", random_bits=ones)
    rna = run_encode(name, xb, rounding="rna")
    for i, b in enumerate(xb.tolist()):
        kind, sign, mag = ref_decode("f32", b)
        if kind != "num" or (name == "ue8m0" and mag < pow2(-127)):
            continue
        away = ref_encode(name, b, "rp" if sign == 0 or name == "ue8m0" else "rm", False)
        assert up[i] == (rz[i] if on_grid(name, mag) else away), hex(b)
        assert rna[i] in (rz[i], away)
    # Exact inputs never move, whatever the random bits.
    exact_x = np.asarray(F.round_to_format(name, x, rounding="rz")).astype(np.float32)
    for seed in range(3):
        rb = np.random.default_rng(seed).integers(0, 2**32, exact_x.shape, dtype=np.uint64)
        got = F.encode(name, exact_x, rounding="stochastic", random_bits=rb.astype(np.uint32))
        np.testing.assert_array_equal(got, F.encode(name, exact_x, rounding="rz"))
    # Scalar random bits broadcast.
    np.testing.assert_array_equal(
        F.encode(name, x, rounding="stochastic", random_bits=np.uint32(0)), rz
    )


def test_stochastic_is_unbiased_enough():
    x = np.full(N, 1.25, np.float32)  # a quarter of the way from 1 to 1.5 in e2m1
    rb = np.random.default_rng(0).integers(0, 2**32, x.shape, dtype=np.uint64)
    v = F.round_to_format("e2m1", x, rounding="stochastic", random_bits=rb.astype(np.uint32))
    assert set(np.unique(np.asarray(v)).tolist()) == {1.0, 1.5}
    assert abs(float(np.mean(np.asarray(v))) - 1.25) < 0.03  # 3.75 sigma


def test_documented_choices():
    enc = lambda *a, **k: int(F.encode(*a, **k))  # noqa: E731
    nan = np.uint32(0x7FC00000).view(np.float32)
    assert enc("e4m3", 464.0) == 0x7E and enc("e4m3", 464.5) == 0x7F
    assert enc("e4m3", -1e9) == 0xFF and enc("e4m3", -1e9, saturate=True) == 0xFE
    assert enc("e4m3", 1e9, rounding="rz") == 0x7E and enc("e4m3", -1e9, rounding="rp") == 0xFE
    assert enc("e5m2", np.float32(np.inf), saturate=True) == 0x7B
    assert enc("e4m3", nan, saturate=True) == 0x7F
    assert enc("e2m1", 100.0) == 0x7 and enc("e2m1", -np.float32(np.inf)) == 0xF
    assert enc("e2m1", nan) == 0x7 and enc("e3m2", -nan) == 0x1F
    assert enc("ue8m0", 0.0) == 0x00 and enc("ue8m0", -4.0) == 0x81 and enc("ue8m0", nan) == 0xFF
    assert enc("ue8m0", 3.0) == 0x81 and enc("ue8m0", 2.9) == 0x80  # rn: >= 1.5 * 2**e up
    assert enc("ue8m0", 3.0, rounding="rz") == 0x80 and enc("ue8m0", 2.1, rounding="rp") == 0x81
    assert enc("ue8m0", 3e38) == 0xFF and enc("ue8m0", 3e38, saturate=True) == 0xFE
    assert enc("ue4m3", -1.5) == enc("e4m3", 1.5) and enc("ue4m3", 1e4) == 0x7F
    assert enc("tf32", 1.0 + 2.0**-11) == 0x3F800000 and enc("tf32", 1 + 3 * 2.0**-11) == 0x3F804000
    assert enc("f16", -0.0) == 0x8000 and enc("bf16", -1e-40, ftz=True) == 0x8000
    assert enc("s8", 200.0) == 200 and enc("s8", 200.0, saturate=True) == 127
    assert enc("u8", -1.0) == 0xFF and enc("u8", -1.0, saturate=True) == 0
    assert enc("s32", 2.0**31) == 0x80000000 and enc("s32", 2.0**31, saturate=True) == 2**31 - 1
    assert enc("s8", nan) == 0 and enc("s4", -np.float32(np.inf)) == 0x8
    assert enc("s4", 2.5, rounding="rna") == 3 and enc("s4", 2.5) == 2 and enc("b1", 1.0) == 1
    assert float(F.round_to_format("e2m1", 2.4)) == 2.0
    assert float(F.round_to_format("ue8m0", 2.0**-130)) == 2.0**-127


def test_encode_accepts_narrow_floats_and_scalars():
    x = np.array([1.0, -2.5, 65504.0], np.float16)
    np.testing.assert_array_equal(F.encode("f16", x), x.view(np.uint16))
    bf = x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(F.encode("bf16", jnp.asarray(bf)), bf.view(np.uint16))
    assert F.encode("e5m2", 1).dtype == jnp.uint32


# ---- f64 (x64 only inside these tests) -------------------------------------------------
def test_f64():
    rng = np.random.default_rng(5)
    b = rng.integers(0, 2**64, N, dtype=np.uint64)
    b[:7] = [
        0,
        1,
        2**63,
        0x7FF0000000000000,
        0x7FEFFFFFFFFFFFFF,
        0x000FFFFFFFFFFFFF,
        0x7FF0000000000001,
    ]
    x = b.view(np.float64)
    # Values near bf16/f16/e4m3 ties: few significant bits, then +-1 float64 ulp.
    small = np.ldexp(rng.integers(2**8, 2**12, N), rng.integers(-40, 20, N)).astype(np.float64)
    small = (small.view(np.int64) + rng.integers(-1, 2, N)).view(np.float64)
    small *= rng.choice([-1, 1], N)
    with jax.enable_x64(True):
        np.testing.assert_array_equal(np.asarray(F.decode("f64", b)).view(np.uint64), b)
        f = F.fields("f64", b)
        assert f.sig.dtype == jnp.uint64
        sig, exp, sgn = (np.asarray(a).tolist() for a in (f.sig, f.exp, f.sign))
        for i, p in enumerate(b.tolist()):
            kind, sign, mag = ref_decode("f64", p)
            assert (bool(f.nan[i]), sgn[i]) == (kind == "nan", sign)
            if kind == "num":
                assert sig[i] * pow2(exp[i]) == mag
        fin = np.isfinite(x)
        got = np.asarray(F.encode("f64", x))
        np.testing.assert_array_equal(got[fin], b[fin])
        assert F.decode("f64", np.uint64(0x3FF0000000000000)).dtype == jnp.float64
        # float64 inputs round once, straight from float64: NumPy's and ml_dtypes' casts.
        for name, dt, xs in [
            ("f32", np.float32, x),
            ("f16", np.float16, small),
            ("e4m3", ml_dtypes.float8_e4m3fn, small),
        ]:
            with np.errstate(all="ignore"):
                want = xs.astype(dt).view(f"u{np.dtype(dt).itemsize}").astype(np.uint32)
            got = np.asarray(F.encode(name, xs))
            ok = ~np.isnan(xs) if name != "f32" else np.ones(N, bool)  # f32 NaN: as NumPy
            np.testing.assert_array_equal(got[ok], want[ok])
        # Directed modes from float64 against the oracle.
        for mode in ("rz", "rm", "rp", "rna"):
            got = np.asarray(F.encode("bf16", small, rounding=mode))
            want = [
                ref_encode("bf16", v, mode, False, src="f64")
                for v in small.view(np.uint64).tolist()
            ]
            np.testing.assert_array_equal(got, want)


# ---- host doubles with x64 off (docs/dtypes.md): one rounding in every mode -------------
def host_doubles(rng, n=N) -> np.ndarray:
    """Doubles that float32 does not hold: near the ties of float32 and of the narrow
    formats (a few significant bits, then +-1 ulp of float64), beyond float32's range and
    below its subnormals, integers with fractions, and a random spread."""
    few = np.ldexp(rng.integers(2**2, 2**25, n // 4), rng.integers(-30, 30, n // 4))
    few = (few.astype(np.float64).view(np.int64) + rng.integers(-1, 2, n // 4)).view(np.float64)
    ints = rng.integers(-(2**23), 2**23, n // 8) + rng.choice([0.5, 0.25, 0.75, 1e-9], n // 8)
    wide = rng.standard_normal(n // 4) * np.exp2(rng.integers(-160, 135, n // 4))
    edge = [1e300, -1e300, 2.0**-150, -(2.0**-150), 3 * 2.0**-151, float.fromhex("0x1.fffffe8p127")]
    edge += [np.inf, -np.inf, 0.0, -0.0, 1 + 2**-24, 1 + 2**-8 + 2**-30, -(2.0**31) - 0.5]
    x = np.concatenate([few * rng.choice([-1, 1], n // 4), ints, wide, edge])
    return np.pad(x, (0, n - len(x)), constant_values=0.1)


@pytest.mark.parametrize("name", ["f32", "bf16", "tf32", "e4m3", "e2m1", "ue8m0", "s8", "u4"])
def test_host_doubles_round_once(name):
    """With x64 off, a NumPy float64 array is rounded once, from the double, in every
    deterministic mode (the oracle rounds the double's exact value)."""
    assert not jax.config.jax_enable_x64
    x = host_doubles(np.random.default_rng(len(name)))
    for mode in ("rn", "rna", "rz", "rm", "rp"):
        for sat in (False, True):
            got = np.asarray(F.encode(name, x, rounding=mode, saturate=sat))
            want = [ref_encode(name, b, mode, sat, src="f64") for b in x.view(np.uint64).tolist()]
            np.testing.assert_array_equal(got, np.array(want, np.uint32), err_msg=f"{mode} {sat}")


def test_host_doubles_without_a_float32_stand_in_are_refused():
    """Stochastic rounding of a double float32 does not hold, and an s32 result float32
    does not hold: a TypeError naming the value (with x64 on too: tests/test_x64.py)."""
    rb = np.zeros(2, np.uint32)
    with pytest.raises(TypeError, match=r"x: the float64 value 0\.1 .*\.e4m3.*'stochastic'"):
        F.encode("e4m3", np.array([1.0, 0.1]), rounding="stochastic", random_bits=rb)
    exact = np.array([1.0, 2.0**-149])  # held by float32: rounded stochastically as float32
    got = F.encode("bf16", exact, rounding="stochastic", random_bits=rb)
    np.testing.assert_array_equal(got, [0x3F80, 0])
    with pytest.raises(TypeError, match=r"x: the float64 value 16777217\.0 .*\.s32"):
        F.encode("s32", np.float64(2**24 + 1))
    assert int(F.encode("s32", np.float64(2**24 + 2.25), rounding="rz")) == 2**24 + 2
    assert int(F.encode("s32", np.float64(3e9), saturate=True)) == 2**31 - 1
    assert int(F.encode("s8", np.float64(2**40 + 200.5), rounding="rz")) == 200  # wraps


# ---- transformations -------------------------------------------------------------------
def test_jit_and_vmap_give_the_same_bits():
    xb = inputs("e4m3", seed=11).reshape(8, N // 8)
    x = xb.view(np.float32)
    rb = np.random.default_rng(0).integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
    for name in ("e4m3", "s8"):
        chex.clear_trace_counter()
        kw = dict(rounding="stochastic", saturate=True, random_bits=rb)
        eager = np.asarray(F.encode(name, x, **kw))

        @jax.jit
        @chex.assert_max_traces(n=1)
        def enc(x, r, name=name):
            return F.encode(name, x, rounding="stochastic", saturate=True, random_bits=r)

        np.testing.assert_array_equal(enc(x, rb), eager)
        np.testing.assert_array_equal(enc(x.copy(), rb), eager)  # no retrace
        vm = jax.vmap(
            lambda x, r, name=name: F.encode(
                name, x, rounding="stochastic", saturate=True, random_bits=r
            )
        )
        np.testing.assert_array_equal(vm(x, rb), eager)
        bits = eager.astype(np.uint32)
        dec = jax.jit(lambda b, name=name: F.decode(name, b))
        np.testing.assert_array_equal(
            np.asarray(dec(bits)).view(np.uint32), np.asarray(F.decode(name, bits)).view(np.uint32)
        )
        fv = jax.vmap(lambda b, name=name: F.fields(name, b))(bits)
        for a, e in zip(fv, F.fields(name, bits), strict=True):
            np.testing.assert_array_equal(a, e)
    chex.clear_trace_counter()


# ---- errors ----------------------------------------------------------------------------
def test_errors():
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"fmt: expected one of \[.*'e4m3'.*\], got 'e4m4'"):
        F.encode("e4m4", x)
    for fn in (F.decode, F.fields):
        with pytest.raises(ValueError, match="fmt"):
            fn("fp8", np.uint32(0))
        with pytest.raises(TypeError, match="bits: expected an integer dtype.*float32"):
            fn("e4m3", x)
    with pytest.raises(ValueError, match=r"rounding: expected one of .*'rn'.*got 'nearest'"):
        F.encode("e4m3", x, rounding="nearest")
    with pytest.raises(ValueError, match="random_bits"):
        F.encode("e4m3", x, rounding="stochastic")
    with pytest.raises(ValueError, match="random_bits"):
        F.encode("e4m3", x, random_bits=np.zeros(3, np.uint32))
    with pytest.raises(TypeError, match="random_bits: expected uint32, got int32"):
        F.encode("e4m3", x, rounding="stochastic", random_bits=np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="x: expected a floating dtype"):
        F.encode("e4m3", np.ones(3, np.int32))
    with pytest.raises(TypeError, match="x: the float64 value 0.1 .*stochastic"):
        rb = np.zeros(3, np.uint32)  # docs/dtypes.md: its bits are drawn inside the program
        F.encode("f32", np.full(3, 0.1), rounding="stochastic", random_bits=rb)
    if not jax.config.jax_enable_x64:  # f64 needs x64 (with it on, both are allowed)
        with pytest.raises(ValueError, match="jax_enable_x64"):
            F.decode("f64", np.uint32(0))
        with pytest.raises(ValueError, match="f64"):
            F.encode("f64", x)


def test_doctests():
    assert doctest.testmod(F, extraglobs={"jnp": jnp}).failed == 0
