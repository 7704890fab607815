"""Low-precision training recipes over jaxmma.matmul: fp8 (per-tensor current and
delayed scaling, row-wise, DeepSeek-V3 block-wise), NVFP4, MXFP8 and MXFP4 (OCP MX),
loss scaling, numerics statistics (docs/recipes.md)."""

from .training._loss_scale import all_finite as all_finite
from .training._loss_scale import dynamic_init as dynamic_init
from .training._loss_scale import dynamic_update as dynamic_update
from .training._loss_scale import scale_loss as scale_loss
from .training._loss_scale import unscale as unscale
from .training._nvfp4 import hadamard_rows as hadamard_rows
from .training._nvfp4 import quantize_2d as quantize_nvfp4_2d
from .training._recipes import Recipe as Recipe
from .training._recipes import bf16 as bf16
from .training._recipes import blockwise as blockwise
from .training._recipes import current_scaling as current_scaling
from .training._recipes import delayed_scaling as delayed_scaling
from .training._recipes import mxfp4 as mxfp4
from .training._recipes import mxfp8 as mxfp8
from .training._recipes import nvfp4 as nvfp4
from .training._recipes import rowwise as rowwise
from .training._scales import amax as amax
from .training._scales import scale_from_amax as scale_from_amax
from .training._stats import Stats as Stats
from .training._stats import stats as stats

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
