"""Keys of the recipes: which recipes draw random numbers, and the error where a
differentiated recipe has no key.

A recipe takes ``key=None`` everywhere: the forward GEMM never draws (weights and
activations are rounded to nearest), so evaluation needs no key. The backward draws for
stochastic gradient rounding and for the NVFP4 recipe's random Hadamard signs; only
there is a missing key an error, raised when the backward is traced (docs/recipes.md,
"Keys"). A key given to a recipe that draws nothing is ignored.
"""

from __future__ import annotations


def reason(r) -> str | None:
    """Why recipe ``r``'s backward draws random numbers (None: it does not)."""
    why = []
    if r.grad_rounding == "stochastic":
        why.append("rounds gradients stochastically (grad_rounding='stochastic')")
    if r.hadamard:
        why.append("draws its random Hadamard signs from the step's key (hadamard=True)")
    return " and ".join(why) or None


def used(r, key):
    """``key`` where recipe ``r`` draws from it, else None (a key is then ignored)."""
    return key if reason(r) is not None else None


def check_backward(r, key) -> None:
    """ValueError naming ``key`` when ``r``'s backward must draw and ``key`` is None."""
    why = reason(r)
    if key is None and why is not None:
        raise ValueError(
            f"key: recipe {r.name!r} {why}, so its gradient needs a jax.random key: "
            "recipe.matmul(x, w, state, key=jax.random.key(step)); key=None runs the "
            "forward only (evaluation)"
        )
