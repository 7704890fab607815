"""Captures of XLA:GPU's GEMM fusions that compute on a dot's operands (a prologue) or on
its result (an epilogue), for ``gpu_replay`` on a CPU.

XLA's autotuner fuses elementwise work into its Triton GEMM fusions: a layer norm's
scale and shift into the dot that reads it, a bias, a residual or an attention scale
into the dot that writes it. The cases tell apart the ways such a fusion could compute:
each operation rounded on its own, or a product and a sum contracted into one FMA (in a
prologue 2 to 7 operand elements of each case differ after the dot's tf32 rounding, and
235 to 1,007 outputs; in an epilogue about a third of the outputs), and, for bfloat16,
the dot's result rounded to bfloat16 before the epilogue or kept in float32. Imports
only NumPy and JAX; run on a GPU as a script, once per process:

    python jaxmma/conformance/_xla_gemm_fused.py --save DIR --run NAME

writes ``DIR/xla-gemm-fused-NAME.npz``: per case the JSON ``meta`` (name, function,
shapes, seed, versions, device, ``XLA_FLAGS``, the compiled HLO text) and the output's
bits, whole; :func:`inputs` rebuilds the inputs. The committed captures come from two
processes on an H200: XLA's default autotuning (``gf1``) and
``--xla_gpu_autotune_level=0`` (``gf2``, the default configurations).
"""

from __future__ import annotations

import json
import re

import numpy as np

try:
    from . import _xla_capture as X
except ImportError:  # run as a script from this folder
    import _xla_capture as X

#: (name, function, dtype, M, K, N, seed): ragged sizes of the model captures (200
#: tokens, 72 features, 216 = three merged projections), and one larger size
CASES = (
    ("affine-prologue", "affine_prologue", "f32", 200, 72, 216, 1),
    ("product-prologue", "product_prologue", "f32", 200, 72, 216, 2),
    ("sum-prologue", "sum_prologue", "f32", 200, 72, 216, 3),
    ("scale-epilogue", "scale_epilogue", "f32", 200, 72, 216, 4),
    ("vector-scale-epilogue", "vector_scale_epilogue", "f32", 200, 72, 216, 5),
    ("bias-epilogue", "bias_epilogue", "f32", 200, 72, 216, 6),
    ("affine-epilogue", "affine_epilogue", "f32", 200, 72, 216, 7),
    ("relu-bias-epilogue", "relu_bias_epilogue", "f32", 200, 72, 216, 8),
    ("residual-epilogue", "residual_epilogue", "f32", 200, 72, 216, 9),
    ("attention-scores", "attention_scores", "f32", 200, 36, 200, 10),
    ("affine-prologue-large", "affine_prologue", "f32", 320, 200, 264, 11),
    ("affine-epilogue-large", "affine_epilogue", "f32", 320, 200, 264, 12),
    ("affine-prologue-long-k", "affine_prologue", "f32", 64, 1000, 48, 16),
    ("affine-epilogue-long-k", "affine_epilogue", "f32", 64, 1000, 48, 17),
    ("affine-prologue-bf16", "affine_prologue", "bf16", 200, 72, 216, 13),
    ("bias-epilogue-bf16", "bias_epilogue", "bf16", 200, 72, 216, 14),
    ("scale-epilogue-bf16", "scale_epilogue", "bf16", 200, 72, 216, 15),
    ("relu-bias-epilogue-bf16", "relu_bias_epilogue", "bf16", 200, 72, 216, 18),
    ("bias-epilogue-bf16-large", "bias_epilogue", "bf16", 320, 200, 264, 19),
)
SCALE = 1.0 / 6.0  # not a power of two: its product rounds


