"""GEMM-layer speed on a GPU: the Pallas kernel, the XLA path and native ``jnp.dot``.

Run on a machine with an NVIDIA GPU::

    python benchmarks/bench_gpu.py                 # bits check + the table
    python benchmarks/bench_gpu.py --check-only    # bits of kernel vs XLA path, each form
    python benchmarks/bench_gpu.py --tune          # tile variants of the bf16 kernel
    python benchmarks/bench_gpu.py --fp8           # e4m3 P=4: mma.sync vs wgmma, then bits

First it checks that the kernel's bits equal the XLA path's bits on the same GPU for every
form the kernel covers (512^3 by default; random raw bits with NaN / Inf / subnormals /
signed zeros, and normal values with a few specials), then times each GEMM (warm-up,
then the median of several runs, each ended by ``block_until_ready``) and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jaxmma
from jaxmma.gemm import _chain, _gemm, _pallas

FORMS = {
    "bf16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "f16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "f16acc": "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
    "tf32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    "e4m3": "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
    "e5m2xe4m3": "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32",
    "wgmma-bf16": "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
    "wgmma-e4m3": "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3",
    "wgmma-e5m2xe4m3": "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e4m3",
    "wgmma-e4m3-f16acc": "wgmma.mma_async.sync.aligned.m64n128k32.f16.e4m3.e4m3",
}
CHECKS = [(name, None) for name in FORMS] + [
    ("e4m3", 4),
    ("bf16", 3),
    ("wgmma-e4m3", 4),
    ("wgmma-e5m2xe4m3", 3),
]


def arch(name: str) -> str:
    return "sm_90a" if name.startswith("wgmma") else "sm_90"


DTYPES = {
    "bf16": ml_dtypes.bfloat16,
    "f16": np.float16,
    "tf32": np.float32,
    "f32": np.float32,
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
}
WIDTH = {"bf16": 16, "f16": 16, "tf32": 32, "f32": 32, "e4m3": 8, "e5m2": 8}
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def operand_bits(rng, shape, fmt, kind):
    """uint32 raw bits: "raw" (every pattern), "mixed" (normal values, 8% raw bits and
    5% signed zeros) or "normal"."""
    n = WIDTH[fmt]
    raw = rng.integers(0, 1 << n, size=shape, dtype=np.uint64).astype(np.uint32)
    if kind == "raw":
        return raw
    vals = rng.standard_normal(shape, dtype=np.float32)
    bits = vals.astype(DTYPES[fmt]).view(UINT[n]).astype(np.uint32)
    if kind == "mixed":
        bits = np.where(rng.random(shape) < 0.08, raw, bits)
        zero = (rng.integers(0, 2, size=shape) << (n - 1)).astype(np.uint32)
        bits = np.where(rng.random(shape) < 0.05, zero, bits)
    return bits


def time_ms(fn, *args, runs=5, warmup=2):
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def gemm_fn(text, promote_every, mode, tiles=None):  # calls an emulating executor itself
    cfg = _gemm.config(text, "sm_90a" if text.startswith("wgmma") else "sm_90", promote_every)
    if mode == "xla":
        return jax.jit(lambda a, b, c: _chain.xla_gemm_bits(cfg, a, b, c))
    return jax.jit(lambda a, b, c: _pallas.gemm_bits(cfg, a, b, c, tiles=tiles))


def check(size, forms=CHECKS):
    """Kernel bits vs XLA-path bits; returns rows (form, P, elements, mismatches)."""
    rows = []
    M, N, K = size
    for name, P in forms:
        text = FORMS[name]
        ins = jaxmma.instruction(text, arch=arch(name))
        rng = np.random.default_rng(len(rows))
        kinds = ("raw", "mixed")
        A = np.stack([operand_bits(rng, (M, K), ins.atype, k) for k in kinds])
        B = np.stack([operand_bits(rng, (K, N), ins.btype, k) for k in kinds])
        C = np.stack([operand_bits(rng, (M, N), ins.ctype, k) for k in kinds])
        t = time.perf_counter()
        ref = gemm_fn(text, P, "xla")(A, B, C)
        got = gemm_fn(text, P, "pallas")(A, B, C)
        bad = int(jnp.sum(ref != got))
        rows.append((name, P, ref.size, bad))
        print(
            f"bits {name} P={P} {M}x{N}x{K} x2: {bad} of {ref.size} differ "
            f"({time.perf_counter() - t:.1f} s)",
            flush=True,
        )
    return rows


def tune(size, variants=((64, 64, 8), (32, 64, 4), (32, 32, 4))):
    """Time the bf16 kernel with each tiling; returns the fastest :class:`_pallas.Tiles`."""
    M, N, K = size
    rng = np.random.default_rng(1)
    A = operand_bits(rng, (M, K), "bf16", "normal")
    B = operand_bits(rng, (K, N), "bf16", "normal")
    C = np.zeros((M, N), np.uint32)
    ref, best = None, None
    for bm, bn, w in variants:
        tiles = _pallas.Tiles(bm, bn, w)
        fn = gemm_fn(FORMS["bf16"], None, "pallas", tiles)
        t = time.perf_counter()
        out = jax.block_until_ready(fn(A, B, C))
        first = time.perf_counter() - t
        ref = out if ref is None else ref
        same = bool(jnp.all(out == ref))
        ms = time_ms(fn, A, B, C, runs=3, warmup=1)
        print(
            f"tiles {tiles}: {ms:.1f} ms (first call {first:.1f} s, same bits {same})", flush=True
        )
        if same and (best is None or ms < best[0]):
            best = (ms, tiles)
    return best[1]


#: block-scaled families timed on float inputs (quantized inside matmul)
BLOCK_SCALED = {
    "MXFP8": (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
        ".f32.e4m3.e4m3.f32.ue8m0",
        "sm_120a",
    ),
    "NVFP4": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3",
        "sm_120a",
    ),
}


def table(size, xla_size):
    M, N, K = size
    rng = np.random.default_rng(2)
    f32 = lambda s: jnp.asarray(rng.standard_normal(s, dtype=np.float32))  # noqa: E731
    rows = []

    def native(n):
        x, y = f32((n, n)), f32((n, n))
        hi = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
        lo = jax.jit(lambda a, b: jnp.dot(a, b))
        xb, yb = x.astype(jnp.bfloat16), y.astype(jnp.bfloat16)
        return time_ms(hi, x, y, runs=10), time_ms(lo, xb, yb, runs=10)

    base = {}
    for n in sorted({M, xla_size}):
        base[n] = native(n)
        rows.append((f"native jnp.dot f32 (HIGHEST), {n}^3", base[n][0], n))
        rows.append((f"native jnp.dot bf16, {n}^3", base[n][1], n))

    def jm(name, n, P=None, mode="pallas", executor="emulate"):
        X, Y = f32((n, n)), f32((n, n))
        text, where = BLOCK_SCALED.get(name, (FORMS.get(name), arch(name)))
        if name not in BLOCK_SCALED:  # block-scaled: float32 in, quantized inside
            dt = jnp.float8_e4m3fn if "e4m3" in name else jnp.bfloat16
            X, Y = X.astype(dt), Y.astype(dt)
        with _pallas.path(mode):
            fn = jax.jit(
                lambda a, b: jaxmma.matmul(
                    a, b, instruction=text, arch=where, promote_every=P, executor=executor
                )
            )
            return time_ms(fn, X, Y, runs=5, warmup=1)

    t_native = jm("bf16", M, executor="native")
    rows.append((f"jaxmma.matmul bf16 m16n8k16, native executor, {M}^3", t_native, M))
    rows.append((f"jaxmma.matmul bf16 m16n8k16, Pallas, {M}^3", jm("bf16", M), M))
    rows.append((f"jaxmma.matmul e4m3 m16n8k32 P=4, Pallas, {M}^3", jm("e4m3", M, 4), M))
    rows.append(
        (f"jaxmma.matmul e4m3 wgmma m64n128k32 P=4, Pallas, {M}^3", jm("wgmma-e4m3", M, 4), M)
    )
    for name in BLOCK_SCALED:
        rows.append((f"jaxmma.matmul {name} (float inputs), XLA path, {M}^3", jm(name, M), M))
    rows.append(
        (f"jaxmma.matmul bf16 m16n8k16, Pallas, {xla_size}^3", jm("bf16", xla_size), xla_size)
    )
    rows.append(
        (
            f"jaxmma.matmul bf16 m16n8k16, XLA path, {xla_size}^3",
            jm("bf16", xla_size, mode="xla"),
            xla_size,
        )
    )
    return rows, base


def fp8_promoted(n):
    """e4m3 with promote_every=4 on the Pallas kernel, mma.sync m16n8k32 against wgmma
    m64n128k32, at n^3, beside native f32; one process, medians."""
    rng = np.random.default_rng(3)
    X = jnp.asarray(rng.standard_normal((n, n), dtype=np.float32))
    Y = jnp.asarray(rng.standard_normal((n, n), dtype=np.float32))
    hi = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
    f32_ms = time_ms(hi, X, Y, runs=10)
    X8, Y8 = X.astype(jnp.float8_e4m3fn), Y.astype(jnp.float8_e4m3fn)
    print(f"\nnative jnp.dot f32 (HIGHEST), {n}^3: {f32_ms:.2f} ms", flush=True)
    out = {}
    for name in ("e4m3", "wgmma-e4m3"):
        fn = jax.jit(
            lambda a, b, name=name: jaxmma.matmul(
                a, b, instruction=FORMS[name], arch=arch(name), promote_every=4
            )
        )
        out[name] = time_ms(fn, X8, Y8, runs=5, warmup=1)
        print(
            f"{name} promote_every=4, Pallas, {n}^3: {out[name]:.1f} ms "
            f"({out[name] / f32_ms:.1f}x native f32)",
            flush=True,
        )
    print(f"wgmma / mma.sync: {out['wgmma-e4m3'] / out['e4m3']:.2f}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--xla-size", type=int, default=1024)
    ap.add_argument("--check-size", type=int, default=512)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="e4m3 P=4, mma.sync vs wgmma, only")
    ap.add_argument("--forms", default=None, help="checks to run, e.g. bf16,e4m3:4")
    args = ap.parse_args()
    dev = jax.devices()[0]
    print(f"device {dev.device_kind}, jax {jax.__version__}", flush=True)
    forms = CHECKS
    if args.forms:
        forms = [
            (f.split(":")[0], int(f.split(":")[1]) if ":" in f else None)
            for f in args.forms.split(",")
        ]
    if args.fp8:
        fp8_promoted(args.size)
    if args.check_only or args.fp8:
        print_checks(check((args.check_size,) * 3, forms), args.check_size)
        return
    if args.tune:
        _pallas.TILES = tune((args.size,) * 3)
    rows, base = table((args.size,) * 3, args.xla_size)
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        driver = "?"
    print(
        f"\n{dev.device_kind}, driver {driver}, jax {jax.__version__}, "
        f"{datetime.date.today().isoformat()}, kernel tiles {_pallas.TILES}\n"
    )
    print("| GEMM | ms | x native f32 |")
    print("| --- | --- | --- |")
    for what, ms, n in rows:
        print(f"| {what} | {ms:.2f} | {ms / base[n][0]:.1f} |", flush=True)
    print_checks(check((args.check_size,) * 3, forms), args.check_size)


def print_checks(checks, n):
    print("\n| bits, kernel vs XLA path | elements | differ |")
    print("| --- | --- | --- |")
    for name, P, size, bad in checks:
        p = "" if P is None else f", promote_every={P}"
        print(f"| {name}{p}, {n}^3, raw bits + mixed | {size} | {bad} |")
    if any(bad for *_, bad in checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
