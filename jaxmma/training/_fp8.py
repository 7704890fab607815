"""The fp8 linear layer ``x [M, K] @ w [K, N]`` of the fp8 recipes, with its backward.

Forward: x and w cast to e4m3 with their scales, one emulated GEMM with the decode
scales as the kernel applies them (``matmul(scale_a=, scale_b=)``). Backward (a
``custom_vjp``): G cast to the gradient format with its own scale (to nearest or
stochastic), then

    dgrad  dx = G @ w^T   on ``recipe.dgrad`` (e.g. ``.e5m2.e4m3``)
    wgrad  dw = x^T @ G   on ``recipe.wgrad`` (e.g. ``.e4m3.e5m2``)

as explicit emulated GEMMs with scales. Per-tensor scaling reuses the forward's e4m3
x and w (their bits, transposed); row-wise and block-wise scaling quantize each GEMM's
operands along that GEMM's K. The delayed-scaling state comes back as the cotangent of
the state argument: ``jax.grad`` with respect to it gives the next state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..gemm import matmul
from . import _keys, _scales

F32 = jnp.float32
GROUP = 128  # DeepSeek-V3's 1 x 128 and 128 x 128 blocks


def _gemm(r, ins, a, b, sa, sb, promote=True):
    """``a @ b`` on ``ins`` with decode scales ``sa``, ``sb`` (float32)."""
    return matmul(
        a, b, instruction=ins, arch=r.arch, promote_every=r.promote_every if promote else None,
        scale_a=jnp.asarray(sa, F32), scale_b=jnp.asarray(sb, F32),
    )  # fmt: skip


def _inv(s):
    return F32(1) / s


def _cast_g(r, g, s, key):
    return _scales.cast(g, s, r.g_fmt, r.grad_rounding, key)


def x_w_scales(r, x, w, state):
    """Per-tensor scales of x and w, and their amax (current or from the history)."""
    ax, aw = _scales.amax(x), _scales.amax(w)
    if r.scaling == "delayed":
        hx = _scales.history_amax(state["x"], r.amax_compute)
        hw = _scales.history_amax(state["w"], r.amax_compute)
        sx = _scales.scale_from_amax(hx, r.x_fmt, r.margin)
        sw = _scales.scale_from_amax(hw, r.w_fmt, r.margin)
        return sx, sw, ax, aw
    sx = _scales.scale_from_amax(ax, r.x_fmt, r.margin)
    sw = _scales.scale_from_amax(aw, r.w_fmt, r.margin)
    return sx, sw, ax, aw


def _forward(r, x, w, state):
    if r.scaling in ("tensor", "delayed"):
        sx, sw, ax, aw = x_w_scales(r, x, w, state)
        xq, wq = _scales.cast(x, sx, r.x_fmt), _scales.cast(w, sw, r.w_fmt)
        y = _gemm(r, r.forward, xq, wq, _inv(sx), _inv(sw))
        return y, (xq, wq, sx, sw, ax, aw)
    if r.scaling == "row":  # per row of x and per column of w, along K
        sx = _scales.scale_from_amax(_scales.amax(x, 1), r.x_fmt, r.margin)  # [M, 1]
        sw = _scales.scale_from_amax(_scales.amax(w, 0), r.w_fmt, r.margin)  # [1, N]
        xq, wq = _scales.cast(x, sx, r.x_fmt), _scales.cast(w, sw, r.w_fmt)
        return _gemm(r, r.forward, xq, wq, _inv(sx), _inv(sw)), (x, w)
    # block: x 1 x 128 along K, w 128 x 128
    sx = _scales.scale_from_amax(_scales.block_amax(x, 1, GROUP), r.x_fmt, r.margin)
    sw = _scales.scale_from_amax(_scales.block_amax(w, GROUP, GROUP), r.w_fmt, r.margin)
    xq = _scales.cast(x, _scales.expand(sx, 1, GROUP), r.x_fmt)
    wq = _scales.cast(w, _scales.expand(sw, GROUP, GROUP), r.w_fmt)
    y = _gemm(r, r.forward, xq, wq, _inv(sx), _inv(sw), promote=False)
    return y, (x, wq, sw)


def _backward(r, res, g, state, key):
    g = g.astype(F32)
    new_state = None
    if r.scaling in ("tensor", "delayed"):
        xq, wq, sx, sw, ax, aw = res
        ag = _scales.amax(g)
        if r.scaling == "delayed":
            sg = _scales.scale_from_amax(
                _scales.history_amax(state["g"], r.amax_compute), r.g_fmt, r.margin
            )
            new_state = {
                "x": _scales.push(state["x"], ax),
                "w": _scales.push(state["w"], aw),
                "g": _scales.push(state["g"], ag),
            }
        else:
            sg = _scales.scale_from_amax(ag, r.g_fmt, r.margin)
        gq = _cast_g(r, g, sg, key)
        dx = _gemm(r, r.dgrad, gq, wq.T, _inv(sg), _inv(sw))
        dw = _gemm(r, r.wgrad, xq.T, gq, _inv(sx), _inv(sg))
        return dx, dw, new_state
    if r.scaling == "row":
        x, w = res
        # dgrad: G per row along N, w^T per column along N (w per row)
        kg, kw = (None, None) if key is None else tuple(jax.random.split(key))
        sg = _scales.scale_from_amax(_scales.amax(g, 1), r.g_fmt, r.margin)  # [M, 1]
        sw = _scales.scale_from_amax(_scales.amax(w, 1), r.w_fmt, r.margin)  # [K, 1]
        dx = _gemm(
            r, r.dgrad, _cast_g(r, g, sg, kg), _scales.cast(w, sw, r.w_fmt).T, _inv(sg),
            _inv(sw).T,
        )  # fmt: skip
        # wgrad: x^T per row along M (x per column), G per column along M
        sx = _scales.scale_from_amax(_scales.amax(x, 0), r.x_fmt, r.margin)  # [1, K]
        sg2 = _scales.scale_from_amax(_scales.amax(g, 0), r.g_fmt, r.margin)  # [1, N]
        dw = _gemm(
            r, r.wgrad, _scales.cast(x, sx, r.x_fmt).T, _cast_g(r, g, sg2, kw), _inv(sx).T,
            _inv(sg2),
        )  # fmt: skip
        return dx, dw, None
    x, wq, sw = res
    kg, kw = (None, None) if key is None else tuple(jax.random.split(key))
    # dgrad: G 1 x 128 along N; w^T reuses the forward's 128 x 128 blocks (transposed)
    sg = _scales.scale_from_amax(_scales.block_amax(g, 1, GROUP), r.g_fmt, r.margin)
    gq = _cast_g(r, g, _scales.expand(sg, 1, GROUP), kg)
    dx = _gemm(r, r.dgrad, gq, wq.T, _inv(sg), _inv(sw).T, promote=False)
    # wgrad: x^T 1 x 128 along M; G in 128 x 128 blocks (the B operand's scales)
    # (x's 128 x 1 blocks along M, cast, then transposed: the same elements and scales as
    # x^T's 1 x 128 blocks, and a transpose of one byte per element, not of x's float32)
    sx = _scales.scale_from_amax(_scales.block_amax(x, GROUP, 1), r.x_fmt, r.margin)
    sgb = _scales.scale_from_amax(_scales.block_amax(g, GROUP, GROUP), r.g_fmt, r.margin)
    xq = _scales.cast(x, _scales.expand(sx, GROUP, 1), r.x_fmt).T
    gq2 = _cast_g(r, g, _scales.expand(sgb, GROUP, GROUP), kw)
    dw = _gemm(r, r.wgrad, xq, gq2, _inv(sx).T, _inv(sgb), promote=False)
    return dx, dw, None


def linear(r, x, w, state, key):
    """``x [M, K] @ w [K, N]`` (float32 out) under recipe ``r`` (fp8 scalings)."""

    @jax.custom_vjp
    def f(x, w, state, key):
        return _forward(r, x, w, state)[0]

    def fwd(x, w, state, key):
        y, res = _forward(r, x, w, state)
        return y, (res, state, key)

    def bwd(saved, g):
        res, state, key = saved
        _keys.check_backward(r, key)
        dx, dw, new_state = _backward(r, res, g, state, key)
        return dx, dw, new_state, None

    f.defvjp(fwd, bwd)
    return f(x, w, state, key)
