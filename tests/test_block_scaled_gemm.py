"""The whole-GEMM block-scaled executor (``gemm._block_scaled``) gives the bits of the
per-step chain (``gemm._chain.xla_gemm_bits`` through ``models.mma_bits``): raw uint32
bits compared, NaN patterns, signed zeros and subnormals included."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _block_inputs import mx_operands as _mx_operands
from _block_inputs import raw_c

import jaxmma
from jaxmma import gemm
from jaxmma.gemm import _block_scaled, _chain, _executors

NVFP4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3"
)
MXF4NVF4_2X = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X"
    ".f32.e2m1.e2m1.f32.ue8m0"
)
MXFP4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0"
)
GROUP_FORMS = (NVFP4, MXF4NVF4_2X, MXFP4)

SPECIAL_SCALES = np.array([0x00, 0x01, 0x38, 0x7F, 0x80, 0xB8, 0xFE, 0xFF], np.uint32)


def _cfg(text):
    return gemm.config(jaxmma.instruction(text, arch="sm_120a"))


@functools.cache
def _programs(text):
    """(fast, reference) compiled once per form."""
    cfg = _cfg(text)
    assert _block_scaled.covers(cfg, ((), ()))

    def fast(A, B, C, SA, SB):
        return _executors.gemm_bits(cfg, A, B, C, scales=(SA, SB))

    def ref(A, B, C, SA, SB):
        return _chain.xla_gemm_bits(cfg, A, B, C, scales=(SA, SB))

    return jax.jit(fast), jax.jit(ref)


def _operands(text, rng, lead, M, N, K):
    """Raw-bit operands with the hard cases: every e2m1 code, zero and -0 blocks,
    cancelling groups, NaN / zero / subnormal / saturating scales, C with NaN, Inf,
    subnormals, -0 and large values that swallow the groups."""
    ins = jaxmma.instruction(text, arch="sm_120a")
    nblk = -(-K // ins.k) * jaxmma.layouts.num_blocks(ins)
    A = rng.integers(0, 16, lead + (M, K), dtype=np.uint32)
    B = rng.integers(0, 16, lead + (K, N), dtype=np.uint32)
    A[..., : M // 4, :16] = 0  # whole groups of zero products
    A[..., M // 4 : M // 2, 16:32] = 0x8  # -0
    rows = B[..., 32:64, : N // 3]
    rows[...] = rng.choice(np.array([1, 9], np.uint32), rows.shape)  # cancelling groups
    A[..., -1, :] = np.arange(K) % 16  # every code against every code
    B[..., :, -1] = (np.arange(K) // 4) % 16
    if "ue4m3" in text:
        SA = rng.integers(0x20, 0x50, lead + (M, nblk), dtype=np.uint32)
        SB = rng.integers(0x20, 0x50, lead + (nblk, N), dtype=np.uint32)
    else:
        SA = rng.integers(110, 140, lead + (M, nblk), dtype=np.uint32)
        SB = rng.integers(110, 140, lead + (nblk, N), dtype=np.uint32)
    wild_a = rng.random(SA.shape) < 0.1
    wild_b = rng.random(SB.shape) < 0.1
    SA[wild_a] = rng.choice(SPECIAL_SCALES, wild_a.sum())
    SB[wild_b] = rng.choice(SPECIAL_SCALES, wild_b.sum())
    SA[..., 1, :] = rng.integers(0, 256, SA.shape[-1])  # full range: truncated groups
    C = raw_c(rng, lead + (M, N))
    A[..., 3, :] = 0  # C alone: subnormal C passes through the chain
    return A, B, C, SA, SB


def _same(text, A, B, C, SA, SB):
    fast, ref = _programs(text)
    got = np.asarray(fast(A, B, C, SA, SB))
    want = np.asarray(ref(A, B, C, SA, SB))
    assert got.dtype == np.uint32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    return got


@pytest.mark.every_case
@pytest.mark.parametrize("text", GROUP_FORMS)
def test_group_forms_give_the_per_step_bits(text):
    rng = np.random.default_rng(35)
    got = _same(text, *_operands(text, rng, (2,), 24, 40, 320))
    f = got.view(np.float32)
    assert np.isnan(f).any() and np.isinf(f).any() and (got == 0x80000000).sum() == 0
    assert (np.abs(f[np.isfinite(f)]) < 2.0**-126).any()  # subnormal results


@pytest.mark.every_case
@pytest.mark.parametrize("K", [1, 40, 64, 130])
def test_ragged_k_is_padded_as_the_chain_pads_it(K):
    rng = np.random.default_rng(K)
    _same(NVFP4, *_operands(NVFP4, rng, (), 17, 9, K))


def test_broadcast_batch_dimensions():
    rng = np.random.default_rng(3)
    A, B, C, SA, SB = _operands(MXFP4, rng, (3,), 16, 8, 128)
    _same(MXFP4, A[:1], B, C, SA[:1], SB)  # A and its scales broadcast over B's batch


def test_vmap_and_jit_give_the_same_bits():
    rng = np.random.default_rng(4)
    A, B, C, SA, SB = _operands(NVFP4, rng, (3,), 16, 16, 128)
    cfg = _cfg(NVFP4)
    one = lambda *x: _executors.gemm_bits(cfg, x[0], x[1], x[2], scales=x[3:])  # noqa: E731
    batched = jax.jit(jax.vmap(one))(A, B, C, SA, SB)
    np.testing.assert_array_equal(
        np.asarray(batched), np.asarray(_programs(NVFP4)[1](A, B, C, SA, SB))
    )


def test_saturated_products_and_extreme_scales():
    """Every product 6 * 6 and the largest scales: the group sums at their bounds."""
    M, N, K = 8, 8, 128
    A = np.full((M, K), 7, np.uint32)  # 6.0
    B = np.full((K, N), 7, np.uint32)
    B[:, ::2] = 15  # -6.0
    C = np.zeros((M, N), np.uint32)
    for text, top in ((NVFP4, 0x7E), (MXFP4, 0xFE)):
        nblk = K // 64 * jaxmma.layouts.num_blocks(jaxmma.instruction(text, arch="sm_120a"))
        SA = np.full((M, nblk), top, np.uint32)
        SB = np.full((nblk, N), top, np.uint32)
        SB[0] = 0x01
        _same(text, A, B, C, SA, SB)


def test_path_rejects_unknown_modes():
    with pytest.raises(ValueError, match="mode: expected one of auto, emulate"):
        with _block_scaled.path("fast"):
            pass


MXF8 = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.{a}.{b}.f32.ue8m0"
)
MXFP8 = MXF8.format(a="e4m3", b="e4m3")
PRODUCT_FORMS = (
    MXFP8,
    MXF8.format(a="e5m2", b="e5m2"),
    MXF8.format(a="e3m2", b="e2m3"),
    MXF8.format(a="e2m1", b="e4m3"),
)


@pytest.mark.every_case
@pytest.mark.parametrize("text", PRODUCT_FORMS)
def test_product_forms_give_the_per_step_bits(text):
    rng = np.random.default_rng(8)
    got = _same(text, *_mx_operands(text, rng, (2,), 24, 40, 128))
    f = got.view(np.float32)
    assert np.isnan(f).any() and np.isinf(f).any() and (got == 0x80000000).sum() == 0
    assert (np.abs(f[np.isfinite(f)]) < 2.0**-126).any()  # subnormal results
    assert (f == 0).any() and (np.abs(f[np.isfinite(f)]) > 1).any()


@pytest.mark.parametrize("K", [1, 40, 96])
def test_product_ragged_k(K):
    rng = np.random.default_rng(K)
    _same(MXFP8, *_mx_operands(MXFP8, rng, (), 17, 9, K))


def test_product_zero_c_counts_with_e_zero():
    """C = 0 counts with e_zero = -133: products of 2**-143 and -2**-159 give 2**-143
    (the small one truncated on the grid 2**-158), where a grid set by the largest
    product alone would give the next subnormal below."""
    M, N, K = 4, 8, 32
    A = np.zeros((M, K), np.uint32)
    A[:, 0] = 0x70  # 128
    A[:, 1] = [0x81, 0x01, 0x82, 0x00]  # -2**-9, 2**-9, -2**-8, 0
    B = np.full((K, N), 0x70, np.uint32)
    SA = np.full((M, 1), 0x01, np.uint32)  # 2**-126
    SB = np.arange(92, 100, dtype=np.uint32)[None, :]  # 2**-35 ... 2**-28
    got = _same(MXFP8, A, B, np.zeros((M, N), np.uint32), SA, SB)
    assert got[0, 4] == 64  # 2**-143, not 63 * 2**-149


def test_product_specials_in_one_operand():
    """NaN and Inf elements in B only (A finite, some of it zero): Inf * 0 and NaN make
    NaN, one sign of Inf gives that Inf, as in the chain."""
    text = PRODUCT_FORMS[1]  # e5m2
    rng = np.random.default_rng(10)
    M, N, K = 8, 8, 64
    A = rng.integers(0, 0x7C, (M, K), dtype=np.uint32) | (rng.integers(0, 2, (M, K)) << 7)
    A = A.astype(np.uint32)
    A[0, :] = 0  # Inf * 0
    B = rng.integers(0, 0x7C, (K, N), dtype=np.uint32)
    B[40, 0] = 0x7C  # +Inf in the second block
    B[3, 1] = 0xFC  # -Inf in the first
    B[5, 2] = 0x7E  # NaN
    SA = np.full((M, 2), 0x7F, np.uint32)
    SB = np.full((2, N), 0x7F, np.uint32)
    got = _same(text, A, B, np.zeros((M, N), np.uint32), SA, SB)
    assert (got[0, :3] == 0x7FFFFFFF).all() and np.isinf(got[1:, :2].view(np.float32)).all()


@pytest.mark.full  # the quick run keeps make test within 5 minutes; CI runs it
def test_product_broadcast_batch_jit_and_vmap():
    rng = np.random.default_rng(5)
    A, B, C, SA, SB = _mx_operands(MXFP8, rng, (3,), 16, 24, 64)
    _same(MXFP8, A[:1], B, C, SA[:1], SB)  # A and its scales broadcast over B's batch
    cfg = _cfg(MXFP8)
    one = lambda *x: _executors.gemm_bits(cfg, x[0], x[1], x[2], scales=x[3:])  # noqa: E731
    batched = jax.jit(jax.vmap(one))(A, B, C, SA, SB)
    np.testing.assert_array_equal(
        np.asarray(batched), np.asarray(_programs(MXFP8)[1](A, B, C, SA, SB))
    )


@pytest.mark.full  # the quick run keeps make test within 5 minutes; CI runs it
def test_product_tiles_and_partial_tiles():
    """Several tiles of columns, the last one partial: the chain's bits."""
    from jaxmma.models import _product_gemm

    rng = np.random.default_rng(6)
    A, B, C, SA, SB = _mx_operands(MXFP8, rng, (), 16, 3 * 16 + 5, 64)
    ins = jaxmma.instruction(MXFP8, arch="sm_120a")
    got = jax.jit(lambda *x: _product_gemm.gemm_bits(ins, *x, tile=16))(A, B, C, SA, SB)
    want = _programs(MXFP8)[1](A, B, C, SA, SB)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize(
    "text, seed",
    # MXFP8 in the full sweep only: the quick run keeps make test within 5 minutes
    [(NVFP4, 0), pytest.param(MXFP8, 1, marks=pytest.mark.full)],
    ids=["nvfp4", "mxfp8"],
)
def test_matmul_takes_the_fast_path_with_the_same_values(text, seed):
    """Through the public matmul (f32 inputs quantized inside): the executor is chosen
    automatically, and forcing the per-step chain gives the same values."""
    kx, ky = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(kx, (32, 200), jnp.float32)
    w = jax.random.normal(ky, (200, 24), jnp.float32)
    run = lambda: np.asarray(  # noqa: E731
        jax.jit(lambda x, w: jaxmma.matmul(x, w, instruction=text, arch="sm_120a"))(x, w)
    )
    fast = run()
    with _block_scaled.path("emulate"):
        slow = run()
    np.testing.assert_array_equal(fast.view(np.uint32), slow.view(np.uint32))


