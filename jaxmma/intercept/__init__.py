"""Floor 8, policies on top of the GEMM and training floors: the targets a dot can run
on (``_targets``), rules and the dots they match (``_rules``), the jaxpr evaluation that
replaces a function's dots (``_evaluate``), the state and keys its dots take
(``_state``) and the named presets (``_presets``).

What other floors may use is re-exported below; they import it from ``jaxmma.intercept``,
never from the modules (``tests/test_layers.py`` checks it). ``NnxModel`` and ``NnxState``
are loaded on first use: their module imports flax, an optional dependency.
"""

import importlib
from typing import TYPE_CHECKING

from ._evaluate import dots as dots
from ._evaluate import init_state as init_state
from ._evaluate import stats as stats
from ._evaluate import with_policy as with_policy
from ._linen import LinenModel as LinenModel
from ._presets import B200_MXFP4 as B200_MXFP4
from ._presets import B200_MXFP8 as B200_MXFP8
from ._presets import B200_NVFP4 as B200_NVFP4
from ._presets import H100_BF16 as H100_BF16
from ._presets import H100_FP8 as H100_FP8
from ._presets import H100_TF32 as H100_TF32
from ._presets import RTX50_MXFP8 as RTX50_MXFP8
from ._presets import RTX50_NVFP4 as RTX50_NVFP4
from ._presets import TABLE as TABLE
from ._presets import Preset as Preset
from ._rules import Dot as Dot
from ._rules import Rule as Rule
from ._targets import KEEP as KEEP
from ._targets import Gemm as Gemm
from ._targets import gemm as gemm

if TYPE_CHECKING:  # loaded by __getattr__ below
    from ._nnx import NnxModel as NnxModel
    from ._nnx import NnxState as NnxState

#: names whose module imports flax (an optional dependency): loaded on first use
_NNX = ("NnxModel", "NnxState")

__all__ = [
    "B200_MXFP4",
    "B200_MXFP8",
    "B200_NVFP4",
    "Dot",
    "Gemm",
    "H100_BF16",
    "H100_FP8",
    "H100_TF32",
    "KEEP",
    "LinenModel",
    "NnxModel",
    "NnxState",
    "Preset",
    "RTX50_MXFP8",
    "RTX50_NVFP4",
    "Rule",
    "TABLE",
    "dots",
    "gemm",
    "init_state",
    "stats",
    "with_policy",
]


def __getattr__(name):
    if name in _NNX:
        return getattr(importlib.import_module("._nnx", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
