"""The instruction descriptor (idesc) of ``tcgen05.mma`` (PTX ISA 9.7.16.4.2).

A 32-bit register operand that carries what the text does not: M, N, the element types,
saturation, negation and transposes. Its layout depends on the kind (the tables of the
spec section, summarised here):

=====  ===========================================  ====================================
bits   ``.kind::tf32/f16/f8f6f4/i8``                ``.kind::mxf8f6f4/mxf4/mxf4nvf4``
=====  ===========================================  ====================================
0-1    sparsity selector (sparse: f16/tf32 0-3)     reserved
2      sparse (1) / dense (0)                       sparse / dense
3      saturate (``.kind::i8``)                     reserved
4-5    dtype: F16 = 0, F32 = 1, S32 = 2             scale factor ID of B
7-9    atype                                        atype
10-12  btype                                        btype (mxf4*: bits 10-11)
13/14  negate A / B                                 negate A / B
15/16  transpose A / B                              transpose A / B (mxf4*: 0)
17-22  N >> 3                                       N >> 3
23     reserved                                     scale type: UE4M3 = 0, UE8M0 = 1
24-28  M >> 4                                       bits 27-28: M >> 7
29     reserved                                     bits 29-30: scale factor ID of A
30-31  maximum shift of B reuse (``.ws``)           bit 31 (mxf4*): K = 96 (1) or not (0)
=====  ===========================================  ====================================

Type codes: ``.kind::f16`` F16 = 0, BF16 = 1; ``.kind::tf32`` TF32 = 2; ``f8f6f4`` and
``mxf8f6f4`` E4M3 = 0, E5M2 = 1, E2M3 = 3, E3M2 = 4, E2M1 = 5; ``.kind::i8`` U8 = 0,
S8 = 1; ``mxf4``/``mxf4nvf4`` E2M1 = 1. The transposes and scale factor IDs say how memory
is read, not what is computed: decoding accepts them and the matrix level ignores them;
so does the sparsity selector (which Tensor Memory columns hold the metadata).
"""

from __future__ import annotations

DTYPES = {0: "f16", 1: "f32", 2: "s32"}
F8F6F4_CODES = {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}
TYPE_CODES = {
    "f16": {0: "f16", 1: "bf16"},
    "tf32": {2: "tf32"},
    "f8f6f4": F8F6F4_CODES,
    "i8": {0: "u8", 1: "s8"},
    "mxf8f6f4": F8F6F4_CODES,
    "mxf4": {1: "e2m1"},
    "mxf4nvf4": {1: "e2m1"},
}
SCALE_TYPES = {0: "ue4m3", 1: "ue8m0"}
#: sparsity selector values (idesc bits 0-1) of a sparse MMA: which Tensor Memory columns
#: hold the metadata (9.7.16.10.8.4); 0 only for .kind::i8 and .kind::f8f6f4
SELECTORS = {"f16": (0, 1, 2, 3), "tf32": (0, 1, 2, 3), "f8f6f4": (0,), "i8": (0,)}


def _field(value: int, lo: int, width: int) -> int:
    return (value >> lo) & ((1 << width) - 1)


def _bad(field: str, value, allowed, kind: str) -> ValueError:
    shown = ", ".join(str(a) for a in allowed)
    return ValueError(f"idesc: invalid {field} {value!r} for .kind::{kind}; allowed: {shown}")


