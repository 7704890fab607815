"""Derivatives of the emulated products: straight-through estimators.

The emulation works on raw bits, which have no derivative; JAX would differentiate the
bit casts to zero. Every float-taking product (``ins.mma``, ``matmul``, ``dot_general``)
instead gets the tangent of the exact product of the values the instruction reads:

    dD = dA @ B + A @ dB + dC        (float32, then D's dtype)

where A and B are the operands after conversion to the element type (or quantization):
the rounding itself passes gradients straight through, as quantization-aware training
does. The tangent is linear, so forward mode (``jax.jvp``) and reverse mode (``jax.grad``,
``jax.vjp``) both work. :func:`with_gemm_gradients` instead runs the two gradient GEMMs of
the reverse pass through a given instruction (e.g. ``.e5m2``), reverse mode only.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from . import _grad

F32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST


def _is_float(t) -> bool:
    return t is not None and jnp.issubdtype(jnp.result_type(t), jnp.floating)


def has_tangent(t) -> bool:
    """A float tangent that is not a symbolic zero."""
    return not isinstance(t, jax.custom_derivatives.SymbolicZero) and _is_float(t)


def _product(x, y):
    lead = jnp.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x = jnp.broadcast_to(x.astype(F32), lead + x.shape[-2:])
    y = jnp.broadcast_to(y.astype(F32), lead + y.shape[-2:])
    return jnp.matmul(x, y, precision=HIGHEST)


def _tangent_dtype(out):
    return out.dtype if jnp.issubdtype(out.dtype, jnp.floating) else jax.dtypes.float0


def straight_through(forward, values, A, B, C, aux, lift_a=None, lift_b=None):
    """``forward(A, B, C, aux)`` with the straight-through tangent.

    Args:
      forward: ``(A, B, C, aux) -> D``, the emulation (not differentiable itself).
      values: ``(A, B, aux) -> (A_values, B_values)``, float arrays of what the
        instruction multiplies (``[..., M, K]``, ``[..., K, N]``).
      A, B, C: the operands as given (None where absent); float ones get tangents.
      aux: anything else ``forward`` needs (e.g. quantized operands); no tangent.
      lift_a: ``(dA, aux) -> dA`` as a dense ``[..., M, K]`` tangent of the values, where
        A is stored in another shape (the compressed A of ``mma.sp``) or scaled (element
        arrays of block-scaled forms with separate scales); linear in ``dA``.
      lift_b: ``(dB, aux) -> dB``, the same for B.
    """

    @jax.custom_jvp
    def f(A, B, C, aux):
        return forward(A, B, C, aux)

    # symbolic zeros: an operand without a tangent (a closed-over constant) adds no term.
    # Instantiated, its zero tangent would be a product with an all-zero matrix, which
    # costs a GEMM and which XLA:CPU's YNNPACK dot fusion (jaxlib 0.10/0.11) computed from
    # uninitialized memory when the other factor was a fused reduction.
    @functools.partial(f.defjvp, symbolic_zeros=True)
    def f_jvp(primals, tangents):
        A, B, C, aux = primals
        dA, dB, dC, _ = tangents
        out = f(A, B, C, aux)
        if not jnp.issubdtype(out.dtype, jnp.floating):
            return out, jnp.zeros(out.shape, jax.dtypes.float0)
        va, vb = straight_values(values, A, B, aux)
        t = jnp.zeros(out.shape, F32)
        if _is_float(A) and has_tangent(dA):
            t = t + _product(dA if lift_a is None else lift_a(dA, aux), vb)
        if _is_float(B) and has_tangent(dB):
            t = t + _product(va, dB if lift_b is None else lift_b(dB, aux))
        if _is_float(C) and has_tangent(dC):
            t = t + jnp.broadcast_to(dC.astype(F32), out.shape)
        return out, t.astype(out.dtype)

    return f(A, B, C, aux)


def straight_values(values, A, B, aux):
    """``values(A, B, aux)`` whose derivative with respect to float A and B is the
    identity (straight through), so that the tangent ``dA @ B + A @ dB``, linear in A and
    B, has derivatives itself: ``jax.hessian``, ``jvp`` of ``grad``, ``grad`` of ``grad``.
    Operands stored in another shape (compressed sparse A) keep no second derivative."""
    sg = jax.lax.stop_gradient
    va, vb = values(sg(A), sg(B), aux)
    if _is_float(A) and jnp.shape(A) == va.shape:
        va = _grad.values_of(A, va)
    if _is_float(B) and jnp.shape(B) == vb.shape:
        vb = _grad.values_of(B, vb)
    return va, vb


def _unbroadcast(g, shape):
    """Sum ``g`` over the leading dimensions that broadcasting added to ``shape``."""
    extra = g.ndim - len(shape)
    g = jnp.sum(g, axis=tuple(range(extra))) if extra else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return jnp.sum(g, axis=axes, keepdims=True) if axes else g


_REVERSE_ONLY = (
    "{option}: the gradient GEMMs it emulates exist in reverse mode only (jax.grad, "
    "jax.vjp, grad of grad); forward-mode derivatives (jax.jvp, jvp of grad, jax.hessian, "
    "jax.jacfwd) have no emulated GEMM to run. Use jax.jacrev(jax.grad(...)) or leave "
    "{option} unset for straight-through derivatives of every order"
)


def _refuse_forward_mode(option: str, *xs) -> None:
    """TypeError naming ``option`` when any of ``xs`` carries a forward-mode tangent."""
    for x in jax.tree.leaves(xs):
        if type(x).__name__ == "JVPTracer":
            raise TypeError(_REVERSE_ONLY.format(option=option))


def with_gemm_gradients(forward, values, dgrad, wgrad, A, B, C, aux, option="grad_instruction"):
    """``forward`` with reverse-mode gradients computed by GEMMs: ``dA = dgrad(G, B^T)``
    and ``dB = wgrad(A^T, G)`` on float32 values (None: the exact product), ``dC = G``.

    ``dgrad(x, y)`` / ``wgrad(x, y)`` are the GEMMs of the gradients (the GEMM layer
    passes :func:`jaxmma.matmul` on its ``dgrad_instruction`` / ``wgrad_instruction``).
    Forward-mode derivatives raise a TypeError naming ``option``; reverse over reverse
    works (the gradient GEMMs have straight-through derivatives themselves).
    """
    dgrad = dgrad or _product
    wgrad = wgrad or _product

    @jax.custom_vjp
    def f(A, B, C, aux):
        return forward(A, B, C, aux)

    def fwd(A, B, C, aux):
        _refuse_forward_mode(option, A, B, C)  # jvp of grad, jax.hessian
        return f(A, B, C, aux), (A, B, C, aux)

    def bwd(res, g):
        A, B, C, aux = res
        va, vb = straight_values(values, A, B, aux)
        g = g.astype(F32)
        grads = []
        for x, d in (
            (A, lambda: dgrad(g, jnp.swapaxes(vb, -1, -2).astype(F32))),
            (B, lambda: wgrad(jnp.swapaxes(va, -1, -2).astype(F32), g)),
            (C, lambda: g),
        ):
            if _is_float(x):
                grads.append(_unbroadcast(d(), x.shape).astype(x.dtype))
            elif x is None:
                grads.append(None)
            else:
                grads.append(jnp.zeros(jnp.shape(x), jax.dtypes.float0))
        zero_aux = jax.tree.map(
            lambda x: (
                jnp.zeros(jnp.shape(x), jax.dtypes.float0)
                if not _is_float(x)
                else jnp.zeros_like(x)
            ),
            aux,
        )
        return (*grads, zero_aux)

    f.defvjp(fwd, bwd)
    _refuse_forward_mode(option, A, B, C)  # jax.jvp
    return f(A, B, C, aux)
