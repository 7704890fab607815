"""What a policy rule runs a dot on: a jaxmma GEMM (:class:`Gemm`), a training recipe
(:class:`jaxmma.recipes.Recipe`), or ``"keep"`` (the dot as the function wrote it).

Each target is checked when the rule is built, so a wrong instruction, architecture or
option is a ``ValueError`` before any function is traced (docs/policy.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ..gemm import dot_general as _dot_general
from ..gemm import matmul as _matmul
from ..gemm import resolve
from ..training import Recipe

#: the target that leaves a dot as the function wrote it
KEEP = "keep"
#: ``matmul`` keywords a :class:`Gemm` does not take: the operands and the form are its
#: own, and a fixed key would round every step alike (the policy's key per step instead:
#: docs/policy.md, "State and keys")
_NOT_OPTIONS = ("A", "B", "C", "instruction", "arch", "key")
OPTIONS = tuple(p for p in inspect.signature(_matmul).parameters if p not in _NOT_OPTIONS)


@dataclasses.dataclass(frozen=True)
class Gemm:
    """A dot run as ``jaxmma.dot_general(lhs, rhs, dimension_numbers,
    instruction=instruction, arch=arch, **options)``; build it with :func:`gemm`."""

    instruction: str
    arch: str
    options: tuple = ()  # (name, value) pairs, sorted by name

    @property
    def kwargs(self) -> dict:
        """The keywords ``jaxmma.dot_general`` gets: instruction, arch and the options."""
        return {"instruction": self.instruction, "arch": self.arch, **dict(self.options)}

    def __call__(
        self,
        lhs: ArrayLike,
        rhs: ArrayLike,
        dimension_numbers: tuple[tuple[Any, Any], tuple[Any, Any]],
        *,
        key: jax.Array | None = None,
    ) -> jax.Array:
        """``jaxmma.dot_general`` on this GEMM (the accumulator's dtype); ``key`` for
        stochastic input rounding."""
        kw = self.kwargs if key is None else {**self.kwargs, "key": key}
        return _dot_general(lhs, rhs, dimension_numbers, **kw)


def gemm(instruction: str, *, arch: str, **options: Any) -> Gemm:
    """A policy target: dots run as ``jaxmma.dot_general(..., instruction=instruction,
    arch=arch, **options)``.

    Args:
      instruction: PTX text of a form with a matrix product (``mma``, ``wgmma``,
        ``tcgen05.mma``, block-scaled forms quantize float operands inside).
      arch: the architecture whose numerics are emulated (``"sm_90"``, ``"sm_100a"``, ...).
      **options: further :func:`jaxmma.matmul` keywords (``promote_every``,
        ``input_rounding``, ``quantize``, ``dgrad_instruction``, split-K, ...); ``key``
        is not one: ``rounding="stochastic"`` draws from the policy's key per step
        (``with_policy(fn, policy, stateful=True)``, docs/policy.md).

    Raises:
      TypeError: ``instruction`` or ``arch`` not a str.
      ValueError: text the parser refuses, a form ``arch`` cannot run, an unknown option.

    Example:
      >>> import jaxmma
      >>> t = jaxmma.policy.gemm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
      ...                        arch="sm_90")
      >>> t.arch
      'sm_90'
    """
    if not isinstance(instruction, str):
        raise TypeError(f"instruction: expected PTX text (a str), got {type(instruction).__name__}")
    if not isinstance(arch, str):
        raise TypeError(f"arch: expected a str such as 'sm_90', got {type(arch).__name__}")
    resolve(instruction, arch)  # the parser's ValueError names the qualifier and the arch
    bad = sorted(set(options) - set(OPTIONS))
    if bad:
        why = (
            " (the key per step is the policy's: with_policy(fn, policy, stateful=True), "
            "docs/policy.md)"
            if "key" in bad
            else ""
        )
        raise ValueError(
            f"options: {bad} not jaxmma.matmul keywords a policy takes{why}; allowed: "
            f"{list(OPTIONS)}"
        )
    return Gemm(instruction, arch, tuple(sorted(options.items())))


def check(target, where: str):
    """``target`` if a policy can run it; TypeError / ValueError naming ``where``."""
    if isinstance(target, str) and target == KEEP:
        return KEEP
    if isinstance(target, (Gemm, Recipe)):
        return target
    raise TypeError(
        f"{where}: expected a target: jaxmma.policy.gemm(...), a jaxmma.recipes recipe, "
        f"a jaxmma.presets entry or 'keep'; got {target!r}"
    )


def _linear(dn, lhs, rhs) -> bool:
    """Whether ``dn`` is a linear layer's ``x [..., K] @ w [K, N]``."""
    (lc, rc), (lb, rb) = dn
    return (
        not lb and not rb and tuple(lc) == (lhs.ndim - 1,) and tuple(rc) == (0,) and rhs.ndim == 2
    )


