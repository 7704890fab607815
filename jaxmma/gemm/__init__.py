"""Floor 6, the GEMM layer: ``matmul`` / ``dot_general`` as one pipeline of stages.

A call runs these stages in order, each in one module (docs/gemm.md, "The pipeline"):

1. validate the options (``_config``): keywords or a :class:`GemmOptions` through one
   validator into a hashable ``Config`` (instruction, promotion, gradient forms, the
   executor asked for) and ``KernelOptions`` (``_options``: split-K, input rounding,
   epilogue, output type);
2. take the arrays in (``_prepare.inputs``): doubles rounded once, C broadcast, K padded
   to ``pad_k``; from here on one pipeline, ``_pipeline.matmul``, for every configuration;
3. plan on the host: the combinations refused by the one rule (``_config``:
   ``refuse_combinations``, and ``refuse_for_arrays`` for what depends on the arrays:
   the scale recipe, C, K), the operands checked and block-scaled ones quantized
   (``_prepare``), the fp8 scale recipe their shapes name (``_recipes``);
4. the forward on raw bits (``_pipeline.forward``, one ``jit`` for every configuration):
   prepare the bits the instruction reads (``_prepare.operands``: input rounding,
   quantized elements and block scales); execute the chain on the executor
   ``_executors.choose`` picks (each a subclass of ``_executor.Executor`` in its own
   module: native tensor cores ``_native``, the emulating Pallas kernel ``_pallas``,
   whole-GEMM block-scaled sums ``_block_scaled``, the XLA chain ``_chain`` over
   ``models.chain_bits``), once, or per batch of split-K slices (``_split.batches``) or
   128-wide block groups (``_recipes.block_groups``); finish on raw bits
   (``_split.reduce``, ``_recipes.block_total``, ``_epilogue``): partials reduced, block
   groups scaled, scales, alpha / beta, C, NVFP4's per-tensor scales, the output type;
   decode.
   Kernel options and scales are optional stages of this one forward;
5. the derivative around it (``_pipeline._differentiable``): ``_pipeline._straight_through``,
   a ``jax.custom_jvp`` of the forward, or the ``grad_instruction`` GEMMs, below.

``_gemm`` holds the public faces; ``_scaled_dot`` (``jax.nn``'s block-scaled API) builds
options for ``matmul``, as the floor above does for XLA:GPU's dots (``jaxmma.xla_gpu``).

Derivatives: one straight-through module, ``jaxmma.util._ste`` (floor 0, so that
``ins.mma`` below shares it), around every entry point: ``util.gemm_straight_through``
takes the forward on bits, the values the instruction reads and the entry point's exact
value (``util.GemmExact``: ``alpha * (A * SA) @ (B * SB) + beta * C``), and
``util.gemm_tangent`` is its tangent alone, for an entry point that names its forward in
its own ``custom_jvp`` (``_pipeline._straight_through``, so that the forward is called by
name). ``_pipeline`` takes one of two exact values (``A @ B + C`` from +0 without kernel options or
scales; with them the epilogue's alpha and beta and the recipe's scales, by ``jax.jvp``:
each keeps the bits of its tangents), ``_scaled_dot.scaled_matmul`` its own, and
``util.with_gemm_gradients`` runs the ``grad_instruction`` GEMMs. jax.nn's
``grad="configs"`` backward in ``_scaled_dot`` is a quantizing recipe, not
straight-through, and keeps its own ``custom_vjp`` (docs/gemm.md, "Derivatives").

What other floors may use is re-exported below; they import it from ``jaxmma.gemm``,
never from the modules (``tests/test_layers.py`` checks it).
"""

from ._config import GemmOptions as GemmOptions
from ._config import config as config
from ._config import resolve as resolve
from ._gemm import DefaultArchWarning as DefaultArchWarning
from ._gemm import dot_general as dot_general
from ._gemm import matmul as matmul
from ._scaled_dot import FORMS as SCALED_FORMS
from ._scaled_dot import scaled_dot_general as scaled_dot_general
from ._scaled_dot import scaled_matmul as scaled_matmul

__all__ = [
    "SCALED_FORMS",
    "DefaultArchWarning",
    "GemmOptions",
    "config",
    "dot_general",
    "matmul",
    "resolve",
    "scaled_dot_general",
    "scaled_matmul",
]
