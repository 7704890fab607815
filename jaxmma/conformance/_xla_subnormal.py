"""Captures of XLA:GPU's f32 arithmetic on subnormal values, for ``gpu_replay`` on a CPU.

XLA:CPU runs with denormals flushed; XLA:GPU keeps f32 subnormals. These functions read
and produce subnormals in elementwise operations (add, sub, mul, powers, max / min,
clamp, comparisons, sign, floor, ceil), in the libdevice / XLA sequences (``exp``,
``tanh``) and in reductions (a row sum, a row max). Imports only NumPy and JAX; run on a
GPU as a script:

    python jaxmma/conformance/_xla_subnormal.py --save DIR

writes ``DIR/xla-subnormal.npz``: per case the JSON ``meta`` (name, versions, device, the
compiled HLO text) and every output's raw bits, whole.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

TINY = 2.0**-126  # the least normal f32


def inputs(name: str) -> list:
    """The case's f32 arguments, from a fixed generator: subnormals of both signs, signed
    zeros, the least normals and a few ordinary values."""
    rng = np.random.default_rng(sum(name.encode()))
    if name == "tanh-exp":
        x = rng.uniform(-10.5, 10.5, 4096).astype(np.float32)
        x[:64] = np.linspace(9.2, 10.5, 64, dtype=np.float32)  # exp(-x*x) subnormal
        return [x]
    n = (256, 72)
    sub = (rng.integers(1, 2**23, n) | (rng.integers(0, 2, n) << 31)).astype(np.uint32)
    pick = rng.integers(0, 6, n)
    x = sub.view(np.float32).copy()
    x[pick == 1] = 0.0
    x[pick == 2] = -0.0
    x[pick == 3] = (rng.choice([-1, 1], n) * TINY * rng.uniform(1, 4, n))[pick == 3]
    x[pick == 4] = rng.uniform(-2, 2, n).astype(np.float32)[pick == 4]
    y = np.roll(x, 7).copy()
    y[:, ::5] = 0.5
    return [x.astype(np.float32), y.astype(np.float32)]


def function(name: str):
    """The JAX function of case ``name`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    if name == "tanh-exp":
        return lambda x: jnp.tanh(x) * jnp.exp(-x * x)
    if name == "ops":
        return lambda x, y: (
            x * y, x + y, x - y, x * 0.5, x**2, x**3, jnp.maximum(x, y), jnp.minimum(x, 0.0),
            jax.nn.relu(x), jnp.clip(x, -(2.0**-130), 2.0**-130), x > y, x == 0.0,
            jnp.floor(x), jnp.ceil(x), jnp.sign(x),
        )  # fmt: skip
    if name == "reduce":
        return lambda x, y: (jnp.sum(x * 0.25, axis=1), jnp.max(x, axis=1), jnp.min(y, axis=1))
    raise ValueError(f"name: unknown case {name!r}")


CASES = ("ops", "tanh-exp", "reduce")


def main(argv=None) -> int:
    import jax

    p = argparse.ArgumentParser()
    p.add_argument("--save", required=True)
    a = p.parse_args(argv)
    rec = {}
    for name in CASES:
        args = inputs(name)
        compiled = jax.jit(function(name)).lower(*args).compile()
        outs = jax.tree.leaves(compiled(*args))
        meta = {"name": name, "jax": jax.__version__, "hlo": compiled.as_text(),
                "device": jax.devices()[0].device_kind, "outputs": len(outs)}  # fmt: skip
        rec[f"{name}.meta"] = np.array(json.dumps(meta))
        for i, o in enumerate(outs):
            o = np.asarray(o)
            rec[f"{name}.out{i}"] = o.view(np.uint8 if o.dtype == bool else np.uint32)
    os.makedirs(a.save, exist_ok=True)
    np.savez_compressed(os.path.join(a.save, "xla-subnormal.npz"), **rec)
    print("saved", len(CASES), "cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
