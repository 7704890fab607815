"""IEEE f32 multiply (FMUL) and fused multiply-add (FFMA) on raw bits, exactly rounded.

GEMM epilogues scale accumulators (``acc * scale``) and DeepSeek-style block scaling
accumulates ``fma(P, s, total)``; their bits must not depend on the host's float unit
(flush-to-zero, contraction). FMUL is the int32 multiply of :mod:`jaxmma.arith._int32`;
FFMA is an exact sum rounded once to nearest even with the general engine
(:func:`jaxmma.arith._numerics.fused_sum`): the product ``x * y`` enters as three exact
terms, ``x``'s 24-bit significand times each byte of ``y``'s, so no term needs more than
32 bits.

Special values as the hardware gives them: NaN in, ``Inf * 0`` or ``Inf - Inf`` give the
canonical NaN; overflow gives Inf; subnormals are kept; an exact zero is +0 unless every
term is a zero of negative sign.
"""

from __future__ import annotations

import jax.numpy as jnp

from ..bits import fields
from . import _int32, _numerics

U32 = jnp.uint32


def _product_terms(x_bits, y_bits) -> _numerics.Terms:
    """``x * y`` (f32 bits, broadcasting) as three exact terms on a last axis."""
    x_bits, y_bits = jnp.broadcast_arrays(jnp.asarray(x_bits, U32), jnp.asarray(y_bits, U32))
    fx, fy = fields("f32", x_bits), fields("f32", y_bits)
    zx = (fx.sig == 0) & ~fx.nan & ~fx.inf
    zy = (fy.sig == 0) & ~fy.nan & ~fy.inf
    nan = fx.nan | fy.nan | (fx.inf & zy) | (fy.inf & zx)
    inf = (fx.inf | fy.inf) & ~nan
    sign = fx.sign ^ fy.sign
    parts = []
    for i in range(3):
        chunk = (fy.sig >> U32(8 * i)) & U32(0xFF)
        lsb = fx.exp + fy.exp + 8 * i
        first = i == 0
        parts.append(
            _numerics.Terms(
                sign,
                fx.sig * chunk,  # < 2**24 * 2**8
                lsb,
                lsb + 31,  # unused by the exact sum
                nan if first else jnp.zeros_like(nan),
                inf if first else jnp.zeros_like(inf),
            )
        )
    return _numerics.Terms(*(jnp.stack(p, axis=-1) for p in zip(*parts, strict=True)))


def _round(terms: _numerics.Terms):
    bits = _numerics.fused_sum(terms, "f32", _numerics.EXACT, window=True)
    true_zero = (terms.sig == 0) & ~terms.nan & ~terms.inf
    neg_zero = jnp.all(true_zero & (terms.sign != 0), axis=-1)
    return jnp.where(neg_zero, U32(1 << 31), bits)


def fmul_f32(x_bits, y_bits):
    """f32 ``x * y`` rounded to nearest even (FMUL), uint32 bits, broadcasting: the int32
    multiply of :mod:`jaxmma.arith._int32` (a few dozen operations; the same bits as the
    exact sum of the three product terms, which :func:`ffma_f32` rounds)."""
    return _int32.ieee_mul_f32(x_bits, y_bits)


def ffma_f32(x_bits, y_bits, z_bits):
    """f32 ``x * y + z`` with one rounding to nearest even (FFMA), uint32 bits."""
    prod = _product_terms(x_bits, y_bits)
    z = jnp.broadcast_to(jnp.asarray(z_bits, U32), prod.sig.shape[:-1])
    return _round(_numerics.concat(prod, _numerics.c_terms(z, "f32")))