@jax.jit
def _relative_check(pa, pb):
    from jaxmma.models import _product_gemm

    wa, ra = _product_gemm._relative_weights(pa, 1, 10)
    wb, rb = _product_gemm._relative_weights(pb, 0, 11)
    m, found = _product_gemm._weighted_max(jnp.matmul(wa, wb, precision="highest"))
    decides = jnp.all(found & (m >= -10) | (ra < -(1 << 19)) | (rb < -(1 << 19)))
    return (decides, *_product_gemm._largest_orders(pa, pb, None, None))


def test_e5m2_largest_orders_relative_weights():
    """e5m2's largest product order per output element, read off float32 weights relative
    to the row's and column's largest order: equal to the maximum of the exact products
    on a plane the weights decide (orders spread over 8), and on one they cannot (an
    element 2**-30 below its row's largest meets only small ones), where it falls back."""

    rng = np.random.default_rng(12)
    M, N = 16, 24
    for spread, decided in ((8, True), (31, False)):
        oa = rng.integers(-16, -16 + spread, (M, 32))
        ob = rng.integers(-16, -16 + spread, (32, N))
        pa = np.where(rng.random(oa.shape) < 0.2, 0.0, 2.0**oa).astype(np.float32)
        pb = np.where(rng.random(ob.shape) < 0.2, 0.0, 2.0**ob).astype(np.float32)
        pa[3] = 0  # a row without a nonzero element
        if not decided:
            pa[5] = 0
            pa[5, 0], pa[5, 1] = 2.0**15, 2.0**-15  # the large one meets zeros only
            pb[0] = 0
            pb[1] = 2.0**-16
        decides, got, nonzero = _relative_check(pa, pb)
        assert bool(decides) == decided
        pmax = (pa[:, :, None] * pb[None, :, :]).max(axis=1)  # exact powers of two
        nz = pmax > 0
        np.testing.assert_array_equal(np.asarray(nonzero), nz)
        np.testing.assert_array_equal(np.asarray(got)[nz], np.log2(pmax[nz]).astype(np.int32))


