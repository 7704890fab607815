"""Matrix-level values <-> raw element bits.

Matrices may be given in the element dtype of their format (``jnp.float16``,
``jnp.bfloat16``, ``jnp.float8_e4m3fn``, ...; ``jnp.float32`` for ``.tf32``) or as raw bits
in an unsigned integer array. Results come back in the destination's dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import util
from . import _formats

#: format -> the jnp dtype whose bits are the element's bits: the registry's dtype of the
#: formats that fill their bytes, float32 for ``.tf32``
DTYPES = {
    fmt: _formats.DTYPES["f32" if fmt == "tf32" else fmt]
    for fmt in ("f16", "bf16", "tf32", "f32", "f64", *_formats.FP8, "s32", "s8", "u8")
}
UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)


def container_bits(fmt: str, kind: str | None = None) -> int:
    """Bits of one raw element as operands carry it: the format's width, 32 for ``.tf32``
    (float32 bits), 8 for the 6- and 4-bit types in ``kind::f8f6f4``/``mxf8f6f4``
    containers."""
    if fmt == "tf32":
        return 32
    if kind in ("f8f6f4", "mxf8f6f4"):
        return max(8, _formats.FORMATS[fmt].bits)
    return _formats.FORMATS[fmt].bits


def to_bits(fmt: str, x, name: str, kind=None, *, width: int | None = None):
    """Element values or raw bits -> uint32 raw bits (uint64 for f64).

    Accepted: the format's element dtype (:data:`DTYPES`, bit-cast), or an unsigned
    integer dtype of at least ``width`` bits (default :func:`container_bits`) holding the
    raw bits in its low ``width`` bits (higher bits are ignored, as everywhere raw bits
    travel); Python ints (lists) are raw bits too. Anything else (other floats, signed
    integers) is a TypeError naming the accepted dtypes: values are never converted.
    """
    if isinstance(x, (list, tuple, int)):  # Python ints: raw bits, never int32-wrapped
        x = np.asarray(x)
        if x.dtype.kind == "i" and (x.size == 0 or x.min() >= 0):
            x = x.astype(np.uint64)
    if fmt == "f64":
        _need_x64(name)
    want = DTYPES.get(fmt)
    out = jnp.uint64 if fmt == "f64" else jnp.uint32
    width = container_bits(fmt, kind) if width is None else width
    dtype = np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)
    if want is not None and dtype == jnp.dtype(want):
        x = jnp.asarray(x)
        size = jnp.dtype(want).itemsize
        u = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[size]
        return lax.bitcast_convert_type(util.ingest(x), u).astype(out)
    if dtype.type in UNSIGNED and 8 * dtype.itemsize >= width:
        if not isinstance(x, jax.Array) and fmt != "f64":  # NumPy uint64: no silent wrap
            x = (np.asarray(x).astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return jnp.asarray(x).astype(out)
    allowed = [jnp.dtype(want).name] if want is not None else []
    unsigned = f"uint{max(8, 1 << (width - 1).bit_length())} (or wider unsigned) raw bits"
    raise TypeError(
        f"{name}: expected {' or '.join([*allowed, unsigned])} for "
        f".{fmt} elements, got {dtype}" + (util.x64_hint() if fmt == "f64" else "")
    )


def registers(x, name: str, bits: int = 32):
    """A register operand as an array: Python ints (lists of them) become unsigned
    ``bits``-wide registers (ValueError outside ``[0, 2**bits)``, never an int32 wrap or
    overflow); arrays pass through unchanged (their dtype is checked by the caller)."""
    if isinstance(x, (list, tuple, int)) and not isinstance(x, bool):
        a = np.asarray(x)
        if a.dtype.kind in "iuO":
            lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
            if lo < 0 or hi >= 2**bits:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"{name}: Python ints are taken as {bits}-bit register bits, which run "
                    f"from 0 to 2**{bits} - 1; got {bad}"
                )
            return jnp.asarray(a.astype(np.uint64 if bits == 64 else np.uint32))
    if isinstance(x, np.ndarray) and x.dtype == np.uint64 and bits < 64:
        # NumPy uint64: taken exactly (x64 off would cut the high bits silently, x64 on
        # would refuse the dtype): the values must fit the register
        hi = int(x.max()) if x.size else 0
        if hi >= 2**bits:
            raise ValueError(
                f"{name}: uint64 values are taken as {bits}-bit register bits, which run from "
                f"0 to 2**{bits} - 1; got {hi}"
            )
        return jnp.asarray(x.astype(np.uint32))
    check_numeric(x, name)
    return jnp.asarray(x)


def check_numeric(x, name: str) -> None:
    """TypeError naming ``name`` for a NumPy array that holds no numbers (objects,
    strings, records), before JAX or NumPy fails on it deep inside."""
    if not isinstance(x, np.ndarray):
        return
    dtype = x.dtype  # ml_dtypes' formats (bfloat16, float8_*) are of kind "V": numbers
    if dtype.kind in "OSUMm" or (dtype.kind == "V" and dtype.type is np.void):
        raise TypeError(f"{name}: expected a numeric array, got a NumPy array of dtype {dtype}")


def check_array_like(x, name: str) -> None:
    """TypeError naming ``name`` for a value that is no array of numbers: a string or an
    object NumPy can only hold as dtype object (None and arrays pass)."""
    if x is None or isinstance(x, jax.Array | np.ndarray | np.generic | int | float):
        check_numeric(x, name)
        return
    try:
        kind = np.asarray(x).dtype.kind
    except (TypeError, ValueError):
        kind = "O"
    if isinstance(x, str) or kind in "OSUV":
        raise TypeError(f"{name}: expected an array of numbers, got {x!r}"[:300])


def _need_x64(name: str) -> None:
    if not jax.config.jax_enable_x64:
        raise ValueError(f"{name}: .f64 elements need 64-bit types, which are off{util.X64_HINT}")


def from_bits(fmt: str, bits):
    """Raw bits of the destination -> its dtype (f32/f16/s32/f64)."""
    want = DTYPES[fmt]
    size = jnp.dtype(want).itemsize
    u = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[size]
    return lax.bitcast_convert_type(bits.astype(u), want)
