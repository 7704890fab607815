"""The ``kind::mxf8f6f4`` product-model kernel on a GPU: its bits against the XLA
formulation, and its speed against the per-step chain and jnp.dot.

    python benchmarks/product_gpu.py              # bits, then timings
    python benchmarks/product_gpu.py --bits       # bits only
    python benchmarks/product_gpu.py --tune       # tilings at 4096^3 (bits of each checked)

Each run stops starting new work after ``--budget`` seconds (default 420).

Bits: ``gemm._product_kernel.gemm_bits`` compiled against
``models._product_gemm.gemm_bits`` (XLA) for e4m3, e5m2, e3m2 x e2m3 and e2m1 x e4m3:
on raw bits (every code, NaN and Inf elements, zero and cancelling blocks, NaN / zero /
extreme scales, C with NaN, Inf, subnormals and -0: most tiles take the per-product
branch) and on MX-quantized normal data (the window sums); and through ``jaxmma.matmul``
with ragged shapes and a batch, the kernel against the per-step chain. The number of
differing uint32 elements is printed. Timings: f32 inputs quantized inside
``jaxmma.matmul(x, w, instruction=MXFP8, arch="sm_120a")`` under jit, the kernel (forced:
``gemm._product_kernel.path("kernel")``; the library does not choose it), the
per-step chain and ``jnp.dot`` of bf16 operands compiled ahead and timed in turn,
medians of rounds of back-to-back calls.
"""

from __future__ import annotations

import argparse
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from block_scaled_gpu import _rounds  # the same timing loop
from product_truncation import MXF8, quantized

import jaxmma
from jaxmma import gemm, models
from jaxmma.gemm import _block_scaled, _chain, _product_kernel

PAIRS = (("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e3m2", "e2m3"), ("e2m1", "e4m3"))
BITS = {"e4m3": 8, "e5m2": 8, "e3m2": 6, "e2m3": 6, "e2m1": 4}
ARCH = "sm_120a"
T0 = time.perf_counter()
BUDGET = [420.0]


def say(*args):
    print(f"[{time.perf_counter() - T0:6.1f}s]", *args, flush=True)


def _late(what):
    if time.perf_counter() - T0 > BUDGET[0]:
        say(f"budget spent: {what} not run")
        return True
    return False


