"""Floor 3, which arithmetic each form uses on each architecture: the table of model
parameters (``_table``), chaining along k on either engine (``_chain``), the block-scaled
sums (``_scaled``), ``wgmma`` (``_wgmma``), the one entry point ``_models.mma_bits``, and
the instruction chained over a GEMM's k-steps (``_steps``).

What other floors may use is below; they import it from ``jaxmma.models``, never from the
modules (``tests/test_layers.py`` checks it). The entry points that take operand bits
(one instruction, the chain over k-steps, the whole-GEMM block-scaled models
``group_gemm_bits`` for ``kind::mxf4*`` and ``product_gemm_bits``) are stated here with
their contract, each handing its operands to the module that computes it; the table and
the helpers are re-exported as they are.
"""

from . import _group_gemm, _models, _product_gemm, _steps
from ._group_gemm import STEP_GROUPS as STEP_GROUPS
from ._group_gemm import half_units as half_units
from ._group_gemm import scale_fields as scale_fields
from ._group_gemm import supports as group_gemm_supports
from ._models import zero_bits as zero_bits
from ._product_gemm import supports as product_gemm_supports
from ._scaled import check_ins as check_scaled_ins
from ._table import GROUP as GROUP
from ._table import GROUP_E_ZERO as GROUP_E_ZERO
from ._table import GROUP_F as GROUP_F
from ._table import PRODUCT_MODEL as PRODUCT_MODEL
from ._table import block_model as block_model
from ._table import family as family
from ._table import wgmma_block_model as wgmma_block_model
from ._wgmma import INTEGER as WGMMA_INTEGER

__all__ = [
    "GROUP",
    "GROUP_E_ZERO",
    "GROUP_F",
    "PRODUCT_MODEL",
    "STEP_GROUPS",
    "WGMMA_INTEGER",
    "block_model",
    "chain_bits",
    "check_scaled_ins",
    "family",
    "group_gemm_bits",
    "group_gemm_supports",
    "half_units",
    "mma_bits",
    "product_gemm_bits",
    "product_gemm_supports",
    "scale_fields",
    "wgmma_block_model",
    "zero_bits",
]


def mma_bits(ins, A, B, C, *, scales=None, model=None, sparse_idx=None, c_shift=0):
    """Raw-bit ``D = A @ B + C`` of one instruction: the one arithmetic entry point that
    every level (register, matrix, ``wmma``, ``wgmma``, the GEMM layer) reaches.

    ``A [..., M, k]``, ``B [..., k, N]``, ``C [..., M, N]`` raw bits (elementwise over
    the output: any M and N). ``scales``: the block-scaled forms'
    ``(SA, SB)``; ``model``: another model than the form's on its architecture
    (``"exact"``); ``sparse_idx``: ``mma.sp``'s int32 ``[..., M, k/2]``, the dense column
    of each stored element of the compressed A; ``c_shift``: ``tcgen05.mma``'s
    scale-input-d. :func:`jaxmma.models._models.mma_bits` picks the model."""
    return _models.mma_bits(
        ins, A, B, C, scales=scales, model=model, sparse_idx=sparse_idx, c_shift=c_shift
    )


def chain_bits(ins, A, B, C, *, scales=None, sparse_idx=None, live=None, from_d=False):
    """Raw-bit D of the instruction chained over k-steps: :func:`mma_bits` once per step
    of the leading axis of ``A [S, ..., M, k]`` and ``B [S, ..., k, N]``, each step's C
    the D before it, the first's ``C [..., M, N]`` (:func:`jaxmma.models._steps.chain_bits`
    says the rest: scales, sparse columns, a chain from D, masked steps)."""
    return _steps.chain_bits(
        ins, A, B, C, scales=scales, sparse_idx=sparse_idx, live=live, from_d=from_d
    )


def group_gemm_bits(ins, A, B, C, SA, SB):
    """A whole ``kind::mxf4*`` GEMM (:func:`group_gemm_supports`) with the bits of the
    chain over its k-steps: ``A [..., M, K]`` e2m1 bits (K a multiple of k), ``B [..., K,
    N]``, ``C [..., M, N]`` f32 bits, scale bytes ``SA [..., M, K / block]``, ``SB [...,
    K / block, N]``, all with the same leading dimensions (:mod:`._group_gemm`)."""
    return _group_gemm.gemm_bits(ins, A, B, C, SA, SB)


def product_gemm_bits(ins, A, B, C, SA, SB, tile: int | None = None):
    """A whole ``kind::mxf8f6f4`` GEMM with ue8m0 scales (:func:`product_gemm_supports`)
    with the bits of the chain over its k-steps: the arguments of
    :func:`group_gemm_bits` (8-bit element containers; ``tile``: columns per tile, the
    default measured fastest: :mod:`._product_gemm`)."""
    return _product_gemm.gemm_bits(ins, A, B, C, SA, SB, tile)
