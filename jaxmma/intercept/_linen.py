"""A flax linen model under a policy, its state in a variable collection and its key
from an rng stream: :class:`LinenModel` (docs/policy.md, "Flax").

The functional form (``with_policy(model.apply, policy, stateful=True)``) with the
state kept where linen keeps variables: ``init`` adds the policy's state to the
variables as the collection ``collection``; ``apply`` reads it from there and takes the
step's key from ``rngs[stream]``. The next state is the gradient of that collection,
as for the functional form: linen's ``mutable=`` cannot return it, since the gradients'
amax exists only once the backward has run. Nothing here imports flax: any object with
linen's ``init`` and ``apply`` works.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax

from . import _evaluate, _rules


def _name(arg: str, value) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{arg}: expected a non-empty str, got {value!r}")
    return value


def _mutable_names(mutable) -> tuple:
    if isinstance(mutable, str):
        return (mutable,)
    if isinstance(mutable, (list, tuple, set, frozenset)):
        return tuple(mutable)
    return ()


class LinenModel:
    """An unmodified flax linen model whose dots run under ``policy``, with the policy's
    state in the variable collection ``collection`` and the step's key from the rng
    stream ``stream``.

    ``init(rngs, *args, **kwargs)`` is ``model.init``'s variables with
    ``variables[collection]`` the policy's state (:func:`jaxmma.policy.init_state` of
    ``model.apply``: one entry per dot keeping state, ``{}`` where none does).
    ``apply(variables, *args, rngs=None, mutable=False, **kwargs)`` is ``model.apply``
    with its dots on the policy's GEMMs: ``with_policy(model.apply, policy,
    stateful=True)(variables[collection], rngs[stream], the other variables, *args)``,
    bit for bit; the other rng streams, ``mutable`` and ``kwargs`` go to ``model.apply``
    as they are (held, not traced: ``train=False`` stays a Python bool). Without
    ``rngs[stream]`` the key is None (inference: a recipe's forward draws nothing).

    The next state is the gradient of ``variables[collection]`` (differentiate the loss
    with respect to the variables, or to ``(variables["params"],
    variables[collection])``); call ``apply`` once per loss. Hand only
    ``grads["params"]`` to the optimizer.

    Args:
      model: a flax linen Module (anything with linen's ``init`` and ``apply``).
      policy: as :func:`jaxmma.with_policy`.
      collection: the variable collection holding the policy's state (a name the model
        does not use).
      stream: the rng stream of the step's key.
      unmatched, unused, unsupported: as :func:`jaxmma.with_policy`.

    Raises:
      TypeError, ValueError: a malformed policy or option (now); at ``init``, a model
        that already has the collection; at ``apply``, ``rngs`` not a dict, the
        collection named in ``mutable``; and what :func:`jaxmma.with_policy` raises.

    Example:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, jaxmma
      >>> from jaxmma import recipes
      >>> lm = jaxmma.policy.LinenModel(nn.Dense(8), recipes.delayed_scaling(history=4))
      >>> variables = lm.init(jax.random.key(0), jnp.ones((4, 16)))
      >>> sorted(variables), sorted(variables["jaxmma"])
      (['jaxmma', 'params'], ['dot0'])
    """

    def __init__(
        self,
        model: Any,
        policy: _rules.Policy,
        *,
        collection: str = "jaxmma",
        stream: str = "jaxmma",
        unmatched: _evaluate.Unmatched = "keep",
        unused: _evaluate.Unused = "error",
        unsupported: _evaluate.Unsupported = "error",
    ) -> None:
        if not (callable(getattr(model, "init", None)) and callable(getattr(model, "apply", None))):
            raise TypeError(
                f"model: expected a flax linen Module (with init and apply), got {model!r}"[:300]
            )
        self.model, self.policy = model, policy
        self.collection = _name("collection", collection)
        self.stream = _name("stream", stream)
        self.options: dict[str, Any] = {
            "unmatched": unmatched, "unused": unused, "unsupported": unsupported,
        }  # fmt: skip
        # the policy and options are checked now, not at the first step
        _evaluate.with_policy(model.apply, policy, stateful=True, **self.options)

    def _rngs(self, rngs):
        """``(the step's key, the other streams)`` of ``rngs``."""
        if rngs is None:
            return None, None
        if not isinstance(rngs, Mapping):
            raise TypeError(
                f"rngs: expected None or a dict of rng streams, {{{self.stream!r}: key, ...}}, "
                f"got {type(rngs).__name__}"
            )
        rest = dict(rngs)
        key = rest.pop(self.stream, None)
        return key, rest or None

    def init(self, rngs: Any, *args: Any, **kwargs: Any) -> dict:
        """``model.init(rngs, *args, **kwargs)`` with the policy's state added as
        ``variables[collection]``."""
        variables = dict(self.model.init(rngs, *args, **kwargs))
        if self.collection in variables:
            raise ValueError(
                f"collection: the model already has a variable collection "
                f"{self.collection!r}; pick another name for the policy's state"
            )
        streams = rngs if isinstance(rngs, Mapping) else {"params": rngs}
        fn = functools.partial(self.model.apply, rngs=dict(streams), **kwargs)
        state = _evaluate.init_state(fn, self.policy, unsupported=self.options["unsupported"])
        return {**variables, self.collection: state(variables, *args)}

    def apply(
        self,
        variables: Mapping[str, Any],
        *args: Any,
        rngs: Mapping[str, jax.Array] | None = None,
        mutable: Any = False,
        **kwargs: Any,
    ) -> Any:
        """``model.apply(variables, *args, rngs=rngs, mutable=mutable, **kwargs)`` with its
        dots under the policy, the state from ``variables[collection]`` and the key from
        ``rngs[stream]``."""
        if not isinstance(variables, Mapping):
            raise TypeError(f"variables: expected the dict of init, got {type(variables).__name__}")
        if self.collection in _mutable_names(mutable):
            raise ValueError(
                f"mutable: the policy's collection {self.collection!r} is not mutated by "
                "apply: its next value is its gradient (differentiate the loss with respect "
                "to it; docs/policy.md, 'Flax')"
            )
        rest = dict(variables)
        state = rest.pop(self.collection, None)
        key, streams = self._rngs(rngs)
        fn = functools.partial(self.model.apply, rngs=streams, mutable=mutable, **kwargs)
        run = _evaluate.with_policy(fn, self.policy, stateful=True, **self.options)
        return run(state, key, rest, *args)
