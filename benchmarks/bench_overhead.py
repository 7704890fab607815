"""Overhead of the GEMM layer's common path: what ``matmul`` costs around its arithmetic.

Small operands (64 x 128 @ 128 x 64), so the figures are the layer's own cost:

* ``trace``: ``jax.jit(f).lower(*args)`` of a new function (Python work: validation,
  operand preparation, executor choice, the derivative rule's wiring), in the process's
  CPU time (all its threads; other processes' load counts less than in wall time);
* ``compile``: ``.compile()`` of that lowering (XLA's work on the program we emit), the
  same way;
* ``eager``: one eager call on shapes seen before (the per-call cost in a notebook:
  argument checks and the dispatch of the cached program);
* the compiled program itself (``--programs``, for these and more paths: the families of
  ``bench_gemm.py``, kernel options, scales, sparse and block-scaled forms, gradients):
  its instruction count and a hash of its instructions without names, source locations
  and metadata, equal for the same program built from two trees (which then compiles
  and runs the same).

for a bf16 ``matmul`` (the plain path), the same with ``out_dtype=bfloat16`` (kernel
options), ``dot_general`` with a batch dimension, ``jax.grad`` of a bf16 ``matmul``
and an e4m3 ``matmul`` with per-tensor scales. Each figure is the least over ``--repeat``
builds or calls (and over the rounds of ``--trees``): on a shared machine the figure
least disturbed by other load.

    python benchmarks/bench_overhead.py [--repeat 5]
    python benchmarks/bench_overhead.py --trees OLD NEW [--rounds 3]

``--trees`` runs the script once per tree in turn (``PYTHONPATH`` set to each, rounds
interleaved: OLD NEW OLD NEW ...) and prints each figure per tree with their ratio, then
the compiled programs of both; record the table in RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"


def _cases():
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxmma

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 128)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((128, 64)), jnp.bfloat16)
    xs = jnp.asarray(rng.standard_normal((2, 64, 128)), jnp.bfloat16)
    x8, w8 = x.astype(jnp.float8_e4m3fn), w.astype(jnp.float8_e4m3fn)
    s = jnp.float32(0.5)
    kw = {"instruction": BF16, "arch": "sm_90"}

    def plain():
        return lambda a, b: jaxmma.matmul(a, b, **kw)

    def options():
        return lambda a, b: jaxmma.matmul(a, b, out_dtype=jnp.bfloat16, **kw)

    def dot_general():
        return lambda a, b: jaxmma.dot_general(a, b, (((2,), (0,)), ((), ())), **kw)

    def grad():
        return jax.grad(lambda a, b: jaxmma.matmul(a, b, **kw).sum(), argnums=(0, 1))

    def scaled():
        return lambda a, b, p, q: jaxmma.matmul(
            a, b, instruction=E4M3, arch="sm_90", scale_a=p, scale_b=q
        )

    return [
        ("bf16 matmul", plain, (x, w)),
        ("bf16 matmul, out_dtype=bfloat16", options, (x, w)),
        ("bf16 dot_general, batch 2", dot_general, (xs, w)),
        ("grad of a bf16 matmul (A and B)", grad, (x, w)),
        ("e4m3 matmul, per-tensor scales", scaled, (x8, w8, s, s)),
    ]


def _program(compiled) -> str:
    """The compiled program's instructions, without names, source locations and
    metadata: ``count:hash``, the same for the same program from another tree."""
    lines = []
    for line in compiled.as_text().splitlines():
        if not re.match(r"\s+(ROOT )?%", line):
            continue
        line = re.sub(r", (stack_frame_id=\d+|metadata=\{[^}]*\})", "", line).rstrip(",")
        lines.append(re.sub(r"%[\w.-]+", "%v", re.sub(r"\.\d+", "", line)))
    digest = hashlib.sha1("\n".join(sorted(lines)).encode()).hexdigest()[:10]
    return f"{len(lines)}:{digest}"


def _paths():
    """More paths of the layer, for their compiled programs only: the families of
    ``bench_gemm.py`` and the kernel options, scales, sparse and block-scaled forms, and
    gradients."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxmma

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 256)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((256, 64)), jnp.float32)
    c = jnp.asarray(rng.standard_normal((64, 64)), jnp.float32)
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    x8, w8 = x.astype(jnp.float8_e4m3fn), w.astype(jnp.float8_e4m3fn)
    xs = xb * jnp.tile(jnp.asarray([1, 0, 1, 0], jnp.bfloat16), 64)  # 2:4 structured
    mm = functools.partial(jaxmma.matmul, arch="sm_90")
    E5M2 = E4M3.replace("e4m3.e4m3", "e5m2.e5m2")
    F16 = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"
    TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    S8 = "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32"
    WG = "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"
    SP = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"
    BS = "mma.sync.aligned.m16n8k{k}.row.col.kind::{kind}.block_scale.scale_vec::{v}"
    BS += ".f32.{t}.{t}.f32.{s}"
    NV = BS.format(k=64, kind="mxf4nvf4", v="4X", t="e2m1", s="ue4m3")
    MX4 = BS.format(k=64, kind="mxf4", v="2X", t="e2m1", s="ue8m0")
    MX8 = BS.format(k=32, kind="mxf8f6f4", v="1X", t="e4m3", s="ue8m0")
    ones = jnp.ones
    return {
        "f16 acc": (lambda a, b: mm(a, b, instruction=F16), (xb.astype(jnp.float16), wb)),
        "tf32": (lambda a, b: mm(a, b, instruction=TF32), (x, w)),
        "s8": (lambda a, b: mm(a, b, instruction=S8), (x8.astype(jnp.int8), w8.astype(jnp.int8))),
        "e4m3, promote_every=4": (
            lambda a, b: mm(a, b, instruction=E4M3, promote_every=4), (x8, w8)),
        "wgmma e4m3 sm_90a": (
            lambda a, b: jaxmma.matmul(a, b, instruction=WG, arch="sm_90a"), (x8, w8)),
        "split_k=3": (lambda a, b: mm(a, b, instruction=BF16, split_k=3), (xb, wb)),
        "cutlass, S = 1, k_tile=32": (
            lambda a, b: mm(a, b, instruction=BF16, split_rule="cutlass", k_tile=32), (xb, wb)),
        "split_k=4 halving, alpha, beta, C, bf16 out": (lambda a, b, c: mm(
            a, b, c, instruction=BF16, split_k=4, split_reduce="halving", epilogue="f32",
            alpha=0.7, beta=-1.3, out_dtype=jnp.bfloat16), (xb, wb, c)),
        "rounded epilogue, bias [N]": (lambda a, b, c: mm(
            a, b, c[0], instruction=BF16, epilogue="rounded", out_dtype=jnp.bfloat16), (xb, wb, c)),
        "input_rounding='rna'": (
            lambda a, b: mm(a, b, instruction=BF16, input_rounding="rna"), (x, w)),
        "row scales": (lambda a, b: mm(
            a, b, instruction=E4M3, scale_a=ones((64, 1)), scale_b=ones((1, 64))), (x8, w8)),
        "block scales, C": (lambda a, b, c: mm(a, b, c, instruction=E4M3, epilogue="f32",
            scale_a=ones((64, 2)), scale_b=ones((2, 1))), (x8, w8, c)),
        "NVFP4 with C": (lambda a, b, c: jaxmma.matmul(a, b, c, instruction=NV, arch="sm_120a"),
                         (x, w, c)),
        "MXFP4": (lambda a, b: jaxmma.matmul(a, b, instruction=MX4, arch="sm_120a"), (x, w)),
        "MXFP8": (lambda a, b: jaxmma.matmul(a, b, instruction=MX8, arch="sm_120a"), (x, w)),
        "sparse, C": (lambda a, b, c: mm(a, b, c, instruction=SP), (xs, wb, c)),
        "grad, grad_instruction": (jax.grad(lambda a, b: mm(
            a, b, instruction=E4M3, grad_instruction=E5M2).sum(), argnums=(0, 1)), (x, w)),
        "grad, kernel options": (jax.grad(lambda a, b: mm(
            a, b, instruction=BF16, split_k=2, out_dtype=jnp.bfloat16).astype(jnp.float32).sum(),
            argnums=(0, 1)), (x, w)),
    }  # fmt: skip


