"""Capture XLA:GPU's f32 sums of random data, for :mod:`jaxmma.xla_gpu._xla_sum`.

Run on a GPU: ``python -m jaxmma.conformance._xla_sums --save DIR`` writes
``DIR/xla-triton-norm.npz`` (a layer norm and a softmax that XLA puts in Triton
normalization fusions: :func:`norm_functions`), ``DIR/xla-triton-rows.npz`` (softmaxes,
layer norms and ``x / sum(x)`` of rows of 33 to 16384, batched or not:
:data:`ROW_CASES`, the compiled module text and the bits of the first :data:`ROWS_KEPT`
rows of the output, its leading dimensions flattened) and
``DIR/xla-sums.npz``: for each case
(:data:`CASES`) the compiled module text and the output bits of ``jnp.sum`` over rows,
columns or everything, of f32 inputs (and of bf16 inputs widened to f32 inside the
fusion). The inputs are rebuilt from their seeds by :func:`data` (NumPy's PCG64, the
same on every machine): standard normal values times ``2**e``, ``e`` uniform in
[-12, 12], so that any other order of the adds gives other bits on most rows.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

#: (name, kind, shape, seed): kind "row" (sum over the last axis), "row_bf16" (bf16
#: inputs widened to f32 inside the fused sum), "full", "column" (over the first axis)
CASES = (
    [("row", s) for s in ((200, 72), (200, 100), (200, 144), (200, 200), (64, 1000),
                          (64, 1024), (16, 4096), (4, 16384), (64, 513), (64, 999), (64, 17),
                          (64, 33), (64, 65), (64, 40), (8, 3000), (300, 7))]
    + [("row_bf16", s) for s in ((200, 72), (200, 144), (200, 200), (64, 1000), (4, 16384),
                                 (64, 513), (64, 17), (8, 3000))]
    + [("full", (n,)) for n in (72, 1000, 4096, 16384, 16385, 100000)]
    + [("column", s) for s in ((200, 72), (1000, 100), (4096, 130), (64, 144), (33, 200))]
)  # fmt: skip


def data(shape: tuple, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal(shape).astype(np.float32)
    e = rng.integers(-12, 13, shape).astype(np.float32)
    return (m * np.exp2(e)).astype(np.float32)


def name(kind: str, shape: tuple) -> str:
    return f"{kind}-{'x'.join(str(d) for d in shape)}"


def function(kind: str):
    """The jitted function of a case, and how its input is made from :func:`data`."""
    import jax.numpy as jnp
    import ml_dtypes

    if kind == "row":
        return (lambda x: jnp.sum(x, axis=-1)), (lambda x: x)
    if kind == "row_bf16":
        return (lambda x: jnp.sum(x.astype(jnp.float32), axis=-1)), (
            lambda x: x.astype(ml_dtypes.bfloat16)
        )
    if kind == "full":
        return jnp.sum, (lambda x: x)
    return (lambda x: jnp.sum(x, axis=0)), (lambda x: x)


def norm_functions() -> dict:
    """XLA's Triton normalization fusions: a layer norm of 72 features and a softmax of
    100, f32, on ``default_rng(0)`` data (``xla-triton-norm.npz``)."""
    import jax
    import jax.numpy as jnp

    def ln(x, g, b):
        m = jnp.mean(x, -1, keepdims=True)
        v = jnp.mean((x - m) ** 2, -1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g[None, :] + b[None, :]

    def softmax(x):
        return jax.nn.softmax(x, axis=-1)

    return {"ln": ln, "softmax": softmax}


def norm_inputs() -> dict:
    rng = np.random.default_rng(0)
    ln = tuple(rng.standard_normal(s).astype(np.float32) for s in ((200, 72), (72,), (72,)))
    return {"ln": ln, "softmax": (rng.standard_normal((200, 100)).astype(np.float32) * 3,)}


#: (function, shape, seed) of ``xla-triton-rows.npz``: XLA's Triton normalization fusions
#: of rows of many lengths (tiles of one row or several, of one to eight warps), batched
#: as attention's are, and ``x / sum(x)``, which XLA also tiles by parts of a row
ROW_CASES = (
    tuple(("softmax", (16, n), 7000 + n) for n in (33, 40, 64, 72, 100, 128, 200, 256, 500,
                                                   513, 1000, 1024, 2048, 3000, 4096))
    + tuple(("softmax", (4, n), 7000 + n) for n in (8192, 16384))
    + tuple(("layer_norm", (16, n), 7000 + n) for n in (33, 100, 500, 1000, 2048, 4096))
    + tuple(("over_sum", (16, n), 7000 + n) for n in (33, 72, 200, 1000))
    + tuple((fn, shape, sum(shape)) for shape in (
        (2, 200, 72), (2, 200, 100), (2, 200, 200), (2, 200, 256), (2, 200, 500),
        (2, 200, 1000), (400, 72), (400, 200), (400, 1000), (4, 16, 100), (4, 16, 1000),
        (8, 128, 128), (16, 64, 64), (2, 8, 200, 200)) for fn in ("softmax", "layer_norm"))
)  # fmt: skip


#: the rows of each output kept in the file (each row is computed on its own)
ROWS_KEPT = 8


def row_function(name: str):
    """The function of a :data:`ROW_CASES` case (not jitted)."""
    import jax
    import jax.numpy as jnp

    if name == "softmax":
        return lambda x: jax.nn.softmax(x, axis=-1)
    if name == "layer_norm":

        def ln(x):
            m = jnp.mean(x, -1, keepdims=True)
            return (x - m) * jax.lax.rsqrt(jnp.mean((x - m) ** 2, -1, keepdims=True) + 1e-5)

        return ln
    if name == "layer_norm_inline":  # the mean written twice, as a user might

        def ln2(x):
            d = x - jnp.mean(x, -1, keepdims=True)
            m2 = jnp.mean((x - jnp.mean(x, -1, keepdims=True)) ** 2, -1, keepdims=True)
            return d * jax.lax.rsqrt(m2 + 1e-5)

        return ln2
    if name == "over_sum":
        return lambda x: x / jnp.sum(x, -1, keepdims=True)
    raise ValueError(f"name: unknown case {name!r}")


def row_input(shape: tuple, seed: int) -> np.ndarray:
    """Standard normal values times 3, from NumPy's PCG64 (the same on every machine)."""
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)


