"""MX (OCP microscaling) and NVFP4 quantization that feeds the block-scaled ``mma``."""

from .operands._quant import Quantized as Quantized
from .operands._quant import dequantize as dequantize
from .operands._quant import fake_quantize_mx as fake_quantize_mx
from .operands._quant import fake_quantize_nvfp4 as fake_quantize_nvfp4
from .operands._quant import nvfp4_global_scale as nvfp4_global_scale
from .operands._quant import quantize_mx as quantize_mx
from .operands._quant import quantize_nvfp4 as quantize_nvfp4
from .operands._quant import raw_bits as raw_bits
from .operands._quant import shared_exponent as shared_exponent
from .operands._scaling import as_operands as as_operands

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
