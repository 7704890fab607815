"""Compile time of the block-scaled executors beside the bf16 GEMM and beside the per-step
chain they replace, one process (XLA default flags; on a GPU the kernels): median of 3
``jax.jit(f).lower(x, w).compile()`` of ``jaxmma.matmul`` on f32 inputs 256 x 512 x 256,
caches cleared.

    python benchmarks/bench_compile_block_scaled.py
"""

import statistics
import time

import jax
import jax.numpy as jnp

import jaxmma
from jaxmma.gemm import _block_scaled

F = {
    "bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90"),
    "NVFP4": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3",
        "sm_120a",
    ),
    "MXFP8": (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0",
        "sm_120a",
    ),
    "MXFP8 tcgen05": (
        "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32.m128n256k32.f32.e4m3.e4m3.ue8m0",
        "sm_100a",
    ),
}
x = jnp.ones((256, 512))
w = jnp.ones((512, 256))


def ct(text, arch):
    ts = []
    for _ in range(3):
        jax.clear_caches()
        f = jax.jit(lambda a, b: jaxmma.matmul(a, b, instruction=text, arch=arch))
        t0 = time.perf_counter()
        f.lower(x, w).compile()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


base = ct(*F["bf16"])
print(f"bf16 {base:.2f} s")
print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}")
for n in ("NVFP4", "MXFP8", "MXFP8 tcgen05"):
    new = ct(*F[n])
    with _block_scaled.path("emulate"):
        old = ct(*F[n])
    print(
        f"{n}: new path {new:.2f} s ({new / base:.1f}x bf16), "
        f"per-step chain {old:.2f} s ({old / base:.1f}x)"
    )
