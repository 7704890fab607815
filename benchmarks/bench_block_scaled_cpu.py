"""Block-scaled GEMMs on the CPU: the per-step chain against the whole-GEMM executor.

One process, f32 inputs quantized inside ``jaxmma.matmul`` under ``jit`` (as a model
calls it), for NVFP4, MXFP4 and MXFP8 (``sm_120a``) at n^3 for each ``--sizes`` n:

* ``old``: the per-step emulation (``gemm._block_scaled.path("emulate")``: every
  k-step through ``models.mma_bits``);
* ``new``: the automatic choice (``gemm._block_scaled``: ``kind::mxf4*`` on
  ``models._group_gemm``, MXFP8 on ``models._product_gemm``);
* ``jnp.dot`` f32 on the same inputs, and the quantizers alone.

Median of ``--repeat`` calls after a warm-up call (its time, which includes compiling,
is printed as ``first``); the old and new bits are compared (raw uint32).

    python benchmarks/bench_block_scaled_cpu.py [--sizes 256,512,1024] [--repeat 5]

Prints a Markdown table with machine and date; record it in RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma
from jaxmma import quant
from jaxmma.gemm import _block_scaled

FORMS = {
    "NVFP4": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3",
    "MXFP4": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X"
    ".f32.e2m1.e2m1.f32.ue8m0",
    "MXFP8": "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e4m3.e4m3.f32.ue8m0",
    "MXFP8-e5m2": "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e5m2.e5m2.f32.ue8m0",
}


def _time(f, args, repeat):
    t0 = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return out, first, statistics.median(times)


def _gemm(text):
    return jax.jit(lambda x, w: jaxmma.matmul(x, w, instruction=text, arch="sm_120a"))


def _quantizer(text):
    ins = jaxmma.instruction(text, arch="sm_120a")
    if ins.stype == "ue4m3":
        q = lambda x, axis: quant.quantize_nvfp4(x, axis=axis)  # noqa: E731
    else:
        blk = jaxmma.layouts.block_size(ins)
        q = lambda x, axis: quant.quantize_mx(x, ins.atype, axis=axis, block=blk)  # noqa: E731
    return jax.jit(lambda x, w: (q(x, -1), q(w, -2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--forms", default="NVFP4,MXFP4,MXFP8")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"{datetime.date.today()}, {platform.machine()} {platform.processor() or ''}, "
        f"{os.cpu_count()} cores, jax {jax.__version__}, {jax.devices()[0].platform}; "
        f"median of {args.repeat} calls (ms), first call incl. compile (s)\n"
    )
    print("| size | form | old ms | new ms | old / new | new first s | quantizers ms "
          "| jnp.dot f32 ms | new / dot | jnp.dot bf16 ms | new / bf16 | same bits |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for n in sizes:
        kx, ky = jax.random.split(jax.random.key(n))
        x = jax.random.normal(kx, (n, n), jnp.float32)
        w = jax.random.normal(ky, (n, n), jnp.float32)
        _, _, dot = _time(jax.jit(lambda a, b: a @ b), (x, w), args.repeat)
        x16, w16 = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
        bf16 = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
        _, _, dot16 = _time(bf16, (x16, w16), args.repeat)
        for name in args.forms.split(","):
            text = FORMS[name]
            _, _, tq = _time(_quantizer(text), (x, w), args.repeat)
            new, first, t_new = _time(_gemm(text), (x, w), args.repeat)
            with _block_scaled.path("emulate"):
                old, _, t_old = _time(_gemm(text), (x, w), args.repeat)
            same = np.array_equal(np.asarray(old).view(np.uint32), np.asarray(new).view(np.uint32))
            print(
                f"| {n}^3 | {name} | {t_old * 1e3:,.1f} | {t_new * 1e3:,.1f} | "
                f"{t_old / t_new:.1f}x | {first:.2f} | {tq * 1e3:.1f} | {dot * 1e3:.1f} | "
                f"{t_new / dot:.1f}x | {dot16 * 1e3:.2f} | {t_new / dot16:.0f}x | "
                f"{'yes' if same else 'NO'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