def run(target, lhs, rhs, dn, state=None, key=None, weight="rhs"):
    """The dot ``lax.dot_general(lhs, rhs, dn)`` on ``target`` (not KEEP), in the
    target's output dtype; ``state`` and ``key`` are the recipe's (a GEMM takes a key).

    A recipe takes the ``weight`` operand (``"rhs"`` or ``"lhs"``) as its w and the
    other as its x. A linear layer's dot (``x [..., K] @ w [K, N]``, the rhs the weight)
    is the recipe's own ``dot_general(state, key=key)``; any other dot without batch
    dimensions is brought to ``x [M, K] @ w [K, N]`` (transposes and reshapes, which
    change no bits) and back.
    """
    if isinstance(target, Gemm):
        return target(lhs, rhs, dn, key=key)
    if (weight == "rhs" and _linear(dn, lhs, rhs)) or dn[1][0]:  # a layer's dot, or batched
        return target.dot_general(state, key=key)(lhs, rhs, dn)
    (x, xf), (w, wf) = _free(lhs, rhs, dn, weight)
    x2, w2 = recipe_operands(lhs, rhs, dn, weight)
    y = target.matmul(x2, w2, state, key=key)
    y = y.reshape(tuple(x.shape[d] for d in xf) + tuple(w.shape[d] for d in wf))
    if weight == "rhs":
        return y
    # (x free, w free) -> the dot's (lhs free, rhs free) = (w free, x free)
    return jnp.transpose(y, (*range(len(xf), y.ndim), *range(len(xf))))


def _free(lhs, rhs, dn, weight):
    """``((x, x's free dimensions), (w, w's free dimensions))`` of an unbatched dot."""
    (lc, rc), _ = dn
    (x, xc), (w, wc) = ((lhs, lc), (rhs, rc)) if weight == "rhs" else ((rhs, rc), (lhs, lc))
    return (x, [d for d in range(x.ndim) if d not in xc]), (
        w,
        [d for d in range(w.ndim) if d not in wc],
    )


def recipe_operands(lhs, rhs, dn, weight="rhs"):
    """The recipe's ``x [M, K]`` and ``w [K, N]`` of the unbatched dot
    ``lax.dot_general(lhs, rhs, dn)`` (``weight``: which operand is w): the free
    dimensions of each operand flattened in order, the contracted ones flattened into K
    (transposes and reshapes: no bit changes)."""
    (lc, rc), _ = dn
    (x, xf), (w, wf) = _free(lhs, rhs, dn, weight)
    xc, wc = (lc, rc) if weight == "rhs" else (rc, lc)
    K = math.prod(x.shape[d] for d in xc)
    x2 = jnp.transpose(x, (*xf, *xc)).reshape(math.prod(x.shape[d] for d in xf), K)
    w2 = jnp.transpose(w, (*wc, *wf)).reshape(K, math.prod(w.shape[d] for d in wf))
    return x2, w2


def weight_side(dot) -> str:
    """Which operand of ``dot`` a recipe quantizes as its weight w: the rhs, unless only
    the lhs is one of the function's arguments (equinox's ``Linear`` computes
    ``weight @ x``, under ``vmap`` ``weight [out, in]`` contracted with ``x [B, in]``)."""
    return "lhs" if dot.lhs_path and not dot.rhs_path else "rhs"