def programs() -> dict:
    """The compiled program of every case and path (``_program``), by name."""
    import jax

    every = {name: (make(), args) for name, make, args in _cases()}
    every.update(_paths())
    return {name: _program(jax.jit(f).lower(*args).compile()) for name, (f, args) in every.items()}


def measure(repeat: int) -> dict:
    import jax

    out = {}
    for name, make, args in _cases():
        trace, comp, eager = [], [], []
        for _ in range(repeat):
            f = make()  # a new function: no cache of ours or JAX's is hit
            t0 = time.process_time()
            low = jax.jit(f).lower(*args)
            t1 = time.process_time()
            low.compile()
            trace.append(t1 - t0)
            comp.append(time.process_time() - t1)
        f = make()
        jax.block_until_ready(f(*args))  # the eager call's programs compiled once
        for _ in range(max(repeat, 20)):
            t0 = time.perf_counter()
            jax.block_until_ready(f(*args))
            eager.append(time.perf_counter() - t0)
        out[name] = {k: min(v) for k, v in
                     (("trace", trace), ("compile", comp), ("eager", eager))}  # fmt: skip
    return out


def _header(extra: str = "") -> str:
    import jax

    load = os.getloadavg()[0]
    return (
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, load {load:.1f}, "
        f"jax {jax.__version__} ({jax.default_backend()}){extra}"
    )


