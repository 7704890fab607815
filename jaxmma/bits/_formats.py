"""Element formats of the warp-level matrix instructions: bits <-> values, rounding.

PTX ISA 9.7.14.2 (matrix data types) and 9.7.14.3 (block scaling). One table,
:data:`FORMATS`, holds the facts of every format; :func:`fields`, :func:`decode`,
:func:`encode` and :func:`round_to_format` read it. Everything works on raw bits with
integer arithmetic (no float rounding by the host or the device is ever trusted), so
the results are the same under ``jit``, ``vmap``, on CPU and on GPU.

Choices where the spec is silent (the tests check each one):

* NaN inputs of :func:`encode` give, by ``Format.nan_encode``: ``"payload"`` (f16, as
  NumPy): sign | Inf exponent | the top mantissa bits of the input NaN (lowest bit set if
  they are all zero); ``"quiet_payload"`` (tf32, f32, f64, as x86/NumPy casts): the same
  with the quiet bit set; ``"quiet"`` (bf16, e5m2, as ml_dtypes): sign | 0x7FC0 / 0x7E;
  ``"all_ones"`` (e4m3 0x7F | sign, ue4m3 0x7F, ue8m0 0xFF); ``"none"`` (e2m1, e2m3,
  e3m2 have no NaN): +max finite (0x7, 0x1F, 0x1F). :func:`decode` of a NaN gives a
  float32 NaN with the element's sign, with the payload shifted up for f16/bf16/tf32/f32
  (as NumPy and ml_dtypes) and 0x7FC00000 for the 8-bit formats.
* Overflow: the value is rounded as if the exponent were unbounded (so e4m3 464.0 -> 448
  under ``rn``, as ml_dtypes); a result above max finite becomes Inf (f16, bf16, tf32,
  f32, f64, e5m2), NaN with the sign (e4m3, ue4m3, ue8m0: like ml_dtypes), or max finite
  (e2m1, e2m3, e3m2, which have neither; NVIDIA's cvt requires ``.satfinite`` for them),
  except where the rounding direction points back to zero (``rz``; ``rm`` of a positive,
  ``rp`` of a negative value), which gives max finite as IEEE 754 does. ``saturate=True``
  maps every overflow and +-Inf to +-max finite; NaN stays NaN.
* Unsigned float formats (ue8m0, ue4m3) encode ``|x|``: the sign is dropped, like the
  sign bit of a ue4m3 container. ue8m0 has no zero: zero and every value that rounds
  below 2**-127 give 0x00 (2**-127), in every rounding mode.
* ``rounding="stochastic"``: let ``D`` be the bits of ``|x|``'s significand dropped
  below the kept precision. Take the 32 most significant bits of ``D`` (left-aligned,
  zero-filled when fewer than 32 bits are dropped), OR 1 into their lowest bit if any
  lower dropped bit is set, and add ``random_bits`` (uint32); a carry out of the 32-bit
  sum increments the kept magnitude. ``random_bits=0`` is ``rz``; ``0xFFFFFFFF`` rounds
  every inexact value up in magnitude; exact values never change. "Exact" means on the
  format's grid extended past max finite with the top binade's spacing (e4m3: 896.0 is,
  900.0 is not). Overflow follows the direction taken: truncation gives max finite, a
  carry gives Inf (NaN, max) as ``rp`` would.
* ``ftz=True`` flushes subnormal *results* to zero with the input's sign.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .. import spec, util
from . import _doubles

Rounding = Literal["rn", "rna", "rz", "rm", "rp", "stochastic"]
ROUNDINGS: tuple[str, ...] = get_args(Rounding)


@dataclasses.dataclass(frozen=True)
class Format:
    """The facts of one element format (a row of :data:`FORMATS`).

    ``bits`` is the width of the encoding, ``storage_bits`` the width of the register or
    container slot that holds one element and ``shift`` where the encoding sits in it
    (tf32: the top 19 bits of a 32-bit register). ``nan`` is the NaN rule of the bits:
    ``"ieee"`` (exponent all ones, mantissa nonzero), ``"all_ones"`` (every bit but the
    sign set) or ``"none"``. ``nan_encode`` is the NaN that :func:`encode` writes.
    """

    name: str
    kind: str  # "float" | "int" | "bits"
    bits: int
    exp_bits: int
    mant_bits: int
    bias: int
    signed: bool
    has_inf: bool
    nan: str
    max: float
    dtype: str | None  # the numpy / ml_dtypes dtype of the same format
    storage_bits: int
    shift: int = 0
    subnormals: bool = True
    nan_encode: str = "none"

    @property
    def min_exp(self) -> int:
        """Exponent of the lowest significand unit: value = sig * 2**min_exp at E=0."""
        return (1 if self.subnormals else 0) - self.bias - self.mant_bits

    @property
    def max_bits(self) -> int:
        """Encoding of +max finite (in the low ``bits``, before ``shift``)."""
        if self.kind != "float":
            return int(self.max)
        frac, e = math.frexp(self.max)
        mant = int((frac * 2 - 1) * 2**self.mant_bits)
        return ((e - 1 + self.bias) << self.mant_bits) | mant


def _float(name, bits, e, m, bias, mx, dtype, *, inf, nan, nan_encode, signed=True, **kw):
    kw = {"storage_bits": bits, **kw, "nan_encode": nan_encode}
    return Format(name, "float", bits, e, m, bias, signed, inf, nan, mx, dtype, **kw)


def _int(name, bits, signed, dtype, kind="int"):
    mx = float(2 ** (bits - 1) - 1 if signed else 2**bits - 1)
    return Format(name, kind, bits, 0, 0, 0, signed, False, "none", mx, dtype, bits)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        _float("f16", 16, 5, 10, 15, float.fromhex("0x1.ffcp15"),  # 65504.0
               "float16", inf=True, nan="ieee", nan_encode="payload"),
        _float("bf16", 16, 8, 7, 127, float.fromhex("0x1.fep127"),  # 3.39e38
               "bfloat16", inf=True, nan="ieee", nan_encode="quiet"),
        _float("tf32", 19, 8, 10, 127, float.fromhex("0x1.ffcp127"),  # 3.40e38
               None, inf=True, nan="ieee", nan_encode="quiet_payload",
               storage_bits=32, shift=13),
        _float("f32", 32, 8, 23, 127, float.fromhex("0x1.fffffep127"),  # 3.40e38
               "float32", inf=True, nan="ieee", nan_encode="quiet_payload"),
        _float("f64", 64, 11, 52, 1023, float.fromhex("0x1.fffffffffffffp1023"),  # 1.8e308
               "float64", inf=True, nan="ieee", nan_encode="quiet_payload"),
        _float("e4m3", 8, 4, 3, 7, float.fromhex("0x1.cp8"),  # 448.0
               "float8_e4m3fn", inf=False, nan="all_ones", nan_encode="all_ones"),
        _float("e5m2", 8, 5, 2, 15, float.fromhex("0x1.cp15"),  # 57344.0
               "float8_e5m2", inf=True, nan="ieee", nan_encode="quiet"),
        _float("e3m2", 6, 3, 2, 3, float.fromhex("0x1.cp4"),  # 28.0
               "float6_e3m2fn", inf=False, nan="none", nan_encode="none", storage_bits=8),
        _float("e2m3", 6, 2, 3, 1, float.fromhex("0x1.ep2"),  # 7.5
               "float6_e2m3fn", inf=False, nan="none", nan_encode="none", storage_bits=8),
        _float("e2m1", 4, 2, 1, 1, float.fromhex("0x1.8p2"),  # 6.0
               "float4_e2m1fn", inf=False, nan="none", nan_encode="none"),
        _float("ue8m0", 8, 8, 0, 127, float.fromhex("0x1p127"),  # 1.7e38; min 2**-127
               "float8_e8m0fnu", inf=False, nan="all_ones", nan_encode="all_ones",
               signed=False, subnormals=False),
        _float("ue4m3", 7, 4, 3, 7, float.fromhex("0x1.cp8"),  # 448.0; bit 7 ignored
               None, inf=False, nan="all_ones", nan_encode="all_ones", signed=False,
               storage_bits=8),
        _int("s8", 8, True, "int8"),
        _int("u8", 8, False, "uint8"),
        _int("s4", 4, True, "int4"),
        _int("u4", 4, False, "uint4"),
        _int("b1", 1, False, None, kind="bits"),
        _int("s32", 32, True, "int32"),
    )
}  # fmt: skip

# ---------------------------------------------------------------------------------------
# The registry: what the other floors know of the formats, read from here (``jaxmma.bits``)
#: the fp8 element formats, and those of ``kind::f8f6f4`` (fp8, fp6, fp4), in the spec's
#: order: the spec's own type lists (:mod:`jaxmma.spec._spec`), written there once
FP8: tuple[str, ...] = spec.F8
F8F6F4: tuple[str, ...] = spec.F8F6F4
#: format -> the JAX dtype of exactly its values (ml_dtypes' name, ``Format.dtype``)
DTYPES: dict[str, np.dtype] = {n: jnp.dtype(f.dtype) for n, f in FORMATS.items() if f.dtype}
#: dtype name -> format: the inverse of :data:`DTYPES`
FORMAT_OF_DTYPE: dict[str, str] = {f.dtype: n for n, f in FORMATS.items() if f.dtype}
#: block-scale format -> the dtype whose byte holds it (a ue4m3 scale in a float8_e4m3fn
#: byte, its sign bit ignored)
SCALE_DTYPES: dict[str, np.dtype] = {"ue8m0": DTYPES["ue8m0"], "ue4m3": DTYPES["e4m3"]}


class Fields(NamedTuple):
    """An element as ``(-1)**sign * sig * 2**exp``, plus NaN/Inf flags.

    ``sign`` uint32 (0/1), ``exp`` int32, ``sig`` uint32 (uint64 for f64), ``nan`` and
    ``inf`` bool. For NaN and Inf, ``sig`` is 0 and ``exp`` is the format's ``min_exp``.
    """

    sign: jax.Array
    exp: jax.Array
    sig: jax.Array
    nan: jax.Array
    inf: jax.Array


def get_format(fmt: str) -> Format:
    """Returns the :class:`Format` named ``fmt`` (a PTX type name such as ``"e4m3"``)."""
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"fmt: expected one of {sorted(FORMATS)}, got {fmt!r}")
    return FORMATS[fmt]


def _need_x64(f: Format) -> None:
    if f.bits == 64 and not _doubles.x64():
        raise ValueError(
            "fmt='f64' needs 64-bit types: enable jax_enable_x64 (for example "
            "`with jax.enable_x64(True):`)"
        )


def _dtype_of(x) -> np.dtype:
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def _shown_int(v: int) -> str:
    r = str(v)
    return r if len(r) <= 40 else f"{r[:40]}... ({len(r)} digits)"


def _as_bits(bits, f: Format) -> jax.Array:
    word = jnp.uint64 if f.bits == 64 else jnp.uint32
    width = 64 if f.bits == 64 else 32
    if isinstance(bits, int) and not isinstance(bits, bool):
        if not 0 <= bits < 2**width:  # never wrapped into the word
            raise ValueError(
                f"bits: Python ints are {width}-bit words for fmt={f.name!r}, from 0 to "
                f"2**{width} - 1; got {_shown_int(bits)}"
            )
        return jnp.asarray(np.asarray(bits).astype(word))
    if isinstance(bits, np.ndarray | np.integer) and bits.dtype.itemsize * 8 > width:
        lo, hi = (int(bits.min()), int(bits.max())) if bits.size else (0, 0)
        if lo < 0 or hi >= 2**width:  # a NumPy uint64/int64 word would lose its high bits
            raise ValueError(
                f"bits: values are {width}-bit words for fmt={f.name!r}, from 0 to "
                f"2**{width} - 1; got {_shown_int(lo if lo < 0 else hi)}"
            )
        return jnp.asarray(np.asarray(bits).astype(np.uint64 if width == 64 else np.uint32))
    dtype = _dtype_of(bits)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"bits: expected an integer dtype (uint32, or uint64 for f64), got {dtype}")
    return jnp.asarray(bits).astype(word)


def _as_float(x, f: Format, rounding="rn", saturate=False) -> jax.Array:
    want = jnp.float64 if f.bits == 64 else jnp.float32
    if _doubles.is_host_double(x):  # doubles: rounded once, directly (bits/_doubles.py)
        return jnp.asarray(_doubles.prepare(x, f, rounding, saturate))
    dtype = _dtype_of(x)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"x: expected a floating dtype (float32; float64 with x64), got {dtype}")
    return jnp.asarray(x).astype(jnp.float64 if dtype == np.float64 else want)


# ---- integer helpers: shifts by traced amounts that may be out of range ----------------
def _c(x, like):
    return jnp.asarray(x, like.dtype)


def _width(x) -> int:
    return jnp.iinfo(x.dtype).bits


def _shl(x, n):
    """``x << n`` for int32 ``n >= 0``; 0 when ``n`` is at least the width."""
    w = _width(x)
    y = lax.shift_left(x, jnp.clip(n, 0, w - 1).astype(x.dtype))
    return jnp.where(n >= w, _c(0, x), y)


def _shr(x, n):
    """``x >> n`` (logical) for int32 ``n >= 0``; 0 when ``n`` is at least the width."""
    w = _width(x)
    y = lax.shift_right_logical(x, jnp.clip(n, 0, w - 1).astype(x.dtype))
    return jnp.where(n >= w, _c(0, x), y)


def _low_mask(n, like):
    """The ``n`` lowest bits set (all bits when ``n`` is at least the width)."""
    return jnp.where(
        n >= _width(like), _c(-1 % 2 ** _width(like), like), _shl(_c(1, like), n) - _c(1, like)
    )


def _split(f: Format, x):
    """Raw fields of the encoding held in ``x``: (sign, biased exponent, mantissa, v)."""
    v = (lax.shift_right_logical(x, _c(f.shift, x)) if f.shift else x) & _c(2**f.bits - 1, x)
    sign = (v >> (f.bits - 1)) & 1 if f.signed else jnp.zeros_like(v)
    e_field = (v >> f.mant_bits) & _c(2**f.exp_bits - 1, x)
    mant = v & _c(2**f.mant_bits - 1, x)
    return sign.astype(jnp.uint32), e_field, mant, v


def _special(f: Format, e_field, mant, v):
    all_e = e_field == 2**f.exp_bits - 1
    if f.nan == "ieee":
        return all_e & (mant != 0), all_e & (mant == 0)
    if f.nan == "all_ones":
        ones = 2 ** (f.bits - 1 if f.signed else f.bits) - 1
        return (v & _c(ones, v)) == ones, jnp.zeros(v.shape, bool)
    return jnp.zeros(v.shape, bool), jnp.zeros(v.shape, bool)


def _float_fields(f: Format, x) -> Fields:
    sign, e_field, mant, v = _split(f, x)
    normal = e_field != 0 if f.subnormals else jnp.ones(v.shape, bool)
    sig = jnp.where(normal, mant | _c(2**f.mant_bits, mant), mant)
    lowest = 1 if f.subnormals else 0  # the biased exponent that min_exp belongs to
    exp = jnp.maximum(e_field.astype(jnp.int32), lowest) - lowest + f.min_exp
    nan, inf = _special(f, e_field, mant, v)
    special = nan | inf
    sig = jnp.where(special, _c(0, sig), sig)
    exp = jnp.where(special, jnp.int32(f.min_exp), exp)
    return Fields(sign, exp, sig, nan, inf)


def fields(fmt: str, bits: ArrayLike) -> Fields:
    """Splits raw element bits into sign, exponent and integer significand.

    Args:
      fmt: a PTX type name, one of ``FORMATS``.
      bits: integer array ``[...]``, the element in the low bits (upper bits ignored);
        for tf32 the whole f32 register (the low 13 bits are ignored); for f64 uint64
        (needs ``jax_enable_x64``).

    Returns:
      :class:`Fields` of shape ``[...]`` with value ``(-1)**sign * sig * 2**exp``:
      ``sig`` includes the hidden bit (subnormals have none; zero has ``sig=0``,
      ``exp=min_exp``); ``sig`` is uint32, or uint64 for f64 (53 bits). Integer formats
      give the sign and magnitude of their value with ``exp=0``.

    Example:
      >>> f = fields("e4m3", jnp.uint32(0x3C))  # 1.5 = 12 * 2**-3
      >>> int(f.sig), int(f.exp)
      (12, -3)
    """
    f = get_format(fmt)
    _need_x64(f)
    x = _as_bits(bits, f)
    if f.kind == "float":
        return _float_fields(f, x)
    v = x.astype(jnp.uint32) & jnp.uint32(2**f.bits - 1)
    neg = (v >> (f.bits - 1)) & 1 if f.signed else jnp.zeros_like(v)
    mag = jnp.where(neg == 1, (jnp.uint32(0) - v) & jnp.uint32(2**f.bits - 1), v)
    false = jnp.zeros(v.shape, bool)
    return Fields(neg, jnp.zeros(v.shape, jnp.int32), mag, false, false)


# ---- rounding -------------------------------------------------------------------------
def _shift_round(sig, r, sign, rounding, rbits):
    """``sig * 2**-r`` rounded to an integer: returns (truncated, increment?)."""
    w = _width(sig)
    rp = jnp.maximum(r, 0)
    kept = jnp.where(r >= 0, _shr(sig, rp), _shl(sig, -r))
    dropped = sig & _low_mask(rp, sig)
    half = jnp.where((rp >= 1) & (rp <= w), _shl(_c(1, sig), rp - 1), _c(0, sig))
    round_bit = (dropped & half) != 0
    sticky = (dropped & (half - _c(1, sig))) != 0
    inexact = round_bit | sticky
    if rounding == "rn":
        return kept, round_bit & (sticky | ((kept & 1) == 1))
    if rounding == "rna":
        return kept, round_bit
    if rounding == "rz":
        return kept, jnp.zeros(kept.shape, bool)
    if rounding == "rp":
        return kept, inexact & (sign == 0)
    if rounding == "rm":
        return kept, inexact & (sign == 1)
    top = jnp.where(rp <= 32, _shl(dropped, 32 - rp), _shr(dropped, rp - 32))
    jam = (rp > 32) & ((dropped & _low_mask(rp - 32, sig)) != 0)
    top32 = top.astype(jnp.uint32) | jam.astype(jnp.uint32)
    return kept, top32 > ~rbits


def _nan_bits(f: Format, sign, payload, payload_bits: int, like):
    m, expones = f.mant_bits, _c((2**f.exp_bits - 1) << f.mant_bits, like)
    if f.nan_encode == "none":  # the largest finite value, unsigned
        return jnp.full(like.shape, _nan_word(f, False, 0), like.dtype)
    if f.nan_encode in ("all_ones", "quiet"):  # one pattern whatever the payload
        bits = _c(_nan_word(f, False, 0), like)
    else:
        if payload is None:
            p = jnp.zeros_like(like)
        elif payload_bits >= m:
            p = (payload >> (payload_bits - m)).astype(like.dtype)
        else:
            p = payload.astype(like.dtype) << (m - payload_bits)
        if f.nan_encode == "payload":
            p = jnp.where(p == 0, _c(1, like), p)
        else:
            p = p | _c(1 << (m - 1), like)
        bits = expones | p
    return bits | (sign.astype(like.dtype) << (f.bits - 1)) if f.signed else bits


def special_bits(fmt: str, value: float, *, saturate: bool = False) -> int:
    """The bits :func:`encode` gives a float32 zero, infinity or NaN (``np.nan``: the
    quiet NaN ``0x7FC00000`` and its sign) in the float format ``fmt``, in any rounding
    mode, as a Python int: :func:`round_float`'s rules for these inputs, from the format's
    table alone, so that a traced caller needs no computation for them
    (``tests/test_formats_special.py`` compares it with :func:`encode`)."""
    f = get_format(fmt)
    if f.kind != "float" or f.bits == 64:
        raise ValueError(f"fmt: expected a float format narrower than f64, got {fmt!r}")
    neg = math.copysign(1.0, value) < 0
    sign = (1 << (f.bits - 1)) if f.signed and neg else 0
    if value == 0:
        out = sign
    elif math.isinf(value):
        if saturate or (not f.has_inf and f.nan == "none"):
            out = f.max_bits | sign
        elif f.has_inf:
            out = ((2**f.exp_bits - 1) << f.mant_bits) | sign
        else:
            out = _nan_word(f, neg, 0)
    elif math.isnan(value):
        out = _nan_word(f, neg, 1 << (f.mant_bits - 1) if f.mant_bits else 0)
    else:
        raise ValueError(f"value: expected a zero, an infinity or a NaN, got {value!r}")
    return out << f.shift


def _nan_word(f: Format, neg: bool, payload: int) -> int:
    """:func:`_nan_bits` for one element: ``payload`` the NaN's mantissa in ``f``'s
    width (a float32 quiet NaN's quiet bit lands on ``f``'s top mantissa bit)."""
    m = f.mant_bits
    if f.nan_encode == "none":
        return f.max_bits
    if f.nan_encode == "all_ones":
        bits = 2 ** (f.bits - 1 if f.signed else f.bits) - 1
    elif f.nan_encode == "quiet":
        bits = ((2**f.exp_bits - 1) << m) | (1 << (m - 1))
    elif f.nan_encode == "payload":
        bits = ((2**f.exp_bits - 1) << m) | (payload or 1)
    else:
        bits = ((2**f.exp_bits - 1) << m) | payload | (1 << (m - 1))
    return bits | ((1 << (f.bits - 1)) if f.signed and neg else 0)


def round_float(f, fl: Fields, payload, payload_bits, rounding, saturate, rbits, ftz):
    """Rounds exact fields ``fl`` into format ``f``: bits in ``f``'s storage position."""
    sign = fl.sign if f.signed else jnp.zeros_like(fl.sign)
    sig = fl.sig
    w, m = _width(sig), f.mant_bits
    top = fl.exp + (w - util.clz(sig).astype(jnp.int32)) - 1
    q = jnp.maximum(top - m, f.min_exp)
    kept, inc = _shift_round(sig, q - fl.exp, sign, rounding, rbits)
    kept = kept + inc.astype(sig.dtype)
    q_top = (f.max_bits >> m) - f.bias - m
    qc = jnp.minimum(q, q_top + 1)
    # Biased exponent - 1 above the mantissa, plus the significand with its hidden bit:
    # a carry of the significand into bit m+1 lands in the exponent, as it should.
    mag = ((qc + f.bias + m).astype(sig.dtype) << m) + kept - _c(2**m, sig)
    mag = jnp.where(kept == 0, _c(0, sig), mag)
    if ftz and f.subnormals:
        mag = jnp.where(mag < 2**m, _c(0, sig), mag)
    word = jnp.uint64 if f.bits == 64 else jnp.uint32
    mag = mag.astype(word)
    maxb = jnp.full(mag.shape, f.max_bits, word)
    if f.has_inf:
        inf_bits = jnp.full(mag.shape, (2**f.exp_bits - 1) << m, word)
    elif f.nan != "none":
        inf_bits = _nan_bits(f, sign, None, 0, mag)
    else:
        inf_bits = maxb
    # Whether the rounding direction points away from zero (overflow -> Inf, not max).
    up = {"rz": False, "rp": sign == 0, "rm": sign == 1, "stochastic": inc}.get(rounding, True)
    over = (mag > maxb) & ~fl.nan & ~fl.inf
    out = jnp.where(over, maxb if saturate else jnp.where(up, inf_bits, maxb), mag)
    out = jnp.where(fl.inf, maxb if saturate else inf_bits, out)
    if f.signed:
        out = out | (sign.astype(word) << (f.bits - 1))
    out = jnp.where(fl.nan, _nan_bits(f, sign, payload, payload_bits, mag), out)
    return out << f.shift if f.shift else out


