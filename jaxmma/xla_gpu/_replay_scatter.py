"""XLA:GPU's f32 scatter-add where each element of the operand receives at most one
update, as the gradient of ``take_along_axis`` (one picked class per row of a
cross-entropy loss) has it.

XLA:GPU does not know that such indices are unique (jax passes ``unique_indices=False``)
and adds each update into the operand with the device's atomic add, which flushes
subnormal inputs and results to zeros of their sign and gives the canonical NaN
(tests/golden/xla/xla-scatter-*.npz: every pair of zeros, subnormals, least normals,
ordinary values, infinities and NaN payloads as operand and update, and 4096 random
subnormal pairs; an H200, two processes, every element). With one update per element
the order of the atomic adds does not matter, so the GPU's result is, per element::

    ftz(ftz(operand) + ftz(update))   (one update), operand (none)

:func:`refusal` says why an equation is not covered: more than one update may reach an
element (their order is the atomics' race), indices XLA is told are unique or sorted
(other emitters), another type or update computation, or a module that does not show
XLA's scatter emitter. :func:`evaluate` computes a covered one on the bits.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith
from ._replay_ieee import with_derivative

U32 = jnp.uint32


def _one_window_per_slice(eqn) -> bool:
    """Whether the scatter's index vectors, one per batch slice of the operand, can
    reach each operand element at most once: every index dimension but the index vector
    (the last) and the batching dimensions has size 1. (A window's elements go to
    distinct elements; batching dimensions pair index and operand slices one to one.)"""
    idx = eqn.invars[1].aval.shape
    batch = set(eqn.params["dimension_numbers"].scatter_indices_batching_dims)
    return math.prod(n for d, n in enumerate(idx[:-1]) if d not in batch) == 1


def _adds_only(eqn) -> bool:
    """The update computation is ``add`` of its two arguments."""
    j = eqn.params.get("update_jaxpr")
    if j is None:
        return False
    j = getattr(j, "jaxpr", j)
    return (
        len(j.eqns) == 1
        and j.eqns[0].primitive.name == "add"
        and list(j.eqns[0].invars) == list(j.invars)
        and list(j.outvars) == list(j.eqns[0].outvars)
    )


def refusal(eqn, facts) -> str | None:
    """None where :func:`evaluate` gives XLA:GPU's bits for ``eqn`` (a ``scatter-add``
    of ``facts``' module, :class:`._hlo.Emitters`), else why not."""
    dtype = np.dtype(eqn.invars[0].aval.dtype)
    if dtype != np.float32:
        return f"a scatter-add of {dtype.name}: its atomic add is not measured (f32 is)"
    if not _adds_only(eqn):
        return "a scatter whose update computation is not one add: not covered"
    if eqn.params.get("unique_indices") or eqn.params.get("indices_are_sorted"):
        return (
            "a scatter-add with indices declared unique or sorted: XLA:GPU then emits "
            "other code than the atomic adds measured"
        )
    if not _one_window_per_slice(eqn):
        return (
            "a scatter-add whose updates may reach one element several times: XLA:GPU "
            "adds them with atomics in the order the threads race (not reproducible)"
        )
    if facts is None or not any(w.endswith("(kInput)") for w in facts.scatters):
        return "the module does not show this scatter in XLA's scatter emitter (a kInput fusion)"
    return None


def _ftz(b):
    """f32 bits with subnormals replaced by zeros of their sign."""
    return jnp.where((b & U32(0x7F800000)) == 0, b & U32(0x80000000), b)


def _placed(eqn, operand, indices, values, fill):
    """``values`` moved to where the scatter puts them, ``fill`` elsewhere (data
    movement on integers: nothing is computed or flushed)."""
    p = eqn.params
    base = jnp.full(operand.shape, fill, values.dtype)
    return jax.lax.scatter(
        base, indices, values, p["dimension_numbers"], mode=p["mode"],
        indices_are_sorted=p["indices_are_sorted"], unique_indices=p["unique_indices"],
    )  # fmt: skip


def _bits(eqn, operand, indices, updates):
    ob = jax.lax.bitcast_convert_type(jnp.asarray(operand, jnp.float32), U32)
    ub = jax.lax.bitcast_convert_type(jnp.asarray(updates, jnp.float32), U32)
    hit = _placed(eqn, ob, indices, jnp.ones(ub.shape, U32), 0) != 0
    upd = _placed(eqn, ob, indices, ub, 0)
    total = _ftz(arith.ieee_add(_ftz(ob), _ftz(upd), "f32"))
    return jax.lax.bitcast_convert_type(jnp.where(hit, total, ob), jnp.float32)


def evaluate(eqn, ins) -> list:
    """The outputs of a covered ``scatter-add`` (:func:`refusal` None), with the
    primitive's own derivative."""
    operand, indices, updates = (jnp.asarray(x) for x in ins)
    return [with_derivative(eqn, lambda o, i, u: _bits(eqn, o, i, u), [operand, indices, updates])]
