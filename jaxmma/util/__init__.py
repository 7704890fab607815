"""Floor 0, helpers every floor may use: errors of traced values (``_errors``), batch
shapes (``_shapes``), custom derivatives (``_grad``, ``_ste``), jaxpr walks
(``_jaxpr``), the work-arounds of XLA faults (``_xla``), XLA:CPU compile options
(``_cpu``). Imports nothing of jaxmma.

What other floors may use is re-exported below; they import it from ``jaxmma.util``,
never from the modules (``tests/test_layers.py`` checks it). ``straight_through`` is the
elementwise straight-through tangent (``_grad``); ``gemm_straight_through`` is the one
derivative rule of every GEMM entry point, given its exact value (``GemmExact``), and
``product_straight_through`` that rule for ``A @ B + C`` (``_ste``).
"""

from ._cpu import cpu_compiler_options as cpu_compiler_options
from ._errors import X64_HINT as X64_HINT
from ._errors import is_traced as is_traced
from ._errors import raise_if as raise_if
from ._errors import recording as recording
from ._errors import x64_hint as x64_hint
from ._grad import no_derivative as no_derivative
from ._grad import straight_through as straight_through
from ._jaxpr import CALLS as CALLS
from ._jaxpr import bind as bind
from ._jaxpr import closed as closed
from ._jaxpr import contains as contains
from ._jaxpr import sub_jaxprs as sub_jaxprs
from ._shapes import batch_shape as batch_shape
from ._shapes import broadcast as broadcast
from ._shapes import matrix_dims as matrix_dims
from ._shapes import pad_axis as pad_axis
from ._ste import Exact as GemmExact
from ._ste import gemm as gemm_straight_through
from ._ste import gemm_tangent as gemm_tangent
from ._ste import has_tangent as has_tangent
from ._ste import straight_through as product_straight_through
from ._ste import with_gemm_gradients as with_gemm_gradients
from ._xla import clz as clz
from ._xla import ingest as ingest
from ._xla import jit as jit

__all__ = [
    "CALLS",
    "GemmExact",
    "X64_HINT",
    "cpu_compiler_options",
    "batch_shape",
    "bind",
    "broadcast",
    "closed",
    "clz",
    "contains",
    "gemm_straight_through",
    "gemm_tangent",
    "has_tangent",
    "ingest",
    "is_traced",
    "jit",
    "matrix_dims",
    "no_derivative",
    "pad_axis",
    "product_straight_through",
    "raise_if",
    "recording",
    "straight_through",
    "sub_jaxprs",
    "with_gemm_gradients",
    "x64_hint",
]
