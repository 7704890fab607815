"""Tests of jaxmma.operands._layouts (PTX ISA 9.7.14 fragment maps).

The oracle here is kept apart from the code it checks: the ``spec_*`` functions below are
the row/column formulas of the spec, transcribed section by section as printed (with
``groupID`` and ``threadID_in_group`` spelled out), evaluated in plain Python per lane and
per element, and compared with the full tables of ``_layouts``.
"""

from __future__ import annotations

import doctest
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmma.operands import _layouts as L


@pytest.fixture(autouse=True)
def _strict_numpy():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


# ---------------------------------------------------------------------------------------
# Explicit lists of every configuration (9.7.14.1, 9.7.14.5.14, 9.7.14.6.3)
F8F6F4 = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")

# (shape, atype, kind, accumulator types)
DENSE = [
    ("m8n8k4", "f16", None, ("f16", "f32")),
    ("m8n8k4", "f64", None, ("f64",)),
    ("m8n8k16", "s8", None, ("s32",)),
    ("m8n8k16", "u8", None, ("s32",)),
    ("m8n8k32", "s4", None, ("s32",)),
    ("m8n8k32", "u4", None, ("s32",)),
    ("m8n8k128", "b1", None, ("s32",)),
    ("m16n8k4", "tf32", None, ("f32",)),
    ("m16n8k4", "f64", None, ("f64",)),
    ("m16n8k8", "f16", None, ("f16", "f32")),
    ("m16n8k8", "bf16", None, ("f32",)),
    ("m16n8k8", "tf32", None, ("f32",)),
    ("m16n8k8", "f64", None, ("f64",)),
    ("m16n8k16", "f16", None, ("f16", "f32")),
    ("m16n8k16", "bf16", None, ("f32",)),
    ("m16n8k16", "f64", None, ("f64",)),
    ("m16n8k16", "s8", None, ("s32",)),
    ("m16n8k16", "u8", None, ("s32",)),
    ("m16n8k16", "e4m3", None, ("f16", "f32")),
    ("m16n8k16", "e5m2", None, ("f16", "f32")),
    ("m16n8k32", "s8", None, ("s32",)),
    ("m16n8k32", "u8", None, ("s32",)),
    ("m16n8k32", "s4", None, ("s32",)),
    ("m16n8k32", "u4", None, ("s32",)),
    ("m16n8k32", "e4m3", None, ("f16", "f32")),
    ("m16n8k32", "e5m2", None, ("f16", "f32")),
    *[("m16n8k32", t, "f8f6f4", ("f16", "f32")) for t in F8F6F4],
    *[("m16n8k32", t, "mxf8f6f4", ("f32",)) for t in F8F6F4],
    ("m16n8k64", "s4", None, ("s32",)),
    ("m16n8k64", "u4", None, ("s32",)),
    ("m16n8k64", "e2m1", "mxf4", ("f32",)),
    ("m16n8k64", "e2m1", "mxf4nvf4", ("f32",)),
    ("m16n8k128", "b1", None, ("s32",)),
    ("m16n8k256", "b1", None, ("s32",)),
]

SPARSE = [
    ("m16n8k16", "f16", None, ("f16", "f32")),
    ("m16n8k16", "bf16", None, ("f32",)),
    ("m16n8k32", "f16", None, ("f16", "f32")),
    ("m16n8k32", "bf16", None, ("f32",)),
    ("m16n8k8", "tf32", None, ("f32",)),
    ("m16n8k16", "tf32", None, ("f32",)),
    ("m16n8k32", "s8", None, ("s32",)),
    ("m16n8k32", "u8", None, ("s32",)),
    ("m16n8k64", "s8", None, ("s32",)),
    ("m16n8k64", "u8", None, ("s32",)),
    ("m16n8k64", "e4m3", None, ("f32",)),
    ("m16n8k64", "e5m2", None, ("f32",)),
    *[("m16n8k64", t, "f8f6f4", ("f16", "f32")) for t in F8F6F4],
    *[("m16n8k64", t, "mxf8f6f4", ("f32",)) for t in F8F6F4],
    ("m16n8k64", "s4", None, ("s32",)),
    ("m16n8k64", "u4", None, ("s32",)),
    ("m16n8k128", "s4", None, ("s32",)),
    ("m16n8k128", "u4", None, ("s32",)),
    ("m16n8k128", "e2m1", "mxf4", ("f32",)),
    ("m16n8k128", "e2m1", "mxf4nvf4", ("f32",)),
]


def _cases():
    """(sparse, shape, atype, kind, operand, ctype, alayout, blayout) for every operand."""
    out = []
    for sparse, forms in ((False, DENSE), (True, SPARSE)):
        for shape, atype, kind, ctypes in forms:
            quad_pair = shape == "m8n8k4" and atype == "f16"
            lays = ("row", "col") if quad_pair else (None,)
            for lay in lays:
                out.append((sparse, shape, atype, kind, "a", None, lay or "row", "col"))
                out.append((sparse, shape, atype, kind, "b", None, "row", lay or "col"))
            for ctype in ctypes:
                out.append((sparse, shape, atype, kind, "c", ctype, "row", "col"))
    return out


CASES = _cases()


def _case_id(case):
    sparse, shape, atype, kind, operand, ctype, alay, blay = case
    parts = ["sp" if sparse else "dense", shape, atype, kind or "", operand, ctype or ""]
    if shape == "m8n8k4" and atype == "f16" and operand != "c":
        parts.append(alay if operand == "a" else blay)
    return "-".join(p for p in parts if p)


def _layout(case):
    sparse, shape, atype, kind, operand, ctype, alay, blay = case
    return L.mma_layout(
        operand,
        shape=shape,
        atype=atype,
        ctype=ctype,
        alayout=alay,
        blayout=blay,
        sparse=sparse,
        kind=kind,
    )


def _mnk(shape):
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def _elem_bits(dtype, kind):
    if dtype == "e2m1":
        return 4 if kind in ("mxf4", "mxf4nvf4") else 8
    bits = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "s32": 32, "f64": 64, "b1": 1}
    return bits.get(dtype, 4 if dtype in ("s4", "u4") else 8)


def _assert_bijection(mat, row, col, dims):
    nmat, nrows, ncols = dims
    assert mat.min() >= 0 and row.min() >= 0 and col.min() >= 0
    assert mat.max() < nmat and row.max() < nrows and col.max() < ncols
    count = np.zeros(dims, np.int64)
    np.add.at(count, (mat, row, col), 1)
    assert (count == 1).all(), f"elements held {count.min()}..{count.max()} times"


