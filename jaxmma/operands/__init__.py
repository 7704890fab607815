"""Floor 4, operand preparation: per-lane layouts (``_layouts``), fragments
(``_fragments``), memory images (``_memory``), scale selection (``_scaling``), MX / NVFP4
quantization (``_quant``), sparse metadata (``_sparse``), GEMM operands (``_operands``).

What other floors may use is re-exported below; they import it from ``jaxmma.operands``,
never from the modules (``tests/test_layers.py`` checks it). Names that would be vague
or shared across the floor carry their module: ``memory_read`` / ``memory_write`` and
the other offset rules of the memory images, ``fragment_pack`` / ``fragment_layout``,
``operand_bits`` / ``operand_values``, ``scaled_matrix_operands`` /
``sparse_matrix_operands``, ``validate_sparse`` and the ``sparse_*`` check switches.
"""

from ._fragments import fragment as fragment
from ._fragments import fragment_matrix as fragment_matrix
from ._fragments import layout as fragment_layout
from ._fragments import matrix_shape as matrix_shape
from ._fragments import pack as fragment_pack
from ._fragments import unfragment as unfragment
from ._fragments import unpack as fragment_unpack
from ._layouts import ldmatrix_layout as ldmatrix_layout
from ._layouts import mma_layout as mma_layout
from ._layouts import movmatrix_layout as movmatrix_layout
from ._layouts import stmatrix_layout as stmatrix_layout
from ._memory import add as memory_add
from ._memory import check_image as check_image
from ._memory import check_traced as memory_check_traced
from ._memory import clamp as memory_clamp
from ._memory import inside as memory_inside
from ._memory import read as memory_read
from ._memory import scale as memory_scale
from ._memory import write as memory_write
from ._operands import SATURATE as SATURATE
from ._operands import element_dtype as element_dtype
from ._operands import float64_operand as float64_operand
from ._operands import to_bits as operand_bits
from ._operands import values as operand_values
from ._quant import SCALE_ROUNDINGS as SCALE_ROUNDINGS
from ._quant import Quantized as Quantized
from ._quant import ScaleRounding as ScaleRounding
from ._quant import check_quantized as check_quantized
from ._quant import computed_once as computed_once
from ._quant import dequantize as dequantize
from ._quant import fake_quantize_mx as fake_quantize_mx
from ._quant import fake_quantize_nvfp4 as fake_quantize_nvfp4
from ._quant import nvfp4_global_scale as nvfp4_global_scale
from ._quant import quantize_mx as quantize_mx
from ._quant import quantize_nvfp4 as quantize_nvfp4
from ._quant import raw_bits as raw_bits
from ._quant import shared_exponent as shared_exponent
from ._scaling import as_operands as as_operands
from ._scaling import block_size as block_size
from ._scaling import matrix_operands as scaled_matrix_operands
from ._scaling import num_blocks as num_blocks
from ._scaling import scale_matrix as scale_matrix
from ._scaling import scale_shapes as scale_shapes
from ._scaling import scales_from_matrices as scales_from_matrices
from ._scaling import select_registers as select_registers
from ._sparse import as_concrete as sparse_as_concrete
from ._sparse import checked as sparse_checked
from ._sparse import compress as compress
from ._sparse import decompress as decompress
from ._sparse import is_checked as sparse_is_checked
from ._sparse import matrix_operands as sparse_matrix_operands
from ._sparse import metadata_indices as metadata_indices
from ._sparse import poison_rows as poison_rows
from ._sparse import prune as prune
from ._sparse import validate as validate_sparse

__all__ = [
    "Quantized",
    "SATURATE",
    "SCALE_ROUNDINGS",
    "ScaleRounding",
    "as_operands",
    "block_size",
    "check_image",
    "check_quantized",
    "compress",
    "computed_once",
    "decompress",
    "dequantize",
    "element_dtype",
    "fake_quantize_mx",
    "fake_quantize_nvfp4",
    "float64_operand",
    "fragment",
    "fragment_layout",
    "fragment_matrix",
    "fragment_pack",
    "fragment_unpack",
    "ldmatrix_layout",
    "matrix_shape",
    "memory_add",
    "memory_check_traced",
    "memory_clamp",
    "memory_inside",
    "memory_read",
    "memory_scale",
    "memory_write",
    "metadata_indices",
    "mma_layout",
    "movmatrix_layout",
    "num_blocks",
    "nvfp4_global_scale",
    "operand_bits",
    "operand_values",
    "poison_rows",
    "prune",
    "quantize_mx",
    "quantize_nvfp4",
    "raw_bits",
    "scale_matrix",
    "scale_shapes",
    "scaled_matrix_operands",
    "scales_from_matrices",
    "select_registers",
    "shared_exponent",
    "sparse_as_concrete",
    "sparse_checked",
    "sparse_is_checked",
    "sparse_matrix_operands",
    "stmatrix_layout",
    "unfragment",
    "validate_sparse",
]
