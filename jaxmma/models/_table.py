"""Which fused-block model each form uses on each architecture: the one table.

``mma`` (:func:`block_model`, per numerics generation), Hopper's ``wgmma``
(:func:`wgmma_block_model`), Blackwell's ``tcgen05.mma`` (:func:`tcgen05_block_model`)
and the block-scaled ``mma`` forms (:data:`PRODUCT_MODEL`, the group model's constants)
with their parameters F, L, e_zero and the f32 output width (docs/numerics.md,
docs/wgmma.md, docs/tcgen05.md, docs/block_scaling.md). The arithmetic itself is the
kernel-neutral core of :mod:`jaxmma.arith`.
"""

from __future__ import annotations

from ..arith import BlockModel
from ..bits import F8F6F4, FP8


def family(n: int) -> int:
    """The numerics generation of a PTX target number."""
    for gen in (120, 100, 90, 89, 80, 75, 70):
        if n >= gen:
            return gen
    raise ValueError(f"no model for sm_{n}")


def block_model(arch: int, ins) -> BlockModel:
    """F, L and e_zero of the fused-block model (docs/numerics.md) for this form and arch."""
    gen = family(arch)
    a = ins.atype
    inputs = "tf32" if a == "tf32" else ("8bit" if a in F8F6F4 else "16bit")
    if gen == 70 or (gen == 75 and ins.shape == "m8n8k4"):
        return BlockModel(F=23, L=4, e_zero_f32=-131, e_zero_f16=-19)
    if gen in (75, 80):
        return BlockModel(F=24, L=4 if inputs == "tf32" else 8, e_zero_f32=-132, e_zero_f16=-20)
    if gen == 89:
        L = {"tf32": 4, "16bit": 8, "8bit": 16}[inputs]
        fp8 = inputs == "8bit"  # F = 13 and f32 results truncated to e8m13 (MMA-Sim)
        return BlockModel(
            F=13 if fp8 else 24,
            L=L,
            e_zero_f32=-132,
            e_zero_f16=-20,
            f32_mantissa=13 if fp8 else 23,
        )
    L = {"tf32": 8, "16bit": 16, "8bit": 32}[inputs]
    if gen == 90 and inputs == "8bit":
        L = 16  # the f16 MMAs sm_90 runs fp8 through
    return BlockModel(F=25, L=L, e_zero_f32=-133, e_zero_f16=-21)


# ---------------------------------------------------------------------------------------
# wgmma.mma_async (sm_90a)
def wgmma_block_model(ins) -> BlockModel:
    """F, L, e_zero and f32 output width of Hopper ``wgmma`` for this form (MMA-Sim)."""
    fp8 = ins.atype in FP8
    return BlockModel(
        F=13 if fp8 else 25,
        L={"tf32": 8, "f16": 16, "bf16": 16}.get(ins.atype, 32),  # 32 bytes of A per block
        e_zero_f32=-133,
        e_zero_f16=-21,
        f32_mantissa=13 if fp8 else 23,
    )


# ---------------------------------------------------------------------------------------
# tcgen05.mma (sm_100a family)
def tcgen05_block_model(ins) -> BlockModel:
    """F, L and e_zero of ``tcgen05.mma`` ``.kind::tf32/f16/f8f6f4`` (MMA-Sim's Blackwell
    ``TCGen05MMA``): one fused block of 32 bytes of A per row (L = K: 8 tf32, 16 f16/bf16,
    32 fp8/fp6/fp4 products), F = 25, f32 results truncated to 23 bits, f16 results to
    nearest even, e_zero = -133 / -21. fp8 keeps F = 25, unlike Hopper's ``wgmma``."""
    return BlockModel(
        F=25,
        L={"tf32": 8, "f16": 16, "bf16": 16}.get(ins.atype, 32),
        e_zero_f32=-133,
        e_zero_f16=-21,
    )


# ---------------------------------------------------------------------------------------
# Block-scaled mma (sm_120) and tcgen05.mma (sm_100a): the same models
KINDS = ("mxf8f6f4", "mxf4", "mxf4nvf4")
#: kind::mxf8f6f4 (MMA-Sim ``MMA_ST_FDPA``, sm_120 and tcgen05): one fused block of 32
#: scaled products.
PRODUCT_MODEL = BlockModel(F=25, L=32, e_zero_f32=-133, e_zero_f16=-21)
#: kind::mxf4 / mxf4nvf4 (MMA-Sim ``MMA_GST_FDPA``, sm_120 and tcgen05): groups of 16,
#: F = 35.
GROUP, GROUP_F, GROUP_E_ZERO = 16, 35, -139
