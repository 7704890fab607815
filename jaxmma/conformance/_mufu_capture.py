"""Measure ``ex2.approx.ftz.f32`` on a GPU: the tables of ``jaxmma/arith/ex2_sm90.npz``
and the check of the rule that reads them (:mod:`jaxmma.arith._libdevice`).

Run on a machine with an NVIDIA GPU, CuPy and NumPy::

    python -m jaxmma.conformance._mufu_capture --save DIR [--arch sm_90]

It writes ``DIR/ex2_sm90.npz`` (for ``--arch sm_90``) (the package's format: the first result and the first
differences of the result bits, for ``x`` in ``[1, 2)`` and in ``[-2, -1)``), then runs
the instruction on every f32 input with ``|x| < 128`` (2**31 inputs, by binade) and prints
how many results differ from the rule: ``|x|`` truncated to 23 fraction bits,
``n + k / 2**23``, gives ``T+[k] * 2**n`` (``x >= 0``) or ``T-[k] * 2**-(n - 1)``
(``x < 0``, ``T-`` the results on ``[-2, -1)``), results below ``2**-126`` being +0.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

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
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
