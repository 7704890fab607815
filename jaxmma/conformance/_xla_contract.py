"""Captures of XLA:GPU's products and sums inside its Triton normalization fusions: does
a multiply that feeds an add run as one FMA (one rounding) or as two operations?

Each function holds a multiply feeding an add in a place where XLA's normalization
rewriter puts both in one Triton fusion, in tiles of one row and of several:

- ``center_affine``: ``(x - mean(x)) * g + b``: the mean's ``sum * fl(1/n)`` feeding
  the subtraction, and the affine ``d * g`` feeding ``+ b``;
- ``layer_norm``: the same with ``rsqrt(mean(d * d) + eps)`` between (the variance's
  ``sum * fl(1/n)`` feeding ``+ eps``, the squares feeding the row sum);
- ``scaled_rows``: ``x * s + t`` with ``s = sum(x)`` and ``t = max(x)`` per row (a
  product of a row's value and a reduced one, feeding an add).

On a CPU (``tests/test_xla_contract.py``) the GPU's bits are compared with the same
function computed one rounding per operation (``gpu_replay`` with the fusion's own
summation order) and with each multiply-add replaced by an exact FMA: where the two
differ, the GPU's bits say which it ran. Imports only NumPy and JAX; run on a GPU:

    python jaxmma/conformance/_xla_contract.py --save DIR --run NAME

writes ``DIR/xla-contract-NAME.npz``: per case the JSON ``meta`` (the compiled HLO
text, versions, device, shape, seed) and the bits of the output's first
:data:`ROWS_KEPT` rows (each row is computed on its own); :func:`case_inputs` rebuilds
the inputs.
"""

from __future__ import annotations

import json

import numpy as np

try:
    from . import _xla_capture as X
except ImportError:  # run as a script from this folder
    import _xla_capture as X

#: (function, shape): rows of 72 to 1000, batched as attention's and MLPs' are
CASES = tuple(
    (fn, shape)
    for fn in ("center_affine", "layer_norm", "scaled_rows")
    for shape in ((200, 72), (400, 72), (2, 200, 72), (4, 16, 300), (8, 4, 300), (400, 200),
                  (16, 64, 64), (8, 128, 128), (64, 1000))
)  # fmt: skip


#: the rows of each output kept in the file
ROWS_KEPT = 16


def case_inputs(fn: str, shape: tuple, seed: int) -> list:
    """``x`` (standard normal times 3), and for the affine functions ``g`` and ``b`` of
    the row's length: float32 from NumPy's PCG64 (the same on every machine)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if fn == "scaled_rows":
        return [x]
    n = shape[-1]
    g = (1 + rng.standard_normal(n) * 0.3).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return [x, g, b]


def function(name: str):
    """The JAX function ``name`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    if name == "center_affine":
        return lambda x, g, b: (x - jnp.mean(x, -1, keepdims=True)) * g + b
    if name == "layer_norm":

        def ln(x, g, b):
            d = x - jnp.mean(x, -1, keepdims=True)
            return d * jax.lax.rsqrt(jnp.mean(d * d, -1, keepdims=True) + 1e-5) * g + b

        return ln
    if name == "scaled_rows":
        return lambda x: x * jnp.sum(x, -1, keepdims=True) + jnp.max(x, -1, keepdims=True)
    raise ValueError(f"name: unknown case {name!r}")


def main(argv=None) -> int:
    import jax
    import jax.numpy as jnp

    args = X.capture_args(argv, __doc__.split("\n")[0])
    out = {}
    for k, (name, shape) in enumerate(CASES):
        seed = 9000 + k
        xs = case_inputs(name, shape, seed)
        f = jax.jit(function(name))
        compiled = f.lower(*(jnp.asarray(x) for x in xs)).compile()
        meta = {
            "name": f"{name}-{'x'.join(map(str, shape))}",
            "function": name,
            "shape": list(shape),
            "seed": seed,
            **X.process_meta(args.run),
            "hlo": compiled.as_text(),
        }
        out[f"{k}.meta"] = np.array(json.dumps(meta))
        y = np.asarray(compiled(*(jnp.asarray(x) for x in xs)))
        out[f"{k}.y"] = y.view(np.uint32).reshape(-1, shape[-1])[:ROWS_KEPT]
        cfg = [
            ln.split("block_level_fusion_config")[-1][:160]
            for ln in meta["hlo"].splitlines()
            if "block_level" in ln
        ]
        print(meta["name"], cfg, flush=True)
    X.write_npz(args.save, f"xla-contract-{args.run}", out)
    print("wrote", len(CASES), "cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
