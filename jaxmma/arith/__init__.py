"""Floor 2, the kernel-neutral arithmetic core: the general fused-block engine
(``_numerics``), the fixed-width engine (``_fixed``), int32 rounding and IEEE adds shared by
every executor (``_int32``), integer and b1 sums (``_integer``), the f64 fma chain
(``_float64``), and XLA:GPU's f32 elementwise functions with the H100's special function
unit (``_gpu_math``). Knows nothing of instructions, tiles or kernels.

What other floors may use is re-exported below; they import it from ``jaxmma.arith``,
never from the modules (``tests/test_layers.py`` checks it). The fixed-width engine's
names carry ``fixed_`` (``fixed_chain``, ``fixed_supports``, ...); the general engine's
are plain; the int32 FADD is ``int32_ieee_add``, the integer and f64 sums
``integer_mma_bits`` / ``float64_mma_bits``.
"""

from ._fixed import ABSENT as FIXED_ABSENT
from ._fixed import GROUP as FIXED_GROUP
from ._fixed import Operand as FixedOperand
from ._fixed import chain as fixed_chain
from ._fixed import cols as fixed_cols
from ._fixed import operand as fixed_operand
from ._fixed import pow2 as fixed_pow2
from ._fixed import round_f32_rz as fixed_round_f32_rz
from ._fixed import round_sum as fixed_round_sum
from ._fixed import rows as fixed_rows
from ._fixed import sum_three as fixed_sum_three
from ._fixed import supports as fixed_supports
from ._float64 import mma_bits as float64_mma_bits
from ._gpu_math import FUNCTIONS as GPU_FUNCTIONS
from ._gpu_math import ex2_approx_ftz as ex2_approx_ftz
from ._ieee import ffma_f32 as ffma_f32
from ._ieee import fmul_f32 as fmul_f32
from ._int32 import c_fields as c_fields
from ._int32 import i32 as i32
from ._int32 import ieee_add as int32_ieee_add
from ._int32 import round_bits as round_bits
from ._int32 import round_f32_rz as round_f32_rz
from ._int32 import srl as srl
from ._int32 import sum_two as sum_two
from ._integer import mma_bits as integer_mma_bits
from ._numerics import EXACT as EXACT
from ._numerics import BlockModel as BlockModel
from ._numerics import Terms as Terms
from ._numerics import apply_specials as apply_specials
from ._numerics import block_chain as block_chain
from ._numerics import c_terms as c_terms
from ._numerics import concat as concat
from ._numerics import convert as convert
from ._numerics import element_order as element_order
from ._numerics import exact_width as exact_width
from ._numerics import fused_sum as fused_sum
from ._numerics import ieee_add as ieee_add
from ._numerics import ieee_sum as ieee_sum
from ._numerics import man_bits as man_bits
from ._numerics import operand_order as operand_order
from ._numerics import product_terms as product_terms
from ._numerics import special_bits as special_bits
from ._numerics import take as take

__all__ = [
    "BlockModel",
    "GPU_FUNCTIONS",
    "EXACT",
    "FIXED_ABSENT",
    "FIXED_GROUP",
    "FixedOperand",
    "Terms",
    "apply_specials",
    "block_chain",
    "c_fields",
    "c_terms",
    "concat",
    "convert",
    "element_order",
    "ex2_approx_ftz",
    "exact_width",
    "ffma_f32",
    "fixed_chain",
    "fixed_cols",
    "fixed_operand",
    "fixed_pow2",
    "fixed_round_f32_rz",
    "fixed_round_sum",
    "fixed_rows",
    "fixed_sum_three",
    "fixed_supports",
    "float64_mma_bits",
    "fmul_f32",
    "fused_sum",
    "i32",
    "ieee_add",
    "ieee_sum",
    "int32_ieee_add",
    "integer_mma_bits",
    "man_bits",
    "operand_order",
    "product_terms",
    "round_bits",
    "round_f32_rz",
    "special_bits",
    "srl",
    "sum_two",
    "take",
]
