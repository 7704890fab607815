"""Derivatives of the emulated products: the one straight-through module.

The emulation works on raw bits, which have no derivative; JAX would differentiate the
bit casts to zero. Every float-taking product instead gets the tangent of the exact value
it computes, at the values the instruction reads (:func:`gemm`, one rule for all):

    dD = alpha * (dA' @ B' + A' @ dB') + beta * dC      (float32, then D's dtype)

where A' and B' are the operands after conversion to the element type (or quantization)
times their scales, if any: the rounding itself passes gradients straight through, as
quantization-aware training does. Each entry point names its exact value (:class:`Exact`):
``ins.mma`` and the plain ``matmul`` / ``dot_general`` ``A @ B + C`` (:data:`PLAIN`,
through :func:`straight_through`), ``matmul`` with kernel options or fp8 scales the
epilogue's alpha and beta and the recipe's scales, ``scaled_matmul`` its block scales.
The tangent is linear, so forward mode (``jax.jvp``) and reverse mode (``jax.grad``,
``jax.vjp``) both work. :func:`with_gemm_gradients` instead runs the two gradient GEMMs of
the reverse pass through a given instruction (e.g. ``.e5m2``), reverse mode only.

Backward passes that quantize (jax.nn's ``scaled_dot_general(grad="configs")``, the
training recipes) are not straight-through and keep their own ``custom_vjp``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

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


@dataclasses.dataclass(frozen=True)
class Exact:
    """The exact value a GEMM entry point computes, whose tangent is the straight-through
    tangent: ``alpha * (A * scale_a(SA)) @ (B * scale_b(SB)) + beta * C`` in float32, at
    the values the instruction reads.

    Attributes:
      scale_a, scale_b: ``s -> factor`` broadcastable to A's ``[..., M, K]`` (B's), from
        the value of a scale operand; linear in ``s`` (a repeat over a block, a slice).
        None: the operand has no scale.
      alpha, beta: Python floats (multiplied in float32); None: no multiplication.
      product: ``(x, y) -> x @ y`` in float32, in the layout the entry point holds its
        operands (default ``[..., M, K] @ [..., K, N]``, broadcasting the batch).
      from_zero: the tangent is accumulated from +0 (``0 + dA @ B + A @ dB + dC``), so a
        tangent of -0 leaves as +0; otherwise it is the sum of its terms alone. The two
        differ in the sign of zeros only: ``ins.mma`` and the plain ``matmul`` have always
        started from +0, the kernel options and ``scaled_matmul`` have not, and every bit
        of each is kept.
      by_jvp: the tangent is ``jax.jvp`` of the value itself, as the kernel options'
        rule has always taken it, rather than the terms written out. The same formula;
        but in an eager ``jax.jvp`` the value's product then runs in one XLA computation
        with the tangent's products, which XLA:CPU may sum in another order (seen with
        fp8 scales at K = 256), so each rule keeps its own way and its bits.
    """

    scale_a: Callable | None = None
    scale_b: Callable | None = None
    alpha: float | None = None
    beta: float | None = None
    product: Callable = _product
    from_zero: bool = False
    by_jvp: bool = False

    def value(self, A, B, C, SA, SB):
        """The exact value itself, float32 (C, SA, SB None where absent)."""
        if self.scale_a is not None and SA is not None:
            A = A * self.scale_a(SA)
        if self.scale_b is not None and SB is not None:
            B = B * self.scale_b(SB)
        d = self.product(A, B)
        if self.alpha is not None:
            d = d * F32(self.alpha)
        if C is not None:
            d = d + jnp.broadcast_to(C if self.beta is None else F32(self.beta) * C, d.shape)
        return d


#: ``A @ B + C`` started from +0: the product of ``ins.mma`` and the plain ``matmul``
PLAIN = Exact(from_zero=True)


def gemm(forward, values, A, B, C=None, SA=None, SB=None, aux=None, *, exact=PLAIN, lifts=None):
    """``forward(A, B, C, SA, SB, aux)`` with the straight-through tangent of ``exact``:
    the one derivative rule of every GEMM entry point (``ins.mma``, ``matmul`` with or
    without kernel options and scales, ``scaled_matmul``).

    The tangent is that of ``exact`` at the values the instruction reads::

        dD = alpha * (dA' @ B' + A' @ dB') + beta * dC,   A' = A * scale_a(SA),
        dA' = dA * scale_a(SA) + A * scale_a(dSA)        (B' and dB' alike)

    in float32, then D's dtype; only the operands that carry a tangent add a term (an
    operand without one, such as a closed-over constant, costs no GEMM). Non-float
    outputs (integer forms) have no tangent (float0).

    Args:
      forward: ``(A, B, C, SA, SB, aux) -> D``, the emulation on raw bits (not
        differentiable itself).
      values: ``(A, B, SA, SB, aux) -> (A_values, B_values, SA_values, SB_values)``:
        float32 arrays of what the instruction reads (None for an absent scale).
        Called on the operands with their gradients stopped; a value of its operand's
        shape has the operand's derivative (straight through, to any order).
      A, B, C, SA, SB: the operands as given (None where absent); float ones take
        tangents. C's value is not read (the tangent is linear in it).
      aux: anything else ``forward`` needs (quantized operands, a key); no tangent.
      exact: the :class:`Exact` value; default :data:`PLAIN`, ``A @ B + C``.
      lifts: None or four functions ``(d, x, aux) -> tangent of the value`` for A, B, SA,
        SB (None: the tangent itself), where the value read is not the operand's own
        (the compressed A of ``mma.sp``, elements with separate block scales, a scale
        whose sign the instruction ignores); linear in ``d``.
    """

    @jax.custom_jvp
    def f(A, B, C, SA, SB, aux):
        return forward(A, B, C, SA, SB, aux)

    # symbolic zeros: an operand without a tangent (a closed-over constant) adds no term.
    # Instantiated, its zero tangent would be a product with an all-zero matrix, which
    # costs a GEMM and which XLA:CPU's YNNPACK dot fusion (jaxlib 0.10/0.11) computed from
    # uninitialized memory when the other factor was a fused reduction.
    @functools.partial(f.defjvp, symbolic_zeros=True)
    def f_jvp(primals, tangents):
        out = f(*primals)
        return out, gemm_tangent(values, exact, out, primals, tangents, lifts=lifts)

    return f(A, B, C, SA, SB, aux)


def gemm_tangent(values, exact, out, primals, tangents, *, lifts=None):
    """The straight-through tangent of :func:`gemm` at ``primals`` (``A, B, C, SA, SB,
    aux``) for ``tangents`` (symbolic zeros where an operand has none), ``out`` the
    primal output: the body of :func:`gemm`'s JVP rule, for an entry point that defines
    its own ``jax.custom_jvp`` (with ``symbolic_zeros=True``) around a forward it names.
    ``values``, ``exact`` and ``lifts`` as in :func:`gemm`."""
    lifts = lifts or (None,) * 4
    if not jnp.issubdtype(out.dtype, jnp.floating):
        return jnp.zeros(out.shape, jax.dtypes.float0)
    A, B, C, SA, SB, aux = primals
    vals = _straight(values, (A, B, SA, SB), aux)

    def tangent(i, x, d):  # the tangent of operand i's value, or None (no term)
        if vals[i] is None or not (_is_float(x) and has_tangent(d)):
            return None
        return jnp.asarray(d if lifts[i] is None else lifts[i](d, x, aux), F32)

    dA, dB, dC, dSA, dSB, _ = tangents
    dA, dB, dSA, dSB = (
        tangent(i, x, d) for i, (x, d) in enumerate(((A, dA), (B, dB), (SA, dSA), (SB, dSB)))
    )
    if exact.by_jvp:
        dC = jnp.asarray(dC, F32) if _is_float(C) and has_tangent(dC) else None
        t = _jvp(exact, (vals[0], vals[1], C, vals[2], vals[3]), (dA, dB, dC, dSA, dSB))
        if t is None:
            return jnp.zeros(out.shape, out.dtype)
        return jnp.broadcast_to(t, out.shape).astype(out.dtype)
    VA, dVA = _scaled(vals[0], dA, vals[2], dSA, exact.scale_a)
    VB, dVB = _scaled(vals[1], dB, vals[3], dSB, exact.scale_b)
    t = _add(
        None if dVA is None else exact.product(dVA, VB),
        None if dVB is None else exact.product(VA, dVB),
    )
    if t is not None and exact.alpha is not None:
        t = t * F32(exact.alpha)
    dC = tangents[2]
    if _is_float(C) and has_tangent(dC):
        dC = dC.astype(F32)
        if exact.beta is not None:
            dC = F32(exact.beta) * dC
        t = _add(t, jnp.broadcast_to(dC, out.shape))
    if t is None:
        return jnp.zeros(out.shape, out.dtype)
    if exact.from_zero:
        t = jnp.zeros(out.shape, F32) + t
    return jnp.broadcast_to(t, out.shape).astype(out.dtype)


def _jvp(exact, primals, tangents):
    """``jax.jvp`` of ``exact.value`` in the operands with a tangent (the others constants),
    or None where none has one."""
    prim = [None if p is None else jnp.asarray(p, F32) for p in primals]
    moving = [i for i, t in enumerate(tangents) if t is not None and prim[i] is not None]
    if not moving:
        return None

    def g(*xs):
        full = list(prim)
        for i, x in zip(moving, xs, strict=True):
            full[i] = x
        return exact.value(*full)

    tans = tuple(jnp.broadcast_to(tangents[i], prim[i].shape) for i in moving)
    return jax.jvp(g, tuple(prim[i] for i in moving), tans)[1]


def _add(x, y):
    """``x + y`` where either may be absent (None: no term)."""
    return y if x is None else x if y is None else x + y


def _scaled(v, dv, s, ds, scale):
    """``v * scale(s)`` and its tangent ``dv * scale(s) + v * scale(ds)`` (terms present
    only for the tangents given)."""
    if scale is None or s is None:
        return v, dv
    e = scale(s)
    dx = None if dv is None else dv * e
    return v * e, _add(dx, None if ds is None else v * scale(ds))


def straight_through(forward, values, A, B, C, aux, lift_a=None, lift_b=None):
    """``forward(A, B, C, aux)`` with the straight-through tangent ``dA @ B + A @ dB +
    dC`` (:func:`gemm` with :data:`PLAIN`), for the products without scale operands.

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
    lifts = tuple(None if g is None else _lift(g) for g in (lift_a, lift_b)) + (None, None)
    return gemm(
        lambda A, B, C, SA, SB, aux: forward(A, B, C, aux),
        lambda A, B, SA, SB, aux: (*values(A, B, aux), None, None),
        A, B, C, aux=aux, lifts=lifts,
    )  # fmt: skip


def _lift(g):
    return lambda d, x, aux: g(d, aux)


def _straight(values, xs, aux):
    """``values(*xs, aux)`` whose derivative with respect to each float operand of the
    value's shape is the identity (straight through), so that the tangent, linear in the
    values, has derivatives itself: ``jax.hessian``, ``jvp`` of ``grad``, ``grad`` of
    ``grad``. Operands stored in another shape (compressed sparse A) keep no second
    derivative."""
    vs = values(*(jax.lax.stop_gradient(x) for x in xs), aux)
    return tuple(
        _grad.values_of(x, v) if v is not None and _is_float(x) and jnp.shape(x) == v.shape else v
        for x, v in zip(xs, vs, strict=True)
    )


def straight_values(values, A, B, aux):
    """``values(A, B, aux)`` with straight-through derivatives (see :func:`_straight`)."""
    vals = lambda A, B, SA, SB, aux: (*values(A, B, aux), None, None)  # noqa: E731
    return _straight(vals, (A, B, None, None), aux)[:2]


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
