"""The native executor on a GPU: the emulation's bits, and its speed against jnp.dot.

    python benchmarks/native_gpu.py            # bits on every covered form, then timings
    python benchmarks/native_gpu.py --bits     # bits only
    python benchmarks/native_gpu.py --tune     # tilings first; the fastest is used after

Bits: ``jaxmma.matmul(..., executor="native")`` against ``executor="emulate"`` on random
raw bits (moderate and wide exponents, NaN, Inf, subnormals, signed zeros), ragged
shapes, with C, batch dimensions and promotion, and with the kernel options (split-K,
epilogues, output types, input rounding, fp8 scaling recipes). Timings: jitted calls after
a warm-up, the executors and the device's own ``jnp.dot`` on the same dtypes (f32 output)
taken in turn, each the median over rounds of 10 back-to-back calls.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma
from jaxmma.gemm import _gemm as _layer
from jaxmma.gemm import _native

FORMS = {
    "wgmma bf16": ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "sm_90a", None),
    "wgmma f16": ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "sm_90a", None),
    "wgmma bf16 P4": ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "sm_90a", 4),
    "mma.sync bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90", None),
    "mma.sync f16 P2": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "sm_90", 2),
    "wgmma e4m3": ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "sm_90a", None),
    "wgmma e4m3 P4": ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "sm_90a", 4),
    "wgmma e5m2": ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2", "sm_90a", None),
    "wgmma e5m2xe4m3 P4": ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e4m3", "sm_90a", 4),
    "wgmma e4m3xe5m2": ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2", "sm_90a", None),
    "wgmma e4m3 P1": ("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "sm_90a", 1),
    "mma.sync e4m3": ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "sm_90", None),
    "mma.sync e5m2 P4": ("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32", "sm_90", 4),
    "mma e4m3xe5m2 P2": ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_90",  2),
    "wgmma tf32": ("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", "sm_90a", None),
    "mma.sync tf32 P2": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "sm_90", 2),
}  # fmt: skip
DTYPES = {
    "bf16": jnp.bfloat16,
    "f16": jnp.float16,
    "e4m3": jnp.float8_e4m3fn,
    "e5m2": jnp.float8_e5m2,
    "tf32": jnp.float32,
}
SPECIAL_F32 = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC12345, 1, 0x807FFFFF]


def _elements(rng, fmt, shape, case):
    """Raw element bits: 'normal' values near 1, 'wide' any exponent, 'raw' any bits."""
    width = {"e4m3": 8, "e5m2": 8, "tf32": 32}.get(fmt, 16)
    dt = DTYPES[fmt]
    if case == "normal":
        x = np.asarray(jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dt))
        return x
    bits = rng.integers(0, 1 << width, shape, dtype=np.uint64).astype(np.uint32)
    if width == 32:
        if case == "wide":
            bits = np.where(np.isfinite(bits.view(np.float32)), bits, 0).astype(np.uint32)
        else:
            pick = rng.random(shape) < 0.1
            bits = np.where(pick, rng.choice(np.array(SPECIAL_F32, np.uint32), shape), bits)
        return bits.view(np.float32)
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


def _gemm(a, b, c=None, *, text, arch, P, ex, **options):
    return jaxmma.matmul(
        a, b, c, instruction=text, arch=arch, promote_every=P, executor=ex, **options
    )


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


#: kernel options checked on the native executor: (name, matmul keywords, C given)
OPTIONS = [
    ("split_k=3 cublas", dict(split_k=3), True),
    ("split_k=4 cutlass k_tile=32 halving", dict(split_k=4, split_rule="cutlass", k_tile=32,
                                                 split_reduce="halving"), True),
    ("split_k=2 xla tree (1, 0)", dict(split_k=2, split_rule="xla", split_reduce=(1, 0)), False),
    ("epilogue f32 alpha beta", dict(epilogue="f32", alpha=0.75, beta=-1.5), True),
    ("epilogue rounded bf16", dict(epilogue="rounded", alpha=2.0, out_dtype=jnp.bfloat16), True),
    ("out_dtype f16", dict(out_dtype=jnp.float16), True),
    ("input_rounding rz (f32 in)", dict(input_rounding="rz"), True),
    ("scales per tensor", dict(scale_a=(), scale_b=(), epilogue="f32"), True),
    ("scales row-wise", dict(scale_a="row", scale_b="row", epilogue="f32"), True),
    ("scales per tensor, bf16 out", dict(scale_a=(), scale_b=(), out_dtype=jnp.bfloat16), False),
    ("scales row-wise, no C", dict(scale_a="row", scale_b="row"), False),
    ("scales 1x128 / 128x128", dict(scale_a="block", scale_b="block"), False),
]  # fmt: skip

#: forms the options are checked on (each option is a chain of the form underneath)
OPTION_FORMS = (
    "wgmma bf16",
    "mma.sync f16 P2",
    "wgmma e4m3",
    "wgmma e5m2xe4m3 P4",
    "wgmma tf32",
    "mma.sync e4m3",
)


def _scales(rng, kind, M, K, N):
    if kind == ():
        shapes = ((), ())
    elif kind == "row":
        shapes = ((M, 1), (1, N))
    else:
        G = -(-K // 128)
        shapes = ((M, G), (G, -(-N // 128)))
    return [np.exp2(rng.integers(-3, 4, s)).astype(np.float32) * 1.25 for s in shapes]


def check_options(seed=1, shapes=(((2, 72, 1000), (1000, 136)),), forms=OPTION_FORMS):
    """Native against emulation with each kernel option (batched, ragged, B broadcast)."""
    rng = np.random.default_rng(seed)
    bad_total = 0
    for name in (f for f in forms if f in FORMS):
        text, arch, P = FORMS[name]
        ins = jaxmma.instruction(text, arch=arch)
        for oname, kw, with_c in OPTIONS:
            if P is not None and kw.get("scale_a") == "block":
                continue  # the block recipe promotes by itself (ValueError with P)
            n = bad = 0
            for sa, sb in shapes:
                M, K, N = sa[-2], sa[-1], sb[-1]
                kw2 = dict(kw)
                if "scale_a" in kw:
                    kw2["scale_a"], kw2["scale_b"] = _scales(rng, kw["scale_a"], M, K, N)
                for case in ("wide", "raw"):
                    if "input_rounding" in kw:
                        A = rng.standard_normal(sa).astype(np.float32)
                        B = rng.standard_normal(sb).astype(np.float32)
                    else:
                        A = _elements(rng, ins.atype, sa, case)
                        B = _elements(rng, ins.btype, sb, case)
                    C = _c(rng, sa[:-1] + sb[-1:], case) if with_c else None
                    out = {}
                    for ex in ("native", "emulate"):
                        f = jax.jit(
                            functools.partial(_gemm, text=text, arch=arch, P=P, ex=ex, **kw2)
                        )
                        d = np.asarray(f(A, B, C))
                        out[ex] = d.view(np.uint32 if d.itemsize == 4 else np.uint16)
                    n += out["native"].size
                    bad += int((out["native"] != out["emulate"]).sum())
            bad_total += bad
            print(f"{name:18s} {oname:36s} {n:>9,d} elements {bad:>7,d} differ", flush=True)
    return bad_total


def _rounds(fns, args, rounds=7, inner=10):
    """Median ms per call of each function, the functions timed in turn each round."""
    for f in fns.values():
        jax.block_until_ready(f(*args))
        jax.block_until_ready(f(*args))
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            n = inner[k] if isinstance(inner, dict) else inner
            t0 = time.perf_counter()
            for _ in range(n):
                out = f(*args)
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t0) / n)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def _dot(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


#: tilings tried by --tune: (bm, bn, max_kt, num_warps, num_stages, group_m)
TUNE = [
    (128, 256, 64, 8, 3, 8),
    (128, 256, 64, 8, 4, 8),
    (256, 128, 64, 8, 3, 8),
    (128, 128, 64, 8, 4, 8),
]
TUNE_PROMOTED = [
    (128, 128, 64, 8, 4, 8),
    (64, 128, 64, 4, 4, 8),
    (64, 256, 64, 8, 4, 8),
]


def _raw(x):
    u = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[x.dtype.itemsize]
    return jax.lax.bitcast_convert_type(x, u).astype(jnp.uint32)


def tune(candidates, families, n=4096):
    """Each tiling on the native kernel at n^3 beside jnp.dot; returns the fastest over
    the families (by the worst ratio to jnp.dot) with bits equal to the first tiling's."""
    rng = np.random.default_rng(2)
    ratios = {}
    print(f"\ntuning at {n}^3: ms (x jnp.dot)")
    for name in families:
        text, arch, P = FORMS[name]
        ins = jaxmma.instruction(text, arch=arch)
        cfg = _layer.config(text, arch, P)
        A = jnp.asarray(_elements(rng, ins.atype, (n, n), "normal"))
        B = jnp.asarray(_elements(rng, ins.btype, (n, n), "normal"))
        Ab, Bb = _raw(A), _raw(B)
        dot = jax.jit(_dot)
        fns, ref = {"dot": lambda a, b, A=A, B=B, dot=dot: dot(A, B)}, None  # same values
        for cand in candidates:
            t = _native.Tiles(*cand)
            try:
                f = jax.jit(functools.partial(_native.gemm_bits, cfg, C=None, tiles=t))
                out = np.asarray(f(Ab, Bb))
            except Exception as e:  # noqa: BLE001 (a tiling the compiler refuses)
                print(f"  {name} {cand}: failed: {type(e).__name__}: {str(e)[:200]}")
                continue
            if ref is None:
                ref = out
            if not np.array_equal(out, ref):
                print(f"  {name} {cand}: bits differ from the first tiling's")
                continue
            fns[cand] = f
        ms = _rounds(fns, (Ab, Bb), rounds=5)
        line = [f"{name}: jnp.dot {ms['dot']:.3f}"]
        for cand in fns:
            if cand != "dot":
                ratios.setdefault(cand, []).append(ms[cand] / ms["dot"])
                line.append(f"{cand} {ms[cand]:.3f} ({ms[cand] / ms['dot']:.2f})")
        print("\n  ".join(line), flush=True)
    best = min((c for c in ratios if len(ratios[c]) == len(families)), key=lambda c: max(ratios[c]))
    print(f"fastest tiling (worst ratio {max(ratios[best]):.2f} x jnp.dot): {best}")
    return _native.Tiles(*best)


