"""Captures of XLA:GPU's f32 sums of a whole vector (a scalar result), for ``gpu_replay``
on a CPU.

A loss is a mean over a batch: XLA's autotuner may give the reduction of a vector to a
scalar to a Triton reduce fusion (one program, output tile ``[]``, TMA allowed) rather
than to its MLIR reduction emitter. Its order of additions is read here with FPRev
probes (Xie et al., arXiv:2411.00442): in a vector of ones, element ``a`` (the anchor)
holds ``+2**40`` and element ``j`` holds ``-2**40``; every partial sum of ones is
absorbed where it meets either, so the sum is ``n`` less the number of elements in the
smallest subtree of the summation tree that holds both ``a`` and ``j``. Random vectors
(normal, and of mixed magnitudes) check the order read. Imports only NumPy and JAX;
run on a GPU as a script:

    python jaxmma/conformance/_xla_scalar_sums.py --save DIR --run NAME

writes ``DIR/xla-scalar-sums-NAME.npz``: per size ``n`` the JSON ``meta`` (the compiled
HLO text, versions, device), the probes' results (``fprev``: one row per anchor, the
sum for each ``j``) and the random vectors' sums (``random``: float32 bits), whose
inputs :func:`random_vectors` rebuilds.
"""

from __future__ import annotations

import json

import numpy as np

try:
    from . import _xla_capture as X
except ImportError:  # run as a script from this folder
    import _xla_capture as X

#: vector lengths: the captured losses' 200, and lengths around the warp and tile sizes
SIZES = (200, 100, 72, 33, 64, 129, 333, 1000, 2048, 4096)
ANCHORS = (0, 1, 5, -1)  # negative: from the end
BIG = np.float32(2.0**40)  # its ulp, 2**17, is above twice any partial sum of ones
RANDOM = 256


def fprev_vector(n: int, a: int, j: int) -> np.ndarray:
    """Ones, with ``+BIG`` at ``a`` and ``-BIG`` at ``j``."""
    v = np.ones(n, np.float32)
    v[a], v[j] = BIG, -BIG
    return v


def random_vectors(n: int, seed: int) -> np.ndarray:
    """``RANDOM`` vectors of ``n`` float32 values: half normal, half of magnitudes
    spread over 2**-20 .. 2**20 with random signs (so that the order matters)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((RANDOM, n)).astype(np.float32)
    spread = np.exp2(rng.uniform(-20, 20, (RANDOM // 2, n))) * rng.choice([-1, 1], (RANDOM // 2, n))
    x[RANDOM // 2 :] = spread.astype(np.float32)
    return x


def function():
    """The captured function: the f32 sum of a vector."""
    import jax.numpy as jnp

    def vector_sum(v):
        return jnp.sum(v)

    return vector_sum


def main(argv=None) -> int:
    import jax
    import jax.numpy as jnp

    args = X.capture_args(argv, __doc__.split("\n")[0])
    out = {}
    for k, n in enumerate(SIZES):
        v0 = jnp.zeros(n, jnp.float32)
        compiled = jax.jit(function()).lower(v0).compile()
        rows = []
        for a in ANCHORS:
            a = a % n
            res = [
                compiled(jnp.asarray(fprev_vector(n, a, j))) if j != a else None for j in range(n)
            ]
            rows.append([np.nan if r is None else float(r) for r in res])
        seed = 3000 + n
        rand = np.array([np.asarray(compiled(jnp.asarray(v))) for v in random_vectors(n, seed)])
        meta = {
            "n": n,
            "anchors": [a % n for a in ANCHORS],
            "seed": seed,
            **X.process_meta(args.run),
            "hlo": compiled.as_text(),
        }
        out[f"{k}.meta"] = np.array(json.dumps(meta))
        out[f"{k}.fprev"] = np.array(rows, np.float32)
        out[f"{k}.random"] = rand.astype(np.float32).view(np.uint32)
        cfg = [ln for ln in meta["hlo"].splitlines() if "fusion(" in ln]
        print(n, [c.split("backend_config=")[-1][:260] for c in cfg], flush=True)
    X.write_npz(args.save, f"xla-scalar-sums-{args.run}", out)
    print("wrote", len(SIZES), "sizes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
