"""jaxmma: bit-exact emulation of NVIDIA warp-level matrix instructions in JAX."""

from . import formats as formats
from . import layouts as layouts
from . import policy as policy
from . import presets as presets
from . import quant as quant
from . import recipes as recipes
from . import sparse as sparse
from .gemm import DefaultArchWarning as DefaultArchWarning
from .gemm import GemmOptions as GemmOptions
from .gemm import dot_general as dot_general
from .gemm import matmul as matmul
from .gemm import scaled_dot_general as scaled_dot_general
from .gemm import scaled_matmul as scaled_matmul
from .instructions import Instruction as Instruction
from .instructions import all_instructions as all_instructions
from .instructions import instruction as instruction
from .instructions import tcgen05_instruction as tcgen05_instruction
from .intercept import with_policy as with_policy
from .util import cpu_compiler_options as cpu_compiler_options
from .xla_gpu import Unverified as Unverified
from .xla_gpu import gpu_replay as gpu_replay
from .xla_gpu import xla_gpu_dots as xla_gpu_dots

__version__ = "0.1.0"

__all__ = [
    "DefaultArchWarning",
    "GemmOptions",
    "Instruction",
    "Unverified",
    "all_instructions",
    "cpu_compiler_options",
    "dot_general",
    "formats",
    "gpu_replay",
    "instruction",
    "layouts",
    "matmul",
    "policy",
    "presets",
    "quant",
    "recipes",
    "scaled_dot_general",
    "scaled_matmul",
    "sparse",
    "tcgen05_instruction",
    "with_policy",
    "xla_gpu_dots",
]
