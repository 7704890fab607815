"""Numerics statistics of a cast to a low-precision format: amax, and how many elements
underflow to zero, land on a subnormal or saturate when ``x * scale`` is rounded to
e4m3, e5m2 or e2m1 (docs/recipes.md, "Statistics")."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import bits
from ..bits import FP8
from . import _scales

#: the element formats :func:`stats` takes
FORMATS = (*FP8, "e2m1")


class Stats(NamedTuple):
    """What :func:`stats` counts (a pytree: returned from ``jax.jit`` as it is).

    ``amax``: float32, max ``|x|`` over the finite elements (before scaling).
    ``underflow``: int32, elements ``x != 0`` whose ``x * scale`` rounds to zero.
    ``subnormal``: int32, elements whose ``x * scale`` rounds to a nonzero subnormal.
    ``saturated``: int32, elements with ``|x * scale|`` above the format's largest finite
    value (Inf included), which a saturating cast clamps to it.
    ``size``: int32, the number of elements.
    """

    amax: jax.Array
    underflow: jax.Array
    subnormal: jax.Array
    saturated: jax.Array
    size: jax.Array


def stats(x: ArrayLike, fmt: str, scale: ArrayLike = 1.0) -> Stats:
    """Counts what a cast of ``x * scale`` to ``fmt`` loses at both ends of its range.

    ``x * scale`` is computed in float32 and rounded to nearest (ties to even) as the
    recipes cast (``formats.encode(fmt, rounding="rn", saturate=True)``); NaN elements
    are in none of the counts. Jit-able and vmap-able; no derivative (the counts are
    integers).

    Args:
      x: float array ``[...]`` (float32, bfloat16, float16).
      fmt: the element format, ``"e4m3"`` (float8_e4m3fn, max 448), ``"e5m2"``
        (float8_e5m2, max 57344) or ``"e2m1"`` (float4_e2m1fn, max 6).
      scale: float32 scalar or array broadcastable to ``x`` (a recipe's scale: the
        cast is ``round(x * scale)``).

    Returns:
      :class:`Stats` of scalars (amax float32, counts int32).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxmma import recipes
      >>> s = recipes.stats(jnp.array([1e-4, 0.01, 1.0, 600.0]), "e4m3")
      >>> [int(s.underflow), int(s.subnormal), int(s.saturated)]
      [1, 1, 1]
    """
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"fmt: expected one of {', '.join(FORMATS)}, got {fmt!r}"[:300])
    if isinstance(scale, str) or not isinstance(scale, (float, int, np.ndarray, jax.Array)):
        raise TypeError(f"scale: expected a float or a float array, got {scale!r}"[:300])
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x: expected a float array, got dtype {x.dtype}")
    scale = jnp.asarray(scale, jnp.float32)
    try:
        fits = jnp.broadcast_shapes(scale.shape, x.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"scale: expected a shape broadcastable to x's {x.shape}, got {scale.shape}"
        )
    f = bits.get_format(fmt)
    v = x.astype(jnp.float32) * scale
    r = bits.decode(fmt, bits.encode(fmt, v, rounding="rn", saturate=True))
    smallest_normal = jnp.float32(2.0 ** (1 - f.bias))
    number = ~jnp.isnan(v)  # NaN (in x, or from Inf * 0) is in no count

    def count(mask):
        return jnp.sum(mask, dtype=jnp.int32)

    return Stats(
        amax=_scales.amax(x),
        underflow=count(number & (x != 0) & (r == 0)),
        subnormal=count(number & (r != 0) & (jnp.abs(r) < smallest_normal)),
        saturated=count(jnp.abs(v) > jnp.float32(f.max)),
        size=jnp.int32(x.size),
    )
