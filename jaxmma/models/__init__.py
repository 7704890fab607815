"""Floor 3, which arithmetic each form uses on each architecture: the table of model
parameters (``_table``), chaining along k on either engine (``_chain``), the block-scaled
sums (``_scaled``), ``wgmma`` (``_wgmma``), and the one entry point ``_models.mma_bits``.

What other floors may use is re-exported below; they import it from ``jaxmma.models``,
never from the modules (``tests/test_layers.py`` checks it). The whole-GEMM block-scaled
models are offered as ``group_gemm_*`` (``kind::mxf4*``) and ``product_gemm_*``.
"""

from ._group_gemm import STEP_GROUPS as STEP_GROUPS
from ._group_gemm import gemm_bits as group_gemm_bits
from ._group_gemm import half_units as half_units
from ._group_gemm import scale_fields as scale_fields
from ._group_gemm import supports as group_gemm_supports
from ._models import mma_bits as mma_bits
from ._models import zero_bits as zero_bits
from ._product_gemm import gemm_bits as product_gemm_bits
from ._product_gemm import supports as product_gemm_supports
from ._scaled import check_ins as check_scaled_ins
from ._table import GROUP as GROUP
from ._table import GROUP_E_ZERO as GROUP_E_ZERO
from ._table import GROUP_F as GROUP_F
from ._table import PRODUCT_MODEL as PRODUCT_MODEL
from ._table import block_model as block_model
from ._table import family as family
from ._table import wgmma_block_model as wgmma_block_model
from ._wgmma import INTEGER as WGMMA_INTEGER

__all__ = [
    "GROUP",
    "GROUP_E_ZERO",
    "GROUP_F",
    "PRODUCT_MODEL",
    "STEP_GROUPS",
    "WGMMA_INTEGER",
    "block_model",
    "check_scaled_ins",
    "family",
    "group_gemm_bits",
    "group_gemm_supports",
    "half_units",
    "mma_bits",
    "product_gemm_bits",
    "product_gemm_supports",
    "scale_fields",
    "wgmma_block_model",
    "zero_bits",
]
