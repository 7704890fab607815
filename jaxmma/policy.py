"""Policies: which dots of an unmodified JAX function (a flax linen / nnx or equinox
model) run on which jaxmma GEMM. Rules match dots by module path, operand path, shape
and dtype; the first match wins (docs/policy.md). ``jaxmma.with_policy`` applies one."""

from .intercept._evaluate import dots as dots
from .intercept._evaluate import init_state as init_state
from .intercept._evaluate import stats as stats
from .intercept._evaluate import with_policy as with_policy
from .intercept._rules import Dot as Dot
from .intercept._rules import Rule as Rule
from .intercept._targets import KEEP as KEEP
from .intercept._targets import Gemm as Gemm
from .intercept._targets import gemm as gemm

__all__ = ["KEEP", "Dot", "Gemm", "Rule", "dots", "gemm", "init_state", "stats", "with_policy"]
