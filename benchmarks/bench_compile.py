"""Compile time of the paths changed for the quick test suite, beside the bf16 GEMM.

All in one process, each program built fresh (a new function object, so no cache is
hit; run without ``JAX_COMPILATION_CACHE_DIR``): the median over ``--repeat`` builds of
``jax.jit(f).lower(*args).compile()`` for

* a bf16 GEMM (the baseline), an e4m3 GEMM with per-tensor scales, a current-scaling
  recipe GEMM (scaled epilogues: FMUL);
* FMUL alone: the int32 multiply (``arith._int32.ieee_mul_f32``, what ``_ieee.fmul_f32``
  runs) and the general engine's exact three-term sum it replaced;
* the first eager call of a sparse ``ins.mma`` (one compiled program with the concrete
  checks) beside the same call run op by op (the implementation called directly: every
  operation compiled on its own) and beside ``jax.jit`` of it.

    python benchmarks/bench_compile.py [--repeat 3]

Prints a Markdown table with machine, date and XLA_FLAGS; record it in RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma
from jaxmma import recipes
from jaxmma.arith import _ieee, _int32

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
SPARSE = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"


def _compile_s(make, args, repeat):
    times = []
    for _ in range(repeat):
        f = make()  # a new function: nothing cached
        t0 = time.perf_counter()
        jax.jit(f).lower(*args).compile()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _first_call_s(fn, make_args, repeat):
    """The wall time of a first call ``fn(*args)`` on arguments whose shapes no earlier
    call used (``make_args(i)``: new leading dimensions each time)."""
    times = []
    for i in range(repeat):
        args = make_args(i)
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    n = ap.parse_args().repeat
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 128)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((128, 64)), jnp.float32)
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    x8, w8 = x.astype(jnp.float8_e4m3fn), w.astype(jnp.float8_e4m3fn)
    s = jnp.float32(0.5)
    rec = recipes.current_scaling()
    u = jnp.asarray(rng.integers(0, 2**32, (64, 64), np.uint64).astype(np.uint32))

    rows = []
    base = _compile_s(
        lambda: lambda a, b: jaxmma.matmul(a, b, instruction=BF16, arch="sm_90"), (xb, wb), n
    )
    rows.append(("bf16 GEMM 64x64x128 (baseline)", base))
    rows.append((
        "e4m3 GEMM, scale_a and scale_b",
        _compile_s(lambda: lambda a, b, p, q: jaxmma.matmul(
            a, b, instruction=E4M3, arch="sm_90", scale_a=p, scale_b=q), (x8, w8, s, s), n),
    ))  # fmt: skip
    rows.append(
        (
            "current-scaling recipe GEMM (f32 in)",
            _compile_s(lambda: lambda a, b: rec.matmul(a, b), (x, w), n),
        )
    )
    rows.append(
        (
            "FMUL 64x64, int32 (`_int32.ieee_mul_f32`)",
            _compile_s(lambda: lambda a, b: _int32.ieee_mul_f32(a, b), (u, u), n),
        )
    )
    rows.append(
        (
            "FMUL 64x64, general engine (three-term exact sum)",
            _compile_s(lambda: lambda a, b: _ieee._round(_ieee._product_terms(a, b)), (u, u), n),
        )
    )

    ins = jaxmma.instruction(SPARSE, arch="sm_90")

    def operands(i):
        lead = (i + 2,)  # a new shape per call: nothing cached in the process
        A = rng.standard_normal((*lead, 16, 32)) * np.tile([1, 0, 1, 0], 8)
        B = rng.standard_normal((*lead, 32, 8))
        C = np.zeros((*lead, 16, 8), np.float32)
        return jnp.asarray(A, jnp.bfloat16), jnp.asarray(B, jnp.bfloat16), jnp.asarray(C)

    impl = ins._implementation()
    rows.append(
        (
            "sparse `ins.mma`, first eager call (one program)",
            _first_call_s(ins.mma, lambda i: operands(10 + i), n),
        )
    )
    rows.append(
        (
            "sparse `ins.mma`, first call op by op (former eager)",
            _first_call_s(lambda *o: impl.matrix_mma(ins, *o), lambda i: operands(20 + i), n),
        )
    )
    rows.append(
        (
            "sparse `ins.mma` under `jax.jit`, first call",
            _first_call_s(
                lambda *o: jax.jit(lambda *a: ins.mma(*a))(*o), lambda i: operands(30 + i), n
            ),
        )
    )

    print(
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"jax {jax.__version__} ({jax.default_backend()}), "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '') or '(none)'}, median of {n}\n"
    )
    print("| program | seconds | x bf16 GEMM |\n| --- | ---: | ---: |")
    for name, t in rows:
        print(f"| {name} | {t:.3f} | {t / base:.2f} |")


if __name__ == "__main__":
    main()