def decode(idesc: int, kind: str) -> dict:
    """The fields of a raw idesc: ``m``, ``n``, ``dtype``, ``atype``, ``btype``,
    ``stype`` (block-scaled kinds), ``satfinite``, ``negate_a``, ``negate_b``,
    ``sparse`` (bit 2) and ``selector`` (bits 0-1, the sparsity selector).

    Raises ``ValueError`` naming the field, its value and the allowed values for
    reserved bits that are set, unknown type codes, a sparsity selector the kind does
    not allow (or a nonzero one in a dense idesc), ``.ws``-only fields, and ``K = 96``
    (not emulated); ``TypeError`` for a non-integer idesc.
    """
    if isinstance(idesc, bool) or not isinstance(idesc, int):
        raise TypeError(f"idesc: expected a 32-bit Python int, got {type(idesc).__name__}")
    if not 0 <= idesc < 2**32:
        raise ValueError(f"idesc: expected a 32-bit value (0 ... 2**32 - 1), got {idesc}")
    if kind not in TYPE_CODES:
        raise _bad("kind", kind, [f"kind::{k}" for k in TYPE_CODES], kind)
    codes = TYPE_CODES[kind]
    scaled = kind.startswith("mx")
    fp4 = kind in ("mxf4", "mxf4nvf4")
    sparse = bool(_field(idesc, 2, 1))
    reserved = [6, 29] + ([23] if not scaled else [0, 1, 3, 24, 25, 26])
    reserved += [12] if fp4 else []
    reserved += [31] if kind == "mxf8f6f4" else []
    for bit in reserved:
        if _field(idesc, bit, 1):
            raise _bad(f"reserved bit {bit}", 1, [0], kind)
    selector = _field(idesc, 0, 2)
    if not scaled:  # bits 0-1: the sparsity selector (9.7.16.10.8.4)
        allowed = SELECTORS[kind] if sparse else (0,)
        if selector not in allowed:
            what = "sparsity selector (bits 0-1)" + ("" if sparse else " of a dense MMA")
            raise _bad(what, selector, allowed, kind)
    out = {
        "negate_a": bool(_field(idesc, 13, 1)),
        "negate_b": bool(_field(idesc, 14, 1)),
        "n": _field(idesc, 17, 6) << 3,
        "satfinite": False,
        "sparse": sparse,
        "selector": selector,
    }
    a, b = _field(idesc, 7, 3), _field(idesc, 10, 2 if fp4 else 3)
    if a not in codes:
        raise _bad("atype (bits 7-9)", a, sorted(codes), kind)
    if b not in codes:
        raise _bad("btype (bits 10-12)", b, sorted(codes), kind)
    out["atype"], out["btype"] = codes[a], codes[b]
    if scaled:
        out["m"] = _field(idesc, 27, 2) << 7
        out["dtype"] = "f32"
        s = _field(idesc, 23, 1)
        allowed = (0, 1) if kind == "mxf4nvf4" else (1,)
        if s not in allowed:
            raise _bad("scale type (bit 23)", s, allowed, kind)
        out["stype"] = SCALE_TYPES[s]
        if fp4:
            if _field(idesc, 31, 1):
                raise ValueError(
                    f"idesc: K dimension bit 31 = 1 (K = 96) for .kind::{kind} is not "
                    "emulated; allowed: 0 (dense K = 64, sparse K = 128)"
                )
            for what, bit in (("transpose A (bit 15)", 15), ("transpose B (bit 16)", 16)):
                if _field(idesc, bit, 1):
                    raise _bad(what, 1, [0], kind)
            for what, lo in (("scale factor ID of B (bits 4-5)", 4), ("of A (bits 29-30)", 29)):
                if _field(idesc, lo, 2) not in (0, 2):
                    raise _bad(what, _field(idesc, lo, 2), [0, 2], kind)
    else:
        out["m"] = _field(idesc, 24, 5) << 4
        d = _field(idesc, 4, 2)
        want = {"f16": (0, 1), "tf32": (1,), "f8f6f4": (0, 1), "i8": (2,)}[kind]
        if d not in want:
            raise _bad("dtype (bits 4-5)", d, want, kind)
        out["dtype"] = DTYPES[d]
        if _field(idesc, 30, 2):
            raise _bad("maximum shift (bits 30-31, .ws only)", _field(idesc, 30, 2), [0], kind)
        sat = _field(idesc, 3, 1)
        if sat and kind != "i8":
            raise _bad("saturate (bit 3)", sat, [0], kind)
        out["satfinite"] = bool(sat)
        if kind == "i8" and (out["negate_a"] or out["negate_b"]):
            raise _bad("negate A/B (bits 13-14)", 1, [0], kind)
    return out


def encode(
    kind: str,
    *,
    m: int,
    n: int,
    dtype: str,
    atype: str,
    btype: str,
    stype: str | None = None,
    satfinite: bool = False,
    negate_a: bool = False,
    negate_b: bool = False,
    sparse: bool = False,
) -> int:
    """The idesc of a form (no transposes, scale factor IDs 0; ``sparse``: bit 2 set,
    sparsity selector 0)."""
    code = {v: k for k, v in TYPE_CODES[kind].items()}
    value = (code[atype] << 7) | (code[btype] << 10) | ((n >> 3) << 17) | (int(sparse) << 2)
    value |= (int(negate_a) << 13) | (int(negate_b) << 14)
    if kind.startswith("mx"):
        value |= ({"ue4m3": 0, "ue8m0": 1}[stype] << 23) | ((m >> 7) << 27)
    else:
        value |= ({v: k for k, v in DTYPES.items()}[dtype] << 4) | ((m >> 4) << 24)
        value |= int(satfinite) << 3
    return value
