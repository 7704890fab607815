"""The executors of the GEMM floor, in their order, and the one place that chooses.

An executor computes the instruction chain of one GEMM on raw bits: ``A [..., M, K]``,
``B [..., K, N]`` and ``C [..., M, N]`` (None: +0) in, D bits out, leading dimensions
broadcast, any K (padded as a kernel pads it). Every executor gives the same bits; they
differ in speed and in what they cover, which each declares (:meth:`Executor.covers`,
the interface of :mod:`._executor`, each executor a subclass in its own module).
:func:`choose` takes the first that covers a GEMM, in the order of :data:`EXECUTORS`:

* ``native``: the device's own tensor cores (:mod:`._native`), where ``executor=``
  allowed it and the GPU at hand gives the modelled bits; it also fuses the scale
  stages (per-tensor, row-wise, the 128-wide block recipe) into its kernel;
* ``pallas``: the emulating Pallas kernel (:mod:`._pallas`) on a GPU, or wherever
  ``_pallas.path("pallas")`` forces it;
* ``block-scaled``: whole-GEMM sums of the block-scaled forms (:mod:`._block_scaled`:
  the group model on ``kind::mxf4*``, its Pallas kernel on a GPU, the product model on
  ``kind::mxf8f6f4``);
* ``xla``: the per-k-step chain of model calls (:mod:`._chain`), which covers every
  form on every backend, and every GEMM with a zero-size dimension (the kernels' grids
  need a tile).

The stages around the chain (split-K slices and their reduction, promotion, scales, the
epilogue) are shared by every executor (:mod:`._pipeline`); an executor that can fuse a
stage says so (:meth:`Executor.fuses`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import models
from ._block_scaled import BlockScaled
from ._chain import Xla
from ._config import Config
from ._executor import Executor as Executor
from ._native import Native
from ._pallas import Pallas

NATIVE, PALLAS, BLOCK_SCALED, XLA = Native(), Pallas(), BlockScaled(), Xla()
#: in the order :func:`choose` tries them; the last covers everything
EXECUTORS: tuple[Executor, ...] = (NATIVE, PALLAS, BLOCK_SCALED, XLA)


def choose(cfg: Config, shapes, scales=None) -> Executor:
    """The executor of a GEMM whose operands have ``shapes`` (of A and B, and C if
    given): the first of :data:`EXECUTORS` that covers it; the XLA chain for a
    zero-size dimension."""
    if any(0 in s for s in shapes):
        return XLA
    return next(ex for ex in EXECUTORS if ex.covers(cfg, scales))


def zeros(cfg: Config, shape) -> jax.Array:
    """+0 accumulator bits of ``shape`` (uint64 for ``.f64``, else uint32)."""
    if cfg.ins.dtype == "f64":
        return jnp.zeros(shape, jnp.uint64)
    return models.zero_bits(shape)


def gemm_bits(cfg: Config, A, B, C=None, *, scales=None) -> jax.Array:
    """Raw-bit GEMM on the executor :func:`choose` picks: ``A [..., M, K]``, ``B [..., K,
    N]``, ``C [..., M, N]`` (None: +0) -> D bits, leading dimensions broadcast.

    ``scales``: ``(SA [..., M, K / block], SB [..., K / block, N])`` for block-scaled
    forms. For sparse forms A is the dense (structured) matrix.
    """
    shapes = [A.shape, B.shape] + ([] if C is None else [C.shape])
    ex: Executor = choose(cfg, shapes, scales)
    if C is None and not ex.reads_no_c:
        lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        C = zeros(cfg, lead + (A.shape[-2], B.shape[-1]))
    return ex.chain(cfg, A, B, C, scales)