# ---------------------------------------------------------------------------------------
# Bijection of every mma / mma.sp operand
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_mma_bijection(case):
    sparse, shape, atype, kind, operand, ctype, _, _ = case
    lay = _layout(case)
    m, n, k = _mnk(shape)
    nmat = 4 if (shape == "m8n8k4" and atype == "f16") else 1
    dims = {"a": (m, k // 2 if sparse else k), "b": (k, n), "c": (m, n)}[operand]
    nelem = lay.nregs * lay.elems_per_reg
    assert lay.mat.shape == lay.row.shape == lay.col.shape == (32, nelem)
    assert all(x.dtype == np.int32 and not x.flags.writeable for x in lay[:3])
    bits = _elem_bits(ctype if operand == "c" else atype, kind)
    assert lay.elem_bits == bits
    assert lay.elems_per_reg == max(1, 32 // bits)
    _assert_bijection(lay.mat, lay.row, lay.col, (nmat, *dims))


# ---------------------------------------------------------------------------------------
# The spec's formulas, transcribed (lane, i) -> (row, col)
def _g(lane):
    return lane >> 2  # groupID


def _t(lane):
    return lane % 4  # threadID_in_group


# 9.7.14.5.1 mma.m8n8k4 .f16
MMA_COMPUTATION_LANES = {  # "MMA computation 1..4": low group and high group
    0: (*range(0, 4), *range(16, 20)),
    1: (*range(4, 8), *range(20, 24)),
    2: (*range(8, 12), *range(24, 28)),
    3: (*range(12, 16), *range(28, 32)),
}


def spec_884_f16_a_row(lane, i):
    row = lane % 4 if lane < 16 else (lane % 4) + 4
    return row, i


def spec_884_f16_a_col(lane, i):
    row = i % 4 if lane < 16 else (i % 4) + 4
    return row, lane % 4


def spec_884_f16_b_row(lane, i):
    col = i if lane < 16 else i + 4
    return lane % 4, col


def spec_884_f16_b_col(lane, i):
    col = lane % 4 if lane < 16 else (lane % 4) + 4
    return i, col


def spec_884_f16_c_f16(lane, i):
    row = lane % 4 if lane < 16 else (lane % 4) + 4
    return row, i


def spec_884_f16_c_f32(lane, i):
    x = (lane & 0b1) + (i & 0b10)
    row = x if lane < 16 else x + 4
    col = (i & 0b100) + (lane & 0b10) + (i & 0b1)
    return row, col


# 9.7.14.5.2 mma.m8n8k4 .f64
def spec_884_f64_a(lane, i):
    return lane >> 2, lane % 4


def spec_884_f64_b(lane, i):
    return lane % 4, lane >> 2


def spec_m8_c(lane, i):  # 9.7.14.5.2-5: all m8n8 accumulators
    return _g(lane), (_t(lane) * 2) + (i & 0x1)


# 9.7.14.5.3 m8n8k16, 9.7.14.5.4 m8n8k32, 9.7.14.5.5 m8n8k128
def spec_8816_a(lane, i):
    return _g(lane), (_t(lane) * 4) + i


def spec_8816_b(lane, i):
    return (_t(lane) * 4) + i, _g(lane)


def spec_8832_a(lane, i):
    return _g(lane), (_t(lane) * 8) + i


def spec_8832_b(lane, i):
    return (_t(lane) * 8) + i, _g(lane)


def spec_88128_a(lane, i):
    return _g(lane), (_t(lane) * 32) + i


def spec_88128_b(lane, i):
    return (_t(lane) * 32) + i, _g(lane)


# 9.7.14.5.6 m16n8k4 (.tf32 and .f64)
def spec_1684_a(lane, i):
    row = _g(lane) if i == 0 else _g(lane) + 8
    return row, _t(lane)


def spec_1684_b(lane, i):
    return _t(lane), _g(lane)


def spec_m16_c(lane, i):  # 9.7.14.5.6-13: "row = groupID for c0 and c1, +8 for c2 and c3"
    row = _g(lane) if i < 2 else _g(lane) + 8
    return row, (_t(lane) * 2) + (i & 0x1)


# 9.7.14.5.7 m16n8k8
def spec_1688_a_f16(lane, i):
    row = _g(lane) if i in (0, 1) else _g(lane) + 8
    return row, _t(lane) * 2 + (i & 0x1)


def spec_1688_a_tf32(lane, i):  # also .f64
    row = _g(lane) if i in (0, 2) else _g(lane) + 8
    col = _t(lane) if i in (0, 1) else _t(lane) + 4
    return row, col


def spec_1688_b_f16(lane, i):
    return (_t(lane) * 2) + i, _g(lane)


def spec_1688_b_tf32(lane, i):  # also .f64
    row = _t(lane) if i == 0 else _t(lane) + 4
    return row, _g(lane)


# 9.7.14.5.8 m16n8k16 floating point
def spec_16816_a_f16(lane, i):
    row = _g(lane) if (0 <= i < 2 or 4 <= i < 6) else _g(lane) + 8
    col = (_t(lane) * 2) + (i & 0x1) if i < 4 else (_t(lane) * 2) + (i & 0x1) + 8
    return row, col


def spec_16816_a_f64(lane, i):
    row = _g(lane) if i % 2 == 0 else _g(lane) + 8
    col = (i * 2) + _t(lane) if i % 2 == 0 else (i * 2) - 2 + _t(lane)
    return row, col


def spec_16816_b_f16(lane, i):
    row = (_t(lane) * 2) + (i & 0x1) if i < 2 else (_t(lane) * 2) + (i & 0x1) + 8
    return row, _g(lane)


def spec_16816_b_f64(lane, i):
    return _t(lane) + (i * 4), _g(lane)


# 9.7.14.5.9 m16n8k16 integer / .e4m3 / .e5m2
def spec_16816_a_i8(lane, i):
    row = _g(lane) if i < 4 else _g(lane) + 8
    return row, (_t(lane) * 4) + (i & 0x3)


def spec_16816_b_i8(lane, i):
    return (_t(lane) * 4) + i, _g(lane)


# 9.7.14.5.10 m16n8k32
def spec_16832_a_i4(lane, i):
    row = _g(lane) if i < 8 else _g(lane) + 8
    return row, (_t(lane) * 8) + (i & 0x7)


def spec_16832_a_i8(lane, i):
    row = _g(lane) if (0 <= i < 4 or 8 <= i < 12) else _g(lane) + 8
    col = (_t(lane) * 4) + (i & 0x3) if i < 8 else (_t(lane) * 4) + (i & 0x3) + 16
    return row, col


def spec_16832_b_i4(lane, i):
    return (_t(lane) * 8) + (i & 0x7), _g(lane)


def spec_16832_b_i8(lane, i):
    row = (_t(lane) * 4) + (i & 0x3) if i < 4 else (_t(lane) * 4) + (i & 0x3) + 16
    return row, _g(lane)


# 9.7.14.5.11 m16n8k64
def spec_16864_a(lane, i):
    row = _g(lane) if (0 <= i < 8 or 16 <= i < 24) else _g(lane) + 8
    col = (_t(lane) * 8) + (i & 0x7) if i < 16 else (_t(lane) * 8) + (i & 0x7) + 32
    return row, col


def spec_16864_b(lane, i):
    row = (_t(lane) * 8) + (i & 0x7) if i < 8 else (_t(lane) * 8) + (i & 0x7) + 32
    return row, _g(lane)


# 9.7.14.5.12 m16n8k128
def spec_168128_a(lane, i):
    row = _g(lane) if i < 32 else _g(lane) + 8
    return row, (_t(lane) * 32) + (i & 0x1F)


def spec_168128_b(lane, i):
    return (_t(lane) * 32) + i, _g(lane)


# 9.7.14.5.13 m16n8k256
def spec_168256_a(lane, i, *, as_printed=False):
    row = _g(lane) if (0 <= i < 32 or 64 <= i < 96) else _g(lane) + 8
    if i < 64:
        # Spec erratum: printed as "(threadID_in_group * 32) + i for ai where i < 64",
        # which is no bijection (see test_m16n8k256_a_erratum); the i >= 64 branch and
        # m16n8k128 use (i & 0x1F).
        col = (_t(lane) * 32) + (i if as_printed else i & 0x1F)
    else:
        col = (_t(lane) * 32) + (i & 0x1F) + 128
    return row, col


def spec_168256_b(lane, i):
    row = (_t(lane) * 32) + (i & 0x1F) if i < 32 else (_t(lane) * 32) + (i & 0x1F) + 128
    return row, _g(lane)


# 9.7.14.6.2 sparse A: (row, firstcol, width) per element, as printed; the compressed
# column is derived below from "non-zero elements out of `width` consecutive elements".
def spec_sp16816_a_f16(lane, i):  # 9.7.14.6.2.1
    row = _g(lane) if i in (0, 1) else _g(lane) + 8
    return row, _t(lane) * 4, 4


def spec_sp16832_a_f16(lane, i):  # 9.7.14.6.2.2
    row = _g(lane) if (0 <= i < 2 or 4 <= i < 6) else _g(lane) + 8
    firstcol = _t(lane) * 4 if i < 4 else (_t(lane) * 4) + 16
    return row, firstcol, 4


def spec_sp16816_a_tf32(lane, i):  # 9.7.14.6.2.3
    row = _g(lane) if i in (0, 2) else _g(lane) + 8
    firstcol = _t(lane) * 2 if i in (0, 1) else (_t(lane) * 2) + 8
    return row, firstcol, 2


def spec_sp1688_a_tf32(lane, i):  # 9.7.14.6.2.4
    row = _g(lane) if i == 0 else _g(lane) + 8
    return row, _t(lane) * 2, 2


def spec_sp16832_a_i8(lane, i):  # 9.7.14.6.2.5
    row = _g(lane) if 0 <= i < 4 else _g(lane) + 8
    return row, _t(lane) * 8, 8


def spec_sp16864_a_i8(lane, i):  # 9.7.14.6.2.6 (.u8/.s8/.e4m3/.e5m2/.e3m2/.e2m3/.e2m1)
    row = _g(lane) if (0 <= i < 4 or 8 <= i < 12) else _g(lane) + 8
    firstcol = _t(lane) * 8 if i < 8 else (_t(lane) * 8) + 32
    return row, firstcol, 8


def spec_sp16864_a_i4(lane, i):  # 9.7.14.6.2.7
    row = _g(lane) if 0 <= i < 8 else _g(lane) + 8
    return row, _t(lane) * 16, 16


def spec_sp168128_a_i4(lane, i):  # 9.7.14.6.2.8 (.u4/.s4/.e2m1)
    row = _g(lane) if (0 <= i < 8 or 16 <= i < 24) else _g(lane) + 8
    firstcol = _t(lane) * 16 if i < 16 else (_t(lane) * 16) + 64
    return row, firstcol, 16


# Sparse B shown only as figures (Figures 121, 132-135, 142-145). Their captions split B
# into bands of 8, 16 and 32 rows; each band is laid out as the dense B of the same type
# (9.7.14.5.7, 9.7.14.5.10, 9.7.14.5.11), the next band in the next register(s). (cutlass
# SM80_SPARSE_16x8x32 BLayout, k = 2t + v0 + 8*v1, agrees for .f16.)
def spec_sp16832_b_f16(lane, i):
    return (_t(lane) * 2) + (i & 0x1) + 8 * (i >> 1), _g(lane)


def spec_sp16864_b_i8(lane, i):
    return (_t(lane) * 4) + (i & 0x3) + 16 * (i >> 2), _g(lane)


def spec_sp168128_b_i4(lane, i):
    return (_t(lane) * 8) + (i & 0x7) + 32 * (i >> 3), _g(lane)


def _spec_fn(sparse, shape, atype, kind, operand, ctype, alay, blay):
    """The spec formula of one operand, chosen the way the spec's sections are organised."""
    i8 = atype in ("s8", "u8") or (atype in F8F6F4 and kind not in ("mxf4", "mxf4nvf4"))
    i4 = atype in ("s4", "u4") or (atype == "e2m1" and kind in ("mxf4", "mxf4nvf4"))
    if operand == "c":
        if shape == "m8n8k4" and atype == "f16":
            return spec_884_f16_c_f16 if ctype == "f16" else spec_884_f16_c_f32
        return spec_m8_c if shape.startswith("m8n8") else spec_m16_c
    if sparse and operand == "a":
        return {
            ("m16n8k16", "f16"): spec_sp16816_a_f16,
            ("m16n8k32", "f16"): spec_sp16832_a_f16,
            ("m16n8k16", "tf32"): spec_sp16816_a_tf32,
            ("m16n8k8", "tf32"): spec_sp1688_a_tf32,
            ("m16n8k32", "i8"): spec_sp16832_a_i8,
            ("m16n8k64", "i8"): spec_sp16864_a_i8,
            ("m16n8k64", "i4"): spec_sp16864_a_i4,
            ("m16n8k128", "i4"): spec_sp168128_a_i4,
        }[shape, "i8" if i8 else "i4" if i4 else "f16" if atype == "bf16" else atype]
    if sparse:  # B: "the same as" the dense section, or the figures above
        return {
            ("m16n8k16", "f16"): spec_16816_b_f16,
            ("m16n8k32", "f16"): spec_sp16832_b_f16,
            ("m16n8k16", "tf32"): spec_16816_b_f64,  # Figure 82 *is* sparse-mma-16816-tf32-B
            ("m16n8k8", "tf32"): spec_1688_b_tf32,
            ("m16n8k32", "i8"): spec_16832_b_i8,
            ("m16n8k64", "i8"): spec_sp16864_b_i8,
            ("m16n8k64", "i4"): spec_16864_b,
            ("m16n8k128", "i4"): spec_sp168128_b_i4,
        }[shape, "i8" if i8 else "i4" if i4 else "f16" if atype == "bf16" else atype]
    if shape == "m8n8k4" and atype == "f16":
        return {
            ("a", "row"): spec_884_f16_a_row,
            ("a", "col"): spec_884_f16_a_col,
            ("b", "row"): spec_884_f16_b_row,
            ("b", "col"): spec_884_f16_b_col,
        }[operand, alay if operand == "a" else blay]
    cls = "f16" if atype in ("f16", "bf16") else "tf32|f64" if atype in ("tf32", "f64") else None
    cls = cls or ("i8" if i8 else "i4" if i4 else atype)
    a = {
        ("m8n8k4", "tf32|f64"): spec_884_f64_a,
        ("m8n8k16", "i8"): spec_8816_a,
        ("m8n8k32", "i4"): spec_8832_a,
        ("m8n8k128", "b1"): spec_88128_a,
        ("m16n8k4", "tf32|f64"): spec_1684_a,
        ("m16n8k8", "f16"): spec_1688_a_f16,
        ("m16n8k8", "tf32|f64"): spec_1688_a_tf32,
        ("m16n8k16", "f16"): spec_16816_a_f16,
        ("m16n8k16", "tf32|f64"): spec_16816_a_f64,
        ("m16n8k16", "i8"): spec_16816_a_i8,
        ("m16n8k32", "i4"): spec_16832_a_i4,
        ("m16n8k32", "i8"): spec_16832_a_i8,
        ("m16n8k64", "i4"): spec_16864_a,
        ("m16n8k128", "b1"): spec_168128_a,
        ("m16n8k256", "b1"): spec_168256_a,
    }
    b = {
        ("m8n8k4", "tf32|f64"): spec_884_f64_b,
        ("m8n8k16", "i8"): spec_8816_b,
        ("m8n8k32", "i4"): spec_8832_b,
        ("m8n8k128", "b1"): spec_88128_b,
        ("m16n8k4", "tf32|f64"): spec_1684_b,
        ("m16n8k8", "f16"): spec_1688_b_f16,
        ("m16n8k8", "tf32|f64"): spec_1688_b_tf32,
        ("m16n8k16", "f16"): spec_16816_b_f16,
        ("m16n8k16", "tf32|f64"): spec_16816_b_f64,
        ("m16n8k16", "i8"): spec_16816_b_i8,
        ("m16n8k32", "i4"): spec_16832_b_i4,
        ("m16n8k32", "i8"): spec_16832_b_i8,
        ("m16n8k64", "i4"): spec_16864_b,
        ("m16n8k128", "b1"): spec_168128_b,
        ("m16n8k256", "b1"): spec_168256_b,
    }
    return (a if operand == "a" else b)[shape, cls]


def _spec_tables(case, nelem):
    sparse, shape, atype, kind, operand, ctype, alay, blay = case
    fn = _spec_fn(*case)
    mat = np.zeros((32, nelem), np.int64)
    row = np.zeros((32, nelem), np.int64)
    col = np.zeros((32, nelem), np.int64)
    for lane in range(32):
        if shape == "m8n8k4" and atype == "f16":
            (mat[lane],) = [k for k, lanes in MMA_COMPUTATION_LANES.items() if lane in lanes]
        seen = []
        for i in range(nelem):
            if sparse and operand == "a":
                r, firstcol, width = fn(lane, i)
                # the width/2 non-zeros of [firstcol, firstcol + width) in register order
                rank = seen.count((r, firstcol))
                assert rank < width // 2
                seen.append((r, firstcol))
                row[lane, i], col[lane, i] = r, firstcol // 2 + rank
            else:
                row[lane, i], col[lane, i] = fn(lane, i)
    return mat, row, col


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_mma_matches_spec_formulas(case):
    lay = _layout(case)
    mat, row, col = _spec_tables(case, lay.nregs * lay.elems_per_reg)
    np.testing.assert_array_equal(lay.mat, mat)
    np.testing.assert_array_equal(lay.row, row)
    np.testing.assert_array_equal(lay.col, col)


def test_m16n8k256_a_erratum():
    """The printed "(threadID_in_group * 32) + i for i < 64" leaves A columns uncovered."""
    cells = {spec_168256_a(lane, i, as_printed=True) for lane in range(32) for i in range(128)}
    assert len(cells) < 16 * 256
    fixed = {spec_168256_a(lane, i) for lane in range(32) for i in range(128)}
    assert len(fixed) == 16 * 256


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_register_counts_match_fragment_tables(case):
    """nregs per lane as the spec's "Fragment" tables state them (derived from M, N, K)."""
    sparse, shape, atype, kind, operand, ctype, _, _ = case
    lay = _layout(case)
    m, n, k = _mnk(shape)
    count = {"a": m * (k // 2 if sparse else k), "b": k * n, "c": m * n}[operand]
    if shape == "m8n8k4" and atype == "f16":
        count *= 4
    assert lay.nregs * lay.elems_per_reg * 32 == count
    # a few the spec prints: m16n8k16 .f16 A "four .f16x2 registers"; m8n8k4 .f32 C "eight"
    printed = {
        (False, "m16n8k16", "f16", "a", None): 4,
        (False, "m8n8k4", "f16", "c", "f32"): 8,
        (False, "m8n8k4", "f16", "c", "f16"): 4,
        (False, "m16n8k256", "b1", "a", None): 4,
        (True, "m16n8k128", "e2m1", "a", None): 4,
        (True, "m16n8k16", "tf32", "b", None): 4,
        (False, "m16n8k16", "f64", "a", None): 8,
    }
    expected = printed.get((sparse, shape, atype, operand, ctype))
    assert expected is None or lay.nregs == expected


def test_d_is_c_and_ctype_default():
    c = L.mma_layout("c", shape="m16n8k16", atype="f16", ctype="f16")
    d = L.mma_layout("d", shape="m16n8k16", atype="f16", ctype="f16")
    assert c is d
    s32 = L.mma_layout("c", shape="m16n8k32", atype="s8")
    assert (s32.nregs, s32.elem_bits) == (4, 32)
    # prefixes of PTX text are accepted
    same = L.mma_layout("a", shape=".m16n8k32", atype=".e2m1", kind="kind::f8f6f4")
    assert same is L.mma_layout("a", shape="m16n8k32", atype="e2m1", kind="f8f6f4")


def test_under_jit_and_vmap():
    """Tables are concrete even when first built inside a trace."""
    L._mma_table.cache_clear()

    @jax.jit
    def f(x):
        lay = L.mma_layout("b", shape="m16n8k32", atype="e4m3")
        return x + jnp.asarray(lay.row, dtype=jnp.int32).sum(dtype=jnp.int32)

    expected = sum(4 * t + (i & 3) + 16 * (i >> 2) for t in range(4) for i in range(8)) * 8
    assert int(f(jnp.int32(0))) == expected
    rows = jax.vmap(lambda x: x + L.mma_layout("c", shape="m16n8k8", atype="tf32").row[0, 2])(
        jnp.arange(3, dtype=jnp.int32)
    )
    np.testing.assert_array_equal(rows, [8, 9, 10])


def test_spec_table_forms_all_have_layouts():
    """Cross-check with the one table of forms (jaxmma.spec._spec), where present."""
    spec = pytest.importorskip("jaxmma.spec")
    count = 0
    for form in spec.forms("mma"):
        kw = dict(
            shape=form.shape,
            atype=form.atype,
            btype=form.btype,
            sparse=form.sparse is not None,
            kind=form.kind,
        )
        for alay, blay in form.layouts:
            L.mma_layout("a", alayout=alay, **kw)
            L.mma_layout("b", blayout=blay, **kw)
        L.mma_layout("c", ctype=form.ctype, **kw)
        L.mma_layout("d", ctype=form.dtype, **kw)
        count += 1
    assert count > 100
    for form in spec.forms("ldmatrix") + spec.forms("stmatrix"):
        fn = L.ldmatrix_layout if form.opcode == "ldmatrix" else L.stmatrix_layout
        for trans in form.trans:
            fn(shape=form.shape, num=form.num, trans=trans, elem=form.elem)


# ---------------------------------------------------------------------------------------
# Sparse metadata (docs/layouts.md table; selector and chunk text of 9.7.14.6.1)
# (shape, atype, chunk size, selectors) as the spec's text states them
META = [
    ("m16n8k16", "f16", 4, (0, 1, 2, 3)),
    ("m16n8k16", "bf16", 4, (0, 1, 2, 3)),
    ("m16n8k32", "f16", 4, (0, 1)),
    ("m16n8k32", "bf16", 4, (0, 1)),
    ("m16n8k8", "tf32", 2, (0, 1, 2, 3)),
    ("m16n8k16", "tf32", 2, (0, 1)),
    ("m16n8k32", "s8", 4, (0, 1)),
    ("m16n8k32", "u8", 4, (0, 1)),
    ("m16n8k64", "s8", 4, (0,)),
    ("m16n8k64", "u8", 4, (0,)),
    *[("m16n8k64", t, 4, (0,)) for t in F8F6F4],
    ("m16n8k64", "s4", 8, (0, 1)),
    ("m16n8k64", "u4", 8, (0, 1)),
    ("m16n8k128", "s4", 8, (0,)),
    ("m16n8k128", "u4", 8, (0,)),
    ("m16n8k128", "e2m1", 8, (0,)),
]
META_CASES = [(s, a, size, sel) for s, a, size, sels in META for sel in sels]


def _notes_meta(shape, atype, sel, lane, n):
    """docs/layouts.md, "Nibble n of a contributing lane -> (row, chunk)"."""
    g, q = lane >> 2, lane & 3
    if (shape, atype) in (("m16n8k16", "f16"), ("m16n8k16", "bf16"), ("m16n8k8", "tf32")):
        return q == sel, g + 8 * (n >> 2), n & 3
    if (shape, atype) in (("m16n8k32", "f16"), ("m16n8k32", "bf16"), ("m16n8k16", "tf32")):
        return q >> 1 == sel, g + 8 * (n >> 2), 4 * (q & 1) + (n & 3)
    if shape == "m16n8k32" or (shape == "m16n8k64" and atype in ("s4", "u4")):
        return q >> 1 == sel, g + 8 * (q & 1), n
    return True, g + 8 * (q & 1), 8 * (q >> 1) + n


@pytest.mark.parametrize("case", META_CASES, ids=lambda c: f"{c[0]}-{c[1]}-sel{c[3]}")
def test_metadata_layout(case):
    shape, atype, size, sel = case
    assert L.metadata_format(shape=shape, atype=atype) == (size, tuple(META_SEL[shape, atype]))
    meta = L.metadata_layout(shape=shape, atype=atype, selector=sel)
    assert meta.lane_used.shape == (32,) and meta.lane_used.dtype == np.bool_
    assert meta.row.shape == meta.chunk.shape == (32, 8)
    for lane in range(32):
        for n in range(8):
            used, row, chunk = _notes_meta(shape, atype, sel, lane, n)
            assert meta.lane_used[lane] == used
            assert (meta.row[lane, n], meta.chunk[lane, n]) == ((row, chunk) if used else (-1, -1))
    # every chunk of every row of the dense 16 x K matrix A exactly once
    k = _mnk(shape)[2]
    used = meta.lane_used
    count = np.zeros((16, k // size), np.int64)
    np.add.at(count, (meta.row[used], meta.chunk[used]), 1)
    assert (count == 1).all()
    # the selector picks lanes of each quad as 9.7.14.6.1 says: one thread (sel), a
    # thread pair (sel 0: T0,T1; sel 1: T2,T3), or all four threads
    quad = {lane % 4 for lane in np.flatnonzero(used)}
    nsel = len(META_SEL[shape, atype])
    assert quad == {4: {sel}, 2: {2 * sel, 2 * sel + 1}, 1: {0, 1, 2, 3}}[nsel]


META_SEL = {(s, a): sels for s, a, _, sels in META}


def test_metadata_compressed_a_consistent():
    """Chunks described x non-zeros per chunk = the compressed K/2 columns of sparse A."""
    for shape, atype, size, _ in META:
        k = _mnk(shape)[2]
        kind = "f8f6f4" if atype in F8F6F4 and shape == "m16n8k64" else None
        kind = "mxf4" if (atype, shape) == ("e2m1", "m16n8k128") else kind
        a = L.mma_layout("a", shape=shape, atype=atype, sparse=True, kind=kind)
        assert (k // size) * (size // 2) == a.col.max() + 1 == k // 2


# ---------------------------------------------------------------------------------------
# Block scaling (9.7.14.3, Table 37; docs/layouts.md)
TABLE_37 = {  # scale_vec -> (byte-id-a, thread-id-a, byte-id-b, thread-id-b)
    "1X": ((0, 1, 2, 3), (0, 1), (0, 1, 2, 3), (0, 1, 2, 3)),
    "2X": ((0, 2), (0, 1), (0, 2), (0, 1, 2, 3)),
    "4X": ((0,), (0, 1), (0,), (0, 1, 2, 3)),
}
SCALE_CASES = [
    (op, sv, tid, bid)
    for sv, (ba, ta, bb, tb) in TABLE_37.items()
    for op, bids, tids in (("a", ba, ta), ("b", bb, tb))
    for tid in tids
    for bid in bids
]


@pytest.mark.parametrize("case", SCALE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_scale_layout(case):
    op, sv, tid, bid = case
    nblk = int(sv[0])
    sl = L.scale_layout(op, scale_vec=sv, thread_id=tid, byte_id=bid)
    shape = (16, nblk) if op == "a" else (nblk, 8)
    assert sl.lane.shape == sl.byte.shape == shape
    for idx in itertools.product(*map(range, shape)):
        if op == "a":
            m, j = idx
            expected = 4 * (m % 8) + 2 * tid + m // 8, bid + j  # docs/layouts.md SF_A
        else:
            j, n = idx
            expected = 4 * n + tid, bid + j  # docs/layouts.md SF_B
        assert (sl.lane[idx], sl.byte[idx]) == expected
    # 9.7.14.3: thread-id-a picks the thread pair %laneid % 4 in {0,1} / {2,3},
    # thread-id-b the thread %laneid % 4 == thread-id-b; byte-id the byte(s) used.
    quad = set((sl.lane % 4).ravel().tolist())
    assert quad == ({2 * tid, 2 * tid + 1} if op == "a" else {tid})
    assert set(sl.byte.ravel().tolist()) == set(range(bid, bid + nblk))
    cells = set(zip(sl.lane.ravel().tolist(), sl.byte.ravel().tolist(), strict=True))
    assert len(cells) == sl.lane.size  # no two factors share a byte
    assert sl is L.scale_layout(op, scale_vec=f"scale_vec::{sv}", thread_id=tid, byte_id=bid)
    assert sl is L.scale_layout(op, scale_vec=nblk, thread_id=tid, byte_id=bid)


# ---------------------------------------------------------------------------------------
# ldmatrix / stmatrix / movmatrix (9.7.14.5.15-17; docs/layouts.md)
LD = [
    *[("m8n8", num, trans, "b16") for num in ("x1", "x2", "x4") for trans in (False, True)],
    *[
        ("m16n16", num, True, elem)
        for num in ("x1", "x2")
        for elem in ("b8", "b8x16.b6x16_p32", "b8x16.b4x16_p64")
    ],
    *[
        ("m8n16", num, False, elem)
        for num in ("x1", "x2", "x4")
        for elem in ("b8x16.b6x16_p32", "b8x16.b4x16_p64")
    ],
]
ST = [
    *[("m8n8", num, trans, "b16") for num in ("x1", "x2", "x4") for trans in (False, True)],
    *[("m16n8", num, True, "b8") for num in ("x1", "x2", "x4")],
]
MOVE_CASES = [("ld", *c) for c in LD] + [("st", *c) for c in ST]
MEM_BITS = {"b16": 16, "b8": 8, "b8x16.b6x16_p32": 6, "b8x16.b4x16_p64": 4}


def _move(case):
    op, shape, num, trans, elem = case
    fn = L.ldmatrix_layout if op == "ld" else L.stmatrix_layout
    return fn(shape=shape, num=num, trans=trans, elem=elem)


def _notes_move(op, shape, trans, lane, reg, j):
    """docs/layouts.md "Data movement" statements: (matrix, memory row, memory col)."""
    g, q = lane >> 2, lane & 3
    if shape == "m8n8":  # "half h gets M_i[l>>2][2q+h]; .trans: M_i[2q+h][l>>2]"
        return (reg, 2 * q + j, g) if trans else (reg, g, 2 * q + j)
    if shape == "m16n16":  # "register R, byte j gets mem[row 4q+j][col (l>>2)+8R]"
        return reg // 2, 4 * q + j, g + 8 * (reg % 2)
    if shape == "m8n16":  # "register i, byte j gets element (l>>2, 4q+j) of matrix i"
        return reg, g, 4 * q + j
    # stmatrix m16n8: "register i, byte b goes to mem_i[row 2q+(b&1)][col (l>>2)+8(b>>1)]"
    return reg, 2 * q + (j & 1), g + 8 * (j >> 1)


@pytest.mark.parametrize("case", MOVE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_movement_layout(case):
    op, shape, num, trans, elem = case
    mv = _move(case)
    nmat = int(num[1])
    rows, cols = {"m8n8": (8, 8), "m16n16": (16, 16), "m8n16": (8, 16), "m16n8": (8, 16)}[shape]
    assert (mv.rows, mv.cols, mv.mem_bits) == (rows, cols, MEM_BITS[elem])
    assert mv.elem_bits * mv.elems_per_reg == 32
    assert mv.elem_bits == (16 if elem == "b16" else 8)
    # "consisting of 1, 2, or 4 32-bit registers" (m16n16: two per matrix)
    assert mv.nregs == nmat * (2 if shape == "m16n16" else 1)
    _assert_bijection(mv.mat, mv.row, mv.col, (nmat, rows, cols))
    for lane in range(32):
        for e in range(mv.nregs * mv.elems_per_reg):
            reg, j = divmod(e, mv.elems_per_reg)
            got = mv.mat[lane, e], mv.row[lane, e], mv.col[lane, e]
            assert got == _notes_move(op, shape, trans, lane, reg, j)
    # the spec's address table: "addr0-addr7 ... threads 0-7", the next 8 for the next
    # matrix; m16n16 needs 16 row addresses per matrix (lanes 0-15, 16-31)
    assert mv.addr_lane.shape == (nmat, rows)
    for i, r in itertools.product(range(nmat), range(rows)):
        assert mv.addr_lane[i, r] == rows * i + r


def test_ldmatrix_text_statements():
    """Sentences of 9.7.14.5.15 about which lanes hold which part of a row."""
    # "A group of four threads loads an entire row" (m8n8, 8x16 b8x16 source rows)
    for shape, elem in (("m8n8", "b16"), ("m8n16", "b8x16.b4x16_p64")):
        ld = L.ldmatrix_layout(shape=shape, num="x1", trans=False, elem=elem)
        for quad in range(8):
            lanes = range(4 * quad, 4 * quad + 4)
            assert {int(ld.row[lane, e]) for lane in lanes for e in range(ld.row.shape[1])} == {
                quad
            }
            assert sorted(ld.col[list(lanes)].ravel().tolist()) == list(range(ld.cols))
    # m16n16: "Each thread in a warp loads 4 consecutive columns across 2 rows" (of the
    # transposed, register-side matrix: memory columns are its rows)
    ld = L.ldmatrix_layout(shape="m16n16", num="x1", trans=True, elem="b8")
    for lane in range(32):
        assert len(set(ld.col[lane].tolist())) == 2
        for reg in range(2):
            mem_rows = ld.row[lane, 4 * reg : 4 * reg + 4].tolist()
            assert mem_rows == list(range(mem_rows[0], mem_rows[0] + 4))


def _simulate_ldmatrix(ld, smem, addrs):
    regs = np.zeros(ld.mat.shape, np.int64)
    width = ld.mem_bits // 8
    for lane, e in itertools.product(range(32), range(ld.mat.shape[1])):
        i, r, c = ld.mat[lane, e], ld.row[lane, e], ld.col[lane, e]
        start = addrs[ld.addr_lane[i, r]] + c * width
        regs[lane, e] = int.from_bytes(bytes(smem[start : start + width]), "little")
    return regs


def _simulate_stmatrix(st, smem, addrs, regs):
    out = smem.copy()
    width = st.mem_bits // 8
    for lane, e in itertools.product(range(32), range(st.mat.shape[1])):
        i, r, c = st.mat[lane, e], st.row[lane, e], st.col[lane, e]
        start = addrs[st.addr_lane[i, r]] + c * width
        out[start : start + width] = np.frombuffer(
            int(regs[lane, e]).to_bytes(width, "little"), np.uint8
        )
    return out


@pytest.mark.parametrize("num", ["x1", "x2", "x4"])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_inverts_ldmatrix(num, trans):
    rng = np.random.default_rng(0)
    nmat = int(num[1])
    # rows at scattered 16-byte aligned addresses
    addrs = np.zeros(32, np.int64)
    addrs[: 8 * nmat] = rng.permutation(64)[: 8 * nmat] * 16
    smem = rng.integers(0, 256, 64 * 16, dtype=np.uint8)
    ld = L.ldmatrix_layout(shape="m8n8", num=num, trans=trans, elem="b16")
    st = L.stmatrix_layout(shape="m8n8", num=num, trans=trans, elem="b16")
    regs = _simulate_ldmatrix(ld, smem, addrs)
    blank = np.zeros_like(smem)
    stored = _simulate_stmatrix(st, blank, addrs, regs)
    touched = np.zeros(smem.shape, bool)
    for a in addrs[: 8 * nmat]:
        touched[a : a + 16] = True
    np.testing.assert_array_equal(stored[touched], smem[touched])
    assert not stored[~touched].any()
    np.testing.assert_array_equal(
        _simulate_ldmatrix(ld, stored, addrs), regs
    )  # and load(store(regs)) == regs


def test_ldmatrix_feeds_mma_fragments():
    """x4 loads the m16n8k16 .f16 A fragment, x2.trans the B fragment (quadrant order)."""
    a_frag = L.mma_layout("a", shape="m16n8k16", atype="f16")
    ld = L.ldmatrix_layout(shape="m8n8", num="x4", trans=False, elem="b16")
    # matrices 0..3 = A[0:8, 0:8], A[8:16, 0:8], A[0:8, 8:16], A[8:16, 8:16]
    np.testing.assert_array_equal(a_frag.row, ld.row + 8 * (ld.mat % 2))
    np.testing.assert_array_equal(a_frag.col, ld.col + 8 * (ld.mat // 2))
    b_frag = L.mma_layout("b", shape="m16n8k16", atype="f16")
    ldt = L.ldmatrix_layout(shape="m8n8", num="x2", trans=True, elem="b16")
    # B stored K-major: memory row = k; matrices 0, 1 = B[0:8, :], B[8:16, :]
    np.testing.assert_array_equal(b_frag.row, ldt.row + 8 * ldt.mat)
    np.testing.assert_array_equal(b_frag.col, ldt.col)


def test_movmatrix_layout():
    mv = L.movmatrix_layout()
    for lay in mv:
        assert (lay.nregs, lay.elems_per_reg, lay.elem_bits) == (1, 2, 16)
        _assert_bijection(lay.mat, lay.row, lay.col, (1, 8, 8))
    for lane, h in itertools.product(range(32), range(2)):
        # docs/layouts.md: "input lane 4r + c/2, half c%2 holds M[r][c]"
        r, c = mv.src.row[lane, h], mv.src.col[lane, h]
        assert (lane, h) == (4 * r + c // 2, c % 2)
        # "result lane l, half h holds M[2q+h][l>>2]"
        assert (mv.dst.row[lane, h], mv.dst.col[lane, h]) == (2 * (lane & 3) + h, lane >> 2)
    # the result holds M^T in the source layout
    np.testing.assert_array_equal(mv.dst.row, mv.src.col)
    np.testing.assert_array_equal(mv.dst.col, mv.src.row)


# ---------------------------------------------------------------------------------------
# Errors name the argument
BAD = [
    (L.mma_layout, ("e",), dict(shape="m16n8k16", atype="f16"), "operand"),
    (L.mma_layout, ("a",), dict(shape="m16n8k12", atype="f16"), "shape"),
    (L.mma_layout, ("a",), dict(shape="m8n8k4", atype="f16", sparse=True), "shape"),
    (L.mma_layout, ("a",), dict(shape="m16n8k16", atype="tf32"), "atype"),
    (L.mma_layout, ("a",), dict(shape="m16n8k32", atype="e2m1"), "kind"),
    (L.mma_layout, ("a",), dict(shape="m16n8k16", atype="e4m3", kind="f8f6f4"), "kind"),
    (L.mma_layout, ("a",), dict(shape="m16n8k64", atype="e2m1", kind="f8f6f4"), "kind"),
    (L.mma_layout, ("a",), dict(shape="m16n8k16", atype="f16", kind="bogus"), "kind"),
    (L.mma_layout, ("b",), dict(shape="m16n8k16", atype="f16", btype="bf16"), "btype"),
    (L.mma_layout, ("b",), dict(shape="m16n8k32", atype="s8", btype="s4"), "btype"),
    (L.mma_layout, ("c",), dict(shape="m16n8k16", atype="f16"), "ctype"),
    (L.mma_layout, ("c",), dict(shape="m16n8k16", atype="bf16", ctype="f16"), "ctype"),
    (L.mma_layout, ("c",), dict(shape="m16n8k32", atype="e4m3", kind="mxf8f6f4", ctype="f16"),
     "ctype"),
    (L.mma_layout, ("c",), dict(shape="m16n8k64", atype="e4m3", sparse=True, ctype="f16"),
     "ctype"),
    (L.mma_layout, ("a",), dict(shape="m16n8k16", atype="f16", alayout="col"), "alayout"),
    (L.mma_layout, ("b",), dict(shape="m8n8k4", atype="f64", blayout="row"), "blayout"),
    (L.mma_layout, ("b",), dict(shape="m8n8k4", atype="f16", blayout="diag"), "blayout"),
    (L.mma_layout, ("a",), dict(shape="m16n8k16", atype="f16", sparse=1), "sparse"),
    (L.metadata_layout, (), dict(shape="m16n8k256", atype="b1", selector=0), "shape"),
    (L.metadata_layout, (), dict(shape="m16n8k16", atype="s8", selector=0), "atype"),
    (L.metadata_layout, (), dict(shape="m16n8k32", atype="f16", selector=2), "selector"),
    (L.metadata_layout, (), dict(shape="m16n8k64", atype="s8", selector=1), "selector"),
    (L.metadata_layout, (), dict(shape="m16n8k16", atype="f16", selector=4), "selector"),
    (L.metadata_format, (), dict(shape="m16n8k4", atype="tf32"), "shape"),
    (L.scale_layout, ("c",), dict(scale_vec="1X", thread_id=0, byte_id=0), "operand"),
    (L.scale_layout, ("a",), dict(scale_vec="3X", thread_id=0, byte_id=0), "scale_vec"),
    (L.scale_layout, ("a",), dict(scale_vec=8, thread_id=0, byte_id=0), "scale_vec"),
    (L.scale_layout, ("a",), dict(scale_vec="1X", thread_id=2, byte_id=0), "thread_id"),
    (L.scale_layout, ("b",), dict(scale_vec="1X", thread_id=4, byte_id=0), "thread_id"),
    (L.scale_layout, ("a",), dict(scale_vec="2X", thread_id=0, byte_id=1), "byte_id"),
    (L.scale_layout, ("b",), dict(scale_vec="4X", thread_id=0, byte_id=2), "byte_id"),
    (L.scale_layout, ("a",), dict(scale_vec="1X", thread_id=0, byte_id=4), "byte_id"),
    (L.scale_layout, ("a",), dict(scale_vec="1X", thread_id=0, byte_id=0, m=8), "m"),
    (L.scale_layout, ("b",), dict(scale_vec="1X", thread_id=0, byte_id=0, n=16), "n"),
    (L.ldmatrix_layout, (), dict(shape="m16n8", num="x1", trans=True, elem="b8"), "shape"),
    (L.ldmatrix_layout, (), dict(shape="m16n16", num="x4", trans=True, elem="b8"), "num"),
    (L.ldmatrix_layout, (), dict(shape="m16n16", num="x1", trans=False, elem="b8"), "trans"),
    (L.ldmatrix_layout, (), dict(shape="m8n16", num="x1", trans=True, elem="b6x16_p32"),
     "trans"),
    (L.ldmatrix_layout, (), dict(shape="m8n8", num="x1", trans=False, elem="b8"), "elem"),
    (L.ldmatrix_layout, (), dict(shape="m8n16", num="x1", trans=False, elem="b8"), "elem"),
    (L.ldmatrix_layout, (), dict(shape="m8n8", num="x3", trans=False, elem="b16"), "num"),
    (L.stmatrix_layout, (), dict(shape="m16n16", num="x1", trans=True, elem="b8"), "shape"),
    (L.stmatrix_layout, (), dict(shape="m16n8", num="x1", trans=False, elem="b8"), "trans"),
    (L.stmatrix_layout, (), dict(shape="m16n8", num="x1", trans=True, elem="b16"), "elem"),
    (L.stmatrix_layout, (), dict(shape="m8n8", num="x1", trans="yes", elem="b16"), "trans"),
]  # fmt: skip


@pytest.mark.parametrize(
    "fn, args, kwargs, name", BAD, ids=lambda x: x if isinstance(x, str) else None
)
def test_errors_name_the_argument(fn, args, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}=") as info:
        fn(*args, **kwargs)
    assert "allowed" in str(info.value)


def test_error_lists_allowed_values():
    with pytest.raises(ValueError, match=r"'f16', 'bf16', 'f64', 's8', 'u8', 'e4m3', 'e5m2'"):
        L.mma_layout("a", shape="m16n8k16", atype="s4")
    with pytest.raises(ValueError, match=r"kind::f8f6f4, kind::mxf8f6f4"):
        L.mma_layout("a", shape="m16n8k32", atype="e3m2")


def test_doctests():
    result = doctest.testmod(L, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


#: the quick run keeps every case of this file (tests/conftest.py)
pytestmark = pytest.mark.every_case
