"""Policies: which dots of an unmodified JAX function (a flax linen / nnx or equinox
model) run on which jaxmma GEMM. Rules match dots by module path, operand path, shape
and dtype; the first match wins (docs/policy.md). ``jaxmma.with_policy`` applies one;
``LinenModel``, ``NnxModel`` and ``NnxState`` keep its state and keys where flax keeps
variables and rng streams (the nnx names import flax when first used)."""

import importlib
from typing import TYPE_CHECKING

from .intercept._evaluate import dots as dots
from .intercept._evaluate import init_state as init_state
from .intercept._evaluate import stats as stats
from .intercept._evaluate import with_policy as with_policy
from .intercept._linen import LinenModel as LinenModel
from .intercept._rules import Dot as Dot
from .intercept._rules import Rule as Rule
from .intercept._targets import KEEP as KEEP
from .intercept._targets import Gemm as Gemm
from .intercept._targets import gemm as gemm

if TYPE_CHECKING:  # loaded by __getattr__ below
    from .intercept._nnx import NnxModel as NnxModel
    from .intercept._nnx import NnxState as NnxState

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
        return getattr(importlib.import_module(".intercept._nnx", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
