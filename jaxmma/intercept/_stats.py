"""Numerics statistics of a policy's dots: for each dot on a recipe that casts to a
low-precision format (fp8, MX, NVFP4), :func:`jaxmma.recipes.stats` of its x and w under
that format and the scales the recipe's forward GEMM gives them (docs/policy.md,
"Statistics").

The scale of each element is the multiplier the recipe's cast applies, ``1 / decode
scale``: per tensor (current scaling, or from the amax history with delayed scaling),
per row of x and column of w (row-wise), per 1 x 128 tile of x and 128 x 128 block of w
(block-wise), ``2**-e`` per 32 along K (MX, the recipe's own ``quantize_mx`` exponents),
``1 / (s g)`` per 16 along K for x and per 16 x 16 block for w (NVFP4, the recipe's own
ue4m3 scales ``s`` and global scale ``g``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import bits, operands, training
from ..training import Recipe, stats

F32 = jnp.float32
U32 = jnp.uint32
#: the entry of a dot's statistics: its recipe's activations x and weights w
ROLES = ("x", "w")


def has_stats(target) -> bool:
    """Whether a dot on ``target`` casts to a format :func:`jaxmma.recipes.stats` counts:
    a recipe other than ``bf16()``."""
    return isinstance(target, Recipe) and target.scaling != "none"


def _pad(x, axis: int, multiple: int):
    n = x.shape[axis]
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, -(-n // multiple) * multiple - n)
    return jnp.pad(x, widths)


def _per_element(v, axis: int, block: int, n: int):
    """Block values (one per ``block`` along ``axis``) repeated to each element, the
    first ``n`` along ``axis`` kept (the zero padding dropped)."""
    v = jnp.repeat(v, block, axis=axis)
    return jax.lax.slice_in_dim(v, 0, n, axis=axis)


def _pow2(neg_e):
    """``2.0**neg_e`` as float32 for int32 ``neg_e`` in [-127, 127], exactly (2**-127 is
    a subnormal)."""
    normal = jax.lax.bitcast_convert_type(((neg_e + 127).clip(1, 254) << 23).astype(U32), F32)
    return jnp.where(neg_e >= -126, normal, F32(float.fromhex("0x1p-127")))


def _mx_scale(r, t, fmt: str, axis: int):
    """Each element's multiplier ``2**-e`` in the recipe's MX cast of ``t`` along ``axis``
    (blocks of 32; a NaN block, scale 0xFF, casts with exponent 0)."""
    axis %= t.ndim
    n = t.shape[axis]
    q = operands.quantize_mx(
        _pad(t, axis, training.MX_BLOCK),
        fmt,
        axis=axis,
        block=training.MX_BLOCK,
        scale_rounding=r.scale_rounding,
    )
    sbits = q.scales.astype(jnp.int32)
    e = jnp.where(sbits == 0xFF, 0, sbits - 127)
    return _per_element(_pow2(-e), axis, training.MX_BLOCK, n)


def _nvfp4_multiplier(sbits, g):
    """``1 / (s g)`` of ue4m3 scale bits and the global scale: 0 for a zero scale (its
    elements are +0), 1 for a NaN scale (its elements are cast unscaled)."""
    full = bits.decode("ue4m3", sbits.astype(U32)) * g
    nan = sbits == 0x7F
    inv = jnp.where(full > 0, F32(1) / jnp.where(full > 0, full, F32(1)), F32(0))
    return jnp.where(nan, F32(1), inv)


def _nvfp4_scales(x, w):
    """The NVFP4 recipe's multipliers of x ``[M, K]`` (1 x 16 along K) and of w ``[K, N]``
    (16 x 16 blocks)."""
    B = training.NVFP4_BLOCK
    qx = operands.quantize_nvfp4(_pad(x, -1, B), axis=-1)
    sx = _per_element(_nvfp4_multiplier(qx.scales, qx.global_scale), 1, B, x.shape[1])
    qw, _ = training.quantize_nvfp4_2d(_pad(_pad(w, 0, B), 1, B))
    sw = _per_element(_nvfp4_multiplier(qw.scales, qw.global_scale), 0, B, w.shape[0])
    return sx, sw[:, : w.shape[1]]


def _scales_of(r: Recipe, x, w, state):
    """The multipliers of x ``[M, K]`` and w ``[K, N]`` in recipe ``r``'s forward casts."""
    if r.scaling in ("tensor", "delayed"):
        sx, sw, _, _ = training.x_w_scales(r, x, w, state)
        return sx, sw
    if r.scaling == "row":
        sx = training.scale_from_amax(training.amax(x, 1), r.x_fmt, r.margin)
        sw = training.scale_from_amax(training.amax(w, 0), r.w_fmt, r.margin)
        return sx, sw
    if r.scaling == "block":
        G = training.FP8_BLOCK_GROUP
        sx = training.scale_from_amax(training.block_amax(x, 1, G), r.x_fmt, r.margin)
        sw = training.scale_from_amax(training.block_amax(w, G, G), r.w_fmt, r.margin)
        return training.expand_blocks(sx, 1, G), training.expand_blocks(sw, G, G)
    if r.scaling == "mx":
        return _mx_scale(r, x, r.x_fmt, 1), _mx_scale(r, w, r.w_fmt, 0)
    return _nvfp4_scales(x, w)


def operand_stats(recipe: Recipe, x, w, state=None) -> dict:
    """``{"x": Stats, "w": Stats}`` of the recipe's x ``[M, K]`` and w ``[K, N]``:
    :func:`jaxmma.recipes.stats` of each under the recipe's format and the scales its
    forward GEMM casts them with (``state``: delayed scaling's amax histories)."""
    x = jax.lax.stop_gradient(jnp.asarray(x, F32))
    w = jax.lax.stop_gradient(jnp.asarray(w, F32))
    if state is not None:
        state = jax.lax.stop_gradient(state)
    sx, sw = _scales_of(recipe, x, w, state)
    return {"x": stats(x, recipe.x_fmt, sx), "w": stats(w, recipe.w_fmt, sw)}


def names(dots) -> list:
    """The key of each dot's statistics: its first name (:attr:`Dot.names`: the scope,
    else an operand's path), else ``"dot<i>"``; a name several of ``dots`` share gets
    ``" (dot <i>)"`` after it."""
    first = [d.names[0] if d.names else f"dot{d.index}" for d in dots]
    counts = {n: first.count(n) for n in first}
    return [
        n if counts[n] == 1 else f"{n} (dot {d.index})" for n, d in zip(first, dots, strict=True)
    ]
