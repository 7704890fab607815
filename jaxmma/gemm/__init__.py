"""Floor 6, the GEMM layer: ``matmul`` / ``dot_general`` as one pipeline of stages.

A call runs these stages in order, each in one module (docs/gemm.md, "The pipeline"):

1. validate the options (``_config``): keywords or a :class:`GemmOptions` through one
   validator into a hashable ``Config`` (instruction, promotion, gradient forms, the
   executor asked for) and ``KernelOptions`` (``_options``: split-K, input rounding,
   epilogue, output type); every refusal of a combination is made here or, for a
   combination that depends on the arrays (scales, C), in ``_kernel.matmul``;
2. prepare the operands (``_prepare``): doubles rounded once, C broadcast, K padded to
   ``pad_k``, shapes checked, float inputs converted to the element bits once (rounded as
   asked), block-scaled operands quantized, a sparse A checked; the values the
   instruction reads, for the derivative;
3. plan: split-K slices (``_split``), the scale recipe (``_recipes``), and the executor
   (``_executors.choose``, the one place that chooses);
4. execute the chain on the executor (``_executors``: native tensor cores ``_native``,
   the emulating Pallas kernel ``_pallas``, whole-GEMM block-scaled sums
   ``_block_scaled``, the XLA chain ``_chain``), once per split-K slice or block group;
5. the epilogue on raw bits (``_split.reduce``, ``_epilogue``): partials reduced,
   scales, alpha / beta, C, the output type;
6. decode: the output bits as values.

``_gemm`` wires the stages for the public faces; ``_kernel`` runs stages 3-6 for kernel
options and fp8 scales. ``_scaled_dot`` (``jax.nn``'s block-scaled API), ``_hlo``
(XLA:GPU's plans) and ``_replay`` build options for ``matmul``.

Derivatives: one straight-through module, ``jaxmma.util._ste`` (floor 0, so that
``ins.mma`` below shares it), around every entry point: ``util.gemm_straight_through``
takes the forward on bits, the values the instruction reads and the entry point's exact
value (``util.GemmExact``: ``alpha * (A * SA) @ (B * SB) + beta * C``); ``_gemm`` (plain
path, ``util.product_straight_through``), ``_kernel`` (kernel options, fp8 scales) and
``_scaled_dot.scaled_matmul`` pass theirs, and ``util.with_gemm_gradients`` runs the
``grad_instruction`` GEMMs. jax.nn's ``grad="configs"`` backward in ``_scaled_dot`` is a
quantizing recipe, not straight-through, and keeps its own ``custom_vjp`` (docs/gemm.md,
"Derivatives").

What other floors may use is re-exported below; they import it from ``jaxmma.gemm``,
never from the modules (``tests/test_layers.py`` checks it).
"""

from ._config import GemmOptions as GemmOptions
from ._config import config as config
from ._config import resolve as resolve
from ._gemm import DefaultArchWarning as DefaultArchWarning
from ._gemm import dot_general as dot_general
from ._gemm import matmul as matmul
from ._hlo import dots as xla_gpu_dots
from ._replay import Unverified as Unverified
from ._replay import gpu_replay as gpu_replay
from ._scaled_dot import FORMS as SCALED_FORMS
from ._scaled_dot import scaled_dot_general as scaled_dot_general
from ._scaled_dot import scaled_matmul as scaled_matmul

__all__ = [
    "SCALED_FORMS",
    "Unverified",
    "DefaultArchWarning",
    "GemmOptions",
    "config",
    "dot_general",
    "gpu_replay",
    "matmul",
    "resolve",
    "scaled_dot_general",
    "scaled_matmul",
    "xla_gpu_dots",
]
