"""The MX linear layer ``x [M, K] @ w [K, N]`` of the MXFP8 and MXFP4 recipes (OCP MX
v1.0 as torchao's MX training runs it), with its backward (docs/recipes.md):

* fprop ``x @ w``: x in 1 x 32 blocks along K, w in 32 x 1 blocks along K;
* dgrad ``G @ w^T``: G along N, w^T along N (w quantized again from the float weight);
* wgrad ``x^T @ G``: x^T and G along M.

Every block gets a ue8m0 scale (:func:`jaxmma.quant.quantize_mx` with the recipe's
``scale_rounding``); x and w are rounded to nearest, G to nearest or stochastically
(``k1, k2 = jax.random.split(key)``: dgrad's G, wgrad's G). Each GEMM is a block-scaled
``matmul`` on ``recipe.forward`` / ``dgrad`` / ``wgrad``. Sizes are multiples of 32 here
(the recipe pads ragged ones).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import operands
from ..gemm import matmul
from . import _keys

F32 = jnp.float32
BLOCK = 32  # OCP MX v1.0, section 5.2


def _q(r, x, fmt, axis, rounding="rn", key=None):
    return operands.quantize_mx(
        jax.lax.stop_gradient(x), fmt, axis=axis, block=BLOCK, scale_rounding=r.scale_rounding,
        rounding=rounding, key=key if rounding == "stochastic" else None,
    )  # fmt: skip


def linear(r, x, w, key):
    """``x [M, K] @ w [K, N]`` (float32) under the MX recipe ``r``."""

    def forward(x, w):
        qx, qw = _q(r, x, r.x_fmt, -1), _q(r, w, r.w_fmt, -2)
        return matmul(qx, qw, instruction=r.forward, arch=r.arch)

    @jax.custom_vjp
    def f(x, w, key):
        return forward(x, w)

    def fwd(x, w, key):
        return forward(x, w), (x, w, key)

    def bwd(saved, g):
        x, w, key = saved
        _keys.check_backward(r, key)
        g = g.astype(F32)
        k1, k2 = jax.random.split(key) if key is not None else (None, None)
        gq = _q(r, g, r.g_fmt, -1, r.grad_rounding, k1)
        dx = matmul(gq, _q(r, w.T, r.w_fmt, -2), instruction=r.dgrad, arch=r.arch)
        gq2 = _q(r, g, r.g_fmt, -2, r.grad_rounding, k2)
        dw = matmul(_q(r, x.T, r.x_fmt, -1), gq2, instruction=r.wgrad, arch=r.arch)
        return dx, dw, None

    f.defvjp(fwd, bwd)
    return f(x, w, key)
