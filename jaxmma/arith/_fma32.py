"""f32 fused multiply-add (FFMA, ``fma.rn.f32``) in 32-bit integer operations.

The general engine (:func:`jaxmma.arith._ieee.ffma_f32`) rounds the exact sum of three
product terms and C; it is the reference, and costs a few hundred operations and a large
program per call. A function that chains many FMAs (the libdevice and XLA:GPU sequences
of :mod:`jaxmma.arith._gpu_math`) takes this one instead: the same bits (tested against
the engine and against exact fractions), a few dozen elementwise operations.

How: the 48-bit product ``P`` of the two normalized significands and the 24-bit
significand of ``z`` are placed in one 64-bit frame held in two uint32 words, the
operand whose leading bit is higher at a fixed place (``P`` at bits 61..14, or ``z`` at
bits 61..38), the other shifted to its place; bits it loses below the frame are folded
into its lowest bit (a sticky bit). Such a loss happens only where the other operand is
at least ``2**59`` in frame units, so the rounding point lies above bit 35 and the sticky
bit decides only ties, as in an IEEE adder. The signed sum is exact in the frame; its top
31 bits (the rest again folded into a sticky bit) go to :func:`._int32.round_bits`.
Special values as :mod:`jaxmma.arith._ieee` documents them.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .. import util
from ..bits import CANONICAL_NAN
from ._int32 import I32, _normalized, round_bits

U32 = jnp.uint32
_SIGN = I32(-(2**31))
_INF = I32(0x7F800000)


def _u32(v):
    return lax.bitcast_convert_type(v, U32)


def _shl(x, n):
    """uint32 ``x << n`` for any int32 ``n >= 0`` (0 from 32 on)."""
    return jnp.where(n >= 32, U32(0), lax.shift_left(x, jnp.clip(n, 0, 31).astype(U32)))


def _shr(x, n):
    """uint32 ``x >> n`` (logical) for any int32 ``n >= 0`` (0 from 32 on)."""
    return jnp.where(n >= 32, U32(0), lax.shift_right_logical(x, jnp.clip(n, 0, 31).astype(U32)))


def _shl64(hi, lo, n):
    """``(hi, lo) << n`` for int32 ``n >= 0``; bits above 64 are dropped."""
    low = n < 32
    hi_out = jnp.where(low, _shl(hi, n) | _shr(lo, 32 - n), _shl(lo, n - 32))
    return hi_out, jnp.where(low, _shl(lo, n), U32(0))


def _shr64(hi, lo, n):
    """``(hi, lo) >> n`` for int32 ``n >= 0``, the bits shifted out folded into bit 0."""
    low = n < 32
    hi_out = _shr(hi, n)
    lo_out = jnp.where(low, _shr(lo, n) | _shl(hi, 32 - n), _shr(hi, n - 32))
    back_hi, back_lo = _shl64(hi_out, lo_out, n)
    lost = (back_hi != hi) | (back_lo != lo)
    return hi_out, lo_out | lost.astype(U32)


def _place(hi, lo, s):
    """``(hi, lo) * 2**s`` for int32 ``s`` (negative: shifted down with a sticky bit)."""
    left = _shl64(hi, lo, jnp.maximum(s, 0))
    right = _shr64(hi, lo, jnp.maximum(-s, 0))
    return jnp.where(s >= 0, left[0], right[0]), jnp.where(s >= 0, left[1], right[1])


def _product(mx, my):
    """The exact product of two significands below ``2**24`` as ``(hi, lo)`` words."""
    xh, xl = _u32(mx >> 16), _u32(mx & 0xFFFF)
    yh, yl = _u32(my >> 16), _u32(my & 0xFFFF)
    low, mid, high = xl * yl, xh * yl + xl * yh, xh * yh  # mid < 2**25
    lo = low + (mid << 16)
    carry = (lo < low).astype(U32)
    return high + (mid >> 16) + carry, lo


def ieee_fma(x, y, z):
    """f32 ``x * y + z`` rounded once to nearest even, on int32 bit patterns (FFMA):
    subnormals kept, a nonzero result that rounds to zero keeps its sign, an exact zero
    is +0 unless the product and ``z`` are both zeros of negative sign, overflow gives
    Inf; NaN in, ``Inf * 0`` and ``Inf - Inf`` give the canonical NaN."""
    ax, ay, az = x & 0x7FFFFFFF, y & 0x7FFFFFFF, z & 0x7FFFFFFF
    p_neg, z_neg = (x ^ y) < 0, z < 0
    p_inf = (ax == _INF) | (ay == _INF)
    nan = (ax > _INF) | (ay > _INF) | (az > _INF)
    nan |= ((ax == _INF) & (ay == 0)) | ((ay == _INF) & (ax == 0))
    nan |= p_inf & (az == _INF) & (p_neg != z_neg)
    mx, ux = _normalized(ax)
    my, uy = _normalized(ay)
    mz, uz = _normalized(az)
    p_hi, p_lo = _product(mx, my)
    p_zero, z_zero = (mx == 0) | (my == 0), mz == 0
    up = ux + uy
    # the operand whose leading bit may be higher sits at the top of the frame
    p_top = ~p_zero & (z_zero | (up + 47 >= uz + 23))
    frame = jnp.where(p_top, up - 14, uz - 38)  # exponent of the frame's bit 0
    p_hi, p_lo = _place(p_hi, p_lo, up - frame)
    z_hi, z_lo = _place(U32(0), _u32(mz), uz - frame)
    # the exact signed sum: magnitudes added, or the smaller taken from the larger
    add = p_neg == z_neg
    p_big = (p_hi > z_hi) | ((p_hi == z_hi) & (p_lo >= z_lo))
    b_hi, b_lo = jnp.where(p_big, p_hi, z_hi), jnp.where(p_big, p_lo, z_lo)
    s_hi, s_lo = jnp.where(p_big, z_hi, p_hi), jnp.where(p_big, z_lo, p_lo)
    sum_lo = b_lo + s_lo
    sum_hi = b_hi + s_hi + (sum_lo < b_lo).astype(U32)
    dif_lo = b_lo - s_lo
    dif_hi = b_hi - s_hi - (b_lo < s_lo).astype(U32)
    hi, lo = jnp.where(add, sum_hi, dif_hi), jnp.where(add, sum_lo, dif_lo)
    neg = jnp.where(add, p_neg, jnp.where(p_big, p_neg, z_neg))
    # the top 31 bits, the rest folded into a sticky bit
    lead = jnp.where(hi != 0, 63 - util.clz(hi).astype(I32), 31 - util.clz(lo).astype(I32))
    mag = jnp.where(lead >= 30, _shr64(hi, lo, jnp.maximum(lead - 30, 0))[1], _shl(lo, 30 - lead))
    nonzero = (hi != 0) | (lo != 0)
    bits = round_bits(neg, lax.bitcast_convert_type(mag, I32), frame + lead - 30, "f32", 23, True)
    bits = bits | jnp.where(nonzero & neg, _SIGN, 0)  # rounded to zero: the sign stays
    zeros = jnp.where(p_neg & z_neg, _SIGN, I32(0))  # +-0 * y + +-0
    bits = jnp.where(p_zero & z_zero, zeros, bits)
    bits = jnp.where(az == _INF, z, bits)
    bits = jnp.where(p_inf, _INF | jnp.where(p_neg, _SIGN, 0), bits)
    return jnp.where(nan, I32(CANONICAL_NAN["f32"]), bits)


def ieee_fma_f32(x_bits, y_bits, z_bits):
    """:func:`ieee_fma` on uint32 raw bits (broadcasting): f32 ``x * y + z``, FFMA."""
    as_i32 = lambda b: lax.bitcast_convert_type(jnp.asarray(b, U32), I32)  # noqa: E731
    x, y, z = jnp.broadcast_arrays(as_i32(x_bits), as_i32(y_bits), as_i32(z_bits))
    return lax.bitcast_convert_type(ieee_fma(x, y, z), U32)
