"""Captures of XLA:GPU's f32 max / min reductions in Triton normalization fusions, for
``gpu_replay`` on a CPU.

XLA's autotuner puts a softmax, or ``x - max(x)`` over rows, into a Triton fusion. The
order of a max does not change its value, except where the rules for NaN and for signed
zeros decide: which NaN comes out, and whether ``max(-0, +0)`` is +0. These rows hold
the cases that tell them apart: NaNs of several payloads and signs (quiet and signaling)
at several positions, rows of zeros with one zero of the other sign, infinities,
subnormals (which XLA:CPU would flush), rows whose largest element is a zero among
negatives; the other rows are random. Imports only NumPy and JAX; run on a GPU as a
script:

    python jaxmma/conformance/_xla_triton_max.py --save DIR

writes ``DIR/xla-triton-max.npz``: per case the JSON ``meta`` (name, versions, device, the
compiled HLO text) and every output's bits, whole; :func:`rows` / :func:`rows_bf16`
rebuild the inputs from the seeds. The autotuner decides per process which reductions go
to Triton: the committed capture adds, from a second process, the two cases
(``-process2``) in which it gave the f32 and bf16 maxima of rows of 1000 to Triton reduce
fusions.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

#: (function, row length, rows): lengths that give Triton tiles of one and of several
#: warps (and MLIR reductions); the ``_bf16`` functions read bfloat16 rows; the
#: elementwise ones (no reduction, so no tile) once
CASES = tuple(
    (fn, n, 64)
    for n in (72, 100, 1000)
    for fn in ("centered_max", "centered_min", "softmax", "max_and_centered",
               "max_and_centered_bf16")
) + (("elementwise", 72, 64), ("elementwise_bf16", 72, 64))  # fmt: skip
NANS = (0x7FC00000, 0x7FC12345, 0xFFC00001, 0x7F800001, 0xFFBFFFFF)


def rows(n: int, count: int, seed: int) -> np.ndarray:
    """``count`` rows of ``n`` f32 values (bits ``uint32``): the crafted rows first (see
    the module docstring), then random ones."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((count, n)) * 3).astype(np.float32)
    b = x.view(np.uint32)
    r = 0
    for i, nan in enumerate(NANS):  # one NaN, at the start, the middle, the end
        for pos in (0, n // 2 + i, n - 1):
            b[r, pos] = nan
            r += 1
    b[r, [3, n - 5]] = [NANS[0], NANS[2]]  # two NaNs of different sign and payload
    r += 1
    for zero, other in ((0x80000000, 0), (0, 0x80000000)):  # zeros, one of the other sign
        for pos in (0, n // 3, n - 1):
            b[r] = zero
            b[r, pos] = other
            r += 1
    for zero, other in ((0x80000000, 0), (0, 0x80000000)):  # negatives, two zeros
        b[r] = (np.abs(x[r]) + 1).view(np.uint32) | 0x80000000
        b[r, [1, n - 2]] = [zero, other]
        r += 1
    b[r, n // 4] = 0x7F800000  # +Inf
    b[r + 1, n // 4] = 0xFF800000  # -Inf
    b[r + 2] = 0xFF800000  # all -Inf
    b[r + 3] = 0x7F800000  # all +Inf
    r += 4
    sub = rng.integers(1, 2**23, (4, n)).astype(np.uint32)
    b[r] = sub[0]  # positive subnormals
    b[r + 1] = sub[1] | 0x80000000  # negative subnormals
    b[r + 2] = sub[2] | (rng.integers(0, 2, n).astype(np.uint32) << 31)  # both signs
    b[r + 3] = sub[3] | 0x80000000
    b[r + 3, n // 2] = 0x80000000  # -0 above negative subnormals
    r += 4
    assert r <= count
    return b


def rows_bf16(n: int, count: int, seed: int) -> np.ndarray:
    """The rows of :func:`rows` as bfloat16 bits (``uint16``): the upper halves, so the
    same kinds of rows (the NaNs keep a NaN payload; subnormals stay subnormal or zero)."""
    b = rows(n, count, seed)
    hi = (b >> 16).astype(np.uint16)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    hi[nan & ((hi & 0x7F) == 0)] |= 1  # a NaN whose payload sat in the low half
    return hi


def function(name: str):
    """The JAX function of case ``name`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    if name == "centered_max":
        return lambda x: x - jnp.max(x, axis=-1, keepdims=True)
    if name == "centered_min":
        return lambda x: x - jnp.min(x, axis=-1, keepdims=True)
    if name == "softmax":
        return lambda x: jax.nn.softmax(x, axis=-1)
    if name in ("max_and_centered", "max_and_centered_bf16"):
        return lambda x: (jnp.max(x, axis=-1), x - jnp.max(x, axis=-1, keepdims=True))
    if name in ("elementwise", "elementwise_bf16"):  # each row against another row
        return lambda x: (
            jnp.maximum(x, x[::-1]), jnp.minimum(x, x[::-1]), jnp.clip(x, x[::-1], x[::-1] + 1)
        )  # fmt: skip
    raise ValueError(f"name: unknown case {name!r}")


def main(argv=None) -> int:
    import jax
    import ml_dtypes

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--save", required=True)
    args = ap.parse_args(argv)
    out = {}
    for k, (name, n, count) in enumerate(CASES):
        bf16 = name.endswith("_bf16")
        bits = (rows_bf16 if bf16 else rows)(n, count, 2000 + n)
        x = jax.numpy.asarray(bits.view(ml_dtypes.bfloat16 if bf16 else np.float32))
        compiled = jax.jit(function(name)).lower(x).compile()
        ys = compiled(x)
        ys = ys if isinstance(ys, tuple) else (ys,)
        meta = {
            "name": f"{name}-{count}x{n}",
            "function": name,
            "shape": [count, n],
            "seed": 2000 + n,
            "jax": jax.__version__,
            "device": str(jax.devices()[0].device_kind),
            "hlo": compiled.as_text(),
        }
        out[f"{k}.meta"] = np.array(json.dumps(meta))
        for i, y in enumerate(ys):
            y = np.asarray(y)
            out[f"{k}.y{i}"] = y.view(np.uint16 if y.dtype.itemsize == 2 else np.uint32)
    os.makedirs(args.save, exist_ok=True)
    np.savez_compressed(os.path.join(args.save, "xla-triton-max.npz"), **out)
    print("wrote", len(CASES), "cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
