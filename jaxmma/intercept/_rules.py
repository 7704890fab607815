"""A policy's rules and the dots they match: :class:`Rule`, :class:`Dot`, and
:func:`as_rules`, which turns what ``with_policy`` takes into checked rules.

A rule matches a dot on its names (the module path where the framework records one,
the pytree paths of its operands), its operands' shapes and dtypes, and an optional
predicate; the first rule that matches a dot decides its target (docs/policy.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import jax
import numpy as np

from ..training import Recipe
from . import _targets


@dataclasses.dataclass(frozen=True)
class Dot:
    """One ``dot_general`` of a traced function, as rules see it.

    Attributes:
      index: its place among the function's dots, in evaluation order (from 0).
      scope: the module path: the ``jax.named_scope`` names around it, joined by "/"
        (flax linen records each module's name, ``"MLP/head"``; equinox each module's
        class, ``"eqx.nn.Sequential/eqx.nn.Linear"``); "" where none is recorded (nnx).
      lhs_path, rhs_path: the pytree key path, joined by "/", of the function argument an
        operand is (through casts, reshapes and transposes): ``"params/head/kernel"``
        (linen variables), ``"head/kernel/value"`` (an nnx module), ``"head/weight"``
        (an equinox module); "" for a computed operand.
      lhs, rhs: ``jax.ShapeDtypeStruct`` of each operand.
      dimension_numbers: the dot's, as ``lax.dot_general`` takes them.
      out_dtype: the dot's output dtype; a replaced dot is rounded to it once.
      rule: the label of the rule that matched (:func:`jaxmma.policy.dots` fills it);
        None: no rule did.
    """

    index: int
    scope: str
    lhs_path: str
    rhs_path: str
    lhs: jax.ShapeDtypeStruct
    rhs: jax.ShapeDtypeStruct
    dimension_numbers: tuple
    out_dtype: np.dtype
    rule: str | None = None

    @property
    def names(self) -> tuple:
        """What a rule's ``path`` is matched against: the scope and the operands' paths
        (rhs first), those that are not empty."""
        return tuple(n for n in (self.scope, self.rhs_path, self.lhs_path) if n)

    def __str__(self) -> str:
        shapes = (f"{np.dtype(s.dtype).name}{list(s.shape)}" for s in (self.lhs, self.rhs))
        return f"dot {self.index} {list(self.names)} ({' @ '.join(shapes)})"


def _prefixes(name: str):
    """ "a/b/c" -> "a", "a/b", "a/b/c": a path names a module and everything inside it."""
    parts = name.split("/")
    return ("/".join(parts[: i + 1]) for i in range(len(parts)))


def _dtypes(name: str, value) -> tuple | None:
    if value is None:
        return None
    values = value if isinstance(value, (tuple, list)) else (value,)
    try:
        return tuple(np.dtype(v).name for v in values)
    except TypeError:
        raise TypeError(
            f"{name}: expected None, a dtype (jnp.bfloat16, 'float32', ...) or a tuple of "
            f"them, got {value!r}"
        ) from None


def _shape(name: str, value) -> tuple | None:
    if value is None:
        return None
    ok = isinstance(value, (tuple, list)) and all(
        d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 0) for d in value
    )
    if not ok:
        raise ValueError(
            f"{name}: expected None or a tuple of sizes (ints >= 0, None for any size), "
            f"got {value!r}"
        )
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule of a policy: the dots it matches and the target they run on.

    Args:
      path: a regular expression for a module: it matches a dot when it matches
        (``re.fullmatch``) one of the dot's :attr:`Dot.names` or a leading part of one
        that ends at a "/" (so ``r".*head"`` matches ``"MLP/head"``, the module path
        flax linen records, and ``"head/kernel/value"``, an nnx module's kernel, and
        ``"head/weight"``, an equinox module's). None matches every dot.
      target: :func:`jaxmma.policy.gemm` (an instruction, its arch and ``matmul``
        options), a recipe of :mod:`jaxmma.recipes` (the rhs is its w and the lhs its
        x, unless only the lhs is an argument of the function; a recipe with state or
        keys needs ``with_policy(..., stateful=True)``), a :mod:`jaxmma.presets` entry,
        or ``"keep"`` (the dot as written).
      lhs_dtype, rhs_dtype: a dtype or a tuple of dtypes the operand must have (None: any).
      lhs_shape, rhs_shape: the operand's shape, None for any size of a dimension
        (``(None, 10)``); None: any shape.
      where: ``where(dot: Dot) -> bool``, a further condition (None: none).
      name: a label for messages (default: ``"rules[i]"``, its place in the policy).

    Raises:
      TypeError: a target, dtype or predicate of the wrong kind.
      ValueError: a malformed ``path`` regular expression or shape.

    Example:
      >>> import jaxmma
      >>> from jaxmma import presets
      >>> policy = [jaxmma.policy.Rule(r".*head.*", "keep"),
      ...           jaxmma.policy.Rule(None, presets.H100_BF16)]
    """

    path: str | None
    target: object
    lhs_dtype: object = None
    rhs_dtype: object = None
    lhs_shape: tuple | None = None
    rhs_shape: tuple | None = None
    where: Callable | None = None
    name: str | None = None

    def __post_init__(self):
        label = f"rule {self.name!r}" if self.name is not None else "rule"
        if self.path is not None:
            if not isinstance(self.path, str):
                raise TypeError(
                    f"path: expected None or a regular expression (str), got {self.path!r}"
                )
            try:
                re.compile(self.path)
            except re.error as e:
                raise ValueError(f"path: {self.path!r} is not a regular expression: {e}") from None
        object.__setattr__(self, "target", _targets.check(self.target, f"target of {label}"))
        for n in ("lhs_dtype", "rhs_dtype"):
            object.__setattr__(self, n, _dtypes(n, getattr(self, n)))
        for n in ("lhs_shape", "rhs_shape"):
            object.__setattr__(self, n, _shape(n, getattr(self, n)))
        if self.where is not None and not callable(self.where):
            raise TypeError(f"where: expected None or a function of a Dot, got {self.where!r}")
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"name: expected None or a str, got {self.name!r}")

    def matches(self, dot: Dot) -> bool:
        """Whether this rule matches ``dot`` (every condition given holds)."""
        if self.path is not None and not any(
            re.fullmatch(self.path, p) for n in dot.names for p in _prefixes(n)
        ):
            return False
        for dtypes, shape, op in (
            (self.lhs_dtype, self.lhs_shape, dot.lhs),
            (self.rhs_dtype, self.rhs_shape, dot.rhs),
        ):
            # __post_init__ keeps the dtypes as a tuple of names
            if dtypes is not None and np.dtype(op.dtype).name not in dtypes:  # type: ignore[operator]
                return False
            if shape is not None and (
                len(shape) != len(op.shape)
                or any(s is not None and s != d for s, d in zip(shape, op.shape, strict=True))
            ):
                return False
        return self.where is None or bool(self.where(dot))


