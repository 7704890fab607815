"""GEMM operands: user arrays -> the raw bits an instruction reads, and back to values.

A GEMM takes what model code has: arrays in the instruction's element dtype (used as they
are: their bits), float arrays of another dtype (converted to the element type, see
:func:`to_bits`), or unsigned integer arrays of raw bits (the instruction's operand
encoding, as ``ins.mma`` takes them).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import util
from ..bits import (
    DTYPES,
    ELEMENT_DTYPES,
    F8F6F4,
    FORMATS,
    check_numeric,
    container_bits,
    decode,
    encode,
    fields,
    from_container,
    is_host_double,
    prepare,
    to_container,
)
from ..bits import to_bits as _to_bits

#: element formats without a NaN or Inf, or narrower than 16 bits: a float input is
#: rounded to nearest and clamped to the largest finite value (``cvt.rn.satfinite``)
SATURATE = (*F8F6F4, "s8", "u8", "s4", "u4")
#: the formats narrower than a byte whose values an ml_dtypes dtype holds (fp6, fp4): not
#: their bits (a byte each), so a float input is converted, never bit-cast
NARROW_DTYPES = {fmt: DTYPES[fmt] for fmt in F8F6F4 if FORMATS[fmt].bits < 8}
UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)


def element_dtype(fmt: str):
    """The jnp dtype whose values are exactly the format's (None for s4/u4/b1)."""
    return ELEMENT_DTYPES.get(fmt) or NARROW_DTYPES.get(fmt)


def to_bits(ins, fmt: str, x, name: str):
    """An operand array -> uint32 raw bits of ``fmt`` in ``ins``'s operand encoding.

    * the element dtype (``jnp.bfloat16`` for ``.bf16``, ``jnp.float8_e4m3fn`` for
      ``.e4m3``, ``jnp.int8`` for ``.s8``, ``jnp.float32`` for ``.tf32``, whose low 13 bits
      the instruction ignores, ...): its bits, unchanged;
    * any other float dtype: rounded to nearest even into ``fmt``, as ``cvt.rn`` does;
      for the 8-, 6- and 4-bit and integer formats saturating (``cvt.rn.satfinite``:
      out-of-range values and +-Inf clamp to the largest finite value, NaN stays NaN
      where the format has one and gives 0 for integers); f16/bf16 overflow to +-Inf;
    * unsigned integers: raw bits, taken as they are (``kind::f8f6f4``: the byte
      containers).

    Raises:
      TypeError: any other dtype (a signed integer of another width, bool, ...), naming
        ``name`` and the dtypes allowed.
    """
    check_numeric(x, name)
    x = jnp.asarray(x)
    want = element_dtype(fmt)
    out = jnp.uint64 if fmt == "f64" else jnp.uint32
    if x.dtype.type in UNSIGNED:
        width = container_bits(fmt, ins.kind)
        if 8 * x.dtype.itemsize < width:  # as ins.mma: raw bits at least as wide as the element
            least = f"uint{max(8, 1 << (width - 1).bit_length())}"
            raise TypeError(
                f"{name}: unsigned raw bits of the .{fmt} operand of {ins.text} need at least "
                f"{width} bits ({least} or wider), got {x.dtype}"
            )
        return x.astype(out)
    if want is not None and x.dtype == jnp.dtype(want) and fmt not in NARROW_DTYPES:
        return _to_bits(fmt, x, name)
    if jnp.issubdtype(x.dtype, jnp.floating) and fmt not in ("b1", "s32"):
        if fmt == "f64":
            return jax.lax.bitcast_convert_type(util.ingest(x.astype(jnp.float64)), jnp.uint64)
        if x.dtype.itemsize < 2:  # fp8/fp6/fp4 inputs: exact in float32
            x = x.astype(jnp.float32)
        bits = encode(fmt, x, rounding="rn", saturate=fmt in SATURATE)
        if ins.kind == "f8f6f4":
            bits = to_container(bits, fmt)
        return bits
    allowed = ["unsigned raw bits"]
    if fmt not in ("b1", "s32"):
        allowed.insert(0, "a float dtype (converted)")
    if want is not None:
        allowed.insert(0, jnp.dtype(want).name)
    raise TypeError(
        f"{name}: expected {', '.join(allowed)} for the .{fmt} operand of {ins.text}, got {x.dtype}"
    )


def float64_operand(ins, fmt: str, x, name: str, rounding: str | None = None):
    """A GEMM operand of host doubles (NumPy float64, Python floats) -> what the GEMM
    rounds once into ``fmt`` (docs/dtypes.md, ``bits/_doubles.py``), x64 on or off.

    ``rounding`` is the GEMM's ``input_rounding`` (None: :func:`to_bits`'s rule, to
    nearest, saturating where :data:`SATURATE` says). With x64 off the doubles become the
    raw bits of that one rounding here, before JAX would turn them into float32 (a
    rounding of its own); with x64 on they stay doubles, which the GEMM rounds directly.
    ``"stochastic"``: doubles that float32 holds, as float32 (the random bits are drawn
    inside the program); others are a TypeError, x64 on or off. Anything else, and
    ``.b1`` / ``.s32`` / ``.f64`` operands, are returned unchanged."""
    if not is_host_double(x) or fmt in ("b1", "s32", "f64"):
        return x
    f, sat = FORMATS[fmt], fmt in SATURATE
    mode = rounding or "rn"
    x = prepare(x, f, mode, sat, name)
    if mode == "stochastic" or x.dtype == np.float64:
        return x
    bits = encode(fmt, x, rounding=mode, saturate=sat)
    return to_container(bits, fmt) if ins.kind == "f8f6f4" else bits


def values(ins, fmt: str, bits):
    """Raw operand bits -> float32 values (float64 for f64): what the instruction reads."""
    if ins.kind == "f8f6f4":
        bits = from_container(bits, fmt)
    if fmt in ("s8", "u8", "s4", "u4", "b1", "s32"):
        f = fields(fmt, bits)
        mag = f.sig.astype(jnp.float32)
        return jnp.where(f.sign != 0, -mag, mag)
    return decode(fmt, bits)
