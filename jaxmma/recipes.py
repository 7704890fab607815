"""Low-precision training recipes over jaxmma.matmul: fp8 (per-tensor current and
delayed scaling, row-wise, DeepSeek-V3 block-wise), NVFP4, MXFP8 and MXFP4 (OCP MX),
loss scaling, numerics statistics (docs/recipes.md)."""

from .training import Recipe as Recipe
from .training import Stats as Stats
from .training import all_finite as all_finite
from .training import amax as amax
from .training import bf16 as bf16
from .training import blockwise as blockwise
from .training import current_scaling as current_scaling
from .training import delayed_scaling as delayed_scaling
from .training import dynamic_init as dynamic_init
from .training import dynamic_update as dynamic_update
from .training import hadamard_rows as hadamard_rows
from .training import mxfp4 as mxfp4
from .training import mxfp8 as mxfp8
from .training import nvfp4 as nvfp4
from .training import quantize_nvfp4_2d as quantize_nvfp4_2d
from .training import rowwise as rowwise
from .training import scale_from_amax as scale_from_amax
from .training import scale_loss as scale_loss
from .training import stats as stats
from .training import unscale as unscale

__all__ = [
    "Recipe",
    "Stats",
    "all_finite",
    "amax",
    "bf16",
    "blockwise",
    "current_scaling",
    "delayed_scaling",
    "dynamic_init",
    "dynamic_update",
    "hadamard_rows",
    "mxfp4",
    "mxfp8",
    "nvfp4",
    "quantize_nvfp4_2d",
    "rowwise",
    "scale_from_amax",
    "scale_loss",
    "stats",
    "unscale",
]
