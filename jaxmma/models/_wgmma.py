"""The arithmetic of Hopper's ``wgmma.mma_async`` (docs/wgmma.md).

One fused block per instruction with the parameters of :func:`jaxmma.models._table.
wgmma_block_model`; integer and single-bit forms are exact integer arithmetic. The
instruction's operands and options (``scale-d``, ``imm-scale``) are handled above, in
:mod:`jaxmma.instructions._wgmma`.
"""

from __future__ import annotations

from .. import arith, bits
from ._chain import chain
from ._table import wgmma_block_model

INTEGER = ("s8", "u8", "b1")


def mma_bits(ins, A, B, C, *, model=None):
    """Raw-bit ``D = A @ B + C`` of a ``wgmma.mma_async`` form, for any M and N.

    Args:
      ins: a ``wgmma.mma_async`` :class:`jaxmma.Instruction`.
      A: uint32 ``[..., M, K]``, B: uint32 ``[..., K, N]`` raw element bits (the element
        in the low bits; ``.tf32``: the f32 register); C: uint32 ``[..., M, N]`` raw bits
        of the accumulator (dtype). The model is elementwise over (m, n): M and N need
        not be the instruction's (the GEMM layer passes whole matrices per k-step); K
        above the block size L chains blocks as the model of :mod:`_numerics` does.
      model: None (Hopper's) or ``"exact"`` (exact sum, one rounding to nearest even).
    Returns:
      uint32 ``[..., M, N]``: raw bits of D in ``ins.dtype``.
    """
    if ins.atype in INTEGER:
        return arith.integer_mma_bits(ins, A, B, C)
    fa, fb = bits.fields(ins.atype, A), bits.fields(ins.btype, B)
    if model == "exact":
        prod = arith.product_terms(fa, fb, ins.atype, ins.btype)
        width = arith.exact_width(ins.atype, ins.btype, ins.ctype, A.shape[-1])
        return arith.block_chain(prod, C, ins.ctype, ins.dtype, arith.EXACT, width)
    return chain(ins, fa, fb, C, ins.ctype, wgmma_block_model(ins), False)