def inputs(function: str, dtype: str, M: int, K: int, N: int, seed: int) -> list:
    """The case's operands as float32 NumPy arrays (rounded to bfloat16 values where
    ``dtype`` is ``"bf16"``): x ``[M, K]``, w ``[K, N]`` (``attention_scores``: q ``[M,
    2, K]`` and k ``[N, 2, K]``), then per feature or per output column g, b, s and a
    residual ``[M, N]`` as the function reads them."""
    rng = np.random.default_rng(seed)
    if function == "attention_scores":
        arrs = [rng.standard_normal((M, 2, K)), rng.standard_normal((N, 2, K))]
    else:
        x = rng.standard_normal((M, K)) * 2
        w = rng.standard_normal((K, N)) / np.sqrt(K)
        gk, bk = 1 + 0.3 * rng.standard_normal(K), 0.5 * rng.standard_normal(K)
        sn, bn = 1 + 0.3 * rng.standard_normal(N), 0.5 * rng.standard_normal(N)
        r = rng.standard_normal((M, N))
        arrs = {
            "affine_prologue": [x, w, gk, bk],
            "product_prologue": [x, w, gk],
            "sum_prologue": [x, w, bk],
            "scale_epilogue": [x, w],
            "vector_scale_epilogue": [x, w, sn],
            "bias_epilogue": [x, w, bn],
            "affine_epilogue": [x, w, sn, bn],
            "relu_bias_epilogue": [x, w, bn],
            "residual_epilogue": [x, w, r],
        }[function]
    arrs = [np.asarray(a, np.float32) for a in arrs]
    if dtype == "bf16":
        arrs = [(a.view(np.uint32) & 0xFFFF0000).view(np.float32) for a in arrs]
    return arrs


def function(name: str):
    """The JAX function ``name`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    fns = {
        "affine_prologue": lambda x, w, g, b: (x * g[None] + b[None]) @ w,
        "product_prologue": lambda x, w, g: (x * g[None]) @ w,
        "sum_prologue": lambda x, w, b: (x + b[None]) @ w,
        "scale_epilogue": lambda x, w: (x @ w) * SCALE,
        "vector_scale_epilogue": lambda x, w, s: (x @ w) * s[None],
        "bias_epilogue": lambda x, w, b: x @ w + b[None],
        "affine_epilogue": lambda x, w, s, b: (x @ w) * s[None] + b[None],
        "relu_bias_epilogue": lambda x, w, b: jax.nn.relu(x @ w + b[None]),
        "residual_epilogue": lambda x, w, r: r + x @ w,
        "attention_scores": lambda q, k: jnp.einsum("thd,shd->hts", q, k) * SCALE,
    }
    if name not in fns:
        raise ValueError(f"name: unknown case {name!r}")
    return fns[name]


def arrays(dtype: str, arrs):
    """The operands as the function takes them (bfloat16 for ``"bf16"``)."""
    import jax.numpy as jnp

    return [jnp.asarray(a, jnp.bfloat16 if dtype == "bf16" else jnp.float32) for a in arrs]


def main(argv=None) -> int:
    args = X.capture_args(argv, __doc__.split("\n")[0])
    import jax

    out = {}
    for k, (name, fn, dtype, M, K, N, seed) in enumerate(CASES):
        f = function(fn)
        f.__name__ = fn
        xs = arrays(dtype, inputs(fn, dtype, M, K, N, seed))
        compiled = jax.jit(f).lower(*xs).compile()
        y = np.asarray(compiled(*xs))
        meta = {
            "name": name,
            "function": fn,
            "dtype": dtype,
            "shape": [M, K, N],
            "seed": seed,
            **X.process_meta(args.run),
            "hlo": compiled.as_text(),
        }
        out[f"{k}.meta"] = np.array(json.dumps(meta))
        out[f"{k}.y"] = y.view(np.uint16 if y.dtype.itemsize == 2 else np.uint32)
        fusions = re.findall(r"kind=kCustom, calls=%(\S+?)_computation", meta["hlo"])
        print(name, fusions, flush=True)
    X.write_npz(args.save, f"xla-gemm-fused-{args.run}", out)
    print("wrote", len(CASES), "cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
