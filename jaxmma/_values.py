"""Matrix-level values <-> raw element bits.

Matrices may be given in the element dtype of their format (``jnp.float16``,
``jnp.bfloat16``, ``jnp.float8_e4m3fn``, ...; ``jnp.float32`` for ``.tf32``) or as raw bits
in an unsigned integer array. Results come back in the destination's dtype.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

# format -> the jnp dtype whose bits are the element's bits
DTYPES = {
    "f16": jnp.float16,
    "bf16": jnp.bfloat16,
    "tf32": jnp.float32,
    "f32": jnp.float32,
    "f64": jnp.float64,
    "e4m3": jnp.float8_e4m3fn,
    "e5m2": jnp.float8_e5m2,
    "s32": jnp.int32,
    "s8": jnp.int8,
    "u8": jnp.uint8,
}
UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)


def to_bits(fmt: str, x, name: str, kind=None):
    """Element values or raw bits -> uint32 raw bits (uint64 for f64)."""
    x = jnp.asarray(x)
    want = DTYPES.get(fmt)
    out = jnp.uint64 if fmt == "f64" else jnp.uint32
    if want is not None and x.dtype == jnp.dtype(want):
        size = jnp.dtype(want).itemsize
        u = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[size]
        bits = lax.bitcast_convert_type(x, u)
        if fmt in ("s8",):
            bits = bits & 0xFF
        return bits.astype(out)
    if x.dtype.type in UNSIGNED:
        return x.astype(out)
    allowed = [jnp.dtype(want).name] if want is not None else []
    raise TypeError(
        f"{name}: expected {' or '.join(allowed + ['unsigned raw bits'])} for "
        f".{fmt} elements, got {x.dtype}"
    )


def from_bits(fmt: str, bits):
    """Raw bits of the destination -> its dtype (f32/f16/s32/f64)."""
    want = DTYPES[fmt]
    size = jnp.dtype(want).itemsize
    u = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[size]
    return lax.bitcast_convert_type(bits.astype(u), want)
