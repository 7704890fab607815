"""Same bits on every backend: GEMMs of every family, saved on one machine, compared on another.

The inputs are generated with NumPy from fixed seeds (the same arrays everywhere): values
of wide exponent range with zeros, signed zeros, subnormals, Inf and NaN mixed in, at
ragged sizes. ``--save`` writes the raw bits of every result; ``--compare`` recomputes
them on this machine's default backend and counts differing elements per case.

    python benchmarks/same_bits.py --save gpu.npz        # e.g. on the GPU
    python benchmarks/same_bits.py --compare gpu.npz     # e.g. on the CPU

Exit status 1 if any case differs.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma

SM90 = "sm_90"
#: name -> (instruction, arch, element dtype of A/B (None: float32 quantized by matmul),
#: accumulator dtype, matmul keywords)
CASES = {
    "bf16.f32": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", SM90, jnp.bfloat16),
    "f16.f16": ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", SM90, jnp.float16),
    "f16.f32": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", SM90, jnp.float16),
    "tf32.f32": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", SM90, jnp.float32),
    "e4m3.f32": ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", SM90, jnp.float8_e4m3fn),
    "e4m3.f32.promote4": (
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        SM90,
        jnp.float8_e4m3fn,
        {"promote_every": 4},
    ),
    "e5m2.e4m3.f16": (
        "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e4m3.f16",
        SM90,
        (jnp.float8_e5m2, jnp.float8_e4m3fn),
    ),
    "e4m3.f32.sm_89": (
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "sm_89",
        jnp.float8_e4m3fn,
    ),
    "bf16.f32.sm_80": (
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "sm_80",
        jnp.bfloat16,
    ),
    "s8.satfinite": ("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32", SM90, jnp.int8),
    "u4.s32": ("mma.sync.aligned.m16n8k64.row.col.s32.u4.u4.s32", SM90, "u4"),
    "b1.xor": ("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.xor.popc", SM90, "b1"),
    "sparse.f16.f32": (
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32",
        SM90,
        jnp.float16,
    ),
    "nvfp4": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3",
        "sm_120a",
        None,
    ),
    "mxfp8": (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
        ".f32.e4m3.e4m3.f32.ue8m0",
        "sm_120a",
        None,
    ),
    "wgmma.e4m3.promote4": (
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3",
        "sm_90a",
        jnp.float8_e4m3fn,
        {"promote_every": 4},
    ),
    "wgmma.bf16": ("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "sm_90a", jnp.bfloat16),
}
M, K, N = 72, 264, 40


def _values(rng, shape):
    """Wide-range values with zeros, signed zeros, subnormal-sized values, Inf and NaN."""
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(-10, 10, shape)
    u = rng.random(shape)
    x[u < 0.03] = 0.0
    x[(u >= 0.03) & (u < 0.05)] = -0.0
    x[(u >= 0.05) & (u < 0.07)] *= 2.0**-130  # subnormal in f32, flushes in narrow formats
    x[(u >= 0.07) & (u < 0.075)] = np.inf
    x[(u >= 0.075) & (u < 0.08)] = -np.inf
    x[(u >= 0.08) & (u < 0.085)] = np.nan
    return x.astype(np.float32)


def _operand(rng, shape, dtype):
    if dtype == "u4":
        return jnp.asarray(rng.integers(0, 16, shape), jnp.uint32)
    if dtype == "b1":
        return jnp.asarray(rng.integers(0, 2, shape), jnp.uint32)
    if dtype is jnp.int8:
        return jnp.asarray(rng.integers(-128, 128, shape), jnp.int8)
    x = _values(rng, shape)
    return jnp.asarray(x) if dtype is None else jnp.asarray(x).astype(dtype)


def _prune(x):
    """Keep the two largest-magnitude values of every group of four along K (2:4)."""
    g = np.asarray(x.astype(jnp.float32)).reshape(x.shape[0], -1, 4)
    order = np.argsort(-np.nan_to_num(np.abs(g), nan=np.inf), axis=-1, kind="stable")
    keep = np.zeros(g.shape, bool)
    np.put_along_axis(keep, order[..., :2], True, axis=-1)
    return jnp.asarray(np.where(keep, g, 0).reshape(x.shape)).astype(x.dtype)


def run_case(name):
    spec = CASES[name]
    text, arch, dtype = spec[:3]
    kw = spec[3] if len(spec) > 3 else {}
    ins = jaxmma.instruction(text, arch=arch)
    rng = np.random.default_rng(sum(map(ord, name)))
    da, db = dtype if isinstance(dtype, tuple) else (dtype, dtype)
    A = _operand(rng, (M, K), da)
    B = _operand(rng, (K, N), db)
    if ins.sparse:
        A = _prune(A)
    if ins.stype:  # finite inputs for the quantizers
        A, B = (jnp.nan_to_num(x, nan=0.0, posinf=1e3, neginf=-1e3) for x in (A, B))
    if ins.ctype in ("s32",):
        C = jnp.asarray(rng.integers(-(2**31), 2**31, (M, N)), jnp.int32)
    else:
        C = jnp.asarray(_values(rng, (M, N))).astype(
            jnp.float16 if ins.ctype == "f16" else jnp.float32
        )
    D = jaxmma.matmul(A, B, C, instruction=ins, **kw)
    D = np.asarray(D)
    return D.view({2: np.uint16, 4: np.uint32}[D.dtype.itemsize])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", metavar="NPZ")
    g.add_argument("--compare", metavar="NPZ")
    args = p.parse_args(argv)
    dev = jax.devices()[0]
    print(f"backend: {dev.platform} ({dev.device_kind}), jax {jax.__version__}")
    results = {name: run_case(name) for name in CASES}
    if args.save:
        np.savez_compressed(args.save, **results)
        print(f"saved {len(results)} cases ({sum(r.size for r in results.values())} elements)")
        return 0
    ref = np.load(args.compare)
    bad = 0
    for name, got in results.items():
        want = ref[name]
        diff = int(np.count_nonzero(got != want)) if got.shape == want.shape else got.size
        bad += diff
        print(f"{name:24s} {got.size:6d} elements  {'same bits' if not diff else f'{diff} DIFFER'}")
    print("all the same" if not bad else f"{bad} elements differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
