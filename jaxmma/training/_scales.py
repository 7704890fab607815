"""Scales of the fp8 recipes: amax, scale from amax, casts, and the amax history.

A scale ``s`` maps a tensor into the format: the cast is ``round(x * s)`` (saturating,
to nearest or stochastic) and its decode scale ``1 / s`` goes to the GEMM
(``matmul(scale_a=, scale_b=)``). ``s = fmax / amax / 2**margin`` in float32, 1 where the
amax is 0 or not finite (docs/recipes.md).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..bits import DTYPES, FORMATS, FP8, decode, encode

F32 = jnp.float32
#: the largest finite value of each fp8 element format
FMAX = {fmt: FORMATS[fmt].max for fmt in FP8}  # 448, 57344
#: rounding of the gradients
GradRounding = Literal["rn", "stochastic"]
ROUNDINGS: tuple[str, ...] = get_args(GradRounding)


def amax(x: ArrayLike, axis: int | tuple[int, ...] | None = None) -> jax.Array:
    """max |x| over ``axis`` (keepdims), float32; NaN/Inf ignored."""
    ints = axis if isinstance(axis, tuple) else (axis,)
    if axis is not None and not all(
        isinstance(a, int | np.integer) and not isinstance(a, bool) for a in ints
    ):
        raise TypeError(f"axis: expected None, an int or a tuple of ints, got {axis!r}"[:300])
    a = jnp.abs(jnp.asarray(x, F32))
    a = jnp.where(jnp.isfinite(a), a, F32(0))
    return jnp.max(a, axis=axis, keepdims=axis is not None)


def scale_from_amax(a: jax.Array, fmt: str, margin: int = 0) -> jax.Array:
    """``fmax / a / 2**margin`` (float32); 1 where ``a`` is 0 or not finite."""
    if fmt not in FMAX:
        raise ValueError(f"fmt: expected one of {', '.join(FMAX)}, got {fmt!r}")
    if isinstance(margin, bool) or not isinstance(margin, int | np.integer):
        raise TypeError(f"margin: expected an int, got {margin!r}"[:300])
    ok = (a > 0) & jnp.isfinite(a)
    s = F32(FMAX[fmt]) / jnp.where(ok, a, F32(1)) / F32(2.0**margin)
    return jnp.where(ok, s, F32(1))


def cast(x, scale, fmt: str, rounding: str = "rn", key=None):
    """``x * scale`` rounded to ``fmt`` (saturating): the format's JAX dtype (e4m3, e5m2),
    else float32 values on the format's grid, which the GEMM reads back exactly (the same
    element bits).

    ``rounding="stochastic"`` draws ``jax.random.bits(key, x.shape, uint32)``."""
    y = jnp.asarray(x, F32) * scale
    kw: dict[str, Any] = {"rounding": rounding, "saturate": True}
    if rounding == "stochastic":
        kw["random_bits"] = jax.random.bits(key, y.shape, jnp.uint32)
    y = jax.lax.stop_gradient(y)
    bits = encode(fmt, y, **kw)
    if fmt in ELEMENT_DTYPES:  # the format's own dtype: the GEMM takes its bits as they are
        out = jax.lax.bitcast_convert_type(bits.astype(jnp.uint8), ELEMENT_DTYPES[fmt])
        # kept whole: XLA:GPU would otherwise fuse the encoding into each transposing
        # reader of the operand (the step's timings with and without: benchmarks/RESULTS.md)
        return jax.lax.optimization_barrier(out)
    return decode(fmt, bits)


#: the fp8 formats' JAX dtypes: one byte per element, no second conversion in the GEMM
ELEMENT_DTYPES = {fmt: DTYPES[fmt] for fmt in FP8}


def blocks(x, rows: int, cols: int):
    """``x [R, C]`` -> ``[R / rows, rows, C / cols, cols]`` (sizes divide)."""
    R, C = x.shape
    return x.reshape(R // rows, rows, C // cols, cols)


def block_amax(x, rows: int, cols: int):
    """amax of each ``rows x cols`` block of ``x [R, C]`` -> ``[R / rows, C / cols]``."""
    return jnp.max(amax(blocks(x, rows, cols), axis=(1, 3)), axis=(1, 3))


def expand(s, rows: int, cols: int):
    """Block values ``[R / rows, C / cols]`` -> one per element ``[R, C]``."""
    return jnp.repeat(jnp.repeat(s, rows, axis=0), cols, axis=1)


def push(history, a):
    """The amax history with ``a`` (this step's amax) in front, the oldest dropped."""
    return jnp.concatenate([jnp.reshape(a, (1,)).astype(F32), history[:-1]])


def history_amax(history, how: str):
    """The amax a delayed scale uses: ``"max"`` of the window or ``"most_recent"``."""
    return jnp.max(history) if how == "max" else history[0]