def _round_int(f, fl: Fields, rounding, saturate, rbits):
    sig = fl.sig
    w = _width(sig)
    top = fl.exp + (w - util.clz(sig).astype(jnp.int32)) - 1
    kept, inc = _shift_round(sig, -fl.exp, fl.sign, rounding, rbits)
    k = (kept + inc.astype(sig.dtype)).astype(jnp.uint32)
    mask = jnp.uint32(2**f.bits - 1)
    max_pos = jnp.uint32(f.max)
    max_neg = jnp.uint32(2 ** (f.bits - 1) if f.signed else 0)
    neg = fl.sign == 1
    too_big = (top >= 32) | (k > jnp.where(neg, max_neg, max_pos))
    sat = jnp.where(neg, (jnp.uint32(0) - max_neg) & mask, max_pos)
    wrapped = jnp.where(neg, jnp.uint32(0) - k, k) & mask
    out = jnp.where(too_big, sat, wrapped) if saturate else wrapped
    out = jnp.where(fl.inf, sat, out)
    return jnp.where(fl.nan, jnp.uint32(0), out)


_ENCODE_NO_DERIVATIVE = (
    "x: formats.encode returns integer bits, which have no derivative with respect to x; "
    "use formats.round_to_format(fmt, x, ...) for a differentiable rounding (its "
    "derivative is the straight-through estimator, the identity's)"
)


