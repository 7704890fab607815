"""Loss scaling: a loss multiplied before differentiation so that small gradients stay
above the smallest value of a low-precision gradient format, and the gradients divided
back afterwards; static or dynamic (halved on a non-finite gradient, doubled after
``period`` finite steps), with its state an explicit pytree."""

from __future__ import annotations

from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

F32 = jnp.float32
#: a pytree of gradients
Tree = TypeVar("Tree")


def scale_loss(loss: jax.Array, scale: ArrayLike) -> jax.Array:
    """``loss * scale`` (differentiate this)."""
    for name, x in (("loss", loss), ("scale", scale)):
        dt = getattr(x, "dtype", None)
        ok = isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
        if not (ok or (dt is not None and jnp.issubdtype(dt, jnp.floating))):
            raise TypeError(f"{name}: expected a float scalar or array, got {x!r}")
    return loss * jnp.asarray(scale, F32).astype(jnp.result_type(loss))


def unscale(grads: Tree, scale: ArrayLike) -> Tree:
    """Every gradient divided by ``scale``."""
    s = jnp.asarray(scale, F32)
    return jax.tree.map(lambda g: (g / s.astype(g.dtype)).astype(g.dtype), grads)


def all_finite(tree: Any) -> jax.Array:
    """True (a bool array) where every leaf of ``tree`` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def _positive_number(name, x, low):
    """A Python or NumPy number above ``low`` (TypeError for anything else)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a float > {low}, got {x!r}"[:300])
    if not x > low:
        raise ValueError(f"{name}: expected a float > {low}, got {x!r}")


def dynamic_init(scale: float = 2.0**15) -> dict[str, jax.Array]:
    """The state of dynamic loss scaling: ``{"scale": f32, "good": int32}``."""
    _positive_number("scale", scale, 0)
    return {"scale": jnp.asarray(scale, F32), "good": jnp.zeros((), jnp.int32)}


def dynamic_update(
    state: dict[str, jax.Array], grads: Any, *, period: int = 2000, factor: float = 2.0
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``(finite, next_state)``: halve (``/ factor``) on a non-finite gradient, grow
    (``* factor``) after ``period`` finite steps in a row. Skip the update where
    ``finite`` is False."""
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"period: expected a positive int, got {period!r}")
    _positive_number("factor", factor, 1)
    ok = all_finite(grads)
    good = jnp.where(ok, state["good"] + 1, 0)
    grow = good >= period
    scale = jnp.where(ok, jnp.where(grow, state["scale"] * factor, state["scale"]),
                      state["scale"] / factor)  # fmt: skip
    return ok, {"scale": scale.astype(F32), "good": jnp.where(grow, 0, good).astype(jnp.int32)}