def _ms(t: float) -> str:
    return f"{t * 1e3:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--programs", action="store_true", help="the compiled programs only")
    ap.add_argument("--trees", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.programs:
        progs = programs()
        if a.json:
            print(json.dumps(progs))
            return
        for name, prog in progs.items():
            print(f"- {name}: {prog}")
        return
    if a.trees is None:
        figs = measure(a.repeat)
        if a.json:
            print(json.dumps(figs))
            return
        print(_header(f", the least of {a.repeat}") + "\n")
        print("| GEMM | trace ms | compile ms | eager call ms |\n| --- | ---: | ---: | ---: |")
        for name, f in figs.items():
            print(f"| {name} | {_ms(f['trace'])} | {_ms(f['compile'])} | {_ms(f['eager'])} |")
        return

    def run(tree, *flags):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        cmd = [sys.executable, os.path.abspath(__file__), "--json", *flags]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])

    progs = {tree: run(tree, "--programs") for tree in a.trees}
    runs: dict[str, list[dict]] = {t: [] for t in a.trees}
    for _ in range(a.rounds):
        for tree in a.trees:
            runs[tree].append(run(tree, "--repeat", str(a.repeat)))
    old, new = a.trees
    figures = ("trace", "compile", "eager")
    med = {
        t: {name: {k: min(r[name][k] for r in rs) for k in figures} for name in rs[0]}
        for t, rs in runs.items()
    }
    print(_header(f", {a.rounds} rounds interleaved, the least of {a.repeat} each") + "\n")
    print("| GEMM | figure | before ms | after ms | after / before |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name in med[old]:
        for k in figures:
            b, f = med[old][name][k], med[new][name][k]
            print(f"| {name} | {k} | {_ms(b)} | {_ms(f)} | {f / b:.2f} |")
    print("\nCompiled programs (instructions without names or metadata), before -> after:")
    for name, b in progs[old].items():
        f = progs[new].get(name)
        print(f"- {name}: {b} -> {f} ({'the same program' if b == f else 'differ'})")


if __name__ == "__main__":
    main()
