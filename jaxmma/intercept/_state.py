"""State and keys of a policy's dots: which targets keep state or draw random numbers,
the name of a dot's state, the key a dot draws from, and the checks that name rule and
dot where either is missing (docs/policy.md, "State and keys").

* A dot whose target keeps state (delayed scaling's amax histories) has an entry
  ``STATE_NAME.format(index=i)`` (``"dot3"``) in the policy's state, ``i`` its index
  among the function's dots (as :func:`jaxmma.policy.dots` lists them); the entry is the
  recipe's own :meth:`~jaxmma.recipes.Recipe.init` pytree and its next value is its
  cotangent, as for the recipe called by hand.
* A dot whose target draws random numbers gets the key
  ``jax.random.fold_in(key, i)`` from the step's ``key``; the recipe or GEMM splits it
  as it splits a key given by hand (docs/recipes.md, "Keys").
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from .. import training
from ..training import Recipe
from . import _targets

#: the name of dot ``index``'s entry in a policy's state
STATE_NAME = "dot{index}"
#: primitives whose body runs more than once per call: a dot in them must not draw from
#: one key or keep one state (the same bits each pass; histories summed)
LOOPS = ("scan", "while")
#: primitives whose body may not run: a state entry left unused would come back zero
BRANCHES = ("cond",)


def state_name(index: int) -> str:
    """The policy state's entry for dot ``index``: ``"dot{index}"``."""
    return STATE_NAME.format(index=index)


def keeps_state(target) -> bool:
    """Whether ``target`` keeps state between steps (delayed scaling)."""
    return isinstance(target, Recipe) and target.scaling == "delayed"


def init(target):
    """The initial state of a dot on ``target`` (:meth:`Recipe.init`)."""
    return target.init()


def _stochastic_gemm(target) -> bool:
    opts = dict(target.options)
    o = opts.get("options")
    modes = (opts.get("rounding"), opts.get("input_rounding"), getattr(o, "input_rounding", None))
    return "stochastic" in modes


def draws(target) -> str | None:
    """Why a dot on ``target`` draws random numbers (None: it does not)."""
    if isinstance(target, Recipe):
        return training.random_reason(target)
    if isinstance(target, _targets.Gemm) and _stochastic_gemm(target):
        return "rounds its inputs stochastically (rounding='stochastic')"
    return None


def draws_forward(target) -> bool:
    """Whether the forward GEMM of ``target`` draws (a GEMM's stochastic input rounding;
    a recipe's forward never does)."""
    return isinstance(target, _targets.Gemm) and draws(target) is not None


def dot_key(key, index: int):
    """The key dot ``index`` draws from: ``jax.random.fold_in(key, index)``."""
    return jax.random.fold_in(key, index)


def check_key(key):
    """``key`` if it is None or one ``jax.random`` key; TypeError naming ``key``."""
    if key is None:
        return None
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == jnp.uint32 and jnp.shape(key) == (2,)
    if not ((typed and jnp.shape(key) == ()) or raw):
        raise TypeError(
            "key: expected None or one jax.random key (jax.random.key(0), or a uint32[2] "
            f"jax.random.PRNGKey), got {getattr(key, 'dtype', type(key).__name__)}"
            f"{list(jnp.shape(key)) if dtype is not None else ''}"
        )
    return key


def check_state(state) -> dict:
    """``state`` as a dict (None: no entries); TypeError naming ``state``."""
    if state is None:
        return {}
    if not isinstance(state, Mapping) or not all(isinstance(k, str) for k in state):
        raise TypeError(
            "state: expected None or the dict of jaxmma.policy.init_state(fn, policy)(*args) "
            f"(one entry per dot keeping state, 'dot<index>'), got {type(state).__name__}"
        )
    return dict(state)


def forward_only(f, message: str):
    """``f(lhs, rhs, state)`` whose derivative is ``ValueError(message)``, raised when the
    backward is traced: a dot whose recipe must draw in its backward and has no key.
    The forward is ``f``'s, bit for bit."""

    @jax.custom_vjp
    def g(lhs, rhs, state):
        return f(lhs, rhs, state)

    def fwd(lhs, rhs, state):
        return f(lhs, rhs, state), None

    def bwd(_, ct):
        raise ValueError(message)

    g.defvjp(fwd, bwd)
    return g


class Threaded:
    """The state and key of one call of a policied function, handed to its dots.

    ``stateful``: whether the call took them (``with_policy(..., stateful=True)``); a
    plain call has neither, so a dot keeping state is refused and a dot drawing in its
    backward runs its forward only (inference)."""

    def __init__(self, stateful: bool, state=None, key=None):
        self.stateful = stateful
        self.state = check_state(state)
        self.key = check_key(key)
        self.used = []

    def _fix(self) -> str:
        if not self.stateful:
            return (
                "run fn with jaxmma.with_policy(fn, policy, stateful=True)(state, key, *args), "
                "the state from jaxmma.policy.init_state(fn, policy)(*args) (docs/policy.md)"
            )
        return "pass the step's jax.random key (docs/policy.md, 'State and keys')"

    def inputs(self, where: str, dot, target, inside: tuple):
        """``(state, key, no_key)`` of ``dot`` on ``target``: its state entry (None where
        the target keeps none), its key (None where it draws nothing or no key was
        given) and, where the backward must draw and no key was given, the message its
        gradient raises (else None). ValueError naming ``where`` (rule and dot) where
        the dot cannot have what its target needs."""
        state = None
        if keeps_state(target):
            loops = [p for p in inside if p in LOOPS + BRANCHES]
            if loops:
                raise ValueError(
                    f"{where}: recipe {target.name!r} keeps state (amax histories), and the "
                    f"dot is inside {loops[-1]!r}, whose body may run more than once or not "
                    "at all: a state entry is read once and updated once per call; move "
                    "the dot out of the loop or branch, or use current_scaling()"
                )
            if not self.stateful:
                raise ValueError(
                    f"{where}: recipe {target.name!r} keeps state (amax histories): " + self._fix()
                )
            name = state_name(dot.index)
            if name not in self.state:
                raise ValueError(
                    f"{where}: state has no entry {name!r} (its amax histories); expected "
                    "the dict of jaxmma.policy.init_state(fn, policy)(*args), one entry "
                    f"per dot keeping state, got entries {sorted(self.state)}"
                )
            self.used.append(name)
            state = self.state[name]
        why = draws(target)
        if why is None:
            return state, None, None
        loops = [p for p in inside if p in LOOPS]
        if loops and self.key is not None:
            raise ValueError(
                f"{where}: its target {why}, and the dot is inside {loops[-1]!r}, whose "
                "body runs more than once: one key per dot and call would draw the same "
                "random bits at every pass; move the dot out of the loop or use a target "
                "that draws nothing"
            )
        if self.key is not None:
            return state, dot_key(self.key, dot.index), None
        if draws_forward(target):
            raise ValueError(
                f"{where}: its target {why}, so its forward needs a key: {self._fix()}"
            )
        no_key = (
            f"{where}: its target {why}, so its gradient needs a jax.random key: "
            + self._fix()
            + "; key=None runs the forward only (inference)"
        )
        return state, None, no_key

    def check_used(self) -> None:
        """ValueError naming ``state`` where it holds entries no dot of the call read (their
        cotangents would be zeros: histories lost)."""
        extra = sorted(set(self.state) - set(self.used))
        if extra:
            raise ValueError(
                f"state: entries {extra} name no dot of fn that keeps state; expected the "
                "entries of jaxmma.policy.init_state(fn, policy)(*args): "
                f"{sorted(self.used)}"
            )
