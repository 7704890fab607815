"""Captures of XLA:GPU's f32 row sums in Triton normalization fusions whose input is
bfloat16 (widened to f32 inside the fusion), for ``gpu_replay`` on a CPU.

A narrower input may change how Triton lays a row out over the lanes (its loads are
vectorized by bytes), so the order read for f32 rows is not assumed for them. The sums
are read with FPRev probes (Xie et al., arXiv:2411.00442) through a normalization that
exposes them: ``x - sum(x)`` over each row of ``x.astype(f32)``, whose element at a
column holding 1 is ``1 - sum``, exact for the integer sums of the probes. Row ``j`` of
the probe for anchor ``a`` holds ``+2**40`` at ``a``, ``-2**40`` at ``j`` and ones
elsewhere, so its sum is ``n`` less the size of the smallest subtree holding both.
A log-softmax of random bf16 rows (a cross-entropy's, widened) checks the order read.
Imports only NumPy and JAX; run on a GPU as a script:

    python jaxmma/conformance/_xla_narrow_rows.py --save DIR --run NAME

writes ``DIR/xla-narrow-rows-NAME.npz``: per case the JSON ``meta`` (the compiled HLO
text, versions, device) and the outputs' bits, whole; :func:`probe_rows` and
:func:`random_rows` rebuild the inputs.
"""

from __future__ import annotations

import json

import numpy as np

try:
    from . import _xla_capture as X
except ImportError:  # run as a script from this folder
    import _xla_capture as X

#: row lengths (the cross-entropy's 100 classes among them)
LENGTHS = (100, 72, 200, 333, 1000)
ANCHORS = (0, 1, -1)
BIG = np.float32(2.0**40)
RANDOM_ROWS = 200


def probe_rows(n: int, a: int) -> np.ndarray:
    """``n`` rows of ``n`` float32 (bf16 values): ones, ``+BIG`` at ``a``, ``-BIG`` at
    the row's index (row ``a`` has ``+BIG`` only: its sum is not read)."""
    x = np.ones((n, n), np.float32)
    x[:, a] = BIG
    x[np.arange(n), np.arange(n)] = -BIG
    x[a, a] = BIG
    return x


def random_rows(n: int, seed: int) -> np.ndarray:
    """``RANDOM_ROWS`` rows of ``n`` logits, bf16 values as float32."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((RANDOM_ROWS, n)) * 3).astype(np.float32)
    return (x.view(np.uint32) & 0xFFFF0000).view(np.float32)


def function(name: str):
    """The JAX function ``name`` (not jitted) of a bf16 ``[R, n]`` array."""
    import jax
    import jax.numpy as jnp

    if name == "centered_sum":
        return lambda x: x.astype(jnp.float32) - jnp.sum(x.astype(jnp.float32), -1, keepdims=True)
    if name == "log_softmax":
        return lambda x: jax.nn.log_softmax(x.astype(jnp.float32), axis=-1)
    raise ValueError(f"name: unknown case {name!r}")


def main(argv=None) -> int:
    import jax
    import jax.numpy as jnp

    args = X.capture_args(argv, __doc__.split("\n")[0])
    out = {}
    k = 0
    for n in LENGTHS:
        for name in ("centered_sum", "log_softmax"):
            f = jax.jit(function(name))
            if name == "centered_sum":
                xs = [probe_rows(n, a % n) for a in ANCHORS]
            else:
                xs = [random_rows(n, 4000 + n)]
            compiled = f.lower(jnp.asarray(xs[0], jnp.bfloat16)).compile()
            meta = {
                "name": f"{name}-{n}",
                "function": name,
                "n": n,
                "anchors": [a % n for a in ANCHORS] if name == "centered_sum" else [],
                "seed": 4000 + n,
                **X.process_meta(args.run),
                "hlo": compiled.as_text(),
            }
            out[f"{k}.meta"] = np.array(json.dumps(meta))
            for i, x in enumerate(xs):
                y = np.asarray(compiled(jnp.asarray(x, jnp.bfloat16)))
                out[f"{k}.y{i}"] = y.view(np.uint32)
            lines = meta["hlo"].splitlines()
            cfg = [
                ln.split("block_level_fusion_config")[-1][:200]
                for ln in lines
                if "block_level" in ln
            ]
            print(meta["name"], cfg, flush=True)
            k += 1
    X.write_npz(args.save, f"xla-narrow-rows-{args.run}", out)
    print("wrote", k, "cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