#: tilings tried by --tune-routes, per (route, promoted): (families, candidates)
TUNE_ROUTES = {
    ("fp8", False): (("wgmma e4m3",), [
        (128, 256, 128, 8, 4, 8), (128, 256, 128, 8, 3, 8), (128, 256, 64, 8, 4, 8),
        (256, 128, 128, 8, 4, 8), (128, 128, 128, 8, 4, 8),
    ]),
    ("fp8", True): (("wgmma e4m3 P4",), [
        (64, 128, 128, 4, 4, 8), (128, 128, 128, 8, 4, 8), (64, 256, 128, 8, 4, 8),
        (128, 256, 128, 8, 3, 8), (128, 128, 64, 4, 4, 8),
    ]),
    ("f16", True): (("mma.sync e4m3",), [
        (64, 128, 64, 4, 4, 8), (128, 128, 64, 8, 4, 8), (128, 128, 64, 4, 4, 8),
        (64, 256, 64, 8, 4, 8), (128, 128, 128, 8, 3, 8), (64, 128, 128, 4, 3, 8),
    ]),
    ("tf32", False): (("wgmma tf32",), [
        (128, 256, 32, 8, 4, 8), (128, 128, 32, 8, 4, 8), (128, 256, 16, 8, 4, 8),
        (128, 128, 64, 8, 3, 8), (64, 256, 32, 4, 4, 8),
    ]),
    ("tf32", True): (("mma.sync tf32 P2",), [
        (64, 128, 32, 4, 4, 8), (128, 128, 32, 8, 4, 8), (128, 128, 16, 8, 4, 8),
        (64, 256, 32, 8, 4, 8),
    ]),
}  # fmt: skip


