"""Named policy targets for the GPUs researchers name: H100 bf16 / tf32 / fp8 as cuBLAS
runs them, B200 NVFP4 / MXFP8 / MXFP4 on ``tcgen05.mma``, RTX 50 on sm_120a's block-scaled
``mma.sync``. Each is a target for :class:`jaxmma.policy.Rule`; ``TABLE`` holds each
entry's GPU, the library call it models and its instruction texts (docs/policy.md)."""

from .intercept import B200_MXFP4 as B200_MXFP4
from .intercept import B200_MXFP8 as B200_MXFP8
from .intercept import B200_NVFP4 as B200_NVFP4
from .intercept import H100_BF16 as H100_BF16
from .intercept import H100_FP8 as H100_FP8
from .intercept import H100_TF32 as H100_TF32
from .intercept import RTX50_MXFP8 as RTX50_MXFP8
from .intercept import RTX50_NVFP4 as RTX50_NVFP4
from .intercept import TABLE as TABLE
from .intercept import Preset as Preset

__all__ = [
    "B200_MXFP4",
    "B200_MXFP8",
    "B200_NVFP4",
    "H100_BF16",
    "H100_FP8",
    "H100_TF32",
    "RTX50_MXFP8",
    "RTX50_NVFP4",
    "TABLE",
    "Preset",
]
