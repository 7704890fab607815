"""Tests of jaxmma.operands._scaling (block-scaled mma; PTX ISA 9.7.14.3, 9.7.14.5.14).

The oracles are kept apart from the code they check:

* ``oracle_scales`` picks scale bytes with the formulas of ``docs/layouts.md`` ("Block-scale
  selectors"), in plain Python loops.
* ``oracle_product_model`` / ``oracle_group_model`` / ``oracle_exact`` compute D[m, n] with
  ``fractions.Fraction`` from the description of the sm_120 models in
  ``docs/block_scaling.md`` (MMA-Sim, arXiv:2511.10909); element values are decoded by
  ml_dtypes, not by jaxmma.
* The probe tests derive each expected value by hand in the comments.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _suite import params

import jaxmma
from jaxmma import operands

NAN = "nan"
FORMS = [i for i in jaxmma.all_instructions("mma") if i.stype]
DENSE = [i for i in FORMS if not i.sparse]
SPARSE = [i for i in FORMS if i.sparse]
TABLE37_BYTE = {"1X": (0, 1, 2, 3), "2X": (0, 2), "4X": (0,)}


def form(kind, a="e2m1", b="e2m1", scale_vec=None, sparse=False):
    (ins,) = [
        i
        for i in FORMS
        if i.kind == kind
        and i.atype == a
        and i.btype == b
        and (scale_vec is None or i.form.scale_vec == scale_vec)
        and bool(i.sparse) == sparse
    ]
    return ins


# ---------------------------------------------------------------------------------------
# Oracle: element values (ml_dtypes) and f32 rounding in Fractions
ML = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
    "ue8m0": ml_dtypes.float8_e8m0fnu,
}
# exponent of the smallest normal (the fixed exponent of subnormals), per format
EMIN = {"e4m3": -6, "e5m2": -14, "e3m2": -2, "e2m3": 0, "e2m1": 0, "ue4m3": -6, "f32": -126}


def container_element(fmt, byte):
    """kind::mxf8f6f4 container -> element bits (9.7.14.5.14: e2m1 in bits [5:2], 6-bit
    types in [5:0])."""
    if fmt == "e2m1":
        return (byte >> 2) & 0xF
    if fmt in ("e3m2", "e2m3"):
        return byte & 0x3F
    return byte & 0xFF


def value(fmt, bits):
    """Fraction, or ('inf', sign), or NAN."""
    if fmt == "ue4m3":
        fmt, bits = "e4m3", bits & 0x7F  # the sign bit of a ue4m3 scale is ignored
    if fmt == "f32":
        x = np.array([bits], np.uint32).view(np.float32)[0]
    else:
        x = np.array([bits], np.uint8).view(ML[fmt])[0]
    f = float(x)
    if math.isnan(f):
        return NAN
    if math.isinf(f):
        return ("inf", f < 0)
    return Fraction(f)


def ilog2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > a else e


def order(fmt, v: Fraction) -> int:
    """The exponent of a nonzero value in [1, 2) significand form, subnormals at emin."""
    e = ilog2(abs(v))
    return e if fmt == "ue8m0" else max(e, EMIN[fmt])


def f32_bits(x: Fraction, mode: str) -> int:
    """x rounded to f32 ('rz': toward zero, +0 for zero; 'rn': nearest even, IEEE)."""
    if x == 0:
        return 0
    neg, a = x < 0, abs(x)
    e = max(ilog2(a), -126)
    ulp = Fraction(2) ** (e - 23)
    q, r = divmod(a, ulp)
    q = int(q)
    if mode == "rn" and (2 * r > ulp or (2 * r == ulp and q % 2)):
        q += 1
    if q == 0:
        return (1 << 31) if (neg and mode == "rn") else 0
    if q == 1 << 24:
        q, e = q >> 1, e + 1
    biased = e + 127 if q >= 1 << 23 else 0
    bits = (biased << 23) | (q & 0x7FFFFF)
    if biased >= 255:
        bits = 0x7F800000
    return bits | (neg << 31)


def special_result(terms):
    """NaN / Inf outcome of a list of term values (Fraction, ('inf', neg) or NAN)."""
    if any(t is NAN for t in terms):
        return 0x7FFFFFFF
    infs = {t[1] for t in terms if isinstance(t, tuple)}
    if len(infs) == 2:
        return 0x7FFFFFFF
    if infs:
        return 0xFF800000 if infs.pop() else 0x7F800000
    return None


def times(x, y):
    """Product of values with IEEE special rules."""
    if x is NAN or y is NAN:
        return NAN
    if isinstance(x, tuple) or isinstance(y, tuple):
        other = y if isinstance(x, tuple) else x
        if not isinstance(other, tuple) and other == 0:
            return NAN
        sx = x[1] if isinstance(x, tuple) else x < 0
        sy = y[1] if isinstance(y, tuple) else y < 0
        return ("inf", sx != sy)
    return x * y


def truncated_sum(terms, exps, F):
    e_max = max(exps)
    unit = Fraction(2) ** (e_max - F)
    total = Fraction(0)
    for t in terms:
        q = abs(t) // unit
        total += (-q if t < 0 else q) * unit
    return total


def oracle_product_model(ins, a, b, c, sa, sb):
    """kind::mxf8f6f4: D = RZ_f32(sum trunc(a b sa sb) + C), F = 25, e_zero = -133."""
    svals = [value("ue8m0", s) for s in (sa + sb)]
    terms, exps = [], []
    for x, y in zip(a, b, strict=True):
        va, vb = value(ins.atype, x), value(ins.btype, y)
        t = times(times(va, vb), times(svals[0], svals[1]))
        terms.append(t)
        if isinstance(t, Fraction):
            exps.append(
                -133
                if t == 0
                else order(ins.atype, va) + order(ins.btype, vb) + sum(ilog2(s) for s in svals)
            )
    vc = value("f32", c)
    special = special_result(terms + [vc])
    if special is not None:
        return special
    exps.append(-133 if vc == 0 else order("f32", vc))
    return f32_bits(truncated_sum(terms + [vc], exps, 25), "rz")


def oracle_group_model(ins, a, b, c, sa, sb):
    """kind::mxf4*: groups of 16 exact sums, scaled, aligned by the scale exponent only;
    F = 35, e_zero = -139, RZ_f32. ``sa``/``sb``: the scales of each k block."""
    nblk = len(sa)
    size = len(a) // nblk
    vs = [(value(ins.stype, x), value(ins.stype, y)) for x, y in zip(sa, sb, strict=True)]
    vc = value("f32", c)
    if any(NAN in pair for pair in vs):
        return 0x7FFFFFFF
    special = special_result([vc])
    if special is not None:
        return special
    terms, exps = [], []
    for g in range(len(a) // 16):
        prods = [value("e2m1", a[k]) * value("e2m1", b[k]) for k in range(16 * g, 16 * g + 16)]
        s1, s2 = vs[16 * g // size]
        terms.append(sum(prods) * s1 * s2)
        zero = all(p == 0 for p in prods) or s1 * s2 == 0
        exps.append(-139 if zero else order(ins.stype, s1) + order(ins.stype, s2))
    terms.append(vc)
    exps.append(-139 if vc == 0 else order("f32", vc))
    return f32_bits(truncated_sum(terms, exps, 35), "rz")


def oracle_exact(ins, a, b, c, sa, sb):
    """The exact sum of every scaled product and C, rounded once to nearest even."""
    nblk = len(sa)
    size = len(a) // nblk
    terms = []
    for k in range(len(a)):
        s = times(value(ins.stype, sa[k // size]), value(ins.stype, sb[k // size]))
        terms.append(times(times(value(ins.atype, a[k]), value(ins.btype, b[k])), s))
    vc = value("f32", c)
    special = special_result(terms + [vc])
    if special is not None:
        return special
    return f32_bits(sum(terms) + vc, "rn")


def oracle_scales(ins, scale_a, scale_b, bid_a, tid_a, bid_b, tid_b):
    """docs/layouts.md: SF_A[m, j] = byte bid_a + j of lane 4*(m%8) + 2*tid_a + m//8;
    SF_B[j, n] = byte bid_b + j of lane 4*n + tid_b."""
    nblk = {"1X": 1, "2X": 2, "4X": 4}[ins.form.scale_vec]
    SA = np.zeros((16, nblk), np.uint32)
    SB = np.zeros((nblk, 8), np.uint32)
    for m in range(16):
        for j in range(nblk):
            lane = 4 * (m % 8) + 2 * tid_a + m // 8
            SA[m, j] = (int(scale_a[lane]) >> (8 * (bid_a + j))) & 0xFF
    for n in range(8):
        for j in range(nblk):
            SB[j, n] = (int(scale_b[4 * n + tid_b]) >> (8 * (bid_b + j))) & 0xFF
    return SA, SB


# ---------------------------------------------------------------------------------------
# Random operands
def u32(rng, shape):
    return rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)


def random_c(rng, shape, lo=-20, hi=20):
    """f32 bits: random sign and mantissa, exponent in [lo, hi], with zeros and specials."""
    exp = rng.integers(lo + 127, hi + 128, shape).astype(np.uint32)
    bits = (u32(rng, shape) & np.uint32(0x807FFFFF)) | (exp << np.uint32(23))
    pick = rng.random(shape)
    bits[pick < 0.08] = 0
    bits[(pick >= 0.08) & (pick < 0.1)] = 0x80000000
    bits[(pick >= 0.1) & (pick < 0.105)] = 0x7F800000
    bits[(pick >= 0.105) & (pick < 0.11)] = 0x7FC00000
    return bits


def random_scales(rng, stype, shape, spread=6, nan=0.01):
    if stype == "ue8m0":
        s = (127 + rng.integers(-spread, spread + 1, shape)).astype(np.uint32)
        s[rng.random(shape) < nan] = 0xFF
    else:  # ue4m3 around 1.0, any sign bit, some zeros / subnormals / NaN
        s = ((56 + rng.integers(-4 * spread, 4 * spread + 1, shape)) % 128).astype(np.uint32)
        s |= (rng.random(shape) < 0.5).astype(np.uint32) << 7
        pick = rng.random(shape)
        s[pick < 0.02] = 0
        s[(pick >= 0.02) & (pick < 0.04)] = 3
        s[(pick >= 0.04) & (pick < 0.04 + nan)] = 0x7F
    return s


def random_elements(rng, ins, shape):
    if ins.kind == "mxf8f6f4":
        return u32(rng, shape) & np.uint32(0xFF)  # containers, padding bits random
    return u32(rng, shape) & np.uint32(0xF)


def bits32(x):
    return np.asarray(x).view(np.uint32)


# ---------------------------------------------------------------------------------------
# Register level == matrix level, for every form
def selectors(i, ins):
    byte = TABLE37_BYTE[ins.form.scale_vec]
    return byte[i % len(byte)], (i // 2) % 2, byte[(i + 1) % len(byte)], i % 4


def _family(ins):
    """The quick run checks one form of each kind, scale vector and sparsity."""
    return ins.kind, ins.form.scale_vec, ins.stype, bool(ins.sparse)


@pytest.mark.parametrize(
    "index",
    params(range(len(FORMS)), lambda i: _family(FORMS[i]), salt="reg", ids=lambda i: FORMS[i].text),
)
def test_register_level_matches_matrix_level(index):
    ins = FORMS[index]
    rng = np.random.default_rng(index)
    nr = ins.nregs
    a, b = u32(rng, (32, nr["a"])), u32(rng, (32, nr["b"]))
    c = random_c(rng, (32, nr["c"]))
    sa = u32(rng, (32,)) & np.uint32(0x7F7F7F7F)  # no NaN (finite results test more)
    sb = u32(rng, (32,)) & np.uint32(0x7F7F7F7F)
    if ins.stype == "ue8m0":  # scale exponents near 2**0
        sa = (sa & np.uint32(0x07070707)) + np.uint32(0x7C7C7C7C)
        sb = (sb & np.uint32(0x07070707)) + np.uint32(0x7C7C7C7C)
    bid_a, tid_a, bid_b, tid_b = selectors(index, ins)
    kw = dict(byte_id_a=bid_a, thread_id_a=tid_a, byte_id_b=bid_b, thread_id_b=tid_b)
    SA, SB = oracle_scales(ins, sa, sb, bid_a, tid_a, bid_b, tid_b)
    A, B, C = (ins.unfragment(op, jnp.asarray(r)) for op, r in (("a", a), ("b", b), ("c", c)))
    if ins.sparse:
        e = np.zeros(32, np.uint32)
        nib = np.array([0b0100, 0b1000, 0b1001, 0b1100, 0b1101, 0b1110])  # ordered
        for lane in range(32):
            e[lane] = sum(int(rng.choice(nib)) << (4 * j) for j in range(8))
        idx = operands.metadata_indices(ins, jnp.asarray(e), 0)
        d = ins(a, b, c, e, selector=0, scale_a=sa, scale_b=sb, **kw)
        D = ins.mma(A, B, C, metadata=idx, scale_a=SA, scale_b=SB)
    else:
        d = ins(a, b, c, scale_a=sa, scale_b=sb, **kw)
        D = ins.mma(A, B, C, scale_a=SA, scale_b=SB)
    np.testing.assert_array_equal(np.asarray(ins.unfragment("d", d)), bits32(D))
    got_sa, got_sb = operands.select_registers(ins, sa, sb, bid_a, tid_a, bid_b, tid_b)
    np.testing.assert_array_equal(np.asarray(got_sa), SA)
    np.testing.assert_array_equal(np.asarray(got_sb), SB)


@pytest.mark.parametrize("scale_vec", ["1X", "2X", "4X"])
def test_every_table37_selector(scale_vec):
    ins = {"1X": DENSE[0], "2X": form("mxf4"), "4X": form("mxf4nvf4", scale_vec="4X")}[scale_vec]
    rng = np.random.default_rng(1)
    sa, sb = u32(rng, (2, 32)), u32(rng, (2, 32))  # a batch of two warps
    for bid in TABLE37_BYTE[scale_vec]:
        for tid_a in (0, 1):
            for tid_b in (0, 1, 2, 3):
                got = operands.select_registers(ins, sa, sb, bid, tid_a, bid, tid_b)
                for w in range(2):
                    want = oracle_scales(ins, sa[w], sb[w], bid, tid_a, bid, tid_b)
                    np.testing.assert_array_equal(np.asarray(got[0][w]), want[0])
                    np.testing.assert_array_equal(np.asarray(got[1][w]), want[1])


@pytest.mark.parametrize(
    "scale_vec,name,value",
    [
        ("1X", "byte_id_a", 4),
        ("1X", "thread_id_a", 2),
        ("1X", "thread_id_b", 4),
        ("1X", "byte_id_b", -1),
        ("2X", "byte_id_a", 1),
        ("2X", "byte_id_b", 3),
        ("4X", "byte_id_a", 2),
        ("4X", "byte_id_b", 1),
        ("2X", "thread_id_a", True),
        ("1X", "byte_id_a", 1.0),
    ],
)
def test_invalid_selectors_raise(scale_vec, name, value):
    ins = {
        "1X": DENSE[3],
        "2X": form("mxf4nvf4", scale_vec="2X"),
        "4X": form("mxf4nvf4", scale_vec="4X"),
    }[scale_vec]
    ids = dict(byte_id_a=0, thread_id_a=0, byte_id_b=0, thread_id_b=0)
    ids[name] = value
    s = jnp.zeros(32, jnp.uint32)
    with pytest.raises(ValueError, match=rf"{name}={value!r} .*allowed: "):
        operands.select_registers(ins, s, s, *ids.values())
    nr = ins.nregs
    regs = [jnp.zeros((32, nr[op]), jnp.uint32) for op in "abc"]
    with pytest.raises(ValueError, match=name):
        ins(*regs, scale_a=s, scale_b=s, **ids)


def test_selector_errors_name_the_allowed_values():
    ins = form("mxf4nvf4", scale_vec="2X")
    s = jnp.zeros(32, jnp.uint32)
    with pytest.raises(ValueError, match=r"byte_id_b=1 .*allowed: 0, 2"):
        operands.select_registers(ins, s, s, 0, 0, 1, 0)
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda t: operands.select_registers(ins, s, s, t, 0, 0, 0))(0)
    with pytest.raises(ValueError, match="scale_a: required"):
        operands.select_registers(ins, None, s, 0, 0, 0, 0)
    with pytest.raises(ValueError, match=r"scale_b: expected shape \[\.\.\., 32\]"):
        operands.select_registers(ins, s, s[:16], 0, 0, 0, 0)
    with pytest.raises(TypeError, match="scale_a: expected uint32"):
        operands.select_registers(ins, s.astype(jnp.int32), s, 0, 0, 0, 0)


def test_scales_from_matrices_dtypes_and_shapes():
    ins = form("mxf4")  # ue8m0, 2X
    SA = np.arange(32, dtype=np.uint8).reshape(16, 2) + np.uint8(100)
    SB = np.arange(16, dtype=np.uint8).reshape(2, 8) + np.uint8(120)
    sa, sb = operands.scales_from_matrices(ins, SA, SB)
    assert sa.dtype == jnp.uint32 and sb.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(sa), SA)
    e8 = jnp.asarray(SA.view(ml_dtypes.float8_e8m0fnu))
    np.testing.assert_array_equal(np.asarray(operands.scales_from_matrices(ins, e8, SB)[0]), SA)
    with pytest.raises(TypeError, match="scale_a: expected uint8 or uint32"):
        operands.scales_from_matrices(ins, SA.astype(np.float32), SB)
    with pytest.raises(ValueError, match=r"scale_b: expected trailing shape \[2, 8\]"):
        operands.scales_from_matrices(ins, SA, SB.T)
    with pytest.raises(ValueError, match="scale_a: required"):
        operands.scales_from_matrices(ins, None, SB)
    nv = form("mxf4nvf4", scale_vec="4X")  # ue4m3, 4X: float8_e4m3fn accepted, sign ignored
    SA4 = np.full((16, 4), 0xB8, np.uint8)
    SB4 = np.full((4, 8), 0x38, np.uint8)
    got = operands.scales_from_matrices(nv, jnp.asarray(SA4.view(jnp.float8_e4m3fn)), SB4)
    np.testing.assert_array_equal(np.asarray(got[0]), SA4)


def test_scale_shapes():
    assert operands.scale_shapes(DENSE[0]) == ((16, 1), (1, 8))
    assert operands.scale_shapes(form("mxf4")) == ((16, 2), (2, 8))
    assert operands.scale_shapes(form("mxf4nvf4", scale_vec="4X")) == ((16, 4), (4, 8))
    assert operands.block_size(SPARSE[0]) == 64  # one scale for all 64 k
    assert operands.block_size(form("mxf4nvf4", scale_vec="4X", sparse=True)) == 32  # k128 / 4X
    with pytest.raises(ValueError, match="block_scale"):
        operands.num_blocks(jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"))


# ---------------------------------------------------------------------------------------
# Probes, derived by hand
E4M3 = {1.0: 0x38, 1.5: 0x3C, 2.0: 0x40, 16.0: 0x58, 448.0: 0x7E}
E2M1 = {0.5: 0x1, 1.0: 0x2, 1.5: 0x3, 2.0: 0x4, 6.0: 0x7, -6.0: 0xF}


def f32(x):
    return int(np.float32(x).view(np.uint32))


def run(ins, a_row, b_col, c, sa_row, sb_col, *, model=None):
    """D[0, 0] bits with row 0 of A, column 0 of B, and their scales given (rest zero)."""
    K = ins.k // (2 if ins.sparse else 1)
    nblk = operands.num_blocks(ins)
    A = np.zeros((16, K), np.uint32)
    B = np.zeros((ins.k, 8), np.uint32)
    C = np.zeros((16, 8), np.uint32)
    SA = np.full((16, nblk), 127 if ins.stype == "ue8m0" else 0x38, np.uint32)
    SB = np.full((nblk, 8), 127 if ins.stype == "ue8m0" else 0x38, np.uint32)
    A[0, : len(a_row)] = a_row
    B[: len(b_col), 0] = b_col
    C[0, 0] = c
    SA[0] = sa_row
    SB[:, 0] = sb_col
    D = ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C), scale_a=SA, scale_b=SB, model=model)
    return int(bits32(D)[0, 0])


MX8 = form("mxf8f6f4", "e4m3", "e4m3")


def test_product_model_scale_pushes_products_below_the_window():
    # C = 1 (e_max = 0, unit 2**-25). 16 products 1.5 * 1.5 = 2.25 scaled by 2**-27
    # (ue8m0 100) and 2**0: each term 2.25 * 2**-27 = 0.5625 units -> truncated to 0: D = 1.
    # A model that scales the sum instead would add 16 * 2.25 * 2**-27 = 1.125 * 2**-22.
    # Exact: 1 + 36 * 2**-27 = 1 + 2.25 * 2**-23 -> nearest -> 1 + 2 * 2**-23.
    a, b = [E4M3[1.5]] * 16, [E4M3[1.5]] * 16
    assert run(MX8, a, b, f32(1.0), 100, 127) == f32(1.0)
    assert run(MX8, a, b, f32(1.0), 100, 127, model="exact") == f32(1 + 2.0**-22)
    # scale 2**-24 (103): each term 2.25 * 2**-24 = 4.5 units -> 4 units = 2**-23; 16 of
    # them = 2**-19: D = 1 + 2**-19 (the per-term truncation loses 16 * 0.5 units)
    assert run(MX8, a, b, f32(1.0), 103, 127) == f32(1 + 2.0**-19)


def test_product_model_scales_enter_the_exponent_before_alignment():
    # One product 1 * 1 with scales 2**-40 * 2**-60 = 2**-100 and C = 2**-100 (f32
    # 0x0D800000): e_max = -100, both terms exact -> D = 2**-99 (a model that truncates
    # against the unscaled product exponent 0 would drop C entirely).
    assert run(MX8, [E4M3[1.0]], [E4M3[1.0]], f32(2.0**-100), 87, 67) == f32(2.0**-99)
    # The largest scales overflow f32: 448 * 448 * 2**127 * 2**127 -> +Inf; with a
    # negated product -> -Inf
    assert run(MX8, [E4M3[448.0]], [E4M3[448.0]], 0, 254, 254) == 0x7F800000
    assert run(MX8, [E4M3[448.0] | 0x80], [E4M3[448.0]], 0, 254, 254) == 0xFF800000
    # subnormal elements are exact: 1 * 1 + 1 * 2**-9 (e4m3 0x01)
    assert run(MX8, [E4M3[1.0]] * 2, [E4M3[1.0], 0x01], 0, 127, 127) == f32(1 + 2.0**-9)
    # f32 truncation: C = 2**-24 + 2**-25 is kept in the window (3 units of 2**-25), but
    # 1 + 0.75 * 2**-23 truncates to 1
    assert run(MX8, [E4M3[1.0]], [E4M3[1.0]], f32(2.0**-24 + 2.0**-25), 127, 127) == f32(1.0)


def test_product_model_nan_scale_and_specials():
    # a NaN scale (ue8m0 0xFF) makes every term NaN, even zero products
    assert run(MX8, [0], [0], 0, 0xFF, 127) == 0x7FFFFFFF
    assert run(MX8, [E4M3[1.0]], [E4M3[1.0]], f32(1.0), 127, 0xFF) == 0x7FFFFFFF
    # e5m2 Inf times a finite scaled value is Inf; Inf * 0 is NaN; an all-zero sum is +0
    ins = form("mxf8f6f4", "e5m2", "e4m3")
    assert run(ins, [0x7C], [E4M3[1.0]], 0, 1, 1) == 0x7F800000
    assert run(ins, [0x7C], [0], 0, 127, 127) == 0x7FFFFFFF
    assert run(ins, [0x80], [E4M3[1.0]], 0x80000000, 127, 127) == 0


def test_product_model_reads_containers():
    # kind::mxf8f6f4 e2m1 sits in bits [5:2]: 0b11_0010_11 is 1.0 with padding set;
    # e3m2 in bits [5:0]: 0b11_001100 is 1.0 (bias 3)
    ins = form("mxf8f6f4", "e2m1", "e3m2")
    assert run(ins, [0b11001011], [0b11001100], 0, 126, 127) == f32(0.5)


NV4 = form("mxf4nvf4", scale_vec="4X")
MXF4 = form("mxf4")


def test_group_model_sums_groups_exactly():
    # group 0 (k 0-15): sixteen 6 * 6 = 576; group 1 (k 16-31): sixteen 6 * -6 = -576;
    # block 1 (k 32-63, scale 2**-30) holds 0.5 * 0.5 = 0.25 -> 2**-32.
    # e_max = 0 (the scale exponent of groups 0/1, not 576's exponent 9): unit 2**-35, the
    # small term survives: D = 2**-32. A model that normalized the group sums (e_max = 9,
    # unit 2**-26) or aligned single products (largest 36, unit 2**-30) would give 0.
    a = [E2M1[6.0]] * 32 + [E2M1[0.5]]
    b = [E2M1[6.0]] * 16 + [E2M1[-6.0]] * 16 + [E2M1[0.5]]
    assert run(MXF4, a, b, 0, [127, 97], [127, 127]) == f32(2.0**-32)
    # with block 1 scaled by 2**-34 the term is 2**-36, below the unit: D = +0; exact keeps it
    assert run(MXF4, a, b, 0, [127, 93], [127, 127]) == 0
    assert run(MXF4, a, b, 0, [127, 93], [127, 127], model="exact") == f32(2.0**-36)


def test_group_model_cancelled_group_keeps_its_exponent():
    # group 0: 6*6 + 6*-6 = 0 (nonzero products that cancel) with scale 2**10: it still
    # counts with exponent 10 for e_max (only all-zero groups take e_zero), so the unit is
    # 2**-25 and group 2's 0.25 * 2**-26 = 2**-28 is truncated: D = +0.
    a = [E2M1[6.0], E2M1[6.0]] + [0] * 30 + [E2M1[0.5]]
    b = [E2M1[6.0], E2M1[-6.0]] + [0] * 30 + [E2M1[0.5]]
    assert run(MXF4, a, b, 0, [137, 101], [127, 127]) == 0
    # the same with group 0 all zero (e_zero -139): e_max = -26, D = 2**-28 exactly
    assert run(MXF4, [0, 0] + a[2:], b, 0, [137, 101], [127, 127]) == f32(2.0**-28)
    assert run(MXF4, a, b, 0, [137, 101], [127, 127], model="exact") == f32(2.0**-28)


def test_group_model_ue4m3_scales():
    ones = [E2M1[1.0]] * 16
    # scale significands multiply the group sum exactly: 1 * 1.5 (0x3C) * 1.25 (0x3A)
    assert run(NV4, ones[:1], ones[:1], 0, [0x3C, 0x38, 0x38, 0x38], [0x3A] + [0x38] * 3) == f32(
        1.875
    )
    # sixteen 6 * 6 = 576 times 1.75 * 1.75 (0x3E) = 1764
    six = [E2M1[6.0]] * 16
    assert run(NV4, six, six, 0, [0x3E, 0, 0, 0], [0x3E, 0, 0, 0]) == f32(1764.0)
    # the sign bit of a ue4m3 scale is ignored: 0xB8 is 1.0
    assert run(NV4, ones, ones, 0, [0xB8, 0, 0, 0], [0xB8, 0, 0, 0]) == f32(16.0)
    # subnormal scale 0x01 = 2**-9: 16 * 2**-9 = 2**-5
    assert run(NV4, ones, ones, 0, [0x01, 0, 0, 0], [0x38, 0, 0, 0]) == f32(2.0**-5)
    # a zero scale removes its group (and its exponent): D = C
    assert run(NV4, ones, ones, f32(3.0), [0x00, 0, 0, 0], [0x38] * 4) == f32(3.0)
    # NaN scales: 0x7F and 0xFF (sign ignored) give NaN, even for zero products
    assert run(NV4, [], [], 0, [0x38, 0x38, 0x7F, 0x38], [0x38] * 4) == 0x7FFFFFFF
    assert run(NV4, [], [], 0, [0x38] * 4, [0x38, 0xFF, 0x38, 0x38]) == 0x7FFFFFFF
    assert run(MXF4, [], [], 0, [127, 0xFF], [127, 127]) == 0x7FFFFFFF


def test_group_model_c_and_truncation():
    # C = 2**20 (exponent 20 > the groups' 0): unit 2**-15; 16 * 0.25 = 4 survives,
    # 0.25 * 2**-20 in block 1 does not: D = 2**20 + 4
    a = [E2M1[0.5]] * 16 + [0] * 16 + [E2M1[0.5]]
    b = [E2M1[0.5]] * 16 + [0] * 16 + [E2M1[0.5]]
    assert run(MXF4, a, b, f32(2.0**20), [127, 107], [127, 127]) == f32(2.0**20 + 4)
    # f32 truncation of the sum: 1 + 1.5 * 2**-23 (block 1: 1.5 * 2**-23) -> 1 + 2**-23
    # (RZ); exact: a tie between 1 + 2**-23 and 1 + 2**-22 -> even -> 1 + 2**-22
    a = [E2M1[1.0]] + [0] * 31 + [E2M1[1.5]]
    b = [E2M1[1.0]] + [0] * 31 + [E2M1[1.0]]
    assert run(MXF4, a, b, 0, [127, 104], [127, 127]) == f32(1 + 2.0**-23)
    assert run(MXF4, a, b, 0, [127, 104], [127, 127], model="exact") == f32(1 + 2.0**-22)
    # C = -Inf wins over finite groups; C NaN -> canonical NaN
    assert run(MXF4, a, b, 0xFF800000, [127, 127], [127, 127]) == 0xFF800000
    assert run(MXF4, a, b, 0x7FC12345, [127, 127], [127, 127]) == 0x7FFFFFFF


def _sparse_mma(ins, A, B, idx, SA, SB):
    """``ins.mma`` from C = +0, jitted (a concrete sparse call runs op by op)."""
    C = np.zeros((16, 8), np.uint32)
    f = lambda *x: ins.mma(*x[:3], metadata=x[3], scale_a=x[4], scale_b=x[5])  # noqa: E731
    return jax.jit(f)(A, B, C, idx, SA, SB)


def test_sparse_forms_scale_stored_products_by_their_dense_block():
    # sparse mxf4nvf4 k128, 4X: stored products 0-15 are dense k 0-31 (block 0), 16-31 are
    # dense 32-63 (block 1). Metadata idx picks dense columns; B rows follow it.
    ins = form("mxf4nvf4", scale_vec="4X", sparse=True)
    A = np.zeros((16, 64), np.uint32)
    A[0, 0] = A[0, 16] = E2M1[1.0]
    idx = np.array([[8 * (k // 4) + (k % 4) for k in range(64)]] * 16, np.int32)  # 4:8 pairs
    B = np.zeros((128, 8), np.uint32)
    B[0, 0] = B[32, 0] = E2M1[1.0]
    SA = np.full((16, 4), 0x38, np.uint32)
    SA[0] = [0x40, 0x48, 0x38, 0x38]  # 2, 4
    SB = np.full((4, 8), 0x38, np.uint32)
    D = _sparse_mma(ins, A, B, idx, SA, SB)
    assert int(bits32(D)[0, 0]) == f32(6.0)  # 1 * 2 + 1 * 4
    # sparse mxf8f6f4 k64: one scale for all 32 stored products
    ins = form("mxf8f6f4", "e4m3", "e4m3", sparse=True)
    A = np.zeros((16, 32), np.uint32)
    A[0, 0] = A[0, 31] = E4M3[1.0]
    idx = np.array([[4 * (k // 2) + (k % 2) for k in range(32)]] * 16, np.int32)
    B = np.zeros((64, 8), np.uint32)
    B[0, 0] = B[61, 0] = E4M3[1.0]
    SA, SB = np.full((16, 1), 128, np.uint32), np.full((1, 8), 129, np.uint32)
    D = _sparse_mma(ins, A, B, idx, SA, SB)
    assert int(bits32(D)[0, 0]) == f32(16.0)  # (1 + 1) * 2 * 4


# ---------------------------------------------------------------------------------------
# The models against the Fraction oracles, on random raw bits
ORACLE_FORMS = [
    form("mxf8f6f4", "e4m3", "e5m2"),
    form("mxf8f6f4", "e2m1", "e3m2"),
    form("mxf8f6f4", "e2m3", "e5m2", sparse=True),
    form("mxf4"),
    form("mxf4nvf4", scale_vec="4X"),
    form("mxf4nvf4", scale_vec="2X", sparse=True),
]


def oracle_d(ins, A, B, C, SA, SB, idx, model):
    nblk = SA.shape[1]
    out = np.zeros((16, 8), np.uint32)
    for m in range(16):
        for n in range(8):
            rows = idx[m] if idx is not None else range(B.shape[0])
            a = [int(x) for x in A[m]]
            b = [int(B[k, n]) for k in rows]
            if ins.kind == "mxf8f6f4":
                a = [container_element(ins.atype, x) for x in a]
                b = [container_element(ins.btype, x) for x in b]
            sa, sb = [int(SA[m, j]) for j in range(nblk)], [int(SB[j, n]) for j in range(nblk)]
            if model == "exact":
                out[m, n] = oracle_exact(ins, a, b, int(C[m, n]), sa, sb)
            elif ins.kind == "mxf8f6f4":
                out[m, n] = oracle_product_model(ins, a, b, int(C[m, n]), sa, sb)
            else:
                out[m, n] = oracle_group_model(ins, a, b, int(C[m, n]), sa, sb)
    return out


@pytest.mark.parametrize(
    "index,model",
    params(
        [(i, m) for i in range(len(ORACLE_FORMS)) for m in (None, "exact")],
        lambda im: im[0],
        salt="oracle",
        ids=lambda im: f"{im[0]}-{im[1]}",
    ),
)
def test_models_match_the_fraction_oracle(index, model):
    ins = ORACLE_FORMS[index]
    rng = np.random.default_rng(100 + index)
    nblk = operands.num_blocks(ins)
    K = ins.k // 2 if ins.sparse else ins.k
    for trial in range(3):
        A = random_elements(rng, ins, (16, K))
        B = random_elements(rng, ins, (ins.k, 8))
        if trial == 2:  # many zeros: e_zero and cancellation paths
            A[rng.random(A.shape) < 0.7] = 0
        C = random_c(rng, (16, 8), -8 if ins.kind != "mxf8f6f4" else -20, 12)
        spread = (2, 6, 30)[trial]
        SA = random_scales(rng, ins.stype, (16, nblk), spread)
        SB = random_scales(rng, ins.stype, (nblk, 8), spread)
        idx = None
        kw = {}
        if ins.sparse:
            chunk = 8 if ins.atype == "e2m1" and ins.kind != "mxf8f6f4" else 4
            per = chunk // 2
            base = np.arange(K) // per * chunk
            if chunk == 4:
                offs = np.array([[0, 1], [1, 3], [0, 2], [2, 3]])
            else:
                offs = np.array([[0, 1, 2, 3], [2, 3, 6, 7], [0, 1, 4, 5], [4, 5, 6, 7]])
            pick = rng.integers(0, 4, (16, K // per))
            idx = (base[None, :] + offs[pick].reshape(16, K)).astype(np.int32)
            kw["metadata"] = idx
        D = ins.mma(A, B, C, scale_a=SA, scale_b=SB, model=model, **kw)
        want = oracle_d(ins, A, B, C, SA, SB, idx, model)
        np.testing.assert_array_equal(bits32(D), want, err_msg=f"trial {trial}")


def test_jit_and_vmap():
    ins = NV4
    rng = np.random.default_rng(7)
    nr = ins.nregs
    a, b = u32(rng, (3, 32, nr["a"])), u32(rng, (3, 32, nr["b"]))
    c = random_c(rng, (3, 32, nr["c"]))
    sa, sb = u32(rng, (3, 32)) & np.uint32(0x3F3F3F3F), u32(rng, (3, 32)) & np.uint32(0x3F3F3F3F)
    kw = dict(byte_id_a=0, thread_id_a=1, byte_id_b=0, thread_id_b=2)

    def f(a, b, c, sa, sb):
        return ins(a, b, c, scale_a=sa, scale_b=sb, **kw)

    eager = np.stack([np.asarray(f(a[i], b[i], c[i], sa[i], sb[i])) for i in range(3)])
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(a, b, c, sa, sb)), eager)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(f))(a, b, c, sa, sb)), eager)
    # one warp's scales broadcast against a batch of operands
    one = jax.jit(f)(a, b, c, sa[0], sb[0])
    np.testing.assert_array_equal(np.asarray(one[0]), eager[0])


@pytest.mark.full  # the live MMA-Sim comparison; its stored outputs are checked in the quick run
def test_agrees_with_the_mmasim_package():
    """The published model itself (MMA-Sim, arXiv:2511.10909), where it is installed.

    Optional: ``mmasim`` and PyTorch are not dependencies of jaxmma (the suite skips this
    without them). Random raw bits, including NaN/Inf/subnormal elements and NaN, zero and
    full-range scales, for every dense form.
    """
    torch = pytest.importorskip("torch")
    sim = pytest.importorskip("mmasim.nv_ptx")
    rng = np.random.default_rng(2511)
    tdtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}

    def operand(ins, x, fmt):  # [rows, k] uint32 -> MMA-Sim's operand
        x = x.astype(np.uint8)
        if ins.kind != "mxf8f6f4":  # two e2m1 per byte, the first in the high nibble
            return torch.from_numpy((x[:, 0::2] << 4) | x[:, 1::2])
        t = torch.from_numpy(np.ascontiguousarray(x))
        return t.view(tdtype[fmt]) if fmt in tdtype else t

    for ins in DENSE:
        nblk = operands.num_blocks(ins)
        block = ins.k // nblk
        op = sim.MMABlockScale(
            "RTX Blackwell",
            f"m16n8k{ins.k}.kind::{ins.kind}.block{block}.f32.{ins.atype}.{ins.btype}.f32."
            f"{ins.stype}",
        )
        for trial in range(3):
            A = random_elements(rng, ins, (16, ins.k))
            B = random_elements(rng, ins, (ins.k, 8))
            if trial == 1:
                A[rng.random(A.shape) < 0.6] = 0
            C = random_c(rng, (16, 8), -20, 12)
            SA = random_scales(rng, ins.stype, (16, nblk), (2, 30, 60)[trial], nan=0.02)
            SB = random_scales(rng, ins.stype, (nblk, 8), (2, 30, 60)[trial], nan=0.02)

            sdt = torch.float8_e8m0fnu if ins.stype == "ue8m0" else torch.float8_e4m3fn
            D = op(
                operand(ins, A, ins.atype),
                operand(ins, B.T, ins.btype).T,
                torch.from_numpy(C.view(np.float32).copy()),
                torch.from_numpy(SA.astype(np.uint8)).view(sdt),
                torch.from_numpy(SB.astype(np.uint8)).view(sdt),
            )
            want = D.view(torch.int32).numpy().view(np.uint32)
            got = bits32(ins.mma(A, B, C, scale_a=SA, scale_b=SB))
            np.testing.assert_array_equal(got, want, err_msg=f"{ins.text} trial {trial}")
