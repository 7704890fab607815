"""A flax nnx model under a policy, its state in an nnx Variable and its keys from an
``nnx.Rngs`` stream: :class:`NnxModel` and :class:`NnxState` (docs/policy.md, "Flax").

The functional form (``with_policy(lambda model, *a: model(*a), policy,
stateful=True)``) inside an nnx Module: the policy's state is an :class:`NnxState`
attribute, each call draws the step's key from ``rngs[stream]`` (none once ``.eval()``
has set ``deterministic``), and what the model mutates in its call (counters, batch
statistics, its own rng streams) is written back to it. The next state is the state's
cotangent: differentiate with respect to ``nnx.Any(nnx.Param, NnxState)`` and write the
``NnxState`` part of the gradient back (``nnx.update``). This module imports flax;
``jaxmma.policy`` loads it on first use of these names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flax import nnx

from . import _evaluate, _rules


class NnxState(nnx.Variable):
    """The state of a policy's dots (delayed scaling's amax histories, the dict of
    :func:`jaxmma.policy.init_state`) in an nnx model. Its next value is its cotangent:
    differentiate with respect to it and write that gradient back with ``nnx.update``."""


def _call(model, *args, **kwargs):
    """The model's output, and its state after the call (what the call mutated)."""
    out = model(*args, **kwargs)
    return out, nnx.state(model)


class NnxModel(nnx.Module):
    """An unmodified flax nnx model whose dots run under ``policy``, with the policy's
    state in an :class:`NnxState` and the step's key from ``rngs[stream]``.

    ``NnxModel(model, policy, *args, rngs=..., **kwargs)`` traces ``model(*args,
    **kwargs)`` (example inputs; no GEMM runs) for the initial state
    (:func:`jaxmma.policy.init_state`, held in ``self.policy_state``). A call
    ``nnx_model(*args, **kwargs)`` is ``with_policy(lambda m, *a: m(*a), policy,
    stateful=True)(state, key, model, *args)`` bit for bit, with ``key =
    rngs[stream]()`` (a new key per call, nnx's rng stream) or None once
    ``nnx_model.eval()`` has set ``deterministic`` (inference: a recipe's forward draws
    nothing); ``kwargs`` are held, not traced. What the model mutates in its call is
    written back to it. The model is an argument of the policied function, so rules
    see its operand paths (``"head/kernel/value"``).

    A training step differentiates with respect to ``nnx.Any(nnx.Param, NnxState)``
    (``nnx.DiffState``), hands the ``nnx.Param`` part to the optimizer
    (``nnx.Optimizer(..., wrt=nnx.Param)`` takes only it) and writes the ``NnxState``
    part back: ``nnx.update(nnx_model, nnx.filter_state(grads, NnxState))``. Use
    ``nnx.jit`` (it carries the rng stream's count from step to step).

    Args:
      model: a flax nnx Module (any callable nnx graph node).
      policy: as :func:`jaxmma.with_policy`.
      *args, **kwargs: example inputs of ``model`` (their shapes and dtypes fix the dots).
      rngs: an ``nnx.Rngs`` with the stream ``stream`` (a key per call), or None (no
        key: inference, or a policy that draws nothing).
      stream: the rng stream of the step's key.
      unmatched, unused, unsupported: as :func:`jaxmma.with_policy`.

    Raises:
      TypeError, ValueError: a malformed policy, option or ``rngs``; what
        :func:`jaxmma.policy.init_state` and :func:`jaxmma.with_policy` raise.
    """

    def __init__(
        self,
        model: Any,
        policy: _rules.Policy,
        *args: Any,
        rngs: nnx.Rngs | None = None,
        stream: str = "jaxmma",
        unmatched: _evaluate.Unmatched = "keep",
        unused: _evaluate.Unused = "error",
        unsupported: _evaluate.Unsupported = "error",
        **kwargs: Any,
    ) -> None:
        if not isinstance(stream, str) or not stream:
            raise TypeError(f"stream: expected a non-empty str, got {stream!r}")
        if rngs is not None and not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs: expected None or an nnx.Rngs, got {type(rngs).__name__}")
        options: dict[str, Any] = {
            "unmatched": unmatched, "unused": unused, "unsupported": unsupported,
        }  # fmt: skip
        _evaluate.with_policy(_call, policy, stateful=True, **options)  # checked now
        state = _evaluate.init_state(functools.partial(_call, **kwargs), policy,
                                     unsupported=unsupported)(model, *args)  # fmt: skip
        self.model = model
        self.policy_state = NnxState(state)
        self.rngs = rngs
        self.stream = stream
        self.deterministic = False
        self._policy: Callable[..., Any] = functools.partial(
            _evaluate.with_policy, policy=policy, stateful=True, **options
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = None
        if not self.deterministic and self.rngs is not None:
            key = self.rngs[self.stream]()
        run = self._policy(functools.partial(_call, **kwargs))
        out, model_state = run(self.policy_state.get_value(), key, self.model, *args)
        nnx.update(self.model, model_state)
        return out
