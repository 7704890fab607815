"""MX (OCP microscaling) and NVFP4 quantization that feeds the block-scaled ``mma``."""

from .operands import Quantized as Quantized
from .operands import as_operands as as_operands
from .operands import dequantize as dequantize
from .operands import fake_quantize_mx as fake_quantize_mx
from .operands import fake_quantize_nvfp4 as fake_quantize_nvfp4
from .operands import nvfp4_global_scale as nvfp4_global_scale
from .operands import quantize_mx as quantize_mx
from .operands import quantize_nvfp4 as quantize_nvfp4
from .operands import raw_bits as raw_bits
from .operands import shared_exponent as shared_exponent

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