def encode(
    fmt: str,
    x: ArrayLike,
    *,
    rounding: Rounding = "rn",
    saturate: bool = False,
    random_bits: ArrayLike | None = None,
    ftz: bool = False,
) -> jax.Array:
    """Rounds values to a format and returns its bits (``cvt`` to a PTX element type).

    Args:
      fmt: a PTX type name, one of ``FORMATS``.
      x: float array ``[...]`` (float16/bfloat16/float32), or doubles (float64 arrays,
        Python floats), rounded once from the double with x64 on or off (docs/dtypes.md).
      rounding: ``"rn"`` (nearest even), ``"rna"`` (nearest, ties away), ``"rz"``,
        ``"rm"``, ``"rp"`` or ``"stochastic"`` (see the module docstring).
      saturate: clamp overflow and +-Inf to +-max finite (integers: clamp to the range;
        otherwise integers wrap modulo ``2**bits``).
      random_bits: uint32 array broadcastable to ``x``; required by ``"stochastic"``.
      ftz: flush subnormal results to signed zero.

    Returns:
      uint32 ``[...]`` with the element in the low bits (tf32: the f32 register with the
      low 13 bits zero; f64: uint64). Integers: NaN gives 0 and +-Inf always the range's
      end.

    Example:
      >>> hex(int(encode("e4m3", 1.0)))
      '0x38'
    """
    f = get_format(fmt)
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding: expected one of {list(ROUNDINGS)}, got {rounding!r}")
    if (rounding == "stochastic") != (random_bits is not None):
        raise ValueError(
            f"random_bits: required with rounding='stochastic' and only with "
            f"it, got rounding={rounding!r} and random_bits={random_bits!r}"
        )
    for name, flag in (("saturate", saturate), ("ftz", ftz)):
        if not isinstance(flag, bool | np.bool_):
            raise TypeError(f"{name}: expected True or False, got {flag!r}"[:300])
    _need_x64(f)
    x = util.no_derivative(_as_float(x, f, rounding, saturate), _ENCODE_NO_DERIVATIVE)
    rbits = None
    if random_bits is not None:
        if isinstance(random_bits, int):
            random_bits = np.uint32(random_bits)
        dtype = _dtype_of(random_bits)
        if dtype != np.uint32:
            raise TypeError(f"random_bits: expected uint32, got {dtype}")
        shape = tuple(np.shape(random_bits))
        try:
            ok = jnp.broadcast_shapes(shape, x.shape) == tuple(x.shape)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"random_bits: expected a shape that broadcasts to x's {tuple(x.shape)}, "
                f"got {shape}"
            )
        rbits = jnp.broadcast_to(jnp.asarray(random_bits), x.shape)
    return _encode_bits(f.name, rounding, bool(saturate), bool(ftz), x, rbits)


