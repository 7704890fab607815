"""Wide fixed-point integers on 16-bit limbs, for exact sums without ``jax_enable_x64``.

A wide number is an array ``[..., NL]`` of uint32 limbs, each holding 16 bits (limb 0 is
the least significant). Sums of up to 65535 limbs cannot overflow a uint32 before the
carries are propagated, which is what makes exact multi-term sums cheap and vectorised.

Used by the numerics models: terms are aligned to a common unit (:func:`align`), summed
with their signs (:func:`signed_sum`), and the exact result is rounded once into a binary
floating-point format (:func:`round_to_float`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from .. import util
from . import _formats

LIMB = 16
MASK = 0xFFFF
U32 = jnp.uint32


def limbs_needed(bits: int) -> int:
    """Limbs to hold an unsigned integer of ``bits`` bits."""
    return max(1, -(-bits // LIMB))


def _shl(x, s):
    """x << s for uint32 x and int32 s, 0 where s >= 32 or s < 0 is not used."""
    s = jnp.clip(s, 0, 31).astype(U32)
    return lax.shift_left(x, s)


def _shr(x, s):
    s = jnp.clip(s, 0, 31).astype(U32)
    return lax.shift_right_logical(x, s)


def align(sig, shift, nlimbs: int):
    """``floor(sig * 2**shift)`` as limbs, and whether nonzero bits were dropped.

    Args:
      sig: uint32 magnitudes ``[...]``.
      shift: int32 ``[...]``; negative shifts truncate toward zero.
      nlimbs: static number of limbs of the result; bits above are dropped (the caller
        sizes it so that nothing is).
    Returns:
      (limbs uint32 ``[..., nlimbs]``, lost bool ``[...]``).
    """
    sig = sig.astype(U32)
    shift = shift.astype(jnp.int32)
    out = []
    for i in range(nlimbs):
        o = LIMB * i - shift  # bit of sig that lands on bit 0 of limb i
        right = jnp.where((o >= 0) & (o < 32), _shr(sig, o), U32(0))
        left = jnp.where((o < 0) & (o > -LIMB), _shl(sig, -o), U32(0))
        out.append((right | left) & U32(MASK))
    drop = -shift  # number of low bits of sig that fall below limb 0
    low_mask = jnp.where(drop >= 32, U32(0xFFFFFFFF), _shl(U32(1), drop) - U32(1))
    lost = (drop > 0) & ((sig & low_mask) != 0)
    return jnp.stack(out, axis=-1), lost


def normalize(limbs):
    """Propagate carries so that every limb is below 2**16 (the top limb keeps the rest)."""
    n = limbs.shape[-1]
    out = []
    carry = jnp.zeros(limbs.shape[:-1], U32)
    for i in range(n):
        v = limbs[..., i] + carry
        if i < n - 1:
            out.append(v & U32(MASK))
            carry = v >> U32(LIMB)
        else:
            out.append(v)
    return jnp.stack(out, axis=-1)


def compare(x, y):
    """Sign of x - y for normalized limbs: -1, 0 or 1 (int32)."""
    res = jnp.zeros(x.shape[:-1], jnp.int32)
    for i in range(x.shape[-1]):  # from least to most significant; the top decides last
        d = jnp.where(x[..., i] > y[..., i], 1, jnp.where(x[..., i] < y[..., i], -1, 0))
        res = jnp.where(d != 0, d, res)
    return res


def subtract(x, y):
    """x - y for normalized limbs with x >= y."""
    out = []
    borrow = jnp.zeros(x.shape[:-1], U32)
    for i in range(x.shape[-1]):
        xi, yi = x[..., i], y[..., i] + borrow
        under = xi < yi
        out.append(jnp.where(under, xi + U32(1 << LIMB) - yi, xi - yi))
        borrow = under.astype(U32)
    return jnp.stack(out, axis=-1)


def signed_sum(sign, limbs, axis: int = -2):
    """Exact sum of signed wide terms along ``axis`` (the term axis, before the limb axis).

    Args:
      sign: bool/uint32 ``[..., T]`` (1 = negative).
      limbs: uint32 ``[..., T, NL]``.
    Returns:
      (negative bool ``[...]``, magnitude limbs ``[..., NL + 1]``), normalized.
    """
    neg_t = jnp.asarray(sign).astype(bool)[..., None]
    zero = jnp.zeros_like(limbs)
    pos = jnp.sum(jnp.where(neg_t, zero, limbs), axis=axis, dtype=U32)
    neg = jnp.sum(jnp.where(neg_t, limbs, zero), axis=axis, dtype=U32)
    pad = [(0, 0)] * (pos.ndim - 1) + [(0, 1)]
    pos = normalize(jnp.pad(pos, pad))
    neg = normalize(jnp.pad(neg, pad))
    is_neg = compare(neg, pos) > 0
    big = jnp.where(is_neg[..., None], neg, pos)
    small = jnp.where(is_neg[..., None], pos, neg)
    return is_neg, subtract(big, small)


def msb(limbs):
    """Index of the highest set bit (int32), -1 for zero."""
    best = jnp.full(limbs.shape[:-1], -1, jnp.int32)
    for i in range(limbs.shape[-1]):
        v = limbs[..., i]
        pos = LIMB * i + 31 - util.clz(v).astype(jnp.int32)
        best = jnp.where(v != 0, pos, best)
    return best


def bits_at(limbs, start, width: int):
    """``(value >> start) & (2**width - 1)`` for int32 ``start >= 0``, ``width <= 16``.

    Also returns whether any bit below ``start`` is set.
    """
    n = limbs.shape[-1]
    idx = start // LIMB
    r = (start % LIMB).astype(U32)
    padded = jnp.concatenate([limbs, jnp.zeros(limbs.shape[:-1] + (2,), U32)], axis=-1)
    take = lambda j: jnp.take_along_axis(  # noqa: E731
        padded, jnp.clip(idx + j, 0, n + 1)[..., None].astype(jnp.int32), axis=-1
    )[..., 0]
    lo, hi = take(0), take(1)
    window = ((lo | (hi << U32(LIMB))) >> r) & U32((1 << width) - 1)
    below = jnp.zeros(limbs.shape[:-1], bool)
    for i in range(n):
        below = below | ((i < idx) & (limbs[..., i] != 0))
    below = below | ((lo & ((U32(1) << r) - U32(1))) != 0)
    return window, below


class FloatFormat(NamedTuple):
    """A binary interchange format: mantissa bits, exponent bits, bias."""

    man: int
    exp: int
    bias: int

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def nbits(self) -> int:
        return 1 + self.exp + self.man

    @property
    def canonical_nan(self) -> int:
        """The NaN the hardware's sums, adds and conversions write: sign clear, every
        exponent and mantissa bit set (f32 ``0x7FFFFFFF``, f16 / bf16 ``0x7FFF``)."""
        return (1 << (self.nbits - 1)) - 1


def _out(name: str) -> FloatFormat:
    f = _formats.FORMATS[name]
    return FloatFormat(f.mant_bits, f.exp_bits, f.bias)


F32 = _out("f32")
F16 = _out("f16")
BF16 = _out("bf16")
#: the output (accumulator) formats of the floating forms
OUT_FORMATS: dict[str, FloatFormat] = {"f32": F32, "f16": F16, "bf16": BF16}
#: the canonical NaN of each output format (:attr:`FloatFormat.canonical_nan`)
CANONICAL_NAN: dict[str, int] = {n: f.canonical_nan for n, f in OUT_FORMATS.items()}


def round_to_float(
    neg, mag, unit_exp, fmt: FloatFormat, mode: str, *, sticky=None, signed_zero: bool = False
):
    """Round ``(-1)**neg * mag * 2**unit_exp`` into ``fmt`` bits (uint32).

    Args:
      neg: bool ``[...]``. mag: normalized limbs ``[..., NL]``. unit_exp: int32 ``[...]``.
      mode: "rn" (ties to even), "rna", "rz", "rm", "rp".
      sticky: optional bool ``[...]``: the exact value lies strictly above ``mag`` (in
        magnitude) by less than one unit.
    Returns:
      uint32 bits. A zero magnitude gives +0; a nonzero value that rounds to zero gives
      +0 too, or a zero of its own sign with ``signed_zero`` (IEEE rounding). Overflow
      gives +-Inf in every mode (the tensor-core behaviour; an IEEE directed mode would
      give the largest finite value instead, which callers that need it handle).
    """
    p = msb(mag)
    zero = p < 0
    lead = p + unit_exp  # exponent of the leading bit
    lsb = jnp.where(lead < fmt.emin, fmt.emin - fmt.man, lead - fmt.man)
    qs = lsb - unit_exp  # bit of mag that becomes the result's lsb
    # The result significand has at most man + 1 <= 24 bits: read it as two windows.
    width = fmt.man + 1
    w_hi = max(width - LIMB, 0)
    start = jnp.maximum(qs, 0)
    lo16, below = bits_at(mag, start, min(width, LIMB))
    q = lo16
    if w_hi:
        hi, _ = bits_at(mag, start + LIMB, w_hi)
        q = q | (hi << U32(LIMB))
    # qs < 0: the value is exact with room to spare; shift the (small) magnitude up.
    low32 = mag[..., 0] | (mag[..., 1] << U32(LIMB)) if mag.shape[-1] > 1 else mag[..., 0]
    q = jnp.where(qs < 0, _shl(low32, -qs), q)
    guard_pos = qs - 1
    guard, rest = bits_at(mag, jnp.maximum(guard_pos, 0), 1)
    guard = jnp.where(qs > 0, guard != 0, False)
    rest = jnp.where(qs > 1, rest, False)
    if sticky is not None:
        rest = rest | sticky
    inexact = guard | rest
    odd = (q & U32(1)) != 0
    inc = {
        "rn": guard & (rest | odd),
        "rna": guard,
        "rz": jnp.zeros_like(guard),
        "rp": (~neg) & inexact,
        "rm": neg & inexact,
    }[mode]
    del below
    q = q + inc.astype(U32)
    carry = q >> U32(fmt.man + 1)  # rounding overflowed into the next binade
    q = jnp.where(carry != 0, q >> U32(1), q)
    lsb = lsb + carry.astype(jnp.int32)
    normal = q >= U32(1 << fmt.man)
    biased = jnp.where(normal, lsb + fmt.man + fmt.bias, 0)
    field = jnp.where(
        normal, (biased.astype(U32) << U32(fmt.man)) | (q & U32((1 << fmt.man) - 1)), q
    )
    inf_biased = (1 << fmt.exp) - 1
    overflow = biased >= inf_biased
    field = jnp.where(overflow, U32(inf_biased << fmt.man), field)
    field = jnp.where(zero | (field == 0), U32(0), field)
    keep = (field != 0) | (~zero if signed_zero else False)
    signbit = jnp.where(keep, neg.astype(U32) << U32(fmt.nbits - 1), U32(0))
    return field | signbit