def _raw(rng, pair, lead, M, N, K):
    A = rng.integers(0, 1 << BITS[pair[0]], lead + (M, K), dtype=np.uint32)
    B = rng.integers(0, 1 << BITS[pair[1]], lead + (K, N), dtype=np.uint32)
    A[..., : M // 4, :16] = 0
    B[..., 32:64, : N // 3] = B[..., 0:32, : N // 3] ^ (1 << (BITS[pair[1]] - 1))
    A[..., M // 4 : M // 2, 32:64] = A[..., M // 4 : M // 2, 0:32]  # cancelling blocks
    SA = rng.integers(110, 140, lead + (M, K // 32), dtype=np.uint32)
    SB = rng.integers(110, 140, lead + (K // 32, N), dtype=np.uint32)
    wild = np.array([0x00, 0x01, 0x7F, 0xFE, 0xFF], np.uint32)
    for S in (SA, SB):
        m = rng.random(S.shape) < 0.02
        S[m] = rng.choice(wild, m.sum())
    C = (rng.standard_normal(lead + (M, N)) * 100).astype(np.float32)
    C *= rng.choice(np.array([0, 1e-40, 1, 1e30], np.float32), C.shape)
    C = C.view(np.uint32)
    C[..., 0, :4] = [0x7F800000, 0xFF800000, 0x7FC00001, 0x80000000]
    return A, B, C, SA, SB


def _quantized(rng, rows, K, fmt, lead=()):
    _, bits, e = quantized(rng, rows, K, fmt, lead)
    return bits, (e + 127).astype(np.uint32)


def _mx(rng, pair, lead, M, N, K):
    A, SA = _quantized(rng, M, K, pair[0], lead)
    Bt, SBt = _quantized(rng, N, K, pair[1], lead)
    C = np.zeros(lead + (M, N), np.uint32)
    return A, np.swapaxes(Bt, -1, -2), C, SA, np.swapaxes(SBt, -1, -2)


def check_bits(sizes) -> int:
    say("== bits: the compiled kernel against the XLA formulation ==")
    bad = 0
    for pair in PAIRS:
        ins = jaxmma.instruction(MXF8.format(a=pair[0], b=pair[1]), arch=ARCH)
        kernel = jax.jit(lambda *x, ins=ins: _product_kernel.gemm_bits(ins, *x))
        xla = jax.jit(lambda *x, ins=ins: models.product_gemm_bits(ins, *x))
        for kind, make in (("raw", _raw), ("quantized", _mx)):
            for lead, M, N, K in sizes:
                if _late(f"bits {pair} {kind}"):
                    return bad
                try:
                    ops = make(np.random.default_rng(M + K), pair, lead, M, N, K)
                    got = np.asarray(kernel(*ops))
                    want = np.asarray(xla(*ops))
                    n = int((got != want).sum())
                    bad += n
                    say(f"{pair} {kind} {lead} {M}x{N}x{K}: {n} of {got.size:,d} differ")
                except Exception:
                    bad += 1
                    say(f"{pair} {kind} {lead} {M}x{N}x{K}: FAILED")
                    traceback.print_exc()
    # through matmul: ragged shapes and a batch, the kernel against the per-step chain
    text = MXF8.format(a="e4m3", b="e4m3")
    for shape in ((3, 129, 200), (2, 77, 96)):
        if _late("matmul bits"):
            return bad
        rng = np.random.default_rng(1)
        x = jnp.asarray(rng.standard_normal(shape[:1] + (shape[1], shape[2])), jnp.float32)
        w = jnp.asarray(rng.standard_normal((shape[2], 48)), jnp.float32)
        f = lambda x, w: jaxmma.matmul(x, w, instruction=text, arch=ARCH)  # noqa: E731
        with _product_kernel.path("kernel"):
            got = np.asarray(jax.jit(f)(x, w)).view(np.uint32)
        with _block_scaled.path("emulate"):
            want = np.asarray(jax.jit(f)(x, w)).view(np.uint32)
        n = int((got != want).sum())
        bad += n
        say(f"matmul {shape} x 48, kernel vs per-step chain: {n} of {got.size:,d} differ")
    return bad


def _bf16_dot(x, w):
    bf16 = jnp.bfloat16
    return jnp.dot(x.astype(bf16), w.astype(bf16), preferred_element_type=jnp.float32)


def raw_bits_timing(n=1024):
    """Kernel and per-step chain on raw-bit operands (NaN / Inf elements, extreme scales:
    the per-product branch nearly everywhere), bits in and out."""
    text = MXF8.format(a="e4m3", b="e4m3")
    ins = jaxmma.instruction(text, arch=ARCH)
    cfg = gemm.config(ins)
    ops = tuple(jnp.asarray(o) for o in _raw(np.random.default_rng(3), PAIRS[0], (), n, n, n))
    fns = {
        "kernel": jax.jit(lambda *x: _product_kernel.gemm_bits(ins, *x)),
        "chain": jax.jit(
            lambda A, B, C, SA, SB: _chain.xla_gemm_bits(cfg, A, B, C, scales=(SA, SB))
        ),
    }
    ms = _rounds(fns, ops, rounds=3, inner=2)
    same = int((np.asarray(fns["kernel"](*ops)) != np.asarray(fns["chain"](*ops))).sum())
    say(f"raw bits {n}^3: {ms}, {same} differ")
    return {k: round(v, 2) for k, v in ms.items()} | {"differing": same}


def timings(sizes=(1024, 4096), chain_up_to=4096):
    say("== timings: jaxmma.matmul(f32 x, f32 w), MXFP8 e4m3, under jit, medians ==")
    text = MXF8.format(a="e4m3", b="e4m3")
    rows = []
    for n in sizes:
        if _late(f"timing {n}^3"):
            break
        kx, kw = jax.random.split(jax.random.key(n))
        x = jax.random.normal(kx, (n, n), jnp.float32)
        w = jax.random.normal(kw, (n, n), jnp.float32)
        dot = jax.jit(_bf16_dot)
        fns = {"bf16 dot": dot.lower(x, w).compile()}
        f = lambda x, w: jaxmma.matmul(x, w, instruction=text, arch=ARCH)  # noqa: E731
        t0 = time.perf_counter()
        with _product_kernel.path("kernel"):
            fns["kernel"] = jax.jit(f).lower(x, w).compile()
        say(f"{n}^3 kernel compiled in {time.perf_counter() - t0:.1f} s")
        if n <= chain_up_to:
            with _block_scaled.path("emulate"):
                fns["chain"] = jax.jit(f).lower(x, w).compile()
        ms = _rounds(fns, (x, w), rounds=5, inner=4)
        same = "-"
        if "chain" in fns:
            k = np.asarray(fns["kernel"](x, w)).view(np.uint32)
            same = int((k != np.asarray(fns["chain"](x, w)).view(np.uint32)).sum())
        rows.append((n, ms, same))
        say(f"{n}^3: {ms}, kernel vs chain: {same} differ")
    raw = raw_bits_timing(sizes[0]) if not _late("raw-bit timing") else None
    dev = jax.devices()[0].device_kind
    print(f"\n{dev}, jax {jax.__version__}, tiling {_product_kernel.TILES}", flush=True)
    if raw:
        print(f"raw-bit operands, {sizes[0]}^3, bits in and out: {raw}")
    print("| n^3 | kernel ms | per-step chain ms | bf16 jnp.dot ms | kernel / dot | differing |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for n, ms, same in rows:
        chain = f"{ms['chain']:.2f}" if "chain" in ms else "-"
        print(
            f"| {n} | {ms['kernel']:.3f} | {chain} | {ms['bf16 dot']:.3f} | "
            f"{ms['kernel'] / ms['bf16 dot']:.1f}x | {same} |",
            flush=True,
        )


TUNE = [
    (16, 64, 2, 2),
    (16, 128, 4, 2),
    (16, 128, 2, 2),
    (16, 128, 8, 2),
    (16, 128, 4, 3),
    (16, 256, 4, 2),
    (32, 64, 2, 2),
]


def tune(n=4096):
    say(f"== tune: tilings at {n}^3 MXFP8 e4m3 quantized (bm, bn, warps, stages) ==")
    ins = jaxmma.instruction(MXF8.format(a="e4m3", b="e4m3"), arch=ARCH)
    ops = tuple(jnp.asarray(o) for o in _mx(np.random.default_rng(0), PAIRS[0], (), n, n, n))
    want = None
    for bm, bn, warps, stages in TUNE:
        if _late(f"tiling {bm}x{bn}"):
            break
        t = _product_kernel.Tiles(bm=bm, bn=bn, num_warps=warps, num_stages=stages)
        try:
            f = jax.jit(lambda *x, t=t: _product_kernel.gemm_bits(ins, *x, tiles=t))
            f = f.lower(*ops).compile()
            got = np.asarray(f(*ops))
            if want is None:
                want = np.asarray(jax.jit(lambda *x: models.product_gemm_bits(ins, *x))(*ops))
            ms = _rounds({"k": f}, ops, rounds=3, inner=3)["k"]
            say(
                f"{bm}x{bn}, {warps} warps, {stages} stages: {ms:.2f} ms, "
                f"{int((got != want).sum())} differ"
            )
        except Exception:
            say(f"{bm}x{bn}, {warps} warps, {stages} stages: FAILED")
            traceback.print_exc()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bits", action="store_true", help="bits only")
    p.add_argument("--tune", action="store_true", help="tilings only")
    p.add_argument("--small", action="store_true", help="tiny shapes (a check off a GPU)")
    p.add_argument("--budget", type=float, default=420.0)
    a = p.parse_args()
    BUDGET[0] = a.budget
    say(f"devices: {jax.devices()}")
    if a.small:
        sizes = [((), 32, 32, 64)]
    else:
        sizes = [((), 256, 256, 512), ((2,), 200, 136, 320)]
    if a.tune:
        tune(256 if a.small else 4096)
        return
    bad = check_bits(sizes)
    say(f"bits: {bad} differing in all")
    if not a.bits:
        timings((128,) if a.small else (1024, 4096))


if __name__ == "__main__":
    main()