def timings(sizes=(1024, 4096)):
    rng = np.random.default_rng(1)
    rows = []
    print(
        f"\n{'family':18s} {'n':>5s} {'native':>9s} {'emulate':>9s} {'jnp.dot':>9s} "
        f"{'native/dot':>10s} {'emu/dot':>8s}"
    )
    for name, (text, arch, P) in FORMS.items():
        ins = jaxmma.instruction(text, arch=arch)
        for n in sizes:
            A = jnp.asarray(_elements(rng, ins.atype, (n, n), "normal"))
            B = jnp.asarray(_elements(rng, ins.btype, (n, n), "normal"))
            fns = {"dot": jax.jit(_dot)}
            for ex in ("native", "emulate"):
                fns[ex] = jax.jit(functools.partial(_gemm, text=text, arch=arch, P=P, ex=ex))
            big = n >= 4096
            t = _rounds(
                fns, (A, B), rounds=5 if big else 7,
                inner={"dot": 10, "native": 10, "emulate": 1 if big else 3},
            )  # fmt: skip
            rows.append((name, n, t["native"], t["emulate"], t["dot"]))
            print(
                f"{name:18s} {n:>5d} {t['native']:>8.3f}  {t['emulate']:>8.1f}  {t['dot']:>8.3f}  "
                f"{t['native'] / t['dot']:>9.2f}x {t['emulate'] / t['dot']:>7.0f}x",
                flush=True,
            )
    print("\n| family | n | native ms | emulation ms | `jnp.dot` ms | native / dot | speed")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, n, nat, emu, dot in rows:
        print(
            f"| {name} | {n} | {nat:.3f} | {emu:.1f} | {dot:.3f} | {nat / dot:.2f} | "
            f"{dot / nat:.2f}x |"
        )


