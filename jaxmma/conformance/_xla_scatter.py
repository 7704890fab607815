"""Captures of XLA:GPU's f32 scatter-add where each element receives at most one update
(the gradient of ``take_along_axis``, as in a cross-entropy loss: one picked class per
row), for ``gpu_replay`` on a CPU. XLA:GPU does not know the indices are unique and may
add with atomic instructions, whose handling of subnormals, signed zeros and NaNs is
that of the atomic add, not of ``add.f32``. The cases pair every kind of f32 value
(zeros of both signs, subnormals, the least normals, ordinary values, infinities, NaN
payloads) as operand and update. Imports only NumPy and JAX; run on a GPU:

    python jaxmma/conformance/_xla_scatter.py --save DIR --run NAME

writes ``DIR/xla-scatter-NAME.npz``: per case the JSON ``meta`` (name, process, the
compiled HLO text), the inputs and the output bits.
"""

from __future__ import annotations

import json

import numpy as np

try:
    from . import _xla_capture as X
except ImportError:  # run as a script from this folder
    import _xla_capture as X

#: f32 bits of each kind: zeros, subnormals (least, greatest, others), least normals,
#: ordinary values, infinities, quiet and signaling NaNs with payloads
KINDS = (0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x80400000,
         0x00000200, 0x00800000, 0x80800000, 0x00800001, 0x3F800000, 0xBF800001,
         0x3FC00000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FC12345,
         0xFFA00001, 0x7F800001)  # fmt: skip


def inputs(name: str) -> list:
    """The case's arguments: operand ``[n, 4]`` f32, picked column ``[n]`` int32 and
    update ``[n]`` f32 (every pair of kinds, then random subnormal pairs whose sum
    crosses into the normals or cancels)."""
    k = np.array(KINDS, np.uint32)
    a, b = np.meshgrid(k, k, indexing="ij")
    rng = np.random.default_rng(sum(name.encode()))
    m = 4096
    sub_a = rng.integers(1, 2**23, m, dtype=np.uint32) | (
        rng.integers(0, 2, m, dtype=np.uint32) << 31
    )
    sub_b = rng.integers(1, 2**23, m, dtype=np.uint32) | (
        rng.integers(0, 2, m, dtype=np.uint32) << 31
    )
    za = np.concatenate([a.ravel(), sub_a])
    ub = np.concatenate([b.ravel(), sub_b])
    n = len(za)
    lab = rng.integers(0, 4, n).astype(np.int32)
    z = rng.standard_normal((n, 4)).astype(np.float32)
    z[np.arange(n), lab] = za.view(np.float32)
    if name == "grad-take":  # the operand is zeros (the transpose of the gather)
        z = np.zeros((n, 4), np.float32)
    return [z, lab, ub.view(np.float32)]


def function(name: str):
    """The JAX function of case ``name`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    if name == "grad-take":

        def f(z, lab, u):
            _, vjp = jax.vjp(lambda t: jnp.take_along_axis(t, lab[:, None], 1), z)
            return vjp(u[:, None])[0]

        return f
    if name == "batched-add":
        dn = jax.lax.ScatterDimensionNumbers(
            update_window_dims=(), inserted_window_dims=(1,), scatter_dims_to_operand_dims=(1,),
            operand_batching_dims=(0,), scatter_indices_batching_dims=(0,),
        )  # fmt: skip

        def g(z, lab, u):
            return jax.lax.scatter_add(z, lab[:, None], u, dn)

        return g
    raise ValueError(f"name: unknown case {name!r}")


CASES = ("grad-take", "batched-add")


def main(argv=None) -> int:
    import jax

    args = X.capture_args(argv, __doc__.split("\n")[0])
    rec = {}
    for name in CASES:
        ins = inputs(name)
        compiled = jax.jit(function(name)).lower(*ins).compile()
        out = np.asarray(compiled(*ins))
        meta = {"name": name, **X.process_meta(args.run), "hlo": compiled.as_text()}
        rec[f"{name}.meta"] = np.array(json.dumps(meta))
        for i, a in enumerate(ins):
            rec[f"{name}.in{i}"] = a.view(np.uint32) if a.dtype == np.float32 else a
        rec[f"{name}.out"] = out.view(np.uint32)
        print(name, out.shape, flush=True)
    X.write_npz(args.save, f"xla-scatter-{args.run}", rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
