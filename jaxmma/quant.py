"""MX (OCP microscaling) and NVFP4 quantization that feeds the block-scaled ``mma``."""

from ._quant import Quantized as Quantized
from ._quant import dequantize as dequantize
from ._quant import fake_quantize_mx as fake_quantize_mx
from ._quant import fake_quantize_nvfp4 as fake_quantize_nvfp4
from ._quant import nvfp4_global_scale as nvfp4_global_scale
from ._quant import quantize_mx as quantize_mx
from ._quant import quantize_nvfp4 as quantize_nvfp4
from ._quant import raw_bits as raw_bits
from ._quant import shared_exponent as shared_exponent
from ._scaling import as_operands as as_operands

__all__ = [
    "Quantized",
    "as_operands",
    "dequantize",
    "fake_quantize_mx",
    "fake_quantize_nvfp4",
    "nvfp4_global_scale",
    "quantize_mx",
    "quantize_nvfp4",
    "raw_bits",
    "shared_exponent",
]
