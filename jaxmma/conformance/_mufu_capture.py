"""Measure the H100's special function unit for :mod:`jaxmma.arith._gpu_math`, and
check that module against XLA:GPU.

Run on a machine with an NVIDIA GPU, CuPy, NumPy and JAX::

    python -m jaxmma.conformance._mufu_capture --save DIR [--arch sm_90] [--check-xla N]

It writes ``DIR/ex2_sm90.npz`` (for ``--arch sm_90``: the first result and the first
differences of the result bits of ``ex2.approx.ftz.f32`` for ``x`` in ``[1, 2)`` and in
``[-2, -1)``, the format of ``jaxmma/arith/mufu_sm90.npz``), then runs the instruction
on every f32 input with ``|x| < 128`` (2**31 inputs, by binade) and prints how many
results differ from the rule: ``|x|`` truncated to 23 fraction bits, ``n + k / 2**23``,
gives ``T+[k] * 2**n`` (``x >= 0``) or ``T-[k] * 2**-(n - 1)`` (``x < 0``, ``T-`` the
results on ``[-2, -1)``), results below ``2**-126`` being +0. With ``--check-xla N`` it
also runs XLA:GPU's f32 ``exp``, ``log``, ``tanh``, ``logistic``, ``erf``, ``rsqrt``,
``sqrt`` and division on ``N`` inputs each (:func:`inputs`), prints how many results
differ from :data:`jaxmma.arith.GPU_FUNCTIONS`, and saves 8192 of each to
``DIR/xla-gpu-math.npz``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from .. import arith

_KERNEL = r"""
extern "C" __global__ void ex2(unsigned base, unsigned* out, long long n) {
  long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (j < n) {
    float x = __uint_as_float(base + (unsigned)j), y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    out[j] = __float_as_uint(y);
  }
}
"""
BINADE = 1 << 23
MANT = BINADE - 1


def main(argv=None) -> int:
    import cupy as cp  # only on the GPU machine

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--save", required=True, help="folder for ex2_<arch>.npz")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument(
        "--check-xla",
        type=int,
        default=0,
        metavar="N",
        help="also compare XLA:GPU's f32 functions with jaxmma's on N inputs each",
    )
    args = ap.parse_args(argv)
    kernel = cp.RawModule(code=_KERNEL, options=(f"-arch={args.arch}",)).get_function("ex2")

    def binade(first_bits: int):
        out = cp.empty(BINADE, cp.uint32)
        kernel((BINADE // 256,), (256,), (np.uint32(first_bits), out, np.int64(BINADE)))
        return out

    pos, neg = binade(0x3F800000), binade(0xBF800000)  # [1, 2) and [-2, -1)
    tables = {}
    for name, t in (("ex2_pos", pos.get()), ("ex2_neg", neg.get())):
        d = np.diff(t.astype(np.int64))
        assert d.min() >= -128 and d.max() <= 127, name
        tables[name + "_first"] = np.int64(t[0])
        tables[name] = d.astype(np.int8)
    os.makedirs(args.save, exist_ok=True)
    path = os.path.join(args.save, f"ex2_{args.arch.replace('_', '')}.npz")
    np.savez_compressed(path, **tables)
    print("wrote", path)

    checked = differ = 0
    for sign in (0, 1):
        for field in range(0, 127 + 7):  # |x| < 128
            first = (sign << 31) | (field << 23)
            got = binade(first)
            x = (cp.arange(BINADE, dtype=cp.uint32) | cp.uint32(first)).view(cp.float32)
            fixed = cp.floor(cp.abs(x.astype(cp.float64)) * 2.0**23).astype(cp.int64)
            n, k = fixed >> 23, fixed & MANT
            if sign == 0:
                e, m = 127 + n, (pos[k] & MANT).astype(cp.int64)
            else:
                e, m = (neg[k] >> 23).astype(cp.int64) - (n - 1), (neg[k] & MANT).astype(cp.int64)
            want = cp.where(e > 0, (e << 23) | m, 0).astype(cp.uint32)
            differ += int(cp.count_nonzero(want != got))
            checked += BINADE
    print(f"ex2.approx.ftz.f32, |x| < 128: {differ} of {checked} results differ from the rule")
    if args.check_xla:
        differ += check_xla(args.check_xla, args.save)
    return 0 if differ == 0 else 1


#: primitive -> the function XLA:GPU compiles (jax.numpy), for --check-xla
def _xla_functions():
    import jax
    import jax.numpy as jnp

    return {
        "exp": jnp.exp, "log": jnp.log, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
        "erf": jax.scipy.special.erf, "rsqrt": jax.lax.rsqrt, "sqrt": jnp.sqrt,
        "div": lambda a, b: a / b,
    }  # fmt: skip


def inputs(n: int, seed: int) -> np.ndarray:
    """``n`` f32 bit patterns: a quarter of every kind (raw uint32), a quarter in
    ``|x| < 2**±30``, a quarter in ``|x| < 16``, a quarter of special values (zeros,
    subnormals, Inf, NaN, the largest finite values, and the functions' break points)."""
    rng = np.random.default_rng(seed)
    q = n // 4
    raw = rng.integers(0, 1 << 32, q, dtype=np.uint64).astype(np.uint32)
    exps = rng.integers(127 - 30, 127 + 31, q).astype(np.uint32)
    wide = (rng.integers(0, 2, q).astype(np.uint32) << 31) | (exps << 23)
    wide |= rng.integers(0, 1 << 23, q).astype(np.uint32)
    small = rng.uniform(-16, 16, q).astype(np.float32).view(np.uint32)
    edges = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3.7439211627767994,
                        7.99881172180175781, 0.0004, 2.0**126, 2.0**-126, 3.4e38, 88.7, -87.3,
                        -103.9, 1.0, 0.5, 2.0]).view(np.uint32)  # fmt: skip
    sub = rng.integers(1, 1 << 23, q - edges.size).astype(np.uint32)
    sub |= rng.integers(0, 2, sub.size).astype(np.uint32) << 31
    special = np.concatenate([edges, sub])
    jitter = rng.integers(-64, 65, special.size).astype(np.int64)
    special = np.where(
        np.arange(special.size) % 2 == 0, special, (special.astype(np.int64) + jitter) % (1 << 32)
    ).astype(np.uint32)
    return np.concatenate([raw, wide, small, special])


