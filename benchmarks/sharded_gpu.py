"""GEMMs split over two GPUs of one host: the bits of one device, and the speed-up.

    PYTHONPATH=$PWD python3 benchmarks/sharded_gpu.py            # 8192 x 4096 x 4096
    PYTHONPATH=$PWD python3 benchmarks/sharded_gpu.py --m 4096   # other sizes

Each form runs ``jax.jit(jaxmma.matmul)`` on A ``[M, K]`` @ B ``[K, N]``, once with both
operands on the first GPU and once with A sharded along M over a mesh of the first two
GPUs (B replicated). It prints, per form: the output's sharding (``P('x')``: split along M
as XLA splits a dot; ``P()``: replicated), the shape of one device's block, how many
elements' bits differ from the one-device result (0 expected: jaxmma/gemm/_partition.py),
and the medians of jitted calls on one and on two devices, taken in one process after a
warm-up: each call waited for, and 20 calls in flight (issued back to back and waited
for once, as a training loop runs them: a two-device program's dispatch then overlaps
the GEMMs). Forms: the native executor's bf16 and fp8 ``wgmma`` (sm_90a, an sm_90 GPU),
NVFP4 ``mma.sync`` (sm_120a, float32 inputs quantized inside the call, emulated), and
``jnp.dot`` bf16 for what XLA's own dot gains. A form that fails prints its error in its
row; the rest go on.
"""

from __future__ import annotations

import argparse
import statistics
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxmma

FORMS = [
    # name, instruction, arch, promote_every, executor, input dtype
    ("native bf16 wgmma", "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "sm_90a",
     None, "native", jnp.bfloat16),
    ("native fp8 wgmma", "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "sm_90a",
     None, "native", jnp.float8_e4m3fn),
    ("native fp8 wgmma, promote_every=4", "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3"
     ".e4m3", "sm_90a", 4, "native", jnp.float8_e4m3fn),
    ("NVFP4 mma.sync (emulated)", "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4"
     ".block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3", "sm_120a", None, "auto", jnp.float32),
]  # fmt: skip


def _median_ms(f, args, budget_s: float, most: int = 20, in_flight: int = 1) -> float:
    """The median time per jitted call after a warm-up, over rounds of ``in_flight``
    calls issued back to back and waited for once (1: each call waited for): as many
    rounds as fit ``budget_s`` (at most ``most``; at least 3, or 1 where one takes 5 s)."""

    def one_round():
        t0 = time.perf_counter()
        for _ in range(in_flight):
            out = f(*args)
        jax.block_until_ready(out)
        return (time.perf_counter() - t0) / in_flight

    jax.block_until_ready(f(*args))
    first = one_round()
    n = int(min(most, max(3 if first < 5 else 1, budget_s / max(first * in_flight, 1e-6))))
    times = [first] + [one_round() for _ in range(n - 1)]
    return statistics.median(times) * 1e3


def _bits(x) -> np.ndarray:
    x = np.asarray(jax.device_get(x))
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


def _row(name, fn, A, B, one_dev, mesh, budget_s):
    a1, b1 = (jax.device_put(x, one_dev) for x in (A, B))
    a2 = jax.device_put(A, NamedSharding(mesh, P("x", None)))
    b2 = jax.device_put(B, NamedSharding(mesh, P()))
    f = jax.jit(fn)
    d1 = jax.block_until_ready(f(a1, b1))
    d2 = jax.block_until_ready(f(a2, b2))
    spec = d2.sharding.spec if isinstance(d2.sharding, NamedSharding) else d2.sharding
    block = d2.addressable_shards[0].data.shape
    diff = int(np.count_nonzero(_bits(d1) != _bits(d2)))
    del d1, d2
    t1 = _median_ms(f, (a1, b1), budget_s)
    t2 = _median_ms(f, (a2, b2), budget_s)
    p1 = _median_ms(f, (a1, b1), budget_s, in_flight=IN_FLIGHT)
    p2 = _median_ms(f, (a2, b2), budget_s, in_flight=IN_FLIGHT)
    return [name, str(spec), "x".join(map(str, block)), str(diff), f"{t1:.2f}", f"{t2:.2f}",
            f"{t1 / t2:.2f}x", f"{p1:.2f}", f"{p2:.2f}", f"{p1 / p2:.2f}x"]  # fmt: skip


#: calls in flight in the second timing (a training loop's dispatch: the host runs ahead)
IN_FLIGHT = 20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--budget", type=float, default=4.0, help="seconds of timed calls per run")
    args = ap.parse_args()
    devs = jax.devices()
    print(f"jax {jax.__version__}, {len(devs)} x {devs[0].device_kind}, "
          f"M x K x N = {args.m} x {args.k} x {args.n}, A sharded along M", flush=True)  # fmt: skip
    if len(devs) < 2:
        raise SystemExit("needs two devices")
    mesh = Mesh(np.array(devs[:2]), ("x",))
    rng = np.random.default_rng(0)
    Af = rng.standard_normal((args.m, args.k), np.float32)
    Bf = rng.standard_normal((args.k, args.n), np.float32)
    head = ["form", "output sharding", "one device's block", "differing elements",
            "1 GPU ms", "2 GPUs ms", "speed-up", f"1 GPU ms, {IN_FLIGHT} in flight",
            f"2 GPUs ms, {IN_FLIGHT} in flight", "speed-up in flight"]  # fmt: skip
    print("| " + " | ".join(head) + " |", flush=True)
    print("| " + " | ".join(["---"] * 3 + ["---:"] * 7) + " |", flush=True)
    rows = [
        (
            "jnp.dot bf16 (XLA's dot)",
            lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32),
            jnp.bfloat16,
        )
    ]  # noqa: E501
    for name, text, arch, pe, executor, dtype in FORMS:
        fn = lambda a, b, text=text, arch=arch, pe=pe, ex=executor: jaxmma.matmul(  # noqa: E731
            a, b, instruction=text, arch=arch, promote_every=pe, executor=ex
        )
        rows.append((name, fn, dtype))
    for name, fn, dtype in rows:
        try:
            A, B = Af.astype(dtype), Bf.astype(dtype)
            cells = _row(name, fn, A, B, devs[0], mesh, args.budget)
        except Exception as e:  # a form that cannot run here: its row says why
            cells = [name, f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"]
            cells += [""] * 8
            traceback.print_exc()
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
