"""Floor 8, XLA:GPU's bits on any backend: what a jitted function computes on an H100.

Two entry points, each over the GEMM floor's ``matmul``:

* ``xla_gpu_dots`` (``_hlo``): read a compiled XLA:GPU module's text and give, for each
  dot, the ``matmul`` options that reproduce its bits (split-K and its reduce order, the
  chain, tf32 rounding, the fp8 route, K padding). The reader is in five modules, each on
  the one below: ``_hlo_text`` (the text parsed), ``_hlo_known`` (what the captures show,
  the rest refused), ``_hlo_reduce`` (split-K reduces, K padding), ``_hlo_flow`` (data
  flow, merged dots) and ``_hlo`` (the plans, the refusals, the emitters);
  ``_xla_reduce`` holds the split-K reduce orders.
* ``gpu_replay`` (``_replay``): run a JAX function op by op with each dot as the module
  computes it, and every other operation as XLA:GPU does where that is established
  (``_replay_ops``: which operations, the refusals; ``_xla_sum``: the reduction
  emitters' summation orders; ``_replay_ieee``: IEEE arithmetic on raw bits, since
  XLA:CPU flushes subnormals and XLA:GPU does not; ``_hlo_frames``: the stack frames of
  the module's metadata, which place an equation in its fusion; ``_versions``: a dot
  whose split-K partials two fusions reduce in two orders, a value per fusion); anything
  else an output depends on is refused at trace time, naming why (or, where asked,
  replaced by an ``Unverified``).

docs/xla_gpu.md says what is covered, what is refused, and the evidence for each rule.
What other floors may use is re-exported below (``tests/test_layers.py`` checks it).
"""

from ._hlo import dots as xla_gpu_dots
from ._replay import Unverified as Unverified
from ._replay import gpu_replay as gpu_replay

__all__ = ["Unverified", "gpu_replay", "xla_gpu_dots"]
