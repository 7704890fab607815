"""A fixed-width exact engine for the fused-block model: same bits, a fraction of the work.

:func:`jaxmma._numerics.fused_sum` builds every product as a multi-limb integer. For the
models whose block sum is narrow, that is far more than needed: every term of a block is
truncated to ``F`` fractional bits below ``2**e_max`` and is below ``2**(e_max + 2)``
(a product of two significands in ``[1, 2)``), so it is an integer below ``2**(F + 2)``
units of the block's grid ``2**(e_max - F)``. With ``F <= 25`` and at most 16 products
per group, a group's sum is below ``2**31``: exact in one int32.

Per product the engine does float32 work that is exact by construction:

* the significands' product ``sa * sb`` (at most 11 x 11 bits) is exact in float32;
* multiplying by ``2**(lsb - unit)``, a power of two built from its exponent bits, is
  exact, and the conversion to int32 truncates toward zero, which is the model's
  truncation of the term's magnitude (a term far below the grid gets the scale 0.0 and
  truncates to 0, as it must);
* the int32 sum of a group is exact; groups and C are combined exactly in 16-bit limbs
  and rounded once by :func:`jaxmma._numerics.round_block`, the rounding the general
  engine uses.

``e_max`` is the largest term order; zero terms count as ``e_zero``, which needs to know
whether any term is zero: the number of nonzero terms is an ordinary float32 matrix
product of 0/1 indicators (exact). NaN and Inf are found the same way: a product of
codes (``+-1`` for finite nonzero elements, ``0``, ``+-Inf``, NaN) is NaN exactly when a
NaN, ``Inf * 0`` or ``Inf - Inf`` meets in the block, and ``+-Inf`` when Infs of one sign
do, which is the model's rule for specials.

The engine never forms an ``[M, N, K]`` array: the products of a block are unrolled
along K as elementwise ``[M, 1] x [1, N]`` operations that XLA fuses into one loop.
:func:`supports` says which models it covers; ``_models`` picks it and keeps the general
engine for the rest, and the test suite checks the two bit for bit.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import util
from ..bits import OUT_FORMATS, Fields, fields, signed_sum
from . import _numerics
from ._numerics import BlockModel

F32 = jnp.float32
I32 = jnp.int32
U32 = jnp.uint32
#: exponent and order given to zero, NaN and Inf elements: far below any real term, and
#: small enough that sums of two of them and an exponent stay inside int32
ABSENT = -(1 << 20)
#: products per int32 partial sum
GROUP = 16
HIGHEST = jax.lax.Precision.HIGHEST
#: a model whose only use is its f32 width: 23 mantissa bits
_F32_RZ = BlockModel(F=0, L=None, e_zero_f32=0, e_zero_f16=0)


class Operand(NamedTuple):
    """Per-element data of A ``[..., M, K]`` or B ``[..., K, N]`` for the engine."""

    sig: jax.Array  # float32 signed significand, 0 for zero, NaN and Inf
    lsb: jax.Array  # int32 exponent of the significand's unit (ABSENT if zero/special)
    order: jax.Array  # int32 exponent that enters e_max (ABSENT if zero/special)
    code: jax.Array  # float32: +-1 finite nonzero, 0 zero, +-Inf, NaN
    nonzero: jax.Array  # float32 1.0 for finite nonzero


def supports(model: BlockModel, dtype: str, sig_bits: int) -> bool:
    """Whether the engine computes this model exactly.

    ``sig_bits``: bits of the larger operand significand (the product of two must be exact
    in float32).
    """
    return (
        not model.exact
        and model.L is not None
        and dtype in ("f32", "f16")
        and model.F + 2 + 4 <= 31  # a group of 16 terms below 2**(F + 2) each
        and 2 * sig_bits <= 24
    )


def operand(f: Fields, fmt: str, order_fmt: str | None = None) -> Operand:
    """Prepare the fields of A or B (see :func:`jaxmma._numerics.operand_order`)."""
    finite = (f.sig != 0) & ~f.nan & ~f.inf
    mag = f.sig.astype(F32)
    sig = jnp.where(finite, jnp.where(f.sign != 0, -mag, mag), F32(0))
    order = _numerics.operand_order(f, fmt, order_fmt)
    inf = jnp.where(f.sign != 0, F32(-jnp.inf), F32(jnp.inf))
    code = jnp.where(f.nan, F32(jnp.nan), jnp.where(f.inf, inf, jnp.sign(sig)))
    return Operand(
        sig,
        jnp.where(finite, f.exp, I32(ABSENT)),
        jnp.where(finite, order, I32(ABSENT)),
        code,
        finite.astype(F32),
    )


def cols(op: Operand, idx) -> Operand:
    """Columns ``idx`` (a slice or index list) of an A operand ``[..., M, K]``."""
    return Operand(*(x[..., idx] for x in op))


def rows(op: Operand, idx) -> Operand:
    """Rows ``idx`` of a B operand ``[..., K, N]``."""
    return Operand(*(x[..., idx, :] for x in op))


def pow2(e):
    """``2.0**e`` for int32 ``e <= 127``; 0.0 where ``e < -126`` (a term that small
    truncates to 0 whatever its scale)."""
    biased = jnp.maximum(e + 127, 0)
    return jax.lax.bitcast_convert_type(biased << 23, F32)


def _signed_limbs(x):
    """int32 -> (negative, magnitude as two 16-bit limbs) for ``|x| < 2**31``."""
    neg = x < 0
    mag = jnp.where(neg, -x, x).astype(U32)
    return neg, jnp.stack([mag & U32(0xFFFF), mag >> U32(16)], axis=-1)


def block(
    a: Operand, b: Operand, c_bits, ctype: str, dtype: str, model: BlockModel, c_shift: int = 0
):
    """One fused block: the L products of ``a [..., M, L]`` and ``b [..., L, N]`` and C.

    ``c_shift``: C enters as ``C * 2**-c_shift`` exactly (its decoded exponent lowered).
    Returns the block's ``dtype`` bits (uint32 ``[..., M, N]``), the same bits as
    :func:`jaxmma._numerics.fused_sum` on the same terms.
    """
    L = a.sig.shape[-1]
    col = lambda x, i: x[..., :, i, None]  # noqa: E731  [..., M, 1]
    row = lambda x, i: x[..., None, i, :]  # noqa: E731  [..., 1, N]
    c = fields(ctype, c_bits)
    c = c._replace(exp=c.exp - c_shift)
    c_finite = (c.sig != 0) & ~c.nan & ~c.inf
    e_zero = model.e_zero(dtype)

    e_max = jnp.where(c_finite, _numerics.element_order(c, ctype), I32(e_zero))
    for i in range(L):
        e_max = jnp.maximum(e_max, col(a.order, i) + row(b.order, i))
    count = jnp.matmul(a.nonzero, b.nonzero, precision=HIGHEST)
    e_max = jnp.where(count < L, jnp.maximum(e_max, I32(e_zero)), e_max)
    # materialized once: XLA would otherwise recompute the maximum in every consumer
    unit = jax.lax.optimization_barrier(e_max - model.F)

    parts = []
    for start in range(0, L, GROUP):
        total = None
        for i in range(start, min(start + GROUP, L)):
            scale = pow2(col(a.lsb, i) + row(b.lsb, i) - unit)
            t = (col(a.sig, i) * row(b.sig, i) * scale).astype(I32)
            total = t if total is None else total + t
        parts.append(total)
    c_mag = jnp.where(c_finite, c.sig, U32(0)).astype(F32)
    c_sig = jnp.where(c.sign != 0, -c_mag, c_mag)
    parts.append((c_sig * pow2(c.exp - unit)).astype(I32))

    if len(parts) == 2:
        bits = round_sum(*_sum_two(*parts), unit, dtype, model)
    elif len(parts) == 3:
        neg, mag, shift = sum_three(*parts)
        bits = round_sum(neg, mag, unit + shift, dtype, model)
    else:
        neg, mag = _sum_parts(parts)
        bits = _numerics.round_block(neg, mag, unit, dtype, model)

    c_inf = jnp.where(c.sign != 0, F32(-jnp.inf), F32(jnp.inf))
    c_code = jnp.where(c.nan, F32(jnp.nan), jnp.where(c.inf, c_inf, F32(0)))
    special = jnp.matmul(a.code, b.code, precision=HIGHEST) + c_code
    return _numerics.special_bits(
        bits, jnp.isnan(special), special == jnp.inf, special == -jnp.inf, dtype
    )


def _sum_two(x, y):
    """``x + y`` for int32 ``|x|, |y| < 2**31`` as (negative, magnitude uint32): a 33-bit
    sum from a wrapped 32-bit add and its overflow."""
    w = x + y
    overflow = ((x < 0) == (y < 0)) & ((w < 0) != (x < 0))
    neg = jnp.where(overflow, x < 0, w < 0)
    return neg, jnp.where(neg, U32(0) - w.astype(U32), w.astype(U32))


def sum_three(x, y, z):
    """``x + y + z`` for int32 ``|x|, |y|, |z| < 2**31`` as (negative, magnitude uint32,
    shift): the magnitude is ``|x + y + z| >> shift`` with the bits shifted out ORed into
    the lowest bit (sticky).

    The exact sum needs up to 33 bits. It is formed in 16-bit halves (the high halves
    signed, the low ones in [0, 2**16)), so nothing overflows. Where it needs 33 bits
    (``shift = 1``), its leading bit is bit 32, and :func:`round_sum` keeps at most 24 bits
    from it: the result's lowest kept bit is bit 9 or above, so one bit folded into a
    sticky bit decides truncation and nearest-even rounding as the whole sum would.
    """
    lo = (x & 0xFFFF) + (y & 0xFFFF) + (z & 0xFFFF)  # < 3 * 2**16
    hi = (x >> 16) + (y >> 16) + (z >> 16) + (lo >> 16)  # arithmetic shifts: signed
    lo = lo & 0xFFFF
    neg = hi < 0
    # magnitude of hi * 2**16 + lo: for a negative sum, -(hi * 2**16 + lo)
    mlo = jnp.where(neg & (lo != 0), 0x10000 - lo, lo)
    mhi = jnp.where(neg, -hi - (lo != 0).astype(I32), hi)  # 0 <= mhi < 2**17
    wide = mhi >= 0x10000
    mag = jnp.where(
        wide,
        (mhi.astype(U32) << U32(15)) | (mlo.astype(U32) >> U32(1)) | (mlo & 1).astype(U32),
        (mhi.astype(U32) << U32(16)) | mlo.astype(U32),
    )
    return neg, mag, wide.astype(I32)


def _sum_parts(parts):
    """The exact sum of int32 partial sums (each below ``2**31`` in magnitude) as
    ``(negative, normalized magnitude limbs)``."""
    signs, limbs = zip(*(_signed_limbs(p) for p in parts), strict=True)
    return signed_sum(jnp.stack(signs, axis=-1), jnp.stack(limbs, axis=-2))


def round_sum(neg, mag, unit, dtype: str, model: BlockModel):
    """:func:`jaxmma._numerics.round_block` for a magnitude that fits one uint32.

    The same rounding as :func:`jaxmma._wide.round_to_float` (f32 toward zero, to
    ``model.f32_mantissa`` bits; f16 to nearest even; subnormals; overflow to Inf; a zero
    result is +0), in 32-bit operations.
    """
    out = OUT_FORMATS[dtype]
    man = out.man
    cut = 0
    if dtype == "f32" and model.f32_mantissa < man:
        cut, man = man - model.f32_mantissa, model.f32_mantissa
    emin = 1 - out.bias
    zero = mag == 0
    p = 31 - util.clz(mag).astype(I32)
    lead = p + unit
    lsb = jnp.where(lead < emin, emin - man, lead - man)
    qs = lsb - unit  # the bit of mag that becomes the result's lsb
    up = jnp.clip(-qs, 0, 31).astype(U32)
    down = jnp.clip(qs, 0, 31).astype(U32)
    q = jnp.where(qs <= 0, mag << up, jnp.where(qs >= 32, U32(0), mag >> down))
    if dtype == "f16":  # to nearest even; f32 truncates
        gpos = jnp.clip(qs - 1, 0, 31).astype(U32)
        guard = (qs >= 1) & (qs <= 32) & (((mag >> gpos) & U32(1)) != 0)
        below = jnp.where(qs - 1 >= 32, U32(0xFFFFFFFF), (U32(1) << gpos) - U32(1))
        rest = (qs >= 2) & ((mag & below) != 0)
        q = q + (guard & (rest | ((q & U32(1)) != 0))).astype(U32)
        carry = q >> U32(man + 1)
        q = jnp.where(carry != 0, q >> U32(1), q)
        lsb = lsb + carry.astype(I32)
    normal = q >= U32(1 << man)
    biased = jnp.where(normal, lsb + man + out.bias, 0)
    field = jnp.where(normal, (biased.astype(U32) << U32(man)) | (q & U32((1 << man) - 1)), q)
    inf_biased = (1 << out.exp) - 1
    field = jnp.where(biased >= inf_biased, U32(inf_biased << man), field)
    field = jnp.where(zero, U32(0), field)
    sign = jnp.where(field != 0, neg.astype(U32) << U32(out.nbits - 1 - cut), U32(0))
    return (field | sign) << U32(cut)


def round_f32_rz(neg, mag, unit):
    """``(-1)**neg * mag * 2**unit`` (``mag`` uint32) rounded toward zero to f32 bits, with
    subnormals, overflow to Inf and +0 for a zero magnitude."""
    return round_sum(neg, mag, unit, "f32", _F32_RZ)


def chain(
    a: Operand, b: Operand, c_bits, ctype: str, dtype: str, model: BlockModel, c_shift: int = 0
):
    """Blocks of ``model.L`` products chained over the K axis (see ``block_chain``); the
    first block takes ``C * 2**-c_shift``."""
    K = a.sig.shape[-1]
    acc, acc_type, shift = c_bits, ctype, c_shift
    for start in range(0, K, model.L):
        s = slice(start, min(start + model.L, K))
        acc = block(cols(a, s), rows(b, s), acc, acc_type, dtype, model, shift)
        acc_type, shift = dtype, 0
    return acc
