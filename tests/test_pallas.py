"""The Pallas GEMM kernel (interpreted on the CPU) against the XLA path, bit for bit."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma import gemm
from jaxmma.gemm import _chain, _pallas

DTYPES = {
    "bf16": ml_dtypes.bfloat16,
    "f16": np.float16,
    "tf32": np.float32,
    "f32": np.float32,
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
}
WIDTH = {"bf16": 16, "f16": 16, "tf32": 32, "f32": 32, "e4m3": 8, "e5m2": 8}


def operand_bits(rng, shape, fmt):
    """Two matrices of raw bits, stacked: every bit pattern (NaN, Inf, subnormals, signed
    zeros), and normal values with a few raw patterns and signed zeros among them."""
    n = WIDTH[fmt]
    raw = rng.integers(0, 1 << n, size=shape, dtype=np.uint64).astype(np.uint32)
    vals = rng.standard_normal(shape, dtype=np.float32)
    vals = vals * np.exp2(rng.integers(-4, 5, size=shape)).astype(np.float32)
    bits = vals.astype(DTYPES[fmt]).view(f"uint{n}").astype(np.uint32)
    mixed = np.where(rng.random(shape) < 0.05, raw, bits)
    zero = (rng.integers(0, 2, size=shape) << (n - 1)).astype(np.uint32)
    mixed = np.where(rng.random(shape) < 0.05, zero, mixed)
    raw2 = rng.integers(0, 1 << n, size=shape, dtype=np.uint64).astype(np.uint32)
    return jnp.asarray(np.stack([raw2, mixed]))


CASES = [
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", None, (24, 40, 72)),
    ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", None, (24, 40, 72)),
    ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", None, (24, 40, 36)),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", 2, (24, 40, 80)),
    # wgmma fp8: blocks of 32 products, F = 13, f32 results truncated to 13 bits
    ("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2", 2, (24, 40, 80)),
]


@pytest.mark.parametrize("text, promote_every, size", CASES, ids=lambda x: str(x)[:40])
def test_kernel_bits_match_xla(text, promote_every, size):
    cfg = gemm.config(text, "sm_90a" if text.startswith("wgmma") else "sm_90", promote_every)
    assert _pallas.plan(cfg) is not None
    ins = cfg.ins
    M, N, K = size
    rng = np.random.default_rng(M * N + K)
    A = operand_bits(rng, (M, K), ins.atype)
    B = operand_bits(rng, (K, N), ins.btype)
    C = operand_bits(rng, (M, N), ins.ctype)
    want = jax.jit(lambda a, b, c: _chain.xla_gemm_bits(cfg, a, b, c))(A, B, C)
    got = jax.jit(lambda a, b, c: _pallas.gemm_bits(cfg, a, b, c, interpret=True))(A, B, C)
    assert got.dtype == want.dtype == jnp.uint32
    bad = np.argwhere(np.asarray(got != want))
    assert bad.size == 0, (
        f"{len(bad)} of {want.size} differ; first at {bad[0].tolist()}: expected "
        f"{int(want[tuple(bad[0])]):#x}, got {int(got[tuple(bad[0])]):#x}"
    )


def test_matmul_takes_the_forced_path():
    text = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.standard_normal((20, 40)), jnp.bfloat16)
    B = jnp.asarray(rng.standard_normal((40, 12)), jnp.bfloat16)
    C = jnp.asarray(rng.standard_normal((20, 12)), jnp.float32)
    out = {}
    for mode in ("pallas", "xla"):
        with _pallas.path(mode):
            cfg = gemm.config(text, "sm_90")
            assert _pallas.use_kernel(cfg) == (mode == "pallas")
            out[mode] = jaxmma.matmul(A, B, C, instruction=text, arch="sm_90")
    assert (out["pallas"].view(jnp.uint32) == out["xla"].view(jnp.uint32)).all()


def test_auto_runs_the_kernel_on_gpu_only():
    cfg = gemm.config("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90")
    assert cfg.path == "auto"
    assert _pallas.use_kernel(cfg) == (jax.default_backend() == "gpu")


def test_mixed_c_and_d_types_are_not_covered():
    cfg = gemm.config("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f16", "sm_80")
    assert _pallas.plan(cfg) is None


@pytest.mark.parametrize(
    "text",
    [
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32",
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3",
    ],
)
def test_uncovered_forms_stay_on_xla(text):
    with _pallas.path("pallas"):
        cfg = gemm.config(text, "sm_90" if "block_scale" not in text else None)
    assert _pallas.plan(cfg) is None
    assert not _pallas.use_kernel(cfg)
    with pytest.raises(ValueError, match="does not cover"):
        _pallas.gemm_bits(
            cfg,
            jnp.zeros((16, 16), jnp.uint32),
            jnp.zeros((16, 8), jnp.uint32),
            jnp.zeros((16, 8), jnp.uint32),
        )


def test_path_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode"):
        with _pallas.path("cuda"):
            pass
