"""jaxmma's NVFP4 and MXFP8 GEMMs on the CPU beside the emulations of the peers, one process.

Each configuration multiplies the same float32 ``x [n, n] @ w [n, n]``, quantized inside
the timed call as a model's linear layer does:

* jaxmma: ``jaxmma.matmul`` under ``jax.jit`` on ``sm_120a`` ``mma.sync`` forms
  (``kind::mxf4nvf4`` 4X with ue4m3 scales and a per-tensor scale; ``kind::mxf8f6f4``
  e4m3 with ue8m0 scales): the modelled tensor core's bits; and, where
  ``jaxmma.cpu_compiler_options()`` gives an option (a CPU with AVX-512), the same jitted
  with it (the same bits);
* torchao (``torchao.prototype.mx_formats``), as its emulated GEMM computes: quantize
  both operands (``NVFP4Tensor.to_nvfp4`` with the per-tensor scale from the operand's
  amax, ``MXTensor.to_mx`` with e4m3 and blocks of 32), dequantize to float32, then
  ``torch.mm``; eager, and under ``torch.compile``. Values on the formats' grids, summed
  in float32 by the CPU's BLAS: not any tensor core's bits;
* Qwix (when installed): ``qwix.quantize`` with tiles of 16 / 32 along K and
  ``qwix.dot_general``, jitted;
* ``jnp.dot`` float32 and ``torch.mm`` float32 on the unquantized inputs: the two
  frameworks' own speed on this machine.

Every configuration is compiled and run once first; then ``--rounds`` rounds run each
configuration once in turn (a shared machine slows all alike) and the median is printed,
with jaxmma's time as a multiple of each peer's.

    python benchmarks/bench_block_scaled_peers.py [--sizes 512,1024] [--rounds 9]

torch and torchao are not dependencies of the project: without them their rows are
skipped with a note. Results go to stdout as Markdown; record them in
``benchmarks/RESULTS.md``.
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

FORMS = {
    "NVFP4": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3",
    "MXFP8": "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e4m3.e4m3.f32.ue8m0",
}


def _jaxmma(form, options=None):
    text = FORMS[form]
    f = lambda a, b: jaxmma.matmul(a, b, instruction=text, arch="sm_120a")  # noqa: E731
    return jax.jit(f, compiler_options=options)


def _torch_peers():
    """``{name: f(x, w)}`` for torch and torchao, or a note saying why there are none."""
    try:
        import torch
        from torchao.prototype.mx_formats.mx_tensor import MXTensor
        from torchao.prototype.mx_formats.nvfp4_tensor import (
            NVFP4Tensor,
            per_tensor_amax_to_scale,
        )
    except ImportError as e:
        return {}, f"torch / torchao not importable ({e}): their rows are skipped"

    def nvfp4(x, w):
        def q(t):  # blocks of 16 along K, the last axis
            scale = per_tensor_amax_to_scale(torch.max(torch.abs(t)))
            return NVFP4Tensor.to_nvfp4(t, 16, scale).dequantize(torch.float32)

        return torch.mm(q(x), q(w.t().contiguous()).t())

    def mxfp8(x, w):
        def q(t):
            return MXTensor.to_mx(t, torch.float8_e4m3fn, 32).dequantize(torch.float32)

        return torch.mm(q(x), q(w.t().contiguous()).t())

    peers = {
        "torchao NVFP4": nvfp4,
        "torchao MXFP8": mxfp8,
        "torchao NVFP4 compiled": torch.compile(nvfp4),
        "torchao MXFP8 compiled": torch.compile(mxfp8),
        "torch.mm f32": torch.mm,
    }
    import torchao

    return peers, f"torch {torch.__version__}, torchao {torchao.__version__}"


def _qwix_peers():
    try:
        import qwix
    except ImportError as e:
        return {}, f"Qwix not importable ({e}): its rows are skipped"

    def make(fmt, tile):
        def f(x, w):
            qx = qwix.quantize(x, fmt, channelwise_axes=[0], tiled_axes={1: tile})
            qw = qwix.quantize(w, fmt, channelwise_axes=[1], tiled_axes={0: tile})
            return qwix.dot_general(qx, qw, (((1,), (0,)), ((), ())))

        return jax.jit(f)

    return {"Qwix NVFP4": make("nvfp4", 16), "Qwix MXFP8": make("mxfp8", 32)}, "Qwix"


def _run(f, args, torch_side):
    return f(*args) if torch_side else jax.block_until_ready(f(*args))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="512,1024")
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    torch_peers, torch_note = _torch_peers()
    qwix_peers, qwix_note = _qwix_peers()
    print(
        f"## {datetime.date.today()}, {platform.machine()} CPU, {os.cpu_count()} cores, "
        f"jax {jax.__version__}; {torch_note}; {qwix_note}\n"
    )
    for n in (int(s) for s in args.sizes.split(",")):
        rng = np.random.default_rng(n)
        x = rng.standard_normal((n, n), dtype=np.float32)
        w = rng.standard_normal((n, n), dtype=np.float32)
        jx, jw = jnp.asarray(x), jnp.asarray(w)
        configs = {f"jaxmma {f}": (_jaxmma(f), (jx, jw), False) for f in FORMS}
        wide = jaxmma.cpu_compiler_options()
        if wide:
            for f in FORMS:
                configs[f"jaxmma {f}, cpu_compiler_options()"] = (_jaxmma(f, wide), (jx, jw), False)
        configs["jnp.dot f32"] = (jax.jit(jnp.dot), (jx, jw), False)
        configs.update({k: (f, (jx, jw), False) for k, f in qwix_peers.items()})
        if torch_peers:
            import torch

            tx, tw = torch.from_numpy(x), torch.from_numpy(w)
            configs.update({k: (f, (tx, tw), True) for k, f in torch_peers.items()})
        first, failed = {}, []
        for name, (f, a, t) in list(configs.items()):
            t0 = time.perf_counter()
            try:
                _run(f, a, t)
            except Exception as e:  # a peer's failure is a result, reported below
                if name.startswith("jaxmma"):
                    raise
                first_line = (str(e).strip().splitlines() or [""])[0][:160]
                failed.append(f"- {name}: fails, {type(e).__name__}: {first_line}")
                del configs[name]
                continue
            first[name] = time.perf_counter() - t0
        times: dict = {k: [] for k in configs}
        for _ in range(args.rounds):
            for name, (f, a, t) in configs.items():
                t0 = time.perf_counter()
                _run(f, a, t)
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"### {n}^3, median of {args.rounds} rounds (ms), load {os.getloadavg()[0]:.1f}\n")
        print("| configuration | ms | first call s | jaxmma NVFP4 / this | jaxmma MXFP8 / this |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for k in configs:
            r4 = med["jaxmma NVFP4"] / med[k]
            r8 = med["jaxmma MXFP8"] / med[k]
            print(f"| {k} | {med[k]:.1f} | {first[k]:.2f} | {r4:.1f}x | {r8:.1f}x |")
        print("\n".join([""] + failed))
        print()


if __name__ == "__main__":
    main()
