"""The fused-block arithmetic in 32-bit integer operations, kernel-neutral.

The rounding of a block sum (:func:`round_bits`, the fixed-width engine's rounding of
:mod:`jaxmma.arith._fixed` written in int32), the IEEE f32 addition (:func:`ieee_add`,
FADD) and multiplication (:func:`ieee_mul`, FMUL) on int32 bit patterns. Both the XLA
path (:func:`jaxmma.arith._numerics.ieee_add`) and the Pallas kernel
(:mod:`jaxmma.gemm._pallas`) call them, so the two give the same bits; only elementwise
``jax.numpy``/``lax`` operations are used, which lower on every backend and inside a
Pallas kernel alike.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .. import util
from ..bits import CANONICAL_NAN, OUT_FORMATS

I32 = jnp.int32


def i32(v: int):
    """A 32-bit pattern as an int32 constant."""
    return I32(v - (1 << 32) if v >= 1 << 31 else v)


def srl(x, s):
    """``x >> s`` (logical) with ``s`` in the dtype of ``x``: a Python int shift is int64
    under ``jax_enable_x64``, and ``lax`` shifts take no mixed dtypes."""
    return lax.shift_right_logical(x, lax.convert_element_type(s, x.dtype))


def c_fields(c, fmt: str):
    """Accumulator bits -> (finite nonzero, order, exp, sig, negative, nan, inf)."""
    if fmt == "f32":
        e = srl(c, 23) & 0xFF
        man = c & 0x7FFFFF
        top, mbits, bias_lsb, neg = 0xFF, 23, 150, c < 0
    elif fmt == "bf16":
        c = c & 0xFFFF
        e = srl(c, 7) & 0xFF
        man = c & 0x7F
        top, mbits, bias_lsb, neg = 0xFF, 7, 134, (c & 0x8000) != 0
    else:
        c = c & 0xFFFF
        e = srl(c, 10) & 0x1F
        man = c & 0x3FF
        top, mbits, bias_lsb, neg = 0x1F, 10, 25, (c & 0x8000) != 0
    special = e == top
    sig = man | jnp.where(e != 0, I32(1 << mbits), 0)
    exp = jnp.maximum(e, 1) - bias_lsb
    finite = ~special & (sig != 0)
    return finite, exp + mbits, exp, sig, neg, special & (man != 0), special & (man == 0)


def round_bits(neg, mag, unit, fmt: str, mantissa: int, nearest: bool):
    """``(-1)**neg * mag * 2**unit`` (``mag`` int32 read as unsigned) -> ``fmt`` bits.

    :func:`jaxmma._fixed.round_sum` in int32: f32 toward zero (to ``mantissa`` bits) or to
    nearest even; f16 to nearest even; subnormals; overflow to Inf; a zero result is +0.
    """
    out = OUT_FORMATS[fmt]
    man = out.man
    cut = 0
    if fmt == "f32" and mantissa < man:
        cut, man = man - mantissa, mantissa
    emin = 1 - out.bias
    zero = mag == 0
    p = 31 - util.clz(mag)
    lead = p + unit
    lsb = jnp.where(lead < emin, emin - man, lead - man)
    qs = lsb - unit  # the bit of mag that becomes the result's lsb
    up = jnp.clip(-qs, 0, 31)
    down = jnp.clip(qs, 0, 31)
    q = jnp.where(qs <= 0, mag << up, jnp.where(qs >= 32, 0, srl(mag, down)))
    if nearest:
        gpos = jnp.clip(qs - 1, 0, 31)
        guard = (qs >= 1) & (qs <= 32) & ((srl(mag, gpos) & 1) != 0)
        below = jnp.where(qs - 1 >= 32, I32(-1), (I32(1) << gpos) - 1)
        rest = (qs >= 2) & ((mag & below) != 0)
        q = q + (guard & (rest | ((q & 1) != 0))).astype(I32)
        carry = srl(q, man + 1)
        q = jnp.where(carry != 0, srl(q, 1), q)
        lsb = lsb + carry
    normal = q >= (1 << man)
    biased = jnp.where(normal, lsb + man + out.bias, 0)
    field = jnp.where(normal, (biased << man) | (q & ((1 << man) - 1)), q)
    inf_biased = (1 << out.exp) - 1
    field = jnp.where(biased >= inf_biased, I32(inf_biased << man), field)
    field = jnp.where(zero, 0, field)
    sign = jnp.where(field != 0, neg.astype(I32) << (out.nbits - 1 - cut), 0)
    return (field | sign) << cut


def sum_two(x, y):
    """``x + y`` for int32 ``|x|, |y| < 2**31`` -> (negative, magnitude as uint32 bits)."""
    w = x + y
    overflow = ((x < 0) == (y < 0)) & ((w < 0) != (x < 0))
    neg = jnp.where(overflow, x < 0, w < 0)
    return neg, jnp.where(neg, 0 - w, w)


def ieee_add(x, y):
    """f32 ``x + y`` rounded to nearest even on int32 bits (FADD; subnormals kept, an
    exact zero is +0 unless both are -0, the canonical NaN), as
    :func:`jaxmma.arith._numerics.ieee_add_general` computes it."""
    ax, ay = x & 0x7FFFFFFF, y & 0x7FFFFFFF
    inf = I32(0x7F800000)
    nan = (ax > inf) | (ay > inf) | ((ax == inf) & (ay == inf) & ((x ^ y) < 0))
    swap = ay > ax
    big, small = jnp.where(swap, y, x), jnp.where(swap, x, y)
    eb, es = srl(big, 23) & 0xFF, srl(small, 23) & 0xFF
    mb = ((big & 0x7FFFFF) | jnp.where(eb != 0, I32(1 << 23), 0)) << 3
    ms = ((small & 0x7FFFFF) | jnp.where(es != 0, I32(1 << 23), 0)) << 3
    eb, es = jnp.maximum(eb, 1), jnp.maximum(es, 1)
    d = jnp.minimum(eb - es, 31)
    aligned = srl(ms, d)
    aligned = aligned | ((aligned << d) != ms).astype(I32)  # sticky
    mag = jnp.where((x ^ y) >= 0, mb + aligned, mb - aligned)
    bits = round_bits(big < 0, mag, eb - 153, "f32", 23, nearest=True)
    bits = jnp.where((x == y) & (x == I32(-(2**31))), x, bits)  # -0 + -0
    bits = jnp.where((ax == inf) | (ay == inf), big, bits)
    return jnp.where(nan, I32(CANONICAL_NAN["f32"]), bits)


def _on_u32(op, x_bits, y_bits):
    """``op`` of two int32 bit patterns, on uint32 raw bits (broadcasting)."""
    as_i32 = lambda b: lax.bitcast_convert_type(jnp.asarray(b, jnp.uint32), I32)  # noqa: E731
    x, y = jnp.broadcast_arrays(as_i32(x_bits), as_i32(y_bits))
    return lax.bitcast_convert_type(op(x, y), jnp.uint32)


def ieee_add_f32(x_bits, y_bits):
    """:func:`ieee_add` on uint32 raw bits (broadcasting): f32 ``x + y``, FADD."""
    return _on_u32(ieee_add, x_bits, y_bits)


def _normalized(a):
    """|f32| bits (int32, finite) -> (significand with its leading one at bit 23, or 0;
    the exponent of its lsb): subnormals shifted up, their exponent lowered to match."""
    _, _, exp, sig, _, _, _ = c_fields(a, "f32")
    shift = jnp.clip(util.clz(sig) - 8, 0, 23)
    return sig << shift, exp - shift


def ieee_mul(x, y):
    """f32 ``x * y`` rounded to nearest even on int32 bits (FMUL; subnormals kept, the
    sign of a zero or underflowed product is the sign of the product, overflow to Inf,
    the canonical NaN for NaN inputs and ``Inf * 0``).

    The 48-bit product of the two 24-bit significands is formed from 16-bit halves in
    uint32: its top 32 bits exactly, the low 16 folded into a sticky bit (the rounding
    point lies at least 6 bits above it, both significands being normalized first)."""
    ax, ay = x & 0x7FFFFFFF, y & 0x7FFFFFFF
    inf = I32(0x7F800000)
    nan = (ax > inf) | (ay > inf) | ((ax == inf) & (ay == 0)) | ((ay == inf) & (ax == 0))
    neg = (x ^ y) < 0
    mx, ux = _normalized(ax)
    my, uy = _normalized(ay)
    u32 = lambda v: lax.bitcast_convert_type(v, jnp.uint32)  # noqa: E731
    xh, xl = u32(srl(mx, 16)), u32(mx & 0xFFFF)
    yh, yl = u32(srl(my, 16)), u32(my & 0xFFFF)
    low = xl * yl  # < 2**32
    top = ((xh * yh) << 16) + (xh * yl + xl * yh) + (low >> 16)  # the product >> 16
    mag = lax.bitcast_convert_type(top | ((low & 0xFFFF) != 0).astype(jnp.uint32), I32)
    bits = round_bits(neg, mag, ux + uy + 16, "f32", 23, nearest=True)
    bits = bits | jnp.where(neg, I32(-(2**31)), 0)  # zeros and underflows keep the sign
    bits = jnp.where((ax == inf) | (ay == inf), inf | (bits & I32(-(2**31))), bits)
    return jnp.where(nan, I32(CANONICAL_NAN["f32"]), bits)


def ieee_mul_f32(x_bits, y_bits):
    """:func:`ieee_mul` on uint32 raw bits (broadcasting): f32 ``x * y``, FMUL."""
    return _on_u32(ieee_mul, x_bits, y_bits)


def round_f32_rz(neg, mag, unit):
    """:func:`round_bits` for f32 toward zero with all 23 mantissa bits, in fewer steps."""
    p = 31 - util.clz(mag)
    lead = p + unit
    sub = lead < -126
    qs = jnp.where(sub, -149 - unit, p - 23)  # the bit of mag that becomes the lsb
    q = jnp.where(qs >= 0, srl(mag, jnp.minimum(qs, 31)), mag << jnp.minimum(-qs, 31))
    bits = jnp.where(sub, q, ((lead + 126) << 23) + q)  # + the hidden bit: exponent + 1
    bits = jnp.where(lead > 127, I32(0x7F800000), bits)
    bits = jnp.where(mag == 0, 0, bits)
    return bits | jnp.where(bits != 0, neg.astype(I32) << 31, 0)


def convert(x, src: str, dst: str):
    """An IEEE conversion between ``f32``, ``f16`` and ``bf16`` on int32 bits, rounded to
    nearest even (F2F / F2FP): subnormals kept, overflow to Inf, signed zeros kept (a
    nonzero value that rounds to zero keeps its sign), NaN -> the canonical NaN; as
    :func:`jaxmma.arith._numerics.convert` computes it, in a few dozen operations."""
    finite, _, exp, sig, neg, nan, inf = c_fields(x, src)
    out = OUT_FORMATS[dst]
    bits = round_bits(neg, sig, exp, dst, out.man, nearest=True)
    sign = neg.astype(I32) << (out.nbits - 1)
    inf_bits = I32(((1 << out.exp) - 1) << out.man)
    bits = jnp.where(finite, bits, sign)  # zeros
    bits = jnp.where(finite & (bits == 0), sign, bits)  # rounded to zero: the sign stays
    bits = jnp.where(inf, inf_bits | sign, bits)
    return jnp.where(nan, I32(CANONICAL_NAN[dst]), bits)


def convert_bits(bits, src: str, dst: str):
    """:func:`convert` on unsigned raw bits (uint32 containers) -> uint32 bits."""
    x = lax.bitcast_convert_type(jnp.asarray(bits, jnp.uint32), I32)
    return lax.bitcast_convert_type(convert(x, src, dst), jnp.uint32)
