"""Speed of a jitted training step whose matmuls run on emulated instructions.

An MLP (``--sizes``, default 256 -> 512 -> 256 -> 10, batch ``--batch`` 256) with every
matmul through :func:`jaxmma.matmul` on float32 inputs: the block-scaled families
quantize inside (``quantize=``) with the straight-through backward; the others round to
the element type. One step is ``jax.value_and_grad`` of a softmax cross-entropy plus an
SGD update, under ``jax.jit``. For each family: the compile time (``lower().compile()``),
the median step time over ``--steps`` steps after a warm-up, the number of lines of the
optimized HLO, and the ratios to bf16 ``mma.sync`` measured in the same process. Every
family is compiled first; the steps are then timed in rounds of one step per family, so
that a machine shared with other jobs slows all families alike.

    python benchmarks/bench_train_step.py [--quick] [--families bf16,nvfp4] [--steps 5]

XLA's flags are whatever ``XLA_FLAGS`` holds (compare a run with
``XLA_FLAGS="--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"``
against one without). Results go to stdout as Markdown; record them in
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma
from jaxmma import quant

_MX = ".block_scale.scale_vec::{v}.f32.{t}.{t}.f32.ue8m0"
#: family -> (instruction, arch, matmul keywords)
FAMILIES = {
    "bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90", {}),
    "fp8 e4m3": ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "sm_90", {}),
    "fp8 e4m3, promote_every=4": (
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "sm_90",
        {"promote_every": 4},
    ),
    "MXFP8 (e4m3, ue8m0)": (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4" + _MX.format(v="1X", t="e4m3"),
        "sm_120a",
        {},
    ),
    "MXFP6 (e3m2, ue8m0)": (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4" + _MX.format(v="1X", t="e3m2"),
        "sm_120a",
        {"quantize": functools.partial(quant.quantize_mx, fmt="e3m2", block=32)},
    ),
    "MXFP4 (e2m1, ue8m0)": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4" + _MX.format(v="2X", t="e2m1"),
        "sm_120a",
        {},
    ),
    "NVFP4 (e2m1, ue4m3, f32 global)": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3",
        "sm_120a",
        {},
    ),
    "s8 (s32 acc)": ("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", "sm_90", {}),
}


def _matmul(family):
    text, arch, kw = FAMILIES[family]
    if family.startswith("s8"):
        # integers: round to s8 inside (saturating), accumulate in s32; the straight-through
        # tangent reaches the float inputs through a float view of the same product
        def mm(x, w):
            xi = jnp.clip(jnp.round(x * 16), -127, 127)
            wi = jnp.clip(jnp.round(w * 16), -127, 127)
            d = jaxmma.matmul(xi.astype(jnp.int8), wi.astype(jnp.int8), instruction=text, arch=arch)
            exact = jax.lax.stop_gradient(d.astype(jnp.float32) / 256 - x @ w)
            return x @ w + exact

        return mm
    return functools.partial(jaxmma.matmul, instruction=text, arch=arch, **kw)


def init(sizes, seed=0):
    g = np.random.default_rng(seed)
    return [
        (
            jnp.asarray(g.standard_normal((a, b)) / np.sqrt(a), jnp.float32),
            jnp.zeros(b, jnp.float32),
        )
        for a, b in zip(sizes[:-1], sizes[1:], strict=True)
    ]


def make_step(family, lr=0.05):
    mm = _matmul(family)

    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = mm(h, w) + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        params = jax.tree.map(lambda p, g: p - lr * g, params, grads)
        return params, value

    return step


def compile_step(family, sizes, batch):
    """(compiled step, its arguments, compile seconds, lines of optimized HLO)."""
    params = init(sizes)
    g = np.random.default_rng(1)
    x = jnp.asarray(g.standard_normal((batch, sizes[0])), jnp.float32)
    y = jnp.asarray(g.integers(0, sizes[-1], batch), jnp.int32)
    step = jax.jit(make_step(family))
    t0 = time.perf_counter()
    compiled = step.lower(params, x, y).compile()
    compile_s = time.perf_counter() - t0
    hlo = compiled.as_text().count("\n")
    jax.block_until_ready(compiled(params, x, y))  # warm-up
    return compiled, (params, x, y), compile_s, hlo


def time_steps(runs, steps):
    """Median seconds per step of each ``(compiled, args)``, the steps taken in turn
    (one of each per round), so that a load that comes and goes meets every family."""
    times = [[] for _ in runs]
    for _ in range(steps):
        for i, (compiled, args) in enumerate(runs):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small MLP: 64 -> 128 -> 10, batch 64")
    p.add_argument("--sizes", default="256,512,256,10")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--families", default=",".join(FAMILIES), help="comma-separated names")
    a = p.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    batch = a.batch
    if a.quick:
        sizes, batch = [64, 128, 10], 64
    names = [f for f in FAMILIES if any(f.startswith(s.strip()) for s in a.families.split(","))]
    if "bf16" not in names:
        names.insert(0, "bf16")
    print(
        f"## {datetime.date.today()}, {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"jax {jax.__version__} ({jax.default_backend()}), XLA_FLAGS="
        f"{os.environ.get('XLA_FLAGS', '') or '(none)'}\n"
    )
    print(f"MLP {' -> '.join(map(str, sizes))}, batch {batch}, median of {a.steps} steps\n")
    print("| family | compile s | step ms | HLO lines | compile / bf16 | step / bf16 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    built = {name: compile_step(name, sizes, batch) for name in names}
    step_s = time_steps([built[n][:2] for n in names], a.steps)
    c0, s0 = built[names[0]][2], step_s[0]
    for name, s in zip(names, step_s, strict=True):
        c, h = built[name][2], built[name][3]
        print(
            f"| {name} | {c:.1f} | {s * 1e3:.1f} | {h:,} | {c / c0:.1f}x | {s / s0:.1f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
