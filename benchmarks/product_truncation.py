"""How often the ``kind::mxf8f6f4`` product model truncates a product, on MX-quantized
normal data: the share of output elements and k-steps, and of tiles and k-steps, in
which some nonzero product has its lsb below the step's grid ``2**(e_max - 25)``.

    python benchmarks/product_truncation.py [--n 256] [--k 4096] [--pair e4m3,e4m3]

Where no product is truncated, a step's sum is the exact sum of its products, which
exponent windows on the tensor cores give (``gemm._product_kernel``); where one is, the
step needs the products one at a time. Read from the element fields with NumPy; C is
the model's own accumulator, step by step (``models.product_gemm_bits``), so ``e_max``
includes C's order as the model has it. The data: x ~ N(0, 1) in blocks of 32 along K,
the OCP MX scale ``2**(floor(log2(amax)) - emax)``, elements rounded to nearest and
saturated.
"""

from __future__ import annotations

import argparse

import jax
import ml_dtypes
import numpy as np

import jaxmma
from jaxmma import models

MXF8 = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.{a}.{b}.f32.ue8m0"
)
DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
}


def quantized(rng, rows, K, fmt, lead=()):
    """x ~ N(0, 1) ``lead + [rows, K]`` in MX blocks of 32 along K: the element values
    ``[..., rows, K / 32, 32]`` (ml_dtypes), their bits ``[..., rows, K]`` (uint32) and
    the scale exponents ``[..., rows, K / 32]``."""
    x = rng.standard_normal(lead + (rows, K // 32, 32))
    top = float(ml_dtypes.finfo(DTYPES[fmt]).max)
    e = np.floor(np.log2(np.abs(x).max(-1))) - int(np.floor(np.log2(top)))
    v = np.clip(x / 2.0 ** e[..., None], -top, top).astype(DTYPES[fmt])
    return v, v.view(np.uint8).astype(np.uint32).reshape(lead + (rows, K)), e.astype(np.int64)


def lsb_and_order(v, fmt):
    """Per element: lsb and order (the model's: subnormals at emin), or None if zero."""
    info = ml_dtypes.finfo(DTYPES[fmt])
    a = np.abs(v.astype(np.float64))
    nz = a > 0
    with np.errstate(divide="ignore"):
        order = np.floor(np.log2(np.where(nz, a, 1.0))).astype(np.int64)
    order = np.maximum(order, int(np.log2(float(info.smallest_normal))))
    return np.where(nz, order - info.nmant, 10**6), np.where(nz, order, -(10**6))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=256, help="M = N")
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--pair", default="e4m3,e4m3")
    a = p.parse_args()
    fa, fb = a.pair.split(",")
    ins = jaxmma.instruction(MXF8.format(a=fa, b=fb), arch="sm_120a")
    rng = np.random.default_rng(0)
    n, K = a.n, a.k
    va, A, ea = quantized(rng, n, K, fa)
    vb, Bt, eb = quantized(rng, n, K, fb)
    B = Bt.T.copy()
    SA, SB = (ea + 127).astype(np.uint32), (eb + 127).T.astype(np.uint32)
    la, oa = lsb_and_order(va, fa)  # [n, S, 32]
    lb, ob = lsb_and_order(vb, fb)
    step = jax.jit(lambda *x: models.product_gemm_bits(ins, *x))
    C = np.zeros((n, n), np.uint32)
    S = K // 32
    trunc = np.zeros((S, n, n), bool)
    # the kernel's test once each row's and column's two lowest-lsb elements (the first
    # of equal ones) are taken out of the windows: the others' smallest lsb
    low_a = np.argsort(la, axis=-1, kind="stable")[..., :2]  # [n, S, 2]
    low_b = np.argsort(lb, axis=-1, kind="stable")[..., :2]
    ks = np.arange(32)
    rest = np.zeros((S, n, n), bool)
    c_above = np.zeros((S, n, n), bool)
    for s in range(S):
        es = ea[:, s][:, None] + eb[:, s][None, :]
        lmin = (la[:, None, s, :] + lb[None, :, s, :]).min(-1) + es
        pmax = (oa[:, None, s, :] + ob[None, :, s, :]).max(-1) + es
        c = C.view(np.float32).astype(np.float64)
        with np.errstate(divide="ignore"):
            c_order = np.where(c != 0, np.floor(np.log2(np.abs(c))), -133).astype(np.int64)
        c_order = np.maximum(c_order, -126)
        e_max = np.maximum(np.where(c != 0, c_order, -133), pmax)
        trunc[s] = lmin < e_max - 25
        out_a = (ks == low_a[:, s, 0:1]) | (ks == low_a[:, s, 1:2])  # [n, 32]
        out_b = (ks == low_b[:, s, 0:1]) | (ks == low_b[:, s, 1:2])
        out = out_a[:, None, :] | out_b[None, :, :]
        sums = np.where(out, 10**7, la[:, None, s, :] + lb[None, :, s, :]).min(-1) + es
        rest[s] = sums < e_max - 25
        c_above[s] = c_order > pmax
        C = np.asarray(
            step(
                A[:, 32 * s : 32 * s + 32],
                B[32 * s : 32 * s + 32],
                C,
                SA[:, s : s + 1],
                SB[s : s + 1],
            )
        )
    print(f"{fa} x {fb}, M = N = {n}, K = {K}, MX-quantized N(0, 1)")
    print(f"element-steps with a truncated product: {trunc.mean():.4%}")
    print(f"element-steps whose C is above the step's largest product: {c_above.mean():.2%}")
    q = [f"{trunc[i * S // 4 : (i + 1) * S // 4].mean():.3%}" for i in range(4)]
    print(f"by quarter of K: {', '.join(q)}")
    print(f"element-steps failing the test without the two lowest: {rest.mean():.6%}")
    print("| tile | tile-steps truncating a product | failing the test without the two lowest |")
    print("| --- | ---: | ---: |")
    for bm, bn in ((16, 16), (16, 64), (16, 128), (32, 64), (64, 64)):
        t = trunc.reshape(S, n // bm, bm, n // bn, bn).any(axis=(2, 4))
        r = rest.reshape(S, n // bm, bm, n // bn, bn).any(axis=(2, 4))
        print(f"| {bm} x {bn} | {t.mean():.1%} | {r.mean():.2%} |")


if __name__ == "__main__":
    main()
