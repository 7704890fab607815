"""The GEMM floor's executors: one interface, and the one place that chooses among them."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmma import arith, models
from jaxmma.gemm import _block_scaled, _chain, _config, _executors, _pallas

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
NVFP4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3"
)
#: wmma with f32 D and f16 C: D becomes the next step's C by cvt.rn
MIXED = "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f16"
SHAPES = [(16, 32), (32, 8), (16, 8)]


def test_every_executor_declares_the_interface():
    names = [ex.name for ex in _executors.EXECUTORS]
    assert names == ["native", "pallas", "block-scaled", "xla"]
    base = _executors.Executor
    for ex in _executors.EXECUTORS:
        cls = type(ex)  # a subclass of the interface in the executor's own module
        assert isinstance(ex, base) and cls is not base and cls.__module__ != base.__module__
        assert cls.covers is not base.covers and cls.chain is not base.chain
        if ex.fuses("block"):
            assert cls.block is not base.block
    assert _executors.EXECUTORS[-1].covers(None, None)  # the XLA chain covers everything
    with pytest.raises(NotImplementedError, match="fuses no block recipe"):
        _executors.XLA.block(None, None, None, None, None)


def test_the_choice_follows_the_order():
    cfg = _config.config(BF16, "sm_90")
    with _pallas.path("pallas"):
        kernel = _config.config(BF16, "sm_90")
    native = dataclasses.replace(cfg, native=True)
    want_pallas = "pallas" if jax.default_backend() == "gpu" else "xla"
    assert _executors.choose(cfg, SHAPES).name == want_pallas
    assert _executors.choose(kernel, SHAPES).name == "pallas"
    assert _executors.choose(native, SHAPES).name == "native"
    assert _executors.choose(native, SHAPES, scales=((), ())).name == "xla"  # not block-scaled
    assert _executors.choose(native, [(16, 0), (0, 8)]).name == "xla"  # zero-size K
    assert _executors.choose(kernel, [(0, 32), (32, 8)]).name == "xla"  # zero-size M
    nv = _config.config(NVFP4, "sm_120a")
    assert _block_scaled.covers(nv, ((), ()))
    assert _executors.choose(nv, SHAPES, scales=((), ())).name == "block-scaled"
    with _block_scaled.path("emulate"):
        assert _executors.choose(nv, SHAPES, scales=((), ())).name == "xla"


def test_c_none_is_plus_zero():
    cfg = _config.config(BF16, "sm_90")
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.integers(0, 1 << 16, (2, 16, 16)), jnp.uint32)
    B = jnp.asarray(rng.integers(0, 1 << 16, (16, 8)), jnp.uint32)
    zero = jnp.zeros((2, 16, 8), jnp.uint32)

    def both(a, b):  # one program: compiled once
        return _executors.gemm_bits(cfg, a, b), _chain.xla_gemm_bits(cfg, a, b, zero)

    got, want = jax.jit(both)(A, B)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_zeros_in_the_accumulator_format(shape):
    cfg = _config.config(BF16, "sm_90")
    z = _executors.zeros(cfg, shape)
    assert z.shape == shape and z.dtype == jnp.uint32 and not np.any(np.asarray(z))


@pytest.mark.parametrize("text", [BF16, MIXED])
def test_the_models_chain_over_k_steps(text):
    # the chain every executor reproduces: from D bits, the first step's C is that D
    # converted as between steps; a masked step leaves D as it was
    cfg = _config.config(text, "sm_80")
    ins = cfg.ins
    rng = np.random.default_rng(1)
    A = jnp.asarray(rng.integers(0, 1 << 16, (3, ins.m, ins.k)) & 0xBFFF, jnp.uint32)
    B = jnp.asarray(rng.integers(0, 1 << 16, (3, ins.k, ins.n)) & 0xBFFF, jnp.uint32)
    D0 = jnp.asarray(np.float32(rng.standard_normal((ins.m, ins.n))).view(np.uint32))
    C0 = D0 if ins.ctype == ins.dtype else arith.convert(D0, ins.dtype, ins.ctype)
    live = jnp.asarray([True, True, False])

    def all_of(a, b, d0, c0):  # one program: compiled once
        return (
            models.chain_bits(ins, a, b, d0, from_d=True),
            models.chain_bits(ins, a, b, c0),
            models.chain_bits(ins, a, b, d0, live=live, from_d=True),
            models.chain_bits(ins, a[:2], b[:2], c0),
        )

    from_d, from_c, masked, two = jax.jit(all_of)(A, B, D0, C0)
    np.testing.assert_array_equal(np.asarray(from_d), np.asarray(from_c))
    np.testing.assert_array_equal(np.asarray(masked), np.asarray(two))
    with pytest.raises(ValueError, match="from_d=True"):
        models.chain_bits(ins, A, B, C0, live=live)