#: shapes of the library comparison (none of them used by the tests)
LIBRARY_SHAPES = ((1536, 2304, 3072), (4096, 4096, 4096), (384, 5120, 1664))


def _torch_fp8(x, fmt, torch):
    t = torch.from_numpy(np.asarray(x).view(np.uint8).copy()).cuda()
    return t.view({"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt])


def check_library(seed=3, shapes=LIBRARY_SHAPES):
    """The native executor against cuBLAS through PyTorch on shapes the tests do not use:
    ``torch._scaled_mm`` (e4m3, fast accumulation on and off, per-tensor and row-wise
    scales) and ``torch.mm`` f32 with tf32 allowed (``input_rounding='rn'``)."""
    import torch  # noqa: PLC0415 (the device machine's PyTorch; not a dependency)

    rng = np.random.default_rng(seed)
    text = FORMS["wgmma e4m3"][0]
    bad_total = 0
    for M, K, N in shapes:
        A = _elements(rng, "e4m3", (M, K), "normal")
        B = _elements(rng, "e4m3", (K, N), "normal")
        ta = _torch_fp8(A, "e4m3", torch)
        tb = _torch_fp8(np.ascontiguousarray(B.T), "e4m3", torch).t()  # column-major B
        for scales in ("tensor", "row"):
            if scales == "tensor":
                sa, sb = np.float32(1.25 * 2.0**-3), np.float32(0.75 * 2.0**2)
                ja, jb = jnp.asarray(sa), jnp.asarray(sb)
                tsa = torch.tensor(float(sa), device="cuda")
                tsb = torch.tensor(float(sb), device="cuda")
            else:
                sa = np.exp2(rng.integers(-3, 4, (M, 1))).astype(np.float32) * 1.25
                sb = np.exp2(rng.integers(-3, 4, (1, N))).astype(np.float32) * 0.75
                ja, jb = jnp.asarray(sa), jnp.asarray(sb)
                tsa, tsb = torch.from_numpy(sa).cuda(), torch.from_numpy(sb).cuda()
            for fast in (True, False):
                for out in ("float32", "bfloat16"):
                    try:
                        t = torch._scaled_mm(
                            ta, tb, scale_a=tsa, scale_b=tsb,
                            out_dtype=getattr(torch, out), use_fast_accum=fast,
                        )  # fmt: skip
                    except RuntimeError as e:
                        print(f"  _scaled_mm {scales} {out}: not run ({str(e)[:80]})")
                        continue
                    torch.cuda.synchronize()
                    ref = t.view(torch.int32 if out == "float32" else torch.int16).cpu().numpy()
                    d = jaxmma.matmul(
                        A, B, instruction=text, arch="sm_90a",
                        promote_every=None if fast else 4, executor="native",
                        scale_a=ja, scale_b=jb, out_dtype=getattr(jnp, out),
                    )  # fmt: skip
                    d = np.asarray(d).view(ref.dtype)
                    bad = int((d != ref).sum())
                    bad_total += bad
                    print(
                        f"_scaled_mm e4m3 {M}x{K}x{N} {scales:6s} fast={fast!s:5s} {out:8s}: "
                        f"{d.size:>10,d} elements {bad:>8,d} differ",
                        flush=True,
                    )
        # tf32: torch.mm on f32 with tf32 allowed = the tf32 chain on inputs rounded (rn)
        Af = rng.standard_normal((M, K)).astype(np.float32)
        Bf = rng.standard_normal((K, N)).astype(np.float32)
        torch.backends.cuda.matmul.allow_tf32 = True
        ref = (torch.from_numpy(Af).cuda() @ torch.from_numpy(Bf).cuda()).cpu().numpy()
        torch.backends.cuda.matmul.allow_tf32 = False
        tf32 = FORMS["mma.sync tf32 P2"][0]
        d = np.asarray(
            jaxmma.matmul(Af, Bf, instruction=tf32, arch="sm_90", input_rounding="rn",
                          executor="native")
        )  # fmt: skip
        bad = int((d.view(np.uint32) != ref.view(np.uint32)).sum())
        print(
            f"torch.mm tf32 {M}x{K}x{N}: {d.size:>10,d} elements {bad:>8,d} differ "
            "(cuBLAS may split K on some shapes)",
            flush=True,
        )
    return bad_total


def torch_timings(n=4096):
    """``torch._scaled_mm`` (e4m3, per-tensor scales, f32 out) and ``torch.mm`` tf32 at
    n^3 beside the native executor's same GEMMs, one process, CUDA events, medians."""
    import torch  # noqa: PLC0415

    rng = np.random.default_rng(4)
    A = _elements(rng, "e4m3", (n, n), "normal")
    B = _elements(rng, "e4m3", (n, n), "normal")
    ta = _torch_fp8(A, "e4m3", torch)
    tb = _torch_fp8(np.ascontiguousarray(B.T), "e4m3", torch).t()
    one = torch.tensor(1.0, device="cuda")
    Af = torch.randn(n, n, device="cuda")
    Bf = torch.randn(n, n, device="cuda")

    def bench(f, reps=50):
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        times = []
        for _ in range(7):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(reps):
                f()
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) / reps)
        return float(np.median(times))

    def mm_tf32():
        torch.backends.cuda.matmul.allow_tf32 = True
        return Af @ Bf

    out = {}
    for fast in (True, False):
        out[f"_scaled_mm fast={fast}"] = bench(
            lambda fast=fast: torch._scaled_mm(
                ta, tb, scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast
            )
        )
    out["torch.mm tf32"] = bench(mm_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bits", action="store_true", help="check bits only")
    ap.add_argument("--tune", action="store_true", help="time the tilings first")
    ap.add_argument("--tune-routes", action="store_true", help="time the fp8/tf32 tilings")
    ap.add_argument("--forms", help="comma-separated families to check and time (default: all)")
    ap.add_argument("--library", action="store_true", help="compare with cuBLAS (PyTorch)")
    ap.add_argument("--options", action="store_true", help="check the kernel options only")
    ap.add_argument("--library-only", action="store_true", help="compare with cuBLAS only")
    ap.add_argument(
        "--time-only", action="store_true", help="timings only (with --library: and cuBLAS's)"
    )
    args = ap.parse_args()
    if args.forms:
        keep = args.forms.split(",")
        for name in list(FORMS):
            if name not in keep:
                del FORMS[name]
    dev = jax.devices()[0]
    print(f"device: {dev.device_kind}, jax {jax.__version__}, {datetime.date.today()}", flush=True)
    if args.tune:
        _native.TILES = tune(TUNE, ("wgmma bf16",))
        _native.PROMOTED_TILES = tune(TUNE_PROMOTED, ("wgmma bf16 P4", "mma.sync f16 P2"))
    if args.tune_routes:
        for key, (families, cands) in TUNE_ROUTES.items():
            if all(f in FORMS for f in families):
                _native.ROUTE_TILES[key] = tune(cands, families)
    print(f"tiling: {_native.TILES}; promoted: {_native.PROMOTED_TILES}", flush=True)
    for key, t in _native.ROUTE_TILES.items():
        print(f"tiling of {key}: {t}", flush=True)
    if args.library_only:
        print(f"differing elements against cuBLAS, in all: {check_library()}", flush=True)
        return
    if args.time_only:
        timings()
        if args.library:
            for name, ms in torch_timings().items():
                print(f"{name:28s} 4096^3 {ms:8.3f} ms", flush=True)
        return
    if not args.options:
        bad = check_bits()
        print(f"differing elements in all: {bad}", flush=True)
    bad = check_options()
    print(f"differing elements with kernel options, in all: {bad}", flush=True)
    if args.library:
        bad = check_library()
        print(f"differing elements against cuBLAS, in all: {bad}", flush=True)
    if not (args.bits or args.options):
        timings()
        if args.library:
            for name, ms in torch_timings().items():
                print(f"{name:28s} 4096^3 {ms:8.3f} ms", flush=True)


if __name__ == "__main__":
    main()
