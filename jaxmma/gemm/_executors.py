"""The executors of the GEMM floor, one interface, and the one place that chooses.

An executor computes the instruction chain of one GEMM on raw bits: ``A [..., M, K]``,
``B [..., K, N]`` and ``C [..., M, N]`` (None: +0) in, D bits out, leading dimensions
broadcast, any K (padded as a kernel pads it). Every executor gives the same bits; they
differ in speed and in what they cover, which each declares (:attr:`Executor.covers`).
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
stage says so (:attr:`Executor.fuses`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from .. import models
from . import _block_scaled, _chain, _native, _pallas
from ._config import Config


@dataclasses.dataclass(frozen=True)
class Executor:
    """One way to compute a GEMM's instruction chain (see the module docstring).

    Attributes:
      name: how docs and errors call it.
      covers: ``(cfg, scales) -> bool``: whether it computes this configuration (``scales``
        the block-scaled forms' ``(SA, SB)``, else None).
      chain: ``(cfg, A, B, C, scales) -> D bits`` in the accumulator's format; ``C`` None
        is +0 (given only where :attr:`reads_no_c`; otherwise :func:`gemm_bits` passes +0).
      reads_no_c: whether ``chain`` takes ``C=None`` itself (a kernel that reads no C).
      fuses: ``(stage) -> bool``: whether the executor runs that stage in its kernel
        (``"tensor"`` / ``"row"`` scales: :func:`scaled`, ``"block"``: :func:`block`).
      scaled: ``(cfg, A, B, C, factors) -> f32 bits``: the chain times the scale factors.
      block: ``(cfg, A, B, SA, SB) -> f32 bits``: the 128-wide block-scale recipe.
    """

    name: str
    covers: Callable[[Config, tuple | None], bool]
    chain: Callable[..., jax.Array]
    reads_no_c: bool = False
    fuses: Callable[[str], bool] = lambda stage: False
    scaled: Callable[..., jax.Array] | None = None
    block: Callable[..., jax.Array] | None = None


NATIVE = Executor(
    "native",
    covers=lambda cfg, scales: cfg.native and scales is None,
    chain=lambda cfg, A, B, C, scales: _native.gemm_bits(cfg, A, B, C),
    reads_no_c=True,
    fuses=lambda stage: stage == "block" or _native.fuses_scales(),
    scaled=_native.scaled_bits,
    block=_native.block_bits,
)
PALLAS = Executor(
    "pallas",
    covers=_pallas.use_kernel,
    chain=lambda cfg, A, B, C, scales: _pallas.gemm_bits(cfg, A, B, C),
)
BLOCK_SCALED = Executor(
    "block-scaled",
    covers=_block_scaled.covers,
    chain=_block_scaled.gemm_bits,
)
XLA = Executor(
    "xla",
    covers=lambda cfg, scales: True,
    chain=lambda cfg, A, B, C, scales: _chain.xla_gemm_bits(cfg, A, B, C, scales=scales),
)
#: in the order :func:`choose` tries them; the last covers everything
EXECUTORS = (NATIVE, PALLAS, BLOCK_SCALED, XLA)


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
    shapes = [jnp.shape(A), jnp.shape(B)] + ([] if C is None else [jnp.shape(C)])
    ex = choose(cfg, shapes, scales)
    if C is None and not ex.reads_no_c:
        lead = jnp.broadcast_shapes(jnp.shape(A)[:-2], jnp.shape(B)[:-2])
        C = zeros(cfg, lead + (jnp.shape(A)[-2], jnp.shape(B)[-1]))
    return ex.chain(cfg, A, B, C, scales)
