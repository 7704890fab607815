"""One transformer block's training step with its four linear layers through
``jaxmma.recipes``, beside the same step in plain ``jnp`` bf16, in one process.

    python benchmarks/bench_block_step.py                 # the default recipes
    python benchmarks/bench_block_step.py --tokens 512    # a smaller step (a CPU)

The block: pre-norm attention (d_model 1024, 16 heads, causal, softmax in float32) and a
4x MLP (GELU), residuals; batch 4 x 1024 tokens. Everything but the four linear layers
(qkv, attention output, MLP up and down) is plain ``jnp`` in bf16 in every variant; the
baseline's linear layers are ``jnp.dot`` of bf16 operands with float32 results. The step
is ``jax.value_and_grad`` of a mean-square loss and an SGD update, jitted; the time is
the median over rounds of back-to-back steps after a warm-up.
"""

from __future__ import annotations

import argparse
import datetime
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxmma import recipes

BF16 = jnp.bfloat16
WGMMA_FP8 = "wgmma.mma_async.sync.aligned.m64n128k32.f32.{a}.{b}"


def _norm(x):
    x = x.astype(jnp.float32)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return ((x - mu) * jax.lax.rsqrt(var + 1e-5)).astype(BF16)


def block(params, x, linear, heads=16):
    """``x [B, T, D]`` bf16 -> the block's output, with ``linear(h, w)`` for each of the
    four linear layers."""
    Bn, T, D = x.shape
    h = _norm(x)
    qkv = linear(h, params["qkv"]).astype(BF16).reshape(Bn, T, 3, heads, D // heads)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32)
    s = s / np.sqrt(D // heads)
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e9)
    p = jax.nn.softmax(s, axis=-1).astype(BF16)
    o = jnp.einsum("bhqk,bhkd->bhqd", p, v).transpose(0, 2, 1, 3).reshape(Bn, T, D)
    x = x + linear(o, params["out"]).astype(BF16)
    h = _norm(x)
    u = jax.nn.gelu(linear(h, params["up"]).astype(BF16))
    return x + linear(u, params["down"]).astype(BF16)


def init(key, d=1024):
    ks = jax.random.split(key, 4)
    shapes = {"qkv": (d, 3 * d), "out": (d, d), "up": (d, 4 * d), "down": (4 * d, d)}
    return {
        n: (jax.random.normal(k, s, jnp.float32) / np.sqrt(s[0])).astype(BF16)
        for k, (n, s) in zip(ks, shapes.items(), strict=True)
    }


def jnp_linear(h, w):
    return jnp.dot(h, w, preferred_element_type=jnp.float32)


def recipe_linear(rec):
    # a fixed key where the recipe rounds stochastically (the timing does not depend on it)
    key = jax.random.key(7) if rec.grad_rounding == "stochastic" else None
    return lambda h, w: rec.matmul(h, w, key=key)


def step_fn(linear):
    def loss(params, x):
        y = block(params, x, linear)
        return jnp.mean(y.astype(jnp.float32) ** 2)

    @jax.jit
    def step(params, x):
        val, g = jax.value_and_grad(loss)(params, x)
        new = jax.tree.map(lambda p, d: (p - 1e-3 * d.astype(jnp.float32)).astype(BF16), params, g)
        return new, val

    return step


def variants():
    wg = tuple(WGMMA_FP8.format(a=a, b=b) for a, b in (("e4m3", "e4m3"), ("e5m2", "e4m3"),
                                                       ("e4m3", "e5m2")))  # fmt: skip
    e4 = tuple(WGMMA_FP8.format(a="e4m3", b="e4m3") for _ in range(3))
    return {
        "jnp bf16": jnp_linear,
        "recipes.bf16()": recipe_linear(recipes.bf16()),
        "current_scaling()": recipe_linear(recipes.current_scaling()),
        "current_scaling(wgmma, sm_90a)": recipe_linear(
            recipes.current_scaling(arch="sm_90a", instructions=wg)
        ),
        "blockwise()": recipe_linear(recipes.blockwise()),
        "blockwise(wgmma, sm_90a)": recipe_linear(
            recipes.blockwise(arch="sm_90a", instructions=e4)
        ),
        "nvfp4()": recipe_linear(recipes.nvfp4()),
    }


def parts(chosen, rounds=5):
    """Each linear layer alone (forward + backward of a sum, bf16 activations), per
    variant, in ms: where a step's time goes."""
    shapes = {"qkv": (4096, 1024, 3072), "out": (4096, 1024, 1024), "up": (4096, 1024, 4096),
              "down": (4096, 4096, 1024)}  # fmt: skip
    print("\n| linear layers | " + " | ".join(f"{n} ms" for n in shapes) + " |")
    print("| --- |" + " ---: |" * len(shapes))
    for name, linear in chosen.items():
        row = []
        for M, K, N in shapes.values():
            h = jax.random.normal(jax.random.key(M + K), (M, K), BF16)
            w = (jax.random.normal(jax.random.key(N), (K, N), jnp.float32) / 32).astype(BF16)
            loss = lambda h, w, lin=linear: lin(h, w).astype(jnp.float32).sum()  # noqa: E731
            f = jax.jit(jax.grad(loss, (0, 1)))
            jax.block_until_ready(f(h, w))
            ts = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(5):
                    out = f(h, w)
                jax.block_until_ready(out)
                ts.append((time.perf_counter() - t0) / 5)
            row.append(1e3 * float(np.median(ts)))
        print(f"| {name} | " + " | ".join(f"{t:.3f}" for t in row) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", help="semicolon-separated variant names")
    ap.add_argument("--parts", action="store_true", help="time each linear layer alone")
    args = ap.parse_args()
    dev = jax.devices()[0]
    print(f"device: {dev.device_kind}, jax {jax.__version__}, {datetime.date.today()}")
    params = init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (args.batch, args.tokens, 1024), BF16)
    chosen = variants()
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(";") or k == "jnp bf16"}
    if args.parts:
        parts(chosen, args.rounds)
        return
    steps, compile_s = {}, {}
    for name, linear in chosen.items():
        f = step_fn(linear)
        t0 = time.perf_counter()
        jax.block_until_ready(f(params, x))
        compile_s[name] = time.perf_counter() - t0
        steps[name] = f
        print(f"{name:32s} first call {compile_s[name]:6.1f} s", flush=True)
    times = {k: [] for k in steps}
    for _ in range(args.rounds):
        for name, f in steps.items():  # the variants in turn, each round
            out = f(params, x)
            jax.block_until_ready(out)
            n = 5
            t0 = time.perf_counter()
            for _ in range(n):
                out = f(params, x)
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - t0) / n)
    base = float(np.median(times["jnp bf16"]))
    print("\n| linear layers | step ms | x jnp bf16 step |")
    print("| --- | ---: | ---: |")
    for name, ts in times.items():
        ms = 1e3 * float(np.median(ts))
        print(f"| {name} | {ms:.2f} | {ms / (1e3 * base):.2f}x |")


if __name__ == "__main__":
    main()