#: what a rule runs a dot on: a GEMM (:func:`jaxmma.policy.gemm`, a preset), a recipe, or
#: ``"keep"``
Target = _targets.Gemm | Recipe | str
#: rules tried in order (a bare target matches every dot), or one rule, or one target
Policy = Rule | Target | Sequence[Rule | Target]


def as_rules(policy: Policy) -> tuple:
    """``policy`` as a tuple of ``(label, Rule)``.

    A policy is a sequence of rules, tried in order; a bare target in it (a
    :class:`Gemm`, a recipe, a preset, ``"keep"``) is a rule matching every dot, and a
    policy that is one rule or one target is that rule alone.
    """
    one = isinstance(policy, (Rule, _targets.Gemm, Recipe, str))
    if not one and not isinstance(policy, Sequence):
        raise TypeError(
            "policy: expected a sequence of jaxmma.policy.Rule (or one rule, or one target: "
            f"a gemm, a recipe, a preset, 'keep'), got {type(policy).__name__}"
        )
    items = (policy,) if one else tuple(policy)  # type: ignore[arg-type]  # a sequence
    if not items:
        raise ValueError("policy: expected at least one rule, got an empty sequence")
    out = []
    for i, r in enumerate(items):
        label = f"rules[{i}]" if not isinstance(r, Rule) or r.name is None else r.name
        if not isinstance(r, Rule):
            try:
                r = Rule(None, r)
            except (TypeError, ValueError) as e:
                raise type(e)(f"policy: {label}: {e}") from None
        out.append((label, r))
    return tuple(out)
