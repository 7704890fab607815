"""Throughput of the emulator: warp-level instructions per second, per family.

Each family runs one jit-compiled call over a batch of warps (random raw register bits),
timed after a warm-up as the median of several calls. Where MMA-Sim (``pip install
mmasim`` with a CPU build of torch) is importable, the same m16n8k16 bf16 / m16n8k8 tf32 /
m16n8k16 f16 instructions run through it side by side on the same inputs, and the ratio
is printed: MMA-Sim's per-instruction call (``MMA(arch, form)(A, B, C)``, how it is meant
to be used) and its batched dot-product kernel (``.dpa`` over all warps at once).

    python benchmarks/bench_mma.py [--warps 10000] [--repeat 5] [--only REGEX]

Results go to stdout as a Markdown table (machine, date, device); record them in
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma

FAMILIES = {
    "bf16 m16n8k16 f32": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "f16 m16n8k16 f16": "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
    "tf32 m16n8k8 f32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    "e4m3 m16n8k32 f32 (sm_90 path)": "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
    "f16 m8n8k4 f32 (sm_90 scalar path)": "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32",
    "s8 m16n8k32 satfinite": "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32",
    "b1 m16n8k256 xor": "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.xor.popc",
    "sparse f16 m16n8k32 f32": "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32"
    ".f16.f16.f32",
}
MMASIM = {  # family -> (MMA-Sim architecture, MMA-Sim form, torch dtype name)
    "bf16 m16n8k16 f32": ("Hopper", "m16n8k16.f32.bf16.bf16.f32", "bfloat16"),
    "f16 m16n8k16 f16": ("Hopper", "m16n8k16.f16.f16.f16.f16", "float16"),
    "tf32 m16n8k8 f32": ("Hopper", "m16n8k8.f32.tf32.tf32.f32", "float32"),
}


def _inputs(ins, warps, seed=0):
    rng = np.random.default_rng(seed)
    args = []
    for op in ins.operands:
        if op.output:
            continue
        if op.name == "e":  # valid ordered metadata: indices (0, 1) in every nibble
            args.append(jnp.full((warps, 32), 0x44444444, jnp.uint32))
            continue
        x = rng.integers(0, 2**32, (warps, 32, op.nregs), dtype=np.uint64).astype(np.uint32)
        args.append(jnp.asarray(x))
    return args


def _time(fn, repeat):
    fn().block_until_ready()  # compile and warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn().block_until_ready()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_jaxmma(text, warps, repeat):
    ins = jaxmma.instruction(text, arch="sm_90")
    args = _inputs(ins, warps)
    kw = {"selector": 0} if ins.sparse else {}
    f = jax.jit(lambda *a: ins(*a, **kw))
    t = _time(lambda: f(*args), repeat)
    return warps / t


def bench_mmasim(family, warps, repeat):
    try:
        import torch
        from mmasim.nv_ptx.sim import MMA
    except ImportError:
        return None
    arch, form, dt = MMASIM[family]
    sim = MMA(arch, form)
    ins = jaxmma.instruction(FAMILIES[family], arch="sm_90")
    rng = np.random.default_rng(0)
    dtype = getattr(torch, dt)
    A = torch.tensor(rng.standard_normal((warps, ins.m, ins.k)), dtype=torch.float32).to(dtype)
    B = torch.tensor(rng.standard_normal((warps, ins.k, ins.n)), dtype=torch.float32).to(dtype)
    cdt = torch.float16 if ins.ctype == "f16" else torch.float32
    C = torch.tensor(rng.standard_normal((warps, ins.m, ins.n)), dtype=torch.float32).to(cdt)
    # one instruction per call, as the simulator is meant to be used (a sample of warps)
    few = max(1, min(warps, 200))
    t0 = time.perf_counter()
    for w in range(few):
        sim(A[w], B[w], C[w])
    per_call = few / (time.perf_counter() - t0)
    # its vectorised dot-product kernel over every warp at once
    a = A[:, :, None, :].expand(-1, -1, ins.n, -1)
    b = B.transpose(1, 2)[:, None, :, :].expand(-1, ins.m, -1, -1)

    def batched():
        sim.dpa(a, b, C)

    batched()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        batched()
        times.append(time.perf_counter() - t0)
    return per_call, warps / statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warps", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", default="")
    args = p.parse_args(argv)
    dev = jax.devices()[0]
    cpu = platform.processor() or platform.machine()
    print(
        f"# {datetime.date.today()}  {platform.node()}  {cpu}  jax {jax.__version__} on "
        f"{dev.platform} ({dev.device_kind}), warps per call {args.warps}"
    )
    print(
        "| family | jaxmma warps/s | MMA-Sim per-call warps/s | MMA-Sim batched warps/s |"
        " jaxmma / per-call | jaxmma / batched |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for fam, text in FAMILIES.items():
        if args.only and not re.search(args.only, fam):
            continue
        ours = bench_jaxmma(text, args.warps, args.repeat)
        sim = bench_mmasim(fam, args.warps, args.repeat) if fam in MMASIM else None
        if sim is None:
            print(f"| {fam} | {ours:,.0f} | - | - | - | - |")
        else:
            pc, bt = sim
            print(
                f"| {fam} | {ours:,.0f} | {pc:,.0f} | {bt:,.0f} | {ours / pc:,.0f}x |"
                f" {ours / bt:,.1f}x |"
            )


if __name__ == "__main__":
    main()