@pytest.mark.full  # the quick run keeps make test within 5 minutes; CI runs it
def test_e5m2_quantized_gaussian_gives_the_per_step_bits():
    """MXFP8 e5m2 quantized from Gaussian data (the relative weights decide every step)
    with NaN / Inf elements, a zero block, NaN / largest / smallest scales: the chain's
    bits."""
    from jaxmma import quant

    text = PRODUCT_FORMS[1]
    kx, ky = jax.random.split(jax.random.key(7))
    x = jax.random.normal(kx, (24, 96), jnp.float32)
    w = jax.random.normal(ky, (96, 16), jnp.float32)
    ins = jaxmma.instruction(text, arch="sm_120a")
    qa = quant.quantize_mx(x, "e5m2", axis=-1, block=32)
    qb = quant.quantize_mx(w, "e5m2", axis=-2, block=32)
    A, B, SA, SB = (np.array(v, np.uint32) for v in quant.as_operands(ins, qa, qb))
    A[2, 5], A[4, 40], B[70, 3] = 0x7C, 0xFE, 0xFC  # +Inf, NaN, -Inf
    A[6, 32:64] = 0
    SA[7, 1], SA[8, 0], SB[2, 9], SB[0, 10] = 0xFF, 0xFE, 0x00, 0xFE
    C = raw_c(np.random.default_rng(7), (24, 16))
    got = _same(text, A, B, C, SA, SB)
    assert np.isnan(got.view(np.float32)).any() and np.isfinite(got.view(np.float32)).any()
