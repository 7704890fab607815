"""A capture of XLA:GPU's sums over dimensions of size 1 (a ``keepdims`` mean's
transpose, ``jnp.sum(x[:, None], axis=1)``): XLA's algebraic simplifier turns such a
reduce into a reshape (its init value taken as the adder's identity), so the sum is
its one element's bits, ``-0``, subnormals and NaN payloads (signaling ones too)
unchanged, where ``-0 + 0`` would give ``+0``. Imports only NumPy and JAX; run on a GPU:

    python jaxmma/conformance/_xla_trivial_reduce.py --save DIR --run NAME

writes ``DIR/xla-trivial-reduce-NAME.json``: per case the compiled HLO text, the input
and the output bits.
"""

from __future__ import annotations

import json
import os

import numpy as np

try:
    from . import _xla_capture as X
except ImportError:  # run as a script from this folder
    import _xla_capture as X

#: f32 bits: zeros of both signs, subnormals, a normal, infinities, NaN payloads
BITS = (0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x3FC00000, 0x7F800000,
        0xFF800000, 0x7FC12345, 0xFFA00001, 0x007FFFFF)  # fmt: skip


def cases() -> dict:
    """name -> (function, input as float32 or bfloat16 NumPy array)."""
    import jax.numpy as jnp

    x = np.array(BITS, np.uint32).view(np.float32)
    return {
        "rows": (lambda v: jnp.sum(v, axis=1), x[:, None]),
        "columns": (lambda v: jnp.sum(v, axis=0), x[None, :]),
        "two-axes": (lambda v: jnp.sum(v, axis=(1, 2)), x[:, None, None]),
    }


def main(argv=None) -> int:
    import jax
    import jax.numpy as jnp

    args = X.capture_args(argv, __doc__.split("\n")[0])
    out = {"process": X.process_meta(args.run)}
    for name, (f, a) in cases().items():
        c = jax.jit(f).lower(jnp.asarray(a)).compile()
        y = np.asarray(c(jnp.asarray(a)))
        out[name] = {"hlo": c.as_text(), "out": y.view(np.uint32).ravel().tolist()}
        print(name, [hex(t) for t in out[name]["out"]], flush=True)
    os.makedirs(args.save, exist_ok=True)
    with open(os.path.join(args.save, f"xla-trivial-reduce-{args.run}.json"), "w") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
