"""Floor 7, training recipes on top of the GEMM floor: scales and their state
(``_scales``), the fp8 and NVFP4 linear layers with their backward passes (``_fp8``,
``_nvfp4``), the recipes themselves (``_recipes``) and loss scaling (``_loss_scale``).

What other floors may use is re-exported below; they import it from ``jaxmma.training``,
never from the modules (``tests/test_layers.py`` checks it). The blocks of the recipes are
``FP8_BLOCK_GROUP`` (DeepSeek-V3's 128), ``MX_BLOCK`` and ``NVFP4_BLOCK``.
"""

from ._fp8 import GROUP as FP8_BLOCK_GROUP
from ._fp8 import x_w_scales as x_w_scales
from ._keys import reason as random_reason
from ._loss_scale import all_finite as all_finite
from ._loss_scale import dynamic_init as dynamic_init
from ._loss_scale import dynamic_update as dynamic_update
from ._loss_scale import scale_loss as scale_loss
from ._loss_scale import unscale as unscale
from ._mx import BLOCK as MX_BLOCK
from ._nvfp4 import BLOCK as NVFP4_BLOCK
from ._nvfp4 import hadamard_rows as hadamard_rows
from ._nvfp4 import quantize_2d as quantize_nvfp4_2d
from ._recipes import NVFP4 as NVFP4
from ._recipes import Recipe as Recipe
from ._recipes import bf16 as bf16
from ._recipes import blockwise as blockwise
from ._recipes import current_scaling as current_scaling
from ._recipes import delayed_scaling as delayed_scaling
from ._recipes import mxfp4 as mxfp4
from ._recipes import mxfp8 as mxfp8
from ._recipes import nvfp4 as nvfp4
from ._recipes import rowwise as rowwise
from ._scales import amax as amax
from ._scales import block_amax as block_amax
from ._scales import expand as expand_blocks
from ._scales import scale_from_amax as scale_from_amax
from ._stats import Stats as Stats
from ._stats import stats as stats

__all__ = [
    "FP8_BLOCK_GROUP",
    "MX_BLOCK",
    "NVFP4",
    "NVFP4_BLOCK",
    "Recipe",
    "Stats",
    "all_finite",
    "amax",
    "bf16",
    "block_amax",
    "blockwise",
    "current_scaling",
    "delayed_scaling",
    "dynamic_init",
    "dynamic_update",
    "expand_blocks",
    "hadamard_rows",
    "mxfp4",
    "mxfp8",
    "nvfp4",
    "quantize_nvfp4_2d",
    "random_reason",
    "rowwise",
    "scale_from_amax",
    "scale_loss",
    "stats",
    "unscale",
    "x_w_scales",
]
