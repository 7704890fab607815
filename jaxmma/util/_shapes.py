"""Leading (batch) dimensions of operands: broadcast them, or say which do not fit."""

from __future__ import annotations

import jax.numpy as jnp


def batch_shape(named, context: str = "") -> tuple[int, ...]:
    """The broadcast of the leading shapes of ``(name, shape)`` pairs.

    Raises:
      ValueError: they do not broadcast (the message names every operand and its shape).
    """
    try:
        return tuple(jnp.broadcast_shapes(*(tuple(shape) for _, shape in named)))
    except ValueError:
        got = ", ".join(f"{name} {tuple(shape)}" for name, shape in named)
        where = f" for {context}" if context else ""
        raise ValueError(
            f"leading (batch) dimensions do not broadcast{where}: {got} "
            "(each must be broadcastable to the others, as in NumPy)"
        ) from None


def broadcast(operands, context: str = ""):
    """Broadcast ``(name, array or None, trailing ndim)`` triples to one batch shape.

    Returns the arrays (None stays None) with the common leading shape and their own
    trailing ``ndim`` dimensions.
    """
    named = [(n, x.shape[: x.ndim - nd]) for n, x, nd in operands if x is not None]
    batch = batch_shape(named, context)
    return tuple(
        None if x is None else jnp.broadcast_to(x, batch + x.shape[x.ndim - nd :])
        for _, x, nd in operands
    )


def matrix_dims(A, B, C) -> tuple[int, int, int]:
    """``(M, K, N)`` of matrix operands ``A [..., M, K]``, ``B [..., K, N]``, ``C [..., M,
    N]``; a ``ValueError`` where one of them has fewer than two dimensions."""
    if A.ndim < 2 or B.ndim < 2 or C.ndim < 2:
        raise ValueError(
            f"expected A [..., M, K], B [..., K, N], C [..., M, N]; "
            f"got shapes {A.shape}, {B.shape}, {C.shape}"
        )
    (M, K), N = A.shape[-2:], B.shape[-1]
    return M, K, N


def pad_axis(x, axis: int, size: int, value=0):
    """``x`` padded at the end of ``axis`` to ``size`` with ``value`` (in x's dtype)."""
    pad = size - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=jnp.asarray(value, x.dtype))