def main(argv=None) -> int:
    import jax
    import jax.numpy as jnp

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--save", required=True)
    args = ap.parse_args(argv)
    out = {}
    for k, (kind, shape) in enumerate(CASES):
        fn, make = function(kind)
        x = jnp.asarray(make(data(shape, 1000 + k)))
        compiled = jax.jit(fn).lower(x).compile()
        out[f"{k}.y"] = np.asarray(compiled(x)).view(np.uint32)
        meta = {"name": name(kind, shape), "kind": kind, "shape": list(shape), "seed": 1000 + k}
        meta["hlo"] = compiled.as_text()
        meta["device"] = str(jax.devices()[0].device_kind)
        out[f"{k}.meta"] = np.array(json.dumps(meta))
    os.makedirs(args.save, exist_ok=True)
    np.savez_compressed(os.path.join(args.save, "xla-sums.npz"), **out)
    norm: dict = {}
    for key, fn in norm_functions().items():
        xs = norm_inputs()[key]
        compiled = jax.jit(fn).lower(*xs).compile()
        norm[key + ".hlo"] = np.array(compiled.as_text())
        norm[key + ".y"] = np.asarray(compiled(*xs))
        for i, a in enumerate(xs):
            norm[f"{key}.in{i}"] = a
    np.savez_compressed(os.path.join(args.save, "xla-triton-norm.npz"), **norm)
    rows: dict = {}
    for k, (fname, shape, seed) in enumerate(ROW_CASES):
        x = jnp.asarray(row_input(shape, seed))
        compiled = jax.jit(row_function(fname)).lower(x).compile()
        meta = {"name": f"{fname}-{'x'.join(map(str, shape))}", "function": fname}
        meta.update(shape=list(shape), seed=seed, hlo=compiled.as_text())
        meta["device"] = str(jax.devices()[0].device_kind)
        rows[f"{k}.meta"] = np.array(json.dumps(meta))
        y = np.asarray(compiled(x)).view(np.uint32)
        rows[f"{k}.y"] = y.reshape(-1, shape[-1])[:ROWS_KEPT]
    np.savez_compressed(os.path.join(args.save, "xla-triton-rows.npz"), **rows)
    print("wrote", len(CASES), "cases and", len(norm_functions()), "normalizations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