# one compiled program per format and rounding, not one per operation of an eager call
# (inside a caller's jit it is inlined: the same operations)
@functools.partial(util.jit, static_argnums=(0, 1, 2, 3))
def _encode_bits(name: str, rounding: str, saturate: bool, ftz: bool, x, rbits):
    f = FORMATS[name]
    src = FORMATS["f64" if x.dtype == jnp.float64 else "f32"]
    raw = lax.bitcast_convert_type(util.ingest(x), jnp.uint64 if src.bits == 64 else jnp.uint32)
    fl = _float_fields(src, raw)
    if f.kind != "float":
        return _round_int(f, fl, rounding, saturate, rbits)
    payload = raw & _c(2**src.mant_bits - 1, raw)
    out = round_float(f, fl, payload, src.mant_bits, rounding, saturate, rbits, ftz)
    return out.astype(jnp.uint64 if f.bits == 64 else jnp.uint32)


def decode(fmt: str, bits: ArrayLike) -> jax.Array:
    """Returns the exact value of element bits.

    Args:
      fmt: a PTX type name, one of ``FORMATS``.
      bits: integer array ``[...]`` as for :func:`fields`.

    Returns:
      float32 ``[...]`` (every value of the formats narrower than 32 bits is exact in
      float32; ue8m0 0x00 = 2**-127 is a float32 subnormal). f64 gives float64 and s32
      gives int32 (its values need 32 bits). NaN: see the module docstring.

    Example:
      >>> float(decode("e2m1", jnp.uint32(0x7)))
      6.0
    """
    f = get_format(fmt)
    _need_x64(f)
    return _decode_bits(f.name, _as_bits(bits, f))


