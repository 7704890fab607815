"""What the library does around two faults of XLA's constant folding (jaxlib 0.10.2).

Under ``jit`` XLA computes the operations whose inputs are all constants (a caller's
closed-over arrays, say) while compiling, with its own evaluator, and two of its
operations there differ from the compiled ones:

* ``clz`` of a negative signed integer gives ``-32`` for int32 (the count of the
  sign-extended 64-bit value, minus 32) where the compiled operation, and XLA's
  definition, give 0: an emulated FMUL of two folded scales came out as +0. :func:`clz`
  selects the 0 itself.
* a bitcast-convert whose operand is a constant reaching it through a call and a
  transpose reads it with the transpose dropped (below).

``tests/test_constant_inputs.py`` checks the public functions on folded constants.

jaxmma compiles its inner functions with ``jax.jit`` so that an eager call compiles once
per configuration. Traced inside a caller's ``jit``, a plain ``jax.jit`` leaves a call
in the program, and jaxlib 0.10.2's XLA:CPU folds a constant that reaches such a call
through a transpose with its transposed layout ignored where the call bit-casts it (a
closed-over array padded by ``jnp.pad``, a nested ``jit``, then ``.T``: the MXFP8
recipe's weight gradient came out with 3,997 of 4,096 elements wrong, no error).
``inline=True`` traces the function into the caller instead: no call, the same bits,
the same eager behaviour; :func:`ingest` covers a caller's own calls.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax


def jit(fun=None, **kwargs):
    """``jax.jit(fun, inline=True, **kwargs)``; usable as ``@jit`` and as
    ``functools.partial(jit, static_argnums=...)``."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    return jax.jit(fun, inline=True, **kwargs)


def ingest(x):
    """An array input of a public function, behind an optimization barrier: XLA folds
    no constant through it, so a caller's own nested ``jit`` cannot put a constant with
    a transposed layout in front of the library's bit casts (see the module docstring);
    the same values, differentiable and batchable (``lax.optimization_barrier`` has
    both rules)."""
    return jax.lax.optimization_barrier(x)


def clz(x):
    """``lax.clz(x)`` (leading zero bits) with XLA's defined count for a negative signed
    ``x`` (0) selected explicitly, so that a folded constant gets it too. The count
    itself stays ``lax.clz`` of the signed value: Pallas's Triton lowering compiles that
    (an unsigned ``clz`` does not legalize there)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.signedinteger):
        return lax.clz(x)
    return jnp.where(x < 0, jnp.zeros_like(x), lax.clz(x))