def check_xla(n: int, save: str | None) -> int:
    """XLA:GPU's f32 functions against :data:`jaxmma.arith.GPU_FUNCTIONS` on
    :func:`inputs` (both jitted, on the default device): print the differing count per
    function (NaNs compare equal whatever their payloads); save 8192 results of each."""
    import jax
    import jax.numpy as jnp

    bad, out = 0, {}
    for k, (name, fn) in enumerate(_xla_functions().items()):
        x = inputs(n, 1 + k)
        args = [x] if name != "div" else [x, inputs(n, 100 + k)]
        vals = [jnp.asarray(a).view(jnp.float32) for a in args]
        gpu = np.asarray(jax.jit(fn)(*vals)).view(np.uint32)
        model = np.asarray(jax.jit(arith.GPU_FUNCTIONS[name][1])(*args))
        nan = np.isnan(gpu.view(np.float32)) & np.isnan(model.view(np.float32))
        differ = (gpu != model) & ~nan
        bad += int(differ.sum())
        print(f"{name}: {int(differ.sum())} of {gpu.size} differ", flush=True)
        if differ.any():
            i = np.nonzero(differ)[0][:5]
            print("  inputs", [hex(int(v)) for v in args[0][i]], "gpu", gpu[i], "model", model[i])
        keep = np.r_[
            0:2048, n // 4 : n // 4 + 2048, n // 2 : n // 2 + 2048, 3 * n // 4 : 3 * n // 4 + 2048
        ]
        for j, a in enumerate(args):
            out[f"{name}.in{j}"] = a[keep]
        out[f"{name}.out"] = gpu[keep]
    if save:
        np.savez_compressed(os.path.join(save, "xla-gpu-math.npz"), **out)
    return bad


if __name__ == "__main__":
    raise SystemExit(main())
