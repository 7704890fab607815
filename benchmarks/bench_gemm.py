"""Speed of the GEMM layer: ``jaxmma.matmul`` against native GEMMs and MMA-Sim.

Every figure is the median of ``--repeat`` calls after a warm-up (compilation excluded),
measured side by side in one process on the same inputs:

* ``table``: one row per family, an N x N x N emulated GEMM (``--size``, default 512) and
  its ratio to a native float32 ``jnp.dot`` (precision HIGHEST) of the same shape. Where
  MMA-Sim (``pip install mmasim`` and a CPU build of torch) is importable, its
  whole-matrix call ``MMA("Hopper", "m16n8k16.f32.bf16.bf16.f32")(A, B, C)`` runs on the
  same bf16 inputs, its bits are compared with jaxmma's, and the speed-up is printed.
* ``memory``: the peak resident set of a fresh process that runs one bf16 ``matmul`` of
  ``--memory-size`` (default 2048) cubed.
* ``compile``: the first call (trace + compile + run) of a bf16 ``matmul`` in a fresh
  process, at ``--compile-size`` cubed and with K four times larger (the compile time
  must not grow with K).
* ``eager``: ``jax.vmap(ins)`` over 256 warps called eagerly (as a notebook does) against
  the same call jitted.

    python benchmarks/bench_gemm.py [table memory compile eager] [--size 512] [--repeat 5]

Results go to stdout as Markdown (machine, date, device); record them in
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
NVFP4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3"
)
MXF8F6F4 = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.{0}.{0}.f32.ue8m0"
)
MXFP4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0"
)
#: family -> (instruction, arch, element dtype of A and B, matmul keywords)
FAMILIES = {
    "bf16 m16n8k16, f32 acc": (BF16, "sm_90", jnp.bfloat16, {}),
    "f16 m16n8k16, f16 acc": (
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
        "sm_90",
        jnp.float16,
        {},
    ),
    "f16 m16n8k16, f32 acc": (
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "sm_90",
        jnp.float16,
        {},
    ),
    "tf32 m16n8k8, f32 acc": (
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
        "sm_90",
        jnp.float32,
        {},
    ),
    "e4m3 m16n8k32, f32 acc (sm_90)": (
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "sm_90",
        jnp.float8_e4m3fn,
        {},
    ),
    "e4m3 m16n8k32, promote_every=4": (
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "sm_90",
        jnp.float8_e4m3fn,
        {"promote_every": 4},
    ),
    "s8 m16n8k32, s32 acc satfinite": (
        "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32",
        "sm_90",
        jnp.int8,
        {},
    ),
    "e4m3 m16n8k32, f32 acc (sm_100)": (
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "sm_100",
        jnp.float8_e4m3fn,
        {},
    ),
    "e4m3 wgmma m64n64k32, promote_every=4": (
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3",
        "sm_90a",
        jnp.float8_e4m3fn,
        {"promote_every": 4},
    ),
    "MXFP8 e4m3 m16n8k32 block-scaled (sm_120a)": (MXF8F6F4.format("e4m3"), "sm_120a", None, {}),
    "MXFP6 e3m2 m16n8k32 block-scaled (sm_120a)": (MXF8F6F4.format("e3m2"), "sm_120a", None, {}),
    "MXFP4 m16n8k64 block-scaled (sm_120a)": (MXFP4, "sm_120a", None, {}),
    "NVFP4 m16n8k64 block-scaled (sm_120a)": (NVFP4, "sm_120a", None, {}),
}


def _median_ms(fn, repeat):
    jax.block_until_ready(fn())  # compile and warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def _inputs(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    C = rng.standard_normal((n, n)).astype(np.float32)
    if dtype is jnp.int8:
        A, B = (np.clip(np.round(x * 40), -127, 127) for x in (A, B))
        C = np.round(C * 1000).astype(np.int32)
    if dtype is None:  # block-scaled: float32 in, quantized by matmul (its default recipe)
        return jnp.asarray(A), jnp.asarray(B), jnp.asarray(C)
    return jnp.asarray(A, dtype), jnp.asarray(B, dtype), jnp.asarray(C)


def _mmasim():
    try:
        import torch
        from mmasim.nv_ptx.sim import MMA
    except ImportError:
        return None
    return torch, MMA


def table(size, repeat, only=""):
    sim = _mmasim()
    rng = np.random.default_rng(1)
    F = jnp.asarray(rng.standard_normal((size, size)), jnp.float32)
    G = jnp.asarray(rng.standard_normal((size, size)), jnp.float32)
    native = jax.jit(lambda x, y: jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST))
    t_native = _median_ms(lambda: native(F, G), repeat)
    Fb, Gb = F.astype(jnp.bfloat16), G.astype(jnp.bfloat16)
    t_bf16 = _median_ms(lambda: jnp.dot(Fb, Gb, preferred_element_type=jnp.float32), repeat)
    print(
        f"\n{size}^3: native float32 jnp.dot (precision HIGHEST) {t_native:.2f} ms, "
        f"native bf16 jnp.dot (f32 result) {t_bf16:.2f} ms\n"
    )
    print("| family | jaxmma ms | / native f32 | MMA-Sim ms | jaxmma speed-up | same bits |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for fam, (text, arch, dtype, kw) in FAMILIES.items():
        if only and not re.search(only, fam):
            continue
        ins = jaxmma.instruction(text, arch=arch)
        A, B, C = _inputs(size, dtype)
        if ins.ctype == "f16":
            C = C.astype(jnp.float16)
        t = _median_ms(lambda: jaxmma.matmul(A, B, C, instruction=ins, **kw), repeat)  # noqa: B023
        sim_ms = speed = same = "-"
        if sim is not None and text == BF16:
            torch, MMA = sim
            D = np.asarray(jaxmma.matmul(A, B, C, instruction=ins))
            ta = torch.from_numpy(np.asarray(A.astype(jnp.float32))).to(torch.bfloat16)
            tb = torch.from_numpy(np.asarray(B.astype(jnp.float32))).to(torch.bfloat16)
            tc = torch.from_numpy(np.asarray(C))
            mma = MMA("Hopper", "m16n8k16.f32.bf16.bf16.f32")
            t0 = time.perf_counter()
            ref = mma(ta, tb, tc)
            sim_t = 1e3 * (time.perf_counter() - t0)
            same_bits = np.array_equal(D.view(np.uint32), ref.numpy().view(np.uint32))
            sim_ms, speed = f"{sim_t:,.0f}", f"{sim_t / t:,.1f}x"
            same = "yes" if same_bits else "NO"
        print(f"| {fam} | {t:,.1f} | {t / t_native:,.0f}x | {sim_ms} | {speed} | {same} |")
        sys.stdout.flush()


_CHILD = """
import json, resource, sys, time
import jax, jax.numpy as jnp, numpy as np, jaxmma
m, k, n = (int(v) for v in sys.argv[1:4])
rng = np.random.default_rng(0)
A = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
B = jnp.asarray(rng.standard_normal((k, n)), jnp.bfloat16)
jax.block_until_ready((A, B))
t0 = time.perf_counter()
D = jax.block_until_ready(jaxmma.matmul(A, B, instruction=sys.argv[4], arch="sm_90"))
first = time.perf_counter() - t0
t0 = time.perf_counter()
jax.block_until_ready(jaxmma.matmul(A, B, instruction=sys.argv[4], arch="sm_90"))
again = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
print(json.dumps({"first_s": first, "again_s": again, "peak_rss_gib": rss}))
"""


def _child(m, k, n):
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(m), str(k), str(n), BF16],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory(size):
    r = _child(size, size, size)
    print(
        f"\nmemory: bf16 matmul {size}^3 in a fresh process: peak RSS "
        f"{r['peak_rss_gib']:.2f} GiB (first call {r['first_s']:.1f} s, then "
        f"{r['again_s']:.1f} s)"
    )


def compile_time(size):
    print("\ncompile: first call (trace + compile + one run) minus a second call, fresh process")
    print("| M x K x N | first call s | second call s | compile s |")
    print("| --- | ---: | ---: | ---: |")
    for k in (size, 4 * size):
        r = _child(size, k, size)
        first, again = r["first_s"], r["again_s"]
        print(f"| {size} x {k} x {size} | {first:.1f} | {again:.2f} | {first - again:.1f} |")


def eager(warps=256, repeat=3):
    ins = jaxmma.instruction(BF16, arch="sm_90")
    rng = np.random.default_rng(0)
    regs = [
        jnp.asarray(rng.integers(0, 2**32, (warps, 32, op.nregs), dtype=np.uint64), jnp.uint32)
        for op in ins.operands
        if not op.output
    ]
    f = jax.vmap(ins)
    t0 = time.perf_counter()
    jax.block_until_ready(f(*regs))
    first = time.perf_counter() - t0
    t_eager = _median_ms(lambda: f(*regs), repeat)
    jf = jax.jit(f)
    t_jit = _median_ms(lambda: jf(*regs), repeat)
    print(
        f"\neager: jax.vmap(ins) over {warps} warps, no jit: first call {first:.2f} s, then "
        f"{t_eager:.1f} ms; jitted: {t_jit:.1f} ms"
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("parts", nargs="*", default=["table", "memory", "compile", "eager"])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", default="", help="regex over family names (table)")
    p.add_argument("--memory-size", type=int, default=2048)
    p.add_argument("--compile-size", type=int, default=1024)
    args = p.parse_args(argv)
    dev = jax.devices()[0]
    cpu = platform.processor() or platform.machine()
    sim = _mmasim()
    print(
        f"# {datetime.date.today()}  {cpu}, {os.cpu_count()} cores  jax {jax.__version__} on "
        f"{dev.platform} ({dev.device_kind})"
        + (f"  torch {sim[0].__version__} (MMA-Sim)" if sim else "  (MMA-Sim not importable)")
    )
    for part in args.parts:
        if part == "table":
            table(args.size, args.repeat, args.only)
        elif part == "memory":
            memory(args.memory_size)
        elif part == "compile":
            compile_time(args.compile_size)
        elif part == "eager":
            eager()
        else:
            p.error(f"unknown part {part!r}: choose from table, memory, compile, eager")


if __name__ == "__main__":
    main()
