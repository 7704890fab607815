"""The block-scaled GEMM executor: whole-GEMM formulations of the block-scaled models.

:func:`jaxmma.gemm._chain.xla_gemm_bits` chains :func:`jaxmma.models._models.mma_bits`
over the k-steps, one ``[M, k] x [k, N]`` slab at a time; for the block-scaled forms
that builds ``[M, N, k]``-sized intermediates per step. The forms :func:`covers` names
run here instead, with the same bits (docs/block_scaling.md, "Which path computes a
block-scaled GEMM"): ``kind::mxf4`` / ``kind::mxf4nvf4`` on
:mod:`jaxmma.models._group_gemm`, or on a GPU its Pallas kernel
(:mod:`jaxmma.gemm._block_kernel`, chosen by its ``MODE``); dense ``kind::mxf8f6f4``
with ue8m0 scales on :mod:`jaxmma.models._product_gemm`. :func:`path` forces either
executor (tests and benchmarks); the bits do not depend on it. On a GPU the
``kind::mxf8f6f4`` forms run on :mod:`jaxmma.gemm._product_kernel` (chosen by its
``MODE``).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

from .. import models, operands, util
from . import _block_kernel, _modes, _partition, _product_kernel
from ._executor import Executor

#: ``"auto"``: the forms :func:`covers` names run here; ``"emulate"``: none does
MODE = "auto"
MODES = ("auto", "emulate")


def path(mode: str):
    """Run block-scaled GEMMs traced inside the block on ``mode`` (see :data:`MODE`;
    :func:`jaxmma.gemm._modes.switched`)."""
    return _modes.switched(sys.modules[__name__], mode)


def covers(cfg, scales) -> bool:
    """Whether :func:`gemm_bits` computes this GEMM (a dense ``kind::mxf4*`` form, or a
    ``kind::mxf8f6f4`` (ue8m0) one, without promotion, while :data:`MODE` allows it). On
    a GPU the XLA formulation of ``kind::mxf8f6f4`` is slower than the per-step chain
    (the measurement is in benchmarks/RESULTS.md): there it runs on the kernel, or with
    the kernel's ``MODE`` off, on the chain."""
    if MODE != "auto" or scales is None or cfg.promote_every is not None:
        return False
    if models.group_gemm_supports(cfg.ins):
        return True
    if not models.product_gemm_supports(cfg.ins):
        return False
    return jax.default_backend() != "gpu" or _product_kernel.chosen() is not None


_pad = util.pad_axis


def gemm_bits(cfg, A, B, C, scales):
    """:func:`jaxmma.gemm._chain.xla_gemm_bits` for a :func:`covers` GEMM: the same
    arguments (A, B, C raw bits with broadcasting leading dimensions, K of any size:
    padded with +0 elements and scales of 1.0), the same bits."""
    ins = cfg.ins
    SA, SB = scales
    lead = jnp.broadcast_shapes(*(x.shape[:-2] for x in (A, B, C, SA, SB)))
    A, B, C, SA, SB = (jnp.broadcast_to(x, lead + x.shape[-2:]) for x in (A, B, C, SA, SB))
    K = A.shape[-1]
    S = max(1, -(-K // ins.k))
    nblk = operands.num_blocks(ins)
    one = {"ue8m0": 0x7F, "ue4m3": 0x38}[ins.stype]  # 1.0: scales of padded blocks
    A = _pad(A, -1, S * ins.k, 0)
    B = _pad(B, -2, S * ins.k, 0)
    SA = _pad(SA, -1, S * nblk, one)
    SB = _pad(SB, -2, S * nblk, one)
    product = models.product_gemm_supports(ins)
    how = _product_kernel.chosen() if product else _block_kernel.chosen()
    if how is not None:  # the same bits from one Pallas kernel
        # split over devices as XLA splits a dot (jaxmma/gemm/_partition.py): the scales
        # follow A's rows and B's columns
        kernel = _product_bits if product else _kernel_bits
        return _partition.sharded(
            kernel, ins, A, B, C, scales=(SA, SB), interpret=how == "interpret"
        )
    if product:
        return models.product_gemm_bits(ins, A, B, C, SA, SB)
    return models.group_gemm_bits(ins, A, B, C, SA, SB)


def _kernel_bits(ins, A, B, C, *, block_scales, interpret: bool):
    return _block_kernel.gemm_bits(ins, A, B, C, *block_scales, interpret=interpret)


def _product_bits(ins, A, B, C, *, block_scales, interpret: bool):
    return _product_kernel.gemm_bits(ins, A, B, C, *block_scales, interpret=interpret)


class BlockScaled(Executor):
    """The whole-GEMM sums as an executor: the GEMMs :func:`covers` names."""

    name = "block-scaled"

    def covers(self, cfg, scales):
        return covers(cfg, scales)

    def chain(self, cfg, A, B, C, scales):
        return gemm_bits(cfg, A, B, C, scales)
