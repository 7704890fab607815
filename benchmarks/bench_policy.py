"""Cost of a policy: ``jaxmma.with_policy(model, rule)`` against the hand-written
``dot_general=`` model and a plain jnp bf16 step, on the CPU.

An MLP 256 -> 512 -> 256 -> 10 (batch 256, ReLU, softmax cross-entropy, an SGD update,
one ``jax.jit`` step) for each recipe: bf16 (``recipes.bf16()``), fp8 current scaling
(``recipes.current_scaling()``), MXFP8 (``recipes.mxfp8()``) and NVFP4
(``recipes.nvfp4(grad_rounding="rn", hadamard=False)``: policies draw no keys yet, so
both paths run this form), every layer on the recipe, the 10-class head included:

* policy: the model written with ``x @ w`` in float32, run as
  ``jaxmma.with_policy(model, recipe)``;
* hand-written: the same model with every ``x @ w`` replaced by
  ``recipe.dot_general()(x, w, ...)``;
* jnp bf16: the model with ``jnp.dot`` on bf16 operands and float32 accumulation (XLA's
  own GEMM), the step the others are measured against.

For each: the compile time (``jax.jit(step).lower(...).compile()``, tracing included,
after ``jax.clear_caches()``) and the median step time over ``--steps`` steps after a
warm-up, measured in one process, the steps in rounds of one step per configuration so
that a shared machine slows all alike; and whether the policy's step gives the
hand-written step's bits.

    python benchmarks/bench_policy.py [--steps 10] [--recipes bf16,nvfp4]

XLA's flags are whatever ``XLA_FLAGS`` holds; no compilation cache is used. Results go
to stdout as Markdown; record them in ``benchmarks/RESULTS.md``.
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
from jaxmma import recipes

SIZES = (256, 512, 256, 10)
BATCH = 256
LR = 0.05
DN = (((1,), (0,)), ((), ()))
RECIPES = {
    "bf16": recipes.bf16,
    "fp8 current scaling": recipes.current_scaling,
    "MXFP8": recipes.mxfp8,
    "NVFP4": lambda: recipes.nvfp4(grad_rounding="rn", hadamard=False),
}


def init(key):
    params = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:], strict=True)):
        w = jax.random.normal(jax.random.fold_in(key, i), (a, b), jnp.float32) / np.sqrt(a)
        params.append({"w": w, "b": jnp.zeros((b,), jnp.float32)})
    return params


def mlp(params, x, dot):
    for i, p in enumerate(params):
        x = dot(x, p["w"]) + p["b"]
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return x


def f32_dot(x, w):
    return x @ w


def bf16_dot(x, w):
    return jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                   preferred_element_type=jnp.float32)  # fmt: skip


def make_step(forward):
    def loss(params, x, y):
        logits = forward(params, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), value

    return step


def configurations(names):
    out = {"jnp bf16": make_step(lambda p, x: mlp(p, x, bf16_dot))}
    for name in names:
        rec = RECIPES[name]()
        hand = rec.dot_general()
        out[f"{name}: policy"] = make_step(jaxmma.with_policy(lambda p, x: mlp(p, x, f32_dot), rec))
        out[f"{name}: hand-written"] = make_step(
            lambda p, x, hand=hand: mlp(p, x, lambda a, w: hand(a, w, DN))
        )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--recipes", default=",".join(RECIPES))
    args = ap.parse_args()
    names = [n.strip() for n in args.recipes.split(",")]
    for n in names:
        if n not in RECIPES:
            raise SystemExit(f"--recipes: {n!r} is not one of {list(RECIPES)}")
    key = jax.random.key(0)
    params = init(key)
    x = jax.random.normal(jax.random.fold_in(key, 100), (BATCH, SIZES[0]), jnp.float32)
    y = jax.random.randint(jax.random.fold_in(key, 101), (BATCH,), 0, SIZES[-1])
    compiled, compile_s = {}, {}
    steps = configurations(names)
    for step in steps.values():  # Python-level caches (parsed instructions) warm for all
        jax.make_jaxpr(step)(params, x, y)
    for label, step in steps.items():
        jax.clear_caches()  # each compile from a cold JAX cache: the order does not matter
        t = time.perf_counter()
        compiled[label] = jax.jit(step).lower(params, x, y).compile()
        compile_s[label] = time.perf_counter() - t
        print(f"# compiled {label}: {compile_s[label]:.1f} s", flush=True)
    outs = {label: f(params, x, y) for label, f in compiled.items()}  # warm-up
    jax.block_until_ready(outs)
    times = {label: [] for label in compiled}
    for _ in range(args.steps):
        for label, f in compiled.items():
            t = time.perf_counter()
            jax.block_until_ready(f(params, x, y))
            times[label].append(time.perf_counter() - t)
    med = {label: statistics.median(v) for label, v in times.items()}
    base_c, base_s = compile_s["jnp bf16"], med["jnp bf16"]

    def same(name):
        a, b = (jax.tree.leaves(outs[f"{name}: {p}"]) for p in ("policy", "hand-written"))
        return all(
            np.array_equal(np.asarray(u).view(np.uint32), np.asarray(v).view(np.uint32))
            for u, v in zip(a, b, strict=True)
        )

    print(f"\njax {jax.__version__}, {platform.machine()}, {os.cpu_count()} cores, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, {datetime.date.today()}; "
          f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, median of {args.steps} "
          "steps\n")  # fmt: skip
    print("| recipe | policy compile | hand-written compile | policy step | "
          "hand-written step | policy / hand-written (compile, step) | same bits |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| jnp bf16 (XLA's dot) | {base_c:.2f} s | | {base_s * 1e3:.2f} ms | | | |")
    for name in names:
        pc, hc = compile_s[f"{name}: policy"], compile_s[f"{name}: hand-written"]
        ps, hs = med[f"{name}: policy"], med[f"{name}: hand-written"]
        print(
            f"| {name} | {pc:.1f} s ({pc / base_c:.1f}x) | {hc:.1f} s ({hc / base_c:.1f}x) | "
            f"{ps * 1e3:.1f} ms ({ps / base_s:.1f}x) | {hs * 1e3:.1f} ms ({hs / base_s:.1f}x) | "
            f"{pc / hc:.2f}, {ps / hs:.2f} | {'yes' if same(name) else 'NO'} |"
        )
    print("\n(x: multiples of the jnp bf16 step's compile and step time)")


if __name__ == "__main__":
    main()
