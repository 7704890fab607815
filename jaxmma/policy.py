"""Policies: which dots of an unmodified JAX function (a flax linen / nnx or equinox
model) run on which jaxmma GEMM. Rules match dots by module path, operand path, shape
and dtype; the first match wins (docs/policy.md). ``jaxmma.with_policy`` applies one;
``LinenModel``, ``NnxModel`` and ``NnxState`` keep its state and keys where flax keeps
variables and rng streams (the nnx names import flax when first used)."""

from typing import TYPE_CHECKING

from . import intercept
from .intercept import KEEP as KEEP
from .intercept import Dot as Dot
from .intercept import Gemm as Gemm
from .intercept import LinenModel as LinenModel
from .intercept import Rule as Rule
from .intercept import dots as dots
from .intercept import gemm as gemm
from .intercept import init_state as init_state
from .intercept import stats as stats
from .intercept import with_policy as with_policy

if TYPE_CHECKING:  # loaded by __getattr__ below
    from .intercept import NnxModel as NnxModel
    from .intercept import NnxState as NnxState

#: names whose module imports flax (an optional dependency): loaded on first use
_NNX = ("NnxModel", "NnxState")

__all__ = [
    "KEEP",
    "Dot",
    "Gemm",
    "LinenModel",
    "NnxModel",
    "NnxState",
    "Rule",
    "dots",
    "gemm",
    "init_state",
    "stats",
    "with_policy",
]


def __getattr__(name):
    if name in _NNX:
        return getattr(intercept, name)  # the floor imports flax on first use
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
