"""Derivatives of the value functions: straight-through estimators and clear refusals.

Rounding is piecewise constant, so its true derivative is zero almost everywhere; a
silent zero gradient is never what a caller of a float -> float rounding wants. The
functions that map floats to floats (:func:`jaxmma.formats.round_to_format`,
:func:`jaxmma.quant.fake_quantize_mx`, :func:`jaxmma.quant.fake_quantize_nvfp4`) use the
straight-through estimator: the tangent of the identity. The functions that map floats to
integer bits (:func:`jaxmma.formats.encode`, :func:`jaxmma.quant.quantize_mx`,
:func:`jaxmma.quant.quantize_nvfp4`) refuse to be differentiated with respect to their
float input, with a ``TypeError`` that names the straight-through alternative.
"""

from __future__ import annotations

import functools

import jax


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def no_derivative(x: jax.Array, message: str) -> jax.Array:
    """``x`` unchanged; differentiating through it raises ``TypeError(message)``."""
    return x


@no_derivative.defjvp
def _no_derivative_jvp(message, primals, tangents):
    raise TypeError(message)


def straight_through(fn, x):
    """``fn(x)`` with the derivative of the identity (tangent cast to the result dtype).

    ``fn`` must map an array to an array of the same shape (a rounding of ``x``).
    """

    @jax.custom_jvp
    def f(v):
        return fn(v)

    @f.defjvp
    def f_jvp(primals, tangents):
        (v,), (t,) = primals, tangents
        out = f(v)  # f itself: a derivative of this rule meets the same rule (any order)
        return out, t.astype(out.dtype)

    return f(x)


@jax.custom_jvp
def values_of(x, v):
    """``v`` (values computed from ``x``, such as ``x`` rounded, of ``x``'s shape) with the
    derivative of ``x``: straight through, to any order. Compute ``v`` from
    ``jax.lax.stop_gradient(x)`` so that nothing else is differentiated."""
    return v


@values_of.defjvp
def _values_of_jvp(primals, tangents):
    (x, v), (tx, _) = primals, tangents
    return values_of(x, v), jax.numpy.broadcast_to(tx, v.shape).astype(v.dtype)
