"""What a policy rule runs a dot on: a jaxmma GEMM (:class:`Gemm`), a training recipe
(:class:`jaxmma.recipes.Recipe`), or ``"keep"`` (the dot as the function wrote it).

Each target is checked when the rule is built, so a wrong instruction, architecture or
option is a ``ValueError`` before any function is traced (docs/policy.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import jax.numpy as jnp

from ..gemm._config import resolve
from ..gemm._gemm import dot_general as _dot_general
from ..gemm._gemm import matmul as _matmul
from ..training._recipes import Recipe

#: the target that leaves a dot as the function wrote it
KEEP = "keep"
#: ``matmul`` keywords a :class:`Gemm` does not take: the operands and the form are its
#: own, and a fixed key would round every step alike (keys per step: docs/policy.md)
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

    def __call__(self, lhs, rhs, dimension_numbers):
        """``jaxmma.dot_general`` on this GEMM (the accumulator's dtype)."""
        return _dot_general(lhs, rhs, dimension_numbers, **self.kwargs)


def gemm(instruction: str, *, arch: str, **options) -> Gemm:
    """A policy target: dots run as ``jaxmma.dot_general(..., instruction=instruction,
    arch=arch, **options)``.

    Args:
      instruction: PTX text of a form with a matrix product (``mma``, ``wgmma``,
        ``tcgen05.mma``, block-scaled forms quantize float operands inside).
      arch: the architecture whose numerics are emulated (``"sm_90"``, ``"sm_100a"``, ...).
      **options: further :func:`jaxmma.matmul` keywords (``promote_every``,
        ``input_rounding``, ``quantize``, ``dgrad_instruction``, split-K, ...); ``key``
        is not one (stochastic rounding needs a key per step).

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
        why = " (a key per step is not a policy's: docs/policy.md)" if "key" in bad else ""
        raise ValueError(
            f"options: {bad} not jaxmma.matmul keywords a policy takes{why}; allowed: "
            f"{list(OPTIONS)}"
        )
    if "stochastic" in (options.get("rounding"), options.get("input_rounding")):
        raise ValueError(
            "options: stochastic rounding needs a key per step, which policies do not draw "
            "yet (docs/policy.md); allowed rounding: 'rn', 'rna', 'rz' or None"
        )
    return Gemm(instruction, arch, tuple(sorted(options.items())))


def check(target, where: str):
    """``target`` if a policy can run it; TypeError / ValueError naming ``where``."""
    if isinstance(target, str) and target == KEEP:
        return KEEP
    if isinstance(target, Gemm):
        return target
    if isinstance(target, Recipe):
        if target.scaling == "delayed":
            raise ValueError(
                f"{where}: recipe {target.name!r} keeps state (amax histories), which "
                "policies do not thread yet; use current_scaling() (docs/policy.md)"
            )
        if target.grad_rounding == "stochastic":
            raise ValueError(
                f"{where}: recipe {target.name!r} rounds gradients stochastically and needs "
                "a key per step, which policies do not draw yet; build it with "
                "grad_rounding='rn' (docs/policy.md)"
            )
        if target.hadamard:
            raise ValueError(
                f"{where}: recipe {target.name!r} draws its Hadamard signs from a key per "
                "step, which policies do not draw yet; build it with hadamard=False "
                "(docs/policy.md)"
            )
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


def run(target, lhs, rhs, dn):
    """The dot ``lax.dot_general(lhs, rhs, dn)`` on ``target`` (not KEEP), in the
    target's output dtype.

    A recipe takes the lhs as its x and the rhs as its w. A linear layer's dot is the
    recipe's own ``dot_general()``; any other dot without batch dimensions is brought to
    ``x [M, K] @ w [K, N]`` (transposes and reshapes, which change no bits) and back.
    """
    if isinstance(target, Gemm):
        return target(lhs, rhs, dn)
    if _linear(dn, lhs, rhs) or dn[1][0]:  # a layer's dot, or batched (the recipe says)
        return target.dot_general()(lhs, rhs, dn)
    (lc, rc), _ = dn
    lf = [d for d in range(lhs.ndim) if d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rc]
    K = math.prod(lhs.shape[d] for d in lc)
    x = jnp.transpose(lhs, (*lf, *lc)).reshape(math.prod(lhs.shape[d] for d in lf), K)
    w = jnp.transpose(rhs, (*rc, *rf)).reshape(K, math.prod(rhs.shape[d] for d in rf))
    y = target.matmul(x, w)
    return y.reshape(tuple(lhs.shape[d] for d in lf) + tuple(rhs.shape[d] for d in rf))
