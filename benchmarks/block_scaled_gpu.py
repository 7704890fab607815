"""The block-scaled Pallas kernel on a GPU: its bits against the XLA formulation, and
its speed against the XLA path and jnp.dot.

    python benchmarks/block_scaled_gpu.py            # bits, timings, more bits
    python benchmarks/block_scaled_gpu.py --tune     # tilings only (bits of each checked)
    python benchmarks/block_scaled_gpu.py --bits     # bits only
    python benchmarks/block_scaled_gpu.py --ptx      # registers and spills of the kernel

Each run stops starting new work after ``--budget`` seconds (default 420).

Bits: ``gemm._block_kernel.gemm_bits`` compiled against ``models._group_gemm.gemm_bits``
(XLA) on raw bits with the hard cases (every e2m1 code, zero and cancelling groups,
NaN / zero / subnormal / saturating scales, C with NaN, Inf, subnormals and -0), and
through ``gemm._block_scaled`` (ragged M, N, K, batch dimensions) with the kernel
forced on and off; the number of differing uint32 elements is printed. Timings: f32
inputs quantized inside ``jaxmma.matmul(x, w, instruction=..., arch="sm_120a")`` under
jit, the kernel and ``jnp.dot`` of bf16 operands (f32 result) compiled ahead and timed
in turn, medians of rounds of back-to-back calls; the XLA path timed apart (its long
calls slowed a dot timed after them by a third).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma
from jaxmma.gemm import _block_kernel, _block_scaled
from jaxmma.gemm import _gemm as _layer
from jaxmma.models import _group_gemm

FORMS = {
    "NVFP4": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3"
    ),
    "MXFP4": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X"
        ".f32.e2m1.e2m1.f32.ue8m0"
    ),
    "MXF4NVF4 2X": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X"
        ".f32.e2m1.e2m1.f32.ue8m0"
    ),
}
ARCH = "sm_120a"
SPECIAL_SCALES = np.array([0x00, 0x01, 0x38, 0x7F, 0x80, 0xB8, 0xFE, 0xFF], np.uint32)
SPECIAL_C = np.array(
    [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF, 1, 0x80000001, 0x7F7FFFFF],
    np.uint32,
)
T0 = time.perf_counter()


def say(*args):
    print(f"[{time.perf_counter() - T0:6.1f}s]", *args, flush=True)


def _ins(text):
    return jaxmma.instruction(text, arch=ARCH)


def _operands(text, rng, lead, M, N, K, wild=0.02):
    """Raw-bit operands (as tests/test_block_kernel.py draws them); scales for
    ``ceil(K / 64)`` k-steps."""
    nblk = -(-K // 64) * jaxmma.layouts.num_blocks(_ins(text))
    A = rng.integers(0, 16, lead + (M, K), dtype=np.uint32)
    B = rng.integers(0, 16, lead + (K, N), dtype=np.uint32)
    A[..., : M // 4, : min(16, K)] = 0  # whole groups of zero products
    A[..., M // 4 : M // 2, 16:32] = 0x8  # -0
    rows = B[..., 32:64, : N // 3]
    rows[...] = rng.choice(np.array([1, 9], np.uint32), rows.shape)  # cancelling groups
    A[..., -1, :] = np.arange(K) % 16  # every code against every code
    B[..., :, -1] = (np.arange(K) // 4) % 16
    if "ue4m3" in text:
        SA = rng.integers(0x20, 0x50, lead + (M, nblk), dtype=np.uint32)
        SB = rng.integers(0x20, 0x50, lead + (nblk, N), dtype=np.uint32)
    else:
        SA = rng.integers(110, 140, lead + (M, nblk), dtype=np.uint32)
        SB = rng.integers(110, 140, lead + (nblk, N), dtype=np.uint32)
    wild_a = rng.random(SA.shape) < wild
    wild_b = rng.random(SB.shape) < wild
    SA[wild_a] = rng.choice(SPECIAL_SCALES, wild_a.sum())
    SB[wild_b] = rng.choice(SPECIAL_SCALES, wild_b.sum())
    SA[..., 1, :] = rng.integers(0, 256, SA.shape[-1])  # full range: truncated groups
    C = rng.standard_normal(lead + (M, N)).astype(np.float32)
    C *= rng.choice(np.array([0, 1e-40, 1e-6, 1, 1e4, 1e37], np.float32), C.shape)
    C = C.view(np.uint32)
    special = rng.random(C.shape) < 0.05
    C[special] = rng.choice(SPECIAL_C, special.sum())
    C[..., 2, :] = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    A[..., 3, :] = 0  # C alone: subnormal C passes through the chain
    C[..., 3, :] = rng.integers(1, 1 << 23, N, dtype=np.uint32) | np.uint32(0x80000000) * (
        np.arange(N) % 2 == 0
    )
    return A, B, C, SA, SB


def _summary(bits):
    f = bits.view(np.float32)
    return (
        f"NaN {int(np.isnan(f).sum()):,d}, Inf {int(np.isinf(f).sum()):,d}, "
        f"subnormal {int(((np.abs(f) < 2.0**-126) & (f != 0)).sum()):,d}, "
        f"zero {int((f == 0).sum()):,d}"
    )


#: bits cases (form, "direct" / "ragged", leading dimensions, M, N, K): first a quick
#: pass, then after the timings the rest
QUICK_BITS = [
    ("NVFP4", "direct", (), 256, 256, 512),
    ("MXFP4", "direct", (), 256, 256, 512),
    ("NVFP4", "ragged", (2,), 300, 200, 1000),
    ("MXFP4", "ragged", (2,), 300, 200, 1000),
]
MORE_BITS = [
    ("NVFP4", "direct", (2,), 192, 320, 1024),
    ("MXFP4", "direct", (2,), 192, 320, 1024),
    ("NVFP4", "direct", (), 1024, 1024, 1024),
    ("MXFP4", "direct", (), 1024, 1024, 1024),
    ("MXF4NVF4 2X", "direct", (), 256, 256, 512),
    ("MXF4NVF4 2X", "ragged", (3,), 129, 77, 130),
    ("NVFP4", "ragged", (3,), 129, 77, 130),
    ("MXFP4", "ragged", (3,), 129, 77, 130),
]
SMALL_BITS = [
    (name, kind, (2,), 32, 48, 128) if kind == "direct" else (name, kind, (2,), 30, 20, 100)
    for name in FORMS
    for kind in ("direct", "ragged")
]
#: seconds after the start past which no new work begins (the run has 8 minutes)
BUDGET = [420.0]


def _late(what: str) -> bool:
    if time.perf_counter() - T0 > BUDGET[0]:
        say(f"skipped (time budget spent): {what}")
        return True
    return False


def check_bits(cases) -> int:
    """Kernel (compiled) against the XLA formulation; returns the differing elements."""
    say("== bits: the kernel compiled vs the XLA formulation (raw uint32) ==")
    total = 0
    for i, (name, kind, lead, M, N, K) in enumerate(cases):
        what = f"{name:12s} {kind:6s} {str(lead):5s} {M}x{N}x{K}"
        if _late(what):
            continue
        text = FORMS[name]
        ins = _ins(text)
        try:
            A, B, C, SA, SB = _operands(text, np.random.default_rng(100 + i), lead, M, N, K)
            if kind == "direct":  # K a multiple of 64, the kernel itself
                ops = (A, B, C, SA, SB)
                got = np.asarray(
                    jax.jit(lambda *x, ins=ins: _block_kernel.gemm_bits(ins, *x))(*ops)
                )
                want = np.asarray(jax.jit(lambda *x, ins=ins: _group_gemm.gemm_bits(ins, *x))(*ops))
            else:  # through the executor: K padded, A and its scales broadcast
                cfg = _layer.config(ins)

                def run(*x, cfg=cfg):
                    return _block_scaled.gemm_bits(cfg, x[0], x[1], x[2], x[3:])

                nblk = -(-K // (64 // jaxmma.layouts.num_blocks(ins)))  # ceil(K / block)
                ops = (A[:1], B, C, SA[:1, :, :nblk], SB[..., :nblk, :])
                out = {}
                for mode in ("kernel", "xla"):
                    with _block_kernel.path(mode):
                        out[mode] = np.asarray(jax.jit(run)(*ops))
                got, want = out["kernel"], out["xla"]
            bad = int((got != want).sum())
            total += bad
            say(f"{what}: {bad:,d} of {got.size:,d} differ ({_summary(want)})")
        except Exception:
            total += 1
            say(f"{what}: FAILED")
            traceback.print_exc()
    say(f"bits: {total:,d} differing elements in these cases (0 expected)")
    return total


def _rounds(fns, args, rounds=7, inner=10):
    """Median ms per call of each compiled function, the functions timed in turn."""
    for f in fns.values():
        jax.block_until_ready(f(*args))
        jax.block_until_ready(f(*args))
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                out = f(*args)
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t0) / inner)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def _compiled(mode, text, x, w):
    """``jaxmma.matmul`` of f32 inputs (quantized inside), compiled ahead under ``mode``."""
    with _block_kernel.path(mode):
        f = jax.jit(lambda x, w: jaxmma.matmul(x, w, instruction=text, arch=ARCH))
        t0 = time.perf_counter()
        c = f.lower(x, w).compile()
        return c, time.perf_counter() - t0


def timings(sizes=(1024, 4096)):
    say("== timings: jaxmma.matmul(f32 x, f32 w) under jit, medians ==")
    rows = []
    for n in sizes:
        kx, kw = jax.random.split(jax.random.key(n))
        x = jax.random.normal(kx, (n, n), jnp.float32)
        w = jax.random.normal(kw, (n, n), jnp.float32)
        dot = jax.jit(
            lambda x, w: jnp.dot(
                x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32
            )
        )
        dot = dot.lower(x, w).compile()
        for name in ("NVFP4", "MXFP4"):
            text = FORMS[name]
            if _late(f"timing {name} {n}^3"):
                continue
            try:
                fns = {"bf16 dot": dot}
                for mode in ("kernel", "xla"):
                    fns[mode], secs = _compiled(mode, text, x, w)
                    say(f"{name} {n}^3 {mode}: compiled in {secs:.1f} s")
                same = np.asarray(fns["kernel"](x, w)).view(np.uint32)
                same = int((same != np.asarray(fns["xla"](x, w)).view(np.uint32)).sum())
                # the kernel and the dot side by side; the XLA path (25 ms a call at
                # 4096^3) apart, so that its load does not slow the dot that follows it
                pair = {k: fns[k] for k in ("kernel", "bf16 dot")}
                ms = _rounds(pair, (x, w), rounds=7, inner=10)
                ms |= _rounds({"xla": fns["xla"]}, (x, w), rounds=3, inner=10 if n <= 2048 else 4)
                rows.append((name, n, ms["kernel"], ms["xla"], ms["bf16 dot"], same))
                say(
                    f"{name} {n}^3: kernel {ms['kernel']:.3f} ms, XLA {ms['xla']:.3f} ms, "
                    f"bf16 dot {ms['bf16 dot']:.3f} ms; kernel vs XLA values: {same} differ"
                )
            except Exception:
                say(f"{name} {n}^3: FAILED")
                traceback.print_exc()
    dev = jax.devices()[0].device_kind
    t2 = _block_kernel.PAIR_TILES
    print(f"\n{dev}, jax {jax.__version__}, tiling {_block_kernel.TILES}, 2X {t2}", flush=True)
    print(
        "| form | n^3 | kernel ms | XLA path ms | bf16 jnp.dot ms | kernel / dot | "
        "XLA / kernel | differing |",
        flush=True,
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for name, n, k, x, d, same in rows:
        print(
            f"| {name} | {n} | {k:.3f} | {x:.3f} | {d:.3f} | {k / d:.1f}x | {x / k:.1f}x "
            f"| {same} |",
            flush=True,
        )
    print(flush=True)


TUNE = [
    (32, 64, 4, 3),
    (32, 64, 4, 2),
    (64, 32, 4, 2),
    (64, 32, 4, 3),
    (16, 64, 4, 2),
    (32, 64, 2, 3),
    (16, 64, 2, 3),
    (32, 32, 2, 3),
    (64, 64, 4, 3),
    (32, 128, 4, 3),
    (64, 64, 8, 2),
]


def _dots_only(c, values, exps, man, rep, scales=None):
    """The kernel's loads and dots without the fusion (wrong bits): a floor for its time."""
    for i, v in enumerate(values):
        c = (c + exps[i // rep]) ^ jax.lax.bitcast_convert_type(v, jnp.int32)
    return c


def tune(n=4096):
    """Each tiling of :data:`TUNE` at n^3 (NVFP4), the same bits checked, and the kernel
    without its fusion (dots and loads only); stops when the budget is spent."""
    say(f"== tune: tilings at {n}^3 NVFP4 (bm, bn, num_warps, num_stages) ==")
    text = FORMS["NVFP4"]
    ins = _ins(text)
    rng = np.random.default_rng(7)
    ops = _operands(text, rng, (), n, n, n, wild=0.0)
    ops = tuple(jnp.asarray(o) for o in ops)
    want = np.asarray(jax.jit(lambda *x, ins=ins: _group_gemm.gemm_bits(ins, *x))(*ops))
    results = []
    runs = [(t, None) for t in TUNE] + [(TUNE[0], _dots_only)]
    for (bm, bn, warps, stages), fuse in runs:
        t = dataclasses.replace(
            _block_kernel.TILES, bm=bm, bn=bn, num_warps=warps, num_stages=stages
        )
        what = f"{bm}x{bn} warps {warps} stages {stages}"
        what += " DOTS ONLY" if fuse else ""
        if _late(what):
            continue
        try:
            f = jax.jit(
                lambda *x, t=t, fuse=fuse: _block_kernel.gemm_bits(ins, *x, tiles=t, fuse=fuse)
            )
            t0 = time.perf_counter()
            c = f.lower(*ops).compile()
            secs = time.perf_counter() - t0
            bad = int((np.asarray(c(*ops)) != want).sum())
            ms = _rounds({"k": c}, ops, rounds=3, inner=3)["k"]
            if fuse is None:
                results.append((ms, t))
            say(f"{what}: {ms:.3f} ms (compile {secs:.1f} s), {bad:,d} differ")
        except Exception as e:  # a tiling that does not compile: the next one
            say(f"{what}: FAILED {type(e).__name__}: {str(e)[:300]}")
    if results:
        ms, t = min(results, key=lambda r: r[0])
        say(f"fastest: {t} at {ms:.3f} ms")


def ptx_report(dump: str, n: int = 1024):
    """Compile the kernel (NVFP4, n^3, default tiling) with XLA dumping its programs to
    ``dump``, and show ``ptxas -v`` (registers, spills) for the PTX that holds it."""
    say(f"== ptx: the kernel's PTX in {dump} ==")
    try:
        text = FORMS["NVFP4"]
        ins = _ins(text)
        ops = tuple(jnp.asarray(o) for o in _operands(text, np.random.default_rng(1), (), n, n, n))
        jax.jit(lambda *x: _block_kernel.gemm_bits(ins, *x)).lower(*ops).compile()
        files = [os.path.join(d, f) for d, _, fs in os.walk(dump) for f in fs if f.endswith(".ptx")]
        hits = [f for f in files if "_kernel" in open(f, errors="replace").read()]
        say(f"{len(files)} PTX files, {len(hits)} with the kernel: {hits[:4]}")
        ptxas = shutil.which("ptxas")
        if ptxas is None:
            for root in sys.path:
                c = os.path.join(root, "nvidia", "cuda_nvcc", "bin", "ptxas")
                if os.path.exists(c):
                    ptxas = c
                    break
        say(f"ptxas: {ptxas}")
        for f in hits[:2]:
            for line in open(f, errors="replace"):
                if line.startswith((".version", ".target")) or ".maxntid" in line:
                    print("   ", line.rstrip(), flush=True)
            if ptxas:
                arch = "sm_90a"
                r = subprocess.run(
                    [ptxas, f"-arch={arch}", "-v", f, "-o", os.devnull],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                for line in (r.stdout + r.stderr).splitlines():
                    if "_kernel" in line or "registers" in line or "spill" in line:
                        print("   ", line, flush=True)
    except Exception:
        say("ptx report FAILED")
        traceback.print_exc()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tune", action="store_true", help="tilings only (bits checked for each)")
    p.add_argument("--bits", action="store_true", help="bits only")
    p.add_argument("--small", action="store_true", help="tiny shapes (a check off a GPU)")
    p.add_argument("--budget", type=float, default=420.0, help="seconds before no new work")
    p.add_argument("--ptx", action="store_true", help="registers and spills (ptxas -v) only")
    args = p.parse_args()
    BUDGET[0] = args.budget
    if args.ptx:  # before the backend starts
        dump = tempfile.mkdtemp(prefix="block_kernel_dump_")
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}"
    say(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.devices()}")
    t1, t2 = _block_kernel.TILES, _block_kernel.PAIR_TILES
    say(f"kernel chosen automatically: {_block_kernel.chosen()}; tiling {t1}, 2X {t2}")
    if args.ptx:
        ptx_report(dump, 128 if args.small else 1024)
        return
    if args.tune:
        tune(128 if args.small else 4096)
        return
    if args.small:
        check_bits(SMALL_BITS)
    else:
        check_bits(QUICK_BITS)
    if not args.bits:
        timings((64, 128) if args.small else (4096, 1024))
    if not args.small:
        check_bits(MORE_BITS)


if __name__ == "__main__":
    main()
