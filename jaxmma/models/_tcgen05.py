"""The arithmetic of Blackwell's ``tcgen05.mma`` (docs/tcgen05.md).

``tcgen05.mma.sp`` runs the same arithmetic on the K/2 stored products (:func:`mma_bits`).

``.kind::tf32``, ``.kind::f16`` and ``.kind::f8f6f4``: one fused block per instruction
with the parameters of :func:`jaxmma.models._table.tcgen05_block_model` (MMA-Sim's
``TCGen05MMA``); the block-scaled kinds share sm_120's models (:mod:`_scaled`, MMA-Sim's
``TCGen05MMABlockScale``); ``.kind::i8`` is the exact integer sum, wrapped or clamped
once (idesc saturate). Options of the instruction (negation, ``enable-input-d``) are
applied above, in :mod:`jaxmma.instructions._tcgen05`; scale-input-d enters here (``c_shift``).
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import arith
from ..bits import F8F6F4, fields, from_container
from . import _scaled
from ._chain import chain
from ._table import tcgen05_block_model


def _fields(ins, fmt: str, bits):
    if ins.kind == "f8f6f4" and fmt in F8F6F4:
        bits = from_container(bits, fmt)
    return fields(fmt, bits)


def _gather_rows(B, sparse_idx):
    """B ``[..., K, N]`` -> ``[..., M, K/2, N]``: the row of B each stored A element meets."""
    return jnp.take_along_axis(B[..., None, :, :], sparse_idx[..., :, :, None], axis=-2)


def mma_bits(ins, A, B, C, *, scales=None, model=None, sparse_idx=None, c_shift=0):
    """Raw-bit ``D = A @ B + C`` of a ``tcgen05.mma`` form, for any M and N.

    Args:
      ins: a ``tcgen05.mma`` :class:`jaxmma.Instruction`.
      A: uint32 ``[..., M, K]``, B: uint32 ``[..., K, N]`` raw element bits
        (``kind::f8f6f4``/``mxf8f6f4``: 8-bit containers; ``mxf4*``: e2m1 nibbles;
        ``.tf32``: the f32 bits); C: uint32 ``[..., M, N]`` bits of the accumulator.
        The model is elementwise over (m, n); K above the instruction's chains blocks.
      scales: ``(SA [..., M, K / block], SB [..., K / block, N])`` raw scale bytes of the
        block-scaled kinds.
      model: None (Blackwell's) or ``"exact"``.
      sparse_idx: ``tcgen05.mma.sp``: int32 ``[..., M, K/2]``, the dense column of each
        element of the compressed A ``[..., M, K/2]``. The K/2 stored products alone enter
        the dense kind's arithmetic (one fused block of K/2 = the dense K products; groups
        of 16 stored products for ``mxf4*``); the rows of B at pruned columns are never
        read, so a NaN or Inf there does not reach D. Stored product ``j`` takes scale
        block ``j // (K / 2 / SFA_N)``, the block of its dense column.
      c_shift: ``scale-input-d`` (``.kind::f16``/``.kind::tf32``): C enters the fused
        sum as ``C * 2**-c_shift`` exactly, its decoded exponent lowered (no rounding,
        below the f32 normal range too).
    Returns:
      uint32 ``[..., M, N]``: raw bits of D in ``ins.dtype``.
    """
    rows = sparse_idx is not None
    if c_shift and ins.kind not in ("f16", "tf32"):
        raise ValueError(f"c_shift: scale-input-d is for .kind::f16/.kind::tf32, not {ins.text}")
    if rows:
        B = _gather_rows(B, sparse_idx)
    if ins.kind == "i8":
        return arith.integer_mma_bits(ins, A, B, C, b_rows=rows)
    if ins.stype:
        return _scaled.mma_bits(ins, A, B, C, scales, model=model, b_rows=rows)
    fa, fb = _fields(ins, ins.atype, A), _fields(ins, ins.btype, B)
    if model == "exact":
        prod = arith.product_terms(fa, fb, ins.atype, ins.btype, b_rows=rows)
        width = arith.exact_width(ins.atype, ins.btype, ins.ctype, A.shape[-1]) + c_shift
        return arith.block_chain(prod, C, ins.ctype, ins.dtype, arith.EXACT, width, c_shift=c_shift)
    return chain(ins, fa, fb, C, ins.ctype, tcgen05_block_model(ins), rows, c_shift=c_shift)
