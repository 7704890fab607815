"""Arithmetic models of the floating-point tensor-core forms, per architecture.

The model (docs/numerics.md, after Fasi et al. 2021, Khattak & Mikaitis 2025, Xie et al. 2025):
an instruction is a chain of fused blocks over k. A block takes L exact products and C;
``e_max`` is the largest term exponent (a zero term counts as ``e_zero``); every term is
truncated toward zero to F fractional bits below ``2**e_max``; the truncated terms are
summed exactly and rounded once to the output format (f32: toward zero; f16: to nearest
even). Blocks chain with the output of one block as C of the next.

All functions work on element *fields* (``_formats.fields``) and raw output bits, batched
over any leading dimensions; everything is exact integer arithmetic (``_wide``), so CPU
and GPU give the same bits and no ``jax_enable_x64`` is needed.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp

from ..bits import (
    CANONICAL_NAN,
    FORMATS,
    OUT_FORMATS,
    FloatFormat,
    align,
    limbs_needed,
    msb,
    round_to_float,
    signed_sum,
)
from ..bits import fields as _fields
from ._int32 import convert_bits, ieee_add_f32

U32 = jnp.uint32


class Terms(NamedTuple):
    """Terms of a fused sum, term axis last: value = (-1)**sign * sig * 2**lsb.

    ``order`` is the exponent that enters ``e_max`` (zero terms: ``e_zero``).
    """

    sign: jnp.ndarray
    sig: jnp.ndarray
    lsb: jnp.ndarray
    order: jnp.ndarray
    nan: jnp.ndarray
    inf: jnp.ndarray


@dataclasses.dataclass(frozen=True)
class BlockModel:
    """Parameters of the fused-block model for one architecture and input family.

    F: fractional bits kept below ``2**e_max``; L: products per block (None: all of K);
    e_zero: exponent of a zero term, per output type; exact: sum without truncation and
    round once to nearest even (the ``"exact"`` reference model).
    """

    F: int
    L: int | None
    e_zero_f32: int
    e_zero_f16: int
    exact: bool = False
    f32_mantissa: int = 23  # f32 results are truncated to this many mantissa bits

    def e_zero(self, dtype: str) -> int:
        return self.e_zero_f16 if dtype == "f16" else self.e_zero_f32


EXACT = BlockModel(F=0, L=None, e_zero_f32=0, e_zero_f16=0, exact=True)


def man_bits(fmt: str) -> int:
    return FORMATS[fmt].mant_bits


def element_order(fields, fmt: str):
    """Exponent of an element's leading bit position as the model counts it (emin for
    subnormals): ``lsb + mantissa bits``."""
    return fields.exp + man_bits(fmt)


# ------------------------------------------------------------------------------ one block
SUM_WINDOW = 64  # bits below the leading term kept by the two-term IEEE sums


def fused_sum(
    terms: Terms, dtype: str, model: BlockModel, exact_width: int = 0, window: bool = False
):
    """Fused sum of the terms along the last axis, rounded to ``dtype`` bits (uint32).

    Specials: any NaN term, Inf - Inf -> canonical NaN; otherwise an Inf term gives Inf.
    ``window`` (exact model, at most two terms): keep ``SUM_WINDOW`` bits below the
    leading term and stand for anything below by an odd half unit (a sticky bit that keeps
    its sign); exact rounding, with a few limbs instead of the whole exponent range.
    """
    out = OUT_FORMATS[dtype]
    zero = terms.sig == 0
    if model.exact and window:
        lead = jnp.where(zero, jnp.int32(-(2**30)), terms.lsb + msb(terms.sig[..., None]))
        lo = jnp.min(jnp.where(zero, jnp.int32(2**30), terms.lsb), axis=-1)
        top = jnp.max(lead, axis=-1)
        unit = jnp.maximum(lo, top - SUM_WINDOW) - 1  # one extra bit: the half unit
        unit = jnp.where(top < -(2**29), 0, unit)
        shift = terms.lsb - unit[..., None]
        limbs, lost = align(jnp.where(zero, U32(0), terms.sig), shift, limbs_needed(SUM_WINDOW + 8))
        limbs = limbs.at[..., 0].set(limbs[..., 0] | lost.astype(U32))
        neg, mag = signed_sum(terms.sign, limbs)
        bits = round_to_float(neg, mag, unit, out, "rn", signed_zero=True)
        return apply_specials(bits, terms, dtype)
    if model.exact:
        lo = jnp.min(jnp.where(zero, jnp.int32(2**30), terms.lsb), axis=-1)
        unit = jnp.where(lo == 2**30, 0, lo)
        width = exact_width
        shift = terms.lsb - unit[..., None]
    else:
        order = jnp.where(zero, model.e_zero(dtype), terms.order)
        e_max = jnp.max(order, axis=-1)
        unit = e_max - model.F
        shift = terms.lsb - unit[..., None]
        width = model.F + 3  # products < 2**(e_max + 2)
    nl = limbs_needed(width + 1)
    limbs, _ = align(jnp.where(zero, U32(0), terms.sig), shift, nl)
    neg, mag = signed_sum(terms.sign, limbs)
    if model.exact:
        bits = round_to_float(neg, mag, unit, out, "rn", signed_zero=True)
    else:
        bits = round_block(neg, mag, unit, dtype, model)
    return apply_specials(bits, terms, dtype)


def round_block(neg, mag, unit, dtype: str, model: BlockModel):
    """The output rounding of one fused block (not the exact model): the exact sum
    ``(-1)**neg * mag * 2**unit`` (``mag``: normalized limbs) to ``dtype`` bits, f32 by
    truncation (to ``model.f32_mantissa`` bits), f16 to nearest even."""
    out = OUT_FORMATS[dtype]
    mode = "rz" if dtype == "f32" else "rn"
    if dtype == "f32" and model.f32_mantissa < out.man:  # e.g. sm_89 fp8: e8m13
        cut = out.man - model.f32_mantissa
        narrow = FloatFormat(model.f32_mantissa, out.exp, out.bias)
        return round_to_float(neg, mag, unit, narrow, mode) << U32(cut)
    return round_to_float(neg, mag, unit, out, mode)


def exact_width(atype: str, btype: str, ctype: str, k: int) -> int:
    """Bits that hold any exact sum of k products and C without truncation."""

    def span(fmt):
        f = FORMATS[fmt]
        top = (1 << f.exp_bits) - 1 - f.bias + 1  # above the largest finite exponent
        return top, 1 - f.bias - f.mant_bits

    (ta, la), (tb, lb), (tc, lc) = span(atype), span(btype), span(ctype)
    top = max(ta + tb + 2, tc + 1) + k.bit_length() + 1
    return top - min(la + lb, lc)


def apply_specials(bits, terms: Terms, dtype: str):
    pos_inf = jnp.any(terms.inf & (terms.sign == 0), axis=-1)
    neg_inf = jnp.any(terms.inf & (terms.sign != 0), axis=-1)
    nan = jnp.any(terms.nan, axis=-1) | (pos_inf & neg_inf)
    return special_bits(bits, nan, pos_inf, neg_inf, dtype)


def special_bits(bits, nan, pos_inf, neg_inf, dtype: str):
    """Override finite result bits: +-Inf where one sign of Inf met, canonical NaN."""
    out = OUT_FORMATS[dtype]
    inf_bits = U32(((1 << out.exp) - 1) << out.man)
    sign_bit = U32(1 << (out.nbits - 1))
    bits = jnp.where(pos_inf, inf_bits, bits)
    bits = jnp.where(neg_inf, inf_bits | sign_bit, bits)
    return jnp.where(nan, U32(CANONICAL_NAN[dtype]), bits)


# ------------------------------------------------------------------------------ products
def product_terms(a, b, atype: str, btype: str, *, order_fmt=None, b_rows=False) -> Terms:
    """Exact products ``A[..., m, k] * B[..., k, n]`` as terms ``[..., m, n, k]``.

    ``a``, ``b``: fields of A ``[..., M, K]`` and B ``[..., K, N]``; with ``b_rows``, B is
    ``[..., M, K, N]``: a K x N matrix per row of A (sparse A gathers B's rows per row).
    """

    def bt(x):  # B -> [..., M or 1, N, K]
        x = jnp.swapaxes(x, -1, -2)
        return x if b_rows else x[..., None, :, :]

    ea = a.exp[..., :, None, :]
    eb = bt(b.exp)
    sa = a.sig[..., :, None, :]
    sb = bt(b.sig)
    sign = a.sign[..., :, None, :] ^ bt(b.sign)
    oa = operand_order(a, atype, order_fmt)[..., :, None, :]
    ob = bt(operand_order(b, btype, order_fmt))
    na = a.nan[..., :, None, :]
    nb = bt(b.nan)
    ia = a.inf[..., :, None, :]
    ib = bt(b.inf)
    za, zb = (sa == 0) & ~ia & ~na, (sb == 0) & ~ib & ~nb  # true zeros (fields give
    # Inf and NaN a zero significand)
    nan = na | nb | (ia & zb) | (ib & za)
    inf = (ia | ib) & ~nan
    sig = jnp.where(ia | ib | na | nb, U32(0), sa * sb)
    return Terms(sign.astype(U32), sig, ea + eb, oa + ob, nan, inf)


def operand_order(fields, fmt, order_fmt=None):
    if order_fmt is None:
        return element_order(fields, fmt)
    # the element re-encoded exactly in order_fmt (e.g. fp8 converted to f16): the leading
    # bit's exponent, clamped at that format's emin
    lead = msb(fields.sig[..., None]) + fields.exp
    emin = 1 - FORMATS[order_fmt].bias
    return jnp.maximum(lead, emin)


def c_terms(c_bits, ctype: str, shift: int = 0) -> Terms:
    """The accumulator as a term ``[..., m, n, 1]``; ``shift``: times ``2**-shift`` exactly
    (the decoded exponent lowered, the significand kept: ``tcgen05.mma``'s scale-input-d)."""
    f = _fields(ctype, c_bits)
    t = Terms(
        f.sign.astype(U32),
        jnp.where(f.nan | f.inf, U32(0), f.sig),
        f.exp - shift,
        element_order(f, ctype) - shift,
        f.nan,
        f.inf,
    )
    return Terms(*(x[..., None] for x in t))


def concat(*terms: Terms) -> Terms:
    return Terms(*(jnp.concatenate(parts, axis=-1) for parts in zip(*terms, strict=True)))


def take(terms: Terms, idx) -> Terms:
    return Terms(*(x[..., idx] for x in terms))


# ------------------------------------------------------------------------------ chains
def block_chain(
    prod: Terms, c_bits, ctype: str, dtype: str, model: BlockModel, width=0, c_shift: int = 0
):
    """Run the chain of fused blocks over the k axis of ``prod`` ``[..., m, n, K]``.

    ``width``: bits of the exact sum, for the exact model (see :func:`exact_width`).
    ``c_shift``: the first block takes ``C * 2**-c_shift`` exactly (see :func:`c_terms`).
    """
    K = prod.sig.shape[-1]
    L = K if (model.L is None or model.exact) else model.L
    acc, acc_type, shift = c_bits, ctype, c_shift
    for start in range(0, K, L):
        block = take(prod, slice(start, min(start + L, K)))
        acc = fused_sum(concat(block, c_terms(acc, acc_type, shift)), dtype, model, width)
        acc_type, shift = dtype, 0
    return acc


def ieee_sum(terms: Terms, dtype: str):
    """The exact sum of the terms rounded once to nearest even, IEEE-754 style.

    What one FADD, FMUL or FFMA does (a single product and/or addends, no truncation):
    subnormals kept, overflow to Inf, an exact zero is +0 unless every term is a zero of
    negative sign, any NaN or an invalid operation gives the canonical NaN.
    """
    if terms.sig.shape[-1] > 2:
        raise ValueError("ieee_sum adds at most two terms (a product and an addend)")
    bits = fused_sum(terms, dtype, EXACT, window=True)
    true_zero = (terms.sig == 0) & ~terms.nan & ~terms.inf
    neg_zero = jnp.all(true_zero & (terms.sign != 0), axis=-1)
    sign_bit = U32(1 << (OUT_FORMATS[dtype].nbits - 1))
    return jnp.where(neg_zero, sign_bit, bits)


def ieee_add(x_bits, y_bits, fmt: str):
    """IEEE-754 addition x + y rounded to nearest even (FADD / HADD2), subnormals kept.

    ``.f32`` runs the 32-bit integer formulation the GEMM kernel uses
    (:func:`jaxmma.arith._int32.ieee_add_f32`, tested bit-equal to :func:`ieee_add_general`);
    other formats the general exact sum.
    """
    if fmt == "f32":
        return ieee_add_f32(x_bits, y_bits)
    return ieee_add_general(x_bits, y_bits, fmt)


def ieee_add_general(x_bits, y_bits, fmt: str):
    """:func:`ieee_add` as an exact two-term sum rounded once (any format)."""
    return ieee_sum(concat(c_terms(x_bits, fmt), c_terms(y_bits, fmt)), fmt)


#: the formats whose conversions run in int32 (:func:`jaxmma.arith._int32.convert`)
_INT32_CONVERT = ("f32", "f16", "bf16")


def convert(bits, src: str, dst: str):
    """IEEE conversion between float formats, rounding to nearest even (F2F / F2FP).

    Between ``f32``, ``f16`` and ``bf16`` it runs the int32 formulation
    (:func:`jaxmma.arith._int32.convert_bits`, tested bit-equal to
    :func:`convert_general`), other formats the general exact sum."""
    if src in _INT32_CONVERT and dst in _INT32_CONVERT and src != dst:
        return convert_bits(bits, src, dst)
    return convert_general(bits, src, dst)


def convert_general(bits, src: str, dst: str):
    """:func:`convert` as a one-term exact sum rounded once (any formats)."""
    return ieee_sum(c_terms(bits, src), dst)