@functools.partial(util.jit, static_argnums=0)
def _decode_bits(name: str, x):
    x = util.ingest(x)
    f = FORMATS[name]
    fmt = name
    if f.name == "f64":
        return lax.bitcast_convert_type(x, jnp.float64)
    if f.name in ("f32", "tf32"):
        return lax.bitcast_convert_type(x & jnp.uint32(~(2**f.shift - 1) % 2**32), jnp.float32)
    if f.name == "s32":
        return lax.bitcast_convert_type(x, jnp.int32)
    fl = fields(fmt, x)
    if f.kind != "float":
        val = fl.sig.astype(jnp.float32)
        return jnp.where(fl.sign == 1, -val, val)
    out = round_float(FORMATS["f32"], fl, None, 0, "rz", False, None, False)
    if f.nan == "ieee" and f.bits >= 16:  # the payload shifted up, as NumPy and ml_dtypes
        mant = _split(f, x)[2]
        nan = jnp.uint32(0x7F800000) | (mant << (23 - f.mant_bits))
    else:  # the canonical quiet NaN, as ml_dtypes
        nan = jnp.uint32(0x7FC00000)
    out = jnp.where(fl.nan, nan | (fl.sign << 31), out)
    return lax.bitcast_convert_type(out, jnp.float32)


def round_to_format(fmt: str, x: ArrayLike, **kwargs: Any) -> jax.Array:
    """``decode(fmt, encode(fmt, x, **kwargs))``: ``x`` rounded onto the format's values.

    Differentiable with the straight-through estimator: the derivative is the identity's
    (rounding itself has zero derivative almost everywhere, which is never what a
    quantization-aware training loop wants). :func:`encode` alone, whose result is
    integer bits, refuses to be differentiated.

    Example:
      >>> float(round_to_format("e2m1", 2.4))
      2.0
    """
    f = get_format(fmt)
    rounding, saturate = kwargs.get("rounding", "rn"), kwargs.get("saturate", False)
    x32 = _as_float(x, f, rounding, saturate)  # the errors naming fmt and x, before tracing
    if _doubles.is_host_double(x):  # doubles: the values that round as the doubles do
        x = x32
    return util.straight_through(lambda v: decode(fmt, encode(fmt, v, **kwargs)), x)
