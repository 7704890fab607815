"""The native executor on a GPU: the emulation's bits, and its speed against jnp.dot.

    python benchmarks/native_gpu.py            # bits on every covered form, then timings
    python benchmarks/native_gpu.py --bits     # bits only

Bits: ``jaxmma.matmul(..., executor="native")`` against ``executor="emulate"`` on random
raw bits (moderate and wide exponents, NaN, Inf, subnormals, signed zeros), ragged
shapes, with C, batch dimensions and promotion. Timings: medians of jitted calls after a
warm-up, as multiples of the device's own ``jnp.dot`` on the same dtypes (f32 output).
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma

FORMS = {
    "wgmma bf16": ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "sm_90a", None),
    "wgmma f16": ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "sm_90a", None),
    "wgmma bf16 P4": ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "sm_90a", 4),
    "mma.sync bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90", None),
    "mma.sync f16 P2": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "sm_90", 2),
}
DTYPES = {
    "bf16": jnp.bfloat16,
    "f16": jnp.float16,
    "e4m3": jnp.float8_e4m3fn,
    "e5m2": jnp.float8_e5m2,
}
SPECIAL_F32 = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC12345, 1, 0x807FFFFF]


def _elements(rng, fmt, shape, case):
    """Raw element bits: 'normal' values near 1, 'wide' any exponent, 'raw' any bits."""
    width = 8 if fmt in ("e4m3", "e5m2") else 16
    dt = DTYPES[fmt]
    if case == "normal":
        x = np.asarray(jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dt))
        return x
    bits = rng.integers(0, 1 << width, shape, dtype=np.uint32)
    if case == "wide":  # finite values of any exponent
        x = jnp.asarray(bits.astype(np.uint8 if width == 8 else np.uint16)).view(dt)
        x = jnp.where(jnp.isfinite(x.astype(jnp.float32)), x, jnp.zeros_like(x))
        return np.asarray(x)
    raw = bits.astype(np.uint8 if width == 8 else np.uint16)
    return np.asarray(jnp.asarray(raw).view(dt))


def _c(rng, shape, case):
    if case == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    bits = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    if case == "raw":
        pick = rng.random(shape) < 0.2
        bits = np.where(pick, rng.choice(np.array(SPECIAL_F32, np.uint32), shape), bits)
    else:
        bits = np.where(np.isfinite(bits.view(np.float32)), bits, 0).astype(np.uint32)
    return bits.view(np.float32)


def _gemm(a, b, c=None, *, text, arch, P, ex):
    return jaxmma.matmul(a, b, c, instruction=text, arch=arch, promote_every=P, executor=ex)


def check_bits(seed=0):
    rng = np.random.default_rng(seed)
    shapes = [((72, 40), (40, 264)), ((2, 128, 512), (2, 512, 96)), ((200, 1000), (1000, 136))]
    rows, bad_total = [], 0
    for name, (text, arch, P) in FORMS.items():
        ins = jaxmma.instruction(text, arch=arch)
        mm = {
            ex: jax.jit(functools.partial(_gemm, text=text, arch=arch, P=P, ex=ex))
            for ex in ("native", "emulate")
        }
        n = bad = 0
        for sa, sb in shapes:
            for case in ("normal", "wide", "raw"):
                A = _elements(rng, ins.atype, sa, case)
                B = _elements(rng, ins.btype, sb, case)
                C = _c(rng, sa[:-1] + sb[-1:], case)
                for c in (C, np.zeros_like(C), -np.zeros_like(C)):
                    d_nat = np.asarray(mm["native"](A, B, c)).view(np.uint32)
                    d_emu = np.asarray(mm["emulate"](A, B, c)).view(np.uint32)
                    n += d_nat.size
                    bad += int((d_nat != d_emu).sum())
                    if bad and (d_nat != d_emu).any() and len(rows) < 40:
                        i = np.argwhere(d_nat != d_emu)[0]
                        rows.append(
                            f"  {name} {case} {sa}x{sb}: first at {tuple(i)} native "
                            f"{d_nat[tuple(i)]:#010x} emulate {d_emu[tuple(i)]:#010x}"
                        )
        bad_total += bad
        print(f"{name:18s} {n:>10,d} elements  {bad:>8,d} differ", flush=True)
    print("\n".join(rows))
    return bad_total


def _median_ms(f, *args, reps=10):
    f(*args).block_until_ready()
    f(*args).block_until_ready()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(*args).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def timings(sizes=(1024, 4096)):
    rng = np.random.default_rng(1)
    print(
        f"\n{'family':18s} {'n':>5s} {'native':>9s} {'emulate':>9s} {'jnp.dot':>9s} "
        f"{'native/dot':>10s} {'emu/dot':>8s}"
    )
    for name, (text, arch, P) in FORMS.items():
        ins = jaxmma.instruction(text, arch=arch)
        for n in sizes:
            A = jnp.asarray(_elements(rng, ins.atype, (n, n), "normal"))
            B = jnp.asarray(_elements(rng, ins.btype, (n, n), "normal"))
            dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
            t_dot = _median_ms(dot, A, B)
            t = {}
            for ex in ("native", "emulate"):
                f = jax.jit(functools.partial(_gemm, text=text, arch=arch, P=P, ex=ex))
                t[ex] = _median_ms(f, A, B, reps=10 if ex == "native" or n < 4096 else 3)
            print(
                f"{name:18s} {n:>5d} {t['native']:>8.3f}  {t['emulate']:>8.1f}  {t_dot:>8.3f}  "
                f"{t['native'] / t_dot:>9.2f}x {t['emulate'] / t_dot:>7.0f}x",
                flush=True,
            )


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bits", action="store_true", help="check bits only")
    args = ap.parse_args()
    dev = jax.devices()[0]
    print(f"device: {dev.device_kind}, jax {jax.__version__}", flush=True)
    bad = check_bits()
    print(f"differing elements in all: {bad}", flush=True)
    if not args.bits:
        timings()


if __name__ == "__main__":
    main()
