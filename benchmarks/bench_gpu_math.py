"""Compile and run time of the emulated XLA:GPU f32 functions (``arith.GPU_FUNCTIONS``)
beside the CPU's own ``jnp`` function, with the FMA each sequence chains taken from the
int32 FFMA (``arith._fma32``, the library's) or from the general engine
(``arith._ieee.ffma_f32``, the reference it is tested against).

All in one process, tables loaded first; each program built fresh (a new function
object; run without ``JAX_COMPILATION_CACHE_DIR``): median over ``--repeat`` builds of
``jax.jit(f).lower(x).compile()``, then the median of ``--repeat`` timed calls on an
f32 array of ``--size`` elements (``block_until_ready``). The two FMAs' results are
compared as raw bits.

    python benchmarks/bench_gpu_math.py [--repeat 3] [--size 1048576]

Prints a Markdown table with machine and date; record it in RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxmma.arith import _fma32, _gpu_math, _ieee

JNP = {
    "exp": jnp.exp,
    "log": jnp.log,
    "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid,
    "erf": jax.scipy.special.erf,
    "rsqrt": jax.lax.rsqrt,
    "sqrt": jnp.sqrt,
    "div": lambda x: 1.0 / x,
}
FMAS = {"int32 FFMA": _fma32.ieee_fma_f32, "engine": _ieee.ffma_f32}


def _compile(f, x, repeat):
    times = []
    for _ in range(repeat):
        g = lambda v, f=f: f(v)  # noqa: E731 (a new object: no cache hit)
        t0 = time.perf_counter()
        c = jax.jit(g).lower(x).compile()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), c


def _run(c, x, repeat):
    c(x).block_until_ready()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        c(x).block_until_ready()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--size", type=int, default=1 << 20)
    a = p.parse_args()
    _gpu_math.tables()
    rng = np.random.default_rng(0)
    xf = rng.standard_normal(a.size).astype(np.float32) * 4
    xb = jnp.asarray(xf.view(np.uint32))
    xf = jnp.asarray(xf)
    print(f"{platform.machine()} {platform.processor() or ''}, jax {jax.__version__}, "
          f"{datetime.date.today()}, {a.size} elements, median of {a.repeat}")  # fmt: skip
    print()
    print("| function | jnp compile s | int32 FFMA compile s | engine compile s "
          "| jnp ms | int32 FFMA ms | engine ms | differing |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    original = _gpu_math._fma
    for name, ref in JNP.items():
        cj, c = _compile(ref, xf, a.repeat)
        rj = _run(c, xf, a.repeat)
        row, outs = [], []
        for fma in FMAS.values():
            _gpu_math._fma = lambda x, y, z, fma=fma: fma(x, y, z)
            try:
                f = _gpu_math.FUNCTIONS[name][1]
                g = (lambda b, f=f: f(np.float32(1.0).view(np.uint32), b)) if name == "div" else f
                ce, c = _compile(g, xb, a.repeat)
                row.append((ce, _run(c, xb, a.repeat)))
                outs.append(np.asarray(c(xb)))
            finally:
                _gpu_math._fma = original
        diff = int(np.sum(outs[0] != outs[1]))
        (c1, r1), (c2, r2) = row
        print(f"| {name} | {cj:.2f} | {c1:.2f} | {c2:.2f} | {rj * 1e3:.2f} | {r1 * 1e3:.2f} "
              f"| {r2 * 1e3:.2f} | {diff} |")  # fmt: skip


if __name__ == "__main__":
    main()
