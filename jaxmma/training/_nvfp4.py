"""The NVFP4 linear layer ``x [M, K] @ w [K, N]`` of NVIDIA's NVFP4 recipe, with its
backward (arXiv:2509.25149; docs/recipes.md):

* fprop ``x @ w``: x in 1 x 16 blocks along K, w in 16 x 16 blocks (2D scales, so the
  backward reads the same quantized weight transposed); rounding to nearest;
* dgrad ``G @ w^T``: G in 1 x 16 blocks along N (stochastic rounding with a key, else
  to nearest), w^T the forward's quantized w, transposed;
* wgrad ``x^T @ G``: both inputs multiplied along the token dimension M by a 16 x 16
  random Hadamard transform (``H diag(signs) / 4``, orthogonal, so the exact product is
  unchanged), then quantized in 1 x 16 blocks along M (G stochastic).

The backward's key is split in three, ``k1, k2, k3 = jax.random.split(key, 3)``: k1
rounds dgrad's G, k2 wgrad's G (stochastic rounding), and the Hadamard signs are
``jax.random.rademacher(k3, (16,))`` in every rounding mode. Sizes are multiples of 16
here (the recipe pads ragged ones, docs/recipes.md).

Each tensor has NVIDIA's per-tensor global scale (``amax / (6 * 448)``); every GEMM is
an emulated block-scaled GEMM on ``recipe.forward`` (a ``.ue4m3`` scale_vec 16 form).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import bits, operands
from ..gemm import matmul
from . import _keys

F32 = jnp.float32
BLOCK = 16


def _sylvester(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


#: the 16 x 16 Hadamard matrix, orthonormal (entries +-1/4)
HADAMARD = (_sylvester(BLOCK) / 4).astype(np.float32)


def quantize_2d(w: jax.Array) -> tuple[operands.Quantized, operands.Quantized]:
    """NVFP4 ``w [K, N]`` with one ue4m3 scale per 16 x 16 block, as the B operand
    (blocked along K, ``axis=-2``), and the same tensor transposed, ``[N, K]``, as the B
    operand of ``G @ w^T`` (blocked along N): two :class:`Quantized` of the same bits.

    Block scale ``s = ue4m3(amax_b / (6 g))`` (nearest, saturating), element
    ``e2m1(w / (s g))`` with the quotient rounded to float32 first, ``g`` the global
    scale (of the finite values). A block holding NaN or Inf gets the NaN scale ``0x7F``
    and its elements hold ``w`` rounded without scaling, as
    :func:`jaxmma.quant.quantize_nvfp4` does: everything computed from it is NaN."""
    if jnp.ndim(w) != 2 or any(d % BLOCK for d in jnp.shape(w)):
        raise ValueError(
            f"w: expected a 2-D weight whose sizes are multiples of {BLOCK}, got shape "
            f"{jnp.shape(w)}"
        )
    K, N = w.shape
    g = operands.nvfp4_global_scale(w)
    blocked = lambda v: v.reshape(K // BLOCK, BLOCK, N // BLOCK, BLOCK)  # noqa: E731
    a = blocked(jnp.abs(w)).max(axis=(1, 3))
    # NaN or Inf in the block: a NaN scale (saturation hid Inf; XLA's max may drop NaN)
    finite = blocked(jnp.isfinite(w)).all(axis=(1, 3))
    sbits = jnp.where(finite, bits.encode("ue4m3", a / (F32(6) * g), saturate=True), 0x7F)
    sv = bits.decode("ue4m3", sbits)
    blocks = lambda v: jnp.repeat(jnp.repeat(v, BLOCK, 0), BLOCK, 1)  # noqa: E731
    full = blocks(sv) * g
    q = jnp.where(full > 0, w / jnp.where(full > 0, full, F32(1)), F32(0))
    q = jnp.where(blocks(finite), q, w)  # a NaN-scale block: w without scaling
    e = bits.encode("e2m1", jax.lax.stop_gradient(q), saturate=True).astype(jnp.uint8)
    sb = sbits.astype(jnp.uint8)
    qw = operands.Quantized(e, jnp.repeat(sb, BLOCK, 1), g, "e2m1", "ue4m3", BLOCK, -2)
    qwt = operands.Quantized(e.T, jnp.repeat(sb.T, BLOCK, 1), g, "e2m1", "ue4m3", BLOCK, -2)
    return qw, qwt


def hadamard_rows(x: jax.Array, signs: jax.Array) -> jax.Array:
    """``x [M, C]`` with every 16 rows multiplied by ``H diag(signs)`` (an orthogonal
    16 x 16 matrix): ``hadamard_rows(x)^T hadamard_rows(y) == x^T y`` exactly in reals."""
    if jnp.ndim(x) != 2 or jnp.shape(x)[0] % BLOCK:
        raise ValueError(
            f"x: expected [M, C] with M a multiple of {BLOCK}, got shape {jnp.shape(x)}"
        )
    if jnp.shape(signs) != (BLOCK,):
        raise ValueError(f"signs: expected shape ({BLOCK},), got {jnp.shape(signs)}")
    M, C = x.shape
    t = jnp.asarray(HADAMARD) * signs[None, :]
    xb = x.reshape(M // BLOCK, BLOCK, C)
    return jnp.einsum("ij,bjc->bic", t, xb, precision=jax.lax.Precision.HIGHEST).reshape(M, C)


def signs_from_key(key):
    """The 16 random signs (float32 +-1) of the wgrad Hadamard transform drawn from
    ``key`` (the third of ``jax.random.split(step_key, 3)`` in the recipe)."""
    return jax.random.rademacher(key, (BLOCK,)).astype(F32)


def _q(x, axis, rounding, key):
    return operands.quantize_nvfp4(
        jax.lax.stop_gradient(x), axis=axis, rounding=rounding,
        key=key if rounding == "stochastic" else None,
    )  # fmt: skip


def _gemm(r, qa, qb):
    return matmul(qa, qb, instruction=r.forward, arch=r.arch)


def linear(r, x, w, key):
    """``x [M, K] @ w [K, N]`` (float32) under NVIDIA's NVFP4 recipe ``r``."""

    def forward(x, w):
        qx = _q(x, -1, "rn", None)
        qw, qwt = quantize_2d(jax.lax.stop_gradient(w))
        return _gemm(r, qx, qw), (x, qwt)

    @jax.custom_vjp
    def f(x, w, key):
        return forward(x, w)[0]

    def fwd(x, w, key):
        y, res = forward(x, w)
        return y, (res, key)

    def bwd(saved, g):
        (x, qwt), key = saved
        _keys.check_backward(r, key)
        g = g.astype(F32)
        k1, k2, k3 = jax.random.split(key, 3) if key is not None else (None, None, None)
        dx = _gemm(r, _q(g, -1, r.grad_rounding, k1), qwt)
        if r.hadamard:
            signs = signs_from_key(k3)
            xh, gh = hadamard_rows(x, signs), hadamard_rows(g, signs)
        else:
            xh, gh = x, g
        dw = _gemm(r, _q(xh.T, -1, "rn", None), _q(gh, -2, r.grad_rounding, k2))
        return dx, dw, None

    f.defvjp(fwd, bwd)
    return f(x, w, key)
