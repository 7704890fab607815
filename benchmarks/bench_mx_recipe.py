"""``recipes.mxfp8()``'s linear layer (forward and backward) on the whole-GEMM product
path against the per-step chain, in one process.

    python benchmarks/bench_mx_recipe.py [--m 256] [--k 512] [--n 512] [--rounds 5]

The recipe's GEMMs are ``tcgen05.mma`` ``kind::mxf8f6f4`` (sm_100a). "product" is the
library's choice (off a GPU ``models._product_gemm``, on a GPU ``gemm._product_kernel``);
"chain" forces the per-step chain (``gemm._block_scaled.path("emulate")``) while the
step is compiled. Both are compiled ahead, their outputs (y, dx, dw) compared as raw
bits, and timed in turn (medians of rounds). ``jnp.dot`` of bf16 operands is the
baseline. The loss ``sum(y**2)`` is XLA's own float sum, whose order may differ between
the two programs; it is printed apart.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxmma import recipes
from jaxmma.gemm import _block_scaled


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--k", type=int, default=512)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (a.m, a.k), jnp.float32)
    w = jax.random.normal(kw, (a.k, a.n), jnp.float32) / np.sqrt(a.k)
    rec = recipes.mxfp8()

    def step(linear):
        def loss(x, w):
            y = linear(x, w)
            return jnp.sum(y**2), y

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))

    def bf16(x, w):
        return jnp.dot(
            x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32
        )

    fns, compile_s = {}, {}
    for name in ("product", "chain", "bf16 dot"):
        linear = bf16 if name == "bf16 dot" else rec.matmul
        t0 = time.perf_counter()
        if name == "chain":
            with _block_scaled.path("emulate"):
                fns[name] = step(linear).lower(x, w).compile()
        else:
            fns[name] = step(linear).lower(x, w).compile()
        compile_s[name] = time.perf_counter() - t0
    outs = {k: jax.block_until_ready(f(x, w)) for k, f in fns.items()}
    leaves = lambda o: [np.asarray(v).view(np.uint32) for v in jax.tree.leaves(o)]  # noqa: E731
    pairs = zip(leaves(outs["product"]), leaves(outs["chain"]), strict=True)
    differ = [int((p != c).sum()) for p, c in pairs]
    times = {k: [] for k in fns}
    for _ in range(a.rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(x, w))
            times[k].append(time.perf_counter() - t0)
    ms = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
    dev = jax.devices()[0].device_kind
    print(f"{dev}, jax {jax.__version__}, mxfp8() linear {a.m}x{a.k} @ {a.k}x{a.n}, fwd + bwd")
    print("| path | compile s | step ms | x bf16 dot step |")
    print("| --- | ---: | ---: | ---: |")
    for k in fns:
        print(f"| {k} | {compile_s[k]:.1f} | {ms[k]:.1f} | {ms[k] / ms['bf16 dot']:.1f}x |")
    # leaves: the loss (XLA's own float sum, fused as each program has it), y, dx, dw
    print(f"product vs chain, differing elements as raw bits: y {differ[1]} of {a.m * a.n:,d},")
    print(f"dx {differ[2]} of {a.m * a.k:,d}, dw {differ[3]} of {a.k * a.n:,d}")
    print(f"(the loss, XLA's sum of y**2 in each program, differs in {differ[0]} of 1 bits)")


if __name__ == "__main__":
    main()
