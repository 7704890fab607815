"""Named presets: the GEMMs of the hardware researchers name, as policy targets.

One table (:data:`TABLE`): each entry's target (a :class:`~._targets.Gemm` or a recipe),
the GPU and library it models, and its instruction texts; ``jaxmma.presets`` exports the
targets by name and docs/policy.md lists the same entries (tests/test_policy.py checks
that the page names every text).
"""

from __future__ import annotations

import dataclasses

from .. import training
from ..gemm import SCALED_FORMS as _BLOCK_SCALED
from ._targets import Gemm, gemm

WGMMA = "wgmma.mma_async.sync.aligned.m64n128k{k}.f32.{a}.{b}"


@dataclasses.dataclass(frozen=True)
class Preset:
    """One named preset: ``target`` (what a rule runs), ``gpu``, and ``models`` (the
    library call it reproduces, with the page that holds the evidence)."""

    name: str
    target: Gemm | training.Recipe
    gpu: str
    models: str

    @property
    def instructions(self) -> tuple:
        """The instruction texts it runs: one for a GEMM; forward, dgrad and wgrad for a
        recipe (each once)."""
        t = self.target
        if isinstance(t, Gemm):
            return (t.instruction,)
        return tuple(dict.fromkeys((t.forward, t.dgrad, t.wgrad)))


def _fp8_h100():
    return training.current_scaling(
        arch="sm_90a",
        instructions=(
            WGMMA.format(k=32, a="e4m3", b="e4m3"),
            WGMMA.format(k=32, a="e5m2", b="e4m3"),
            WGMMA.format(k=32, a="e4m3", b="e5m2"),
        ),
    )


TABLE = {
    p.name: p
    for p in (
        Preset(
            "H100_BF16", gemm(WGMMA.format(k=16, a="bf16", b="bf16"), arch="sm_90a"), "H100",
            "cuBLAS bf16 GEMMs (torch.mm): wgmma k16 chained across K, f32 accumulation, "
            "no split-K (docs/gemm.md, the native executor's evidence)",
        ),
        Preset(
            "H100_TF32",
            gemm(WGMMA.format(k=8, a="tf32", b="tf32"), arch="sm_90a", input_rounding="rn"),
            "H100",
            "cuBLAS float32 GEMMs with tf32 allowed: f32 inputs rounded to nearest to "
            "tf32, wgmma k8 chained across K (docs/gemm.md)",
        ),
        Preset(
            "H100_FP8", _fp8_h100(), "H100",
            "torchao float8 tensorwise on torch._scaled_mm: per-tensor current scaling, "
            "e4m3 forward, e5m2 gradients, wgmma k32 promoted every 128 elements of K "
            "(use_fast_accum=False; docs/gemm.md, docs/recipes.md)",
        ),
        Preset(
            "B200_NVFP4", gemm(training.NVFP4, arch="sm_100a"), "B200",
            "NVFP4 GEMMs on tcgen05.mma kind::mxf4nvf4: e2m1 with a ue4m3 scale per 16 "
            "and a float32 scale per tensor, quantized inside (docs/tcgen05.md); "
            "straight-through backward",
        ),
        Preset(
            "B200_MXFP8", training.mxfp8(), "B200",
            "the recipe mxfp8 (torchao MX training, OCP MX): e4m3 with a ue8m0 scale per "
            "32 along each GEMM's K, fprop, dgrad and wgrad on tcgen05.mma kind::mxf8f6f4 "
            "(docs/recipes.md, docs/tcgen05.md)",
        ),
        Preset(
            "B200_MXFP4", training.mxfp4(), "B200",
            "the recipe mxfp4 (torchao MX training, OCP MX): e2m1 with a ue8m0 scale per "
            "32 along each GEMM's K, fprop, dgrad and wgrad on tcgen05.mma kind::mxf4 "
            "(docs/recipes.md, docs/tcgen05.md)",
        ),
        Preset(
            "RTX50_NVFP4",
            gemm(_BLOCK_SCALED["ue4m3"].format(a="e2m1", b="e2m1"), arch="sm_120a"),
            "RTX 50 (sm_120a)",
            "NVFP4 on the block-scaled mma.sync of sm_120a (docs/block_scaling.md); "
            "straight-through backward",
        ),
        Preset(
            "RTX50_MXFP8",
            training.mxfp8(
                arch="sm_120a",
                instructions=(_BLOCK_SCALED["ue8m0"].format(a="e4m3", b="e4m3"),) * 3,
            ),
            "RTX 50 (sm_120a)",
            "the recipe mxfp8 on the block-scaled mma.sync of sm_120a "
            "(docs/block_scaling.md, docs/recipes.md)",
        ),
    )
}  # fmt: skip

H100_BF16 = TABLE["H100_BF16"].target
H100_TF32 = TABLE["H100_TF32"].target
H100_FP8 = TABLE["H100_FP8"].target
B200_NVFP4 = TABLE["B200_NVFP4"].target
B200_MXFP8 = TABLE["B200_MXFP8"].target
B200_MXFP4 = TABLE["B200_MXFP4"].target
RTX50_NVFP4 = TABLE["RTX50_NVFP4"].target
RTX50_MXFP8 = TABLE["RTX50_MXFP8"].target
