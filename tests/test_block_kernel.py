"""The Pallas kernel of the block-scaled group model (``gemm._block_kernel``), interpreted
on the CPU, gives the bits of the XLA formulation (``models._group_gemm.gemm_bits``): raw
uint32 results compared, NaN patterns, signed zeros and subnormals included."""

import functools

import jax
import numpy as np
import pytest
from _block_inputs import raw_c

import jaxmma
from jaxmma import gemm
from jaxmma.gemm import _block_kernel, _block_scaled
from jaxmma.models import _group_gemm

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
SPECIAL_SCALES = np.array([0x00, 0x01, 0x38, 0x7F, 0x80, 0xB8, 0xFE, 0xFF], np.uint32)


def _ins(text):
    return jaxmma.instruction(text, arch="sm_120a")


@functools.cache
def _programs(text):
    """(kernel interpreted, XLA formulation), compiled once per form."""
    ins = _ins(text)

    def kernel(A, B, C, SA, SB):
        return _block_kernel.gemm_bits(ins, A, B, C, SA, SB, interpret=True)

    def xla(A, B, C, SA, SB):
        return _group_gemm.gemm_bits(ins, A, B, C, SA, SB)

    return jax.jit(kernel), jax.jit(xla)


def _operands(text, rng, lead, M, N, K, wild=0.03):
    """Raw-bit operands (K a multiple of 64) with the hard cases: every e2m1 code against
    every code, zero and -0 groups, cancelling groups, NaN / zero / subnormal /
    saturating scales (a share ``wild`` of them), a row of full-range scales, C with NaN,
    Inf, subnormals, -0, a row of raw bits and large values that swallow the groups."""
    nblk = K // 64 * jaxmma.layouts.num_blocks(_ins(text))
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
    wild_a = rng.random(SA.shape) < wild
    wild_b = rng.random(SB.shape) < wild
    SA[wild_a] = rng.choice(SPECIAL_SCALES, wild_a.sum())
    SB[wild_b] = rng.choice(SPECIAL_SCALES, wild_b.sum())
    SA[..., 1, :] = rng.integers(0, 256, SA.shape[-1])  # full range: truncated groups
    C = raw_c(rng, lead + (M, N))
    A[..., 3, :] = 0  # C alone: subnormal C passes through the chain
    return A, B, C, SA, SB


def _same(text, *operands):
    kernel, xla = _programs(text)
    got = np.asarray(kernel(*operands))
    want = np.asarray(xla(*operands))
    assert got.dtype == np.uint32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    return got


@pytest.mark.every_case
@pytest.mark.parametrize("text", [NVFP4, MXF4NVF4_2X, MXFP4])
def test_kernel_gives_the_xla_bits(text):
    """Ragged M and N (not multiples of the tile), two batch elements, three k-steps."""
    got = _same(text, *_operands(text, np.random.default_rng(35), (2,), 21, 35, 192))
    f = got.view(np.float32)
    assert np.isnan(f).any() and np.isinf(f).any()
    assert not (got == 0x80000000).any()  # a zero sum is +0, whatever C's sign
    assert (np.abs(f[np.isfinite(f)]) < 2.0**-126).any()  # subnormal results
    assert np.isfinite(f).mean() > 0.5


def test_saturated_products_and_extreme_scales():
    """Every product 6 * 6 (group sums of 2,304, odd partial sums above 2,048) and the
    largest and smallest scales, against C of every order."""
    M, N, K = 16, 16, 128
    A = np.full((M, K), 7, np.uint32)  # 6.0
    A[::3, ::5] = 1  # 0.5: odd partial sums
    B = np.full((K, N), 7, np.uint32)
    B[:, ::2] = 15  # -6.0
    rng = np.random.default_rng(1)
    C = (rng.standard_normal((M, N)) * 2.0 ** rng.integers(-140, 120, (M, N))).astype(np.float32)
    C = C.view(np.uint32)
    for text, top in ((NVFP4, 0x7E), (MXFP4, 0xFE)):
        nblk = K // 64 * jaxmma.layouts.num_blocks(_ins(text))
        SA = np.full((M, nblk), top, np.uint32)
        SB = np.full((nblk, N), top, np.uint32)
        SB[0] = 0x01
        SA[4:8] = 0x00  # zero (ue4m3) / smallest (ue8m0) scales
        _same(text, A, B, C, SA, SB)


def test_groups_that_cancel_exactly():
    """Every group's products cancel to 0 (they still count for e_max): D is C where C is
    finite, +0 for C = +-0, and the rest of the step's orders (large scales, tiny C)."""
    M, N, K = 16, 16, 128
    A = np.full((M, K), 0x1, np.uint32)  # 0.5, against +-0.5 in alternate rows of B
    B = np.where(np.arange(K * N).reshape(K, N) // N % 2 == 0, 0x1, 0x9).astype(np.uint32)
    C = np.zeros((M, N), np.uint32)
    C[1::2] = 0x80000000  # -0
    C[::4, ::3] = np.float32(1e-30).view(np.uint32)
    C[2::4, 1::5] = 1  # the smallest subnormal
    for text, lo, hi in ((NVFP4, 0x01, 0x7E), (MXFP4, 0x01, 0xFE)):
        nblk = K // 64 * jaxmma.layouts.num_blocks(_ins(text))
        rng = np.random.default_rng(9)
        SA = rng.integers(lo, hi, (M, nblk), dtype=np.uint32)
        SB = rng.integers(lo, hi, (nblk, N), dtype=np.uint32)
        got = _same(text, A, B, C, SA, SB)
        zero = (C & 0x7FFFFFFF) == 0
        assert (got[zero] == 0).all()


def test_scale_specials_one_at_a_time():
    """NaN, zero, subnormal and saturating scales in single rows and columns, the rest of
    D finite: each special decides its own rows or columns only."""
    rng = np.random.default_rng(2)
    for text in (NVFP4, MXFP4):
        A, B, C, SA, SB = _operands(text, rng, (), 16, 16, 128, wild=0.0)
        C = np.where(np.isfinite(C.view(np.float32)), C, 0).astype(np.uint32)
        for i, s in enumerate(SPECIAL_SCALES):
            SA[2 * i, i % SA.shape[-1]] = s
            SB[i % SB.shape[0], 2 * i + 1] = s
        got = _same(text, A, B, C, SA, SB)
        assert np.isnan(got.view(np.float32)).any()


@pytest.mark.full  # the quick run keeps make test within 5 minutes; CI runs it
def test_grouped_program_order_and_other_tilings():
    """Programs in groups of tile rows (as on the GPU), rectangular tiles, and a batch
    larger than the tiles (the batch on the grid's first axis) cover D."""
    text = MXFP4
    ops = _operands(text, np.random.default_rng(6), (), 80, 56, 128)
    want = np.asarray(_programs(text)[1](*ops))
    ins = _ins(text)
    for tiles in (
        _block_kernel.Tiles(bm=16, bn=16, group_m=2),
        _block_kernel.Tiles(bm=32, bn=16, group_m=0),
        _block_kernel.Tiles(bm=16, bn=32, group_m=3),
    ):
        f = jax.jit(lambda *x, t=tiles: _block_kernel.gemm_bits(ins, *x, interpret=True, tiles=t))
        np.testing.assert_array_equal(np.asarray(f(*ops)), want)
    many = _operands(text, np.random.default_rng(7), (3,), 16, 16, 64)  # more batch than tiles
    np.testing.assert_array_equal(
        np.asarray(_programs(text)[0](*many)), np.asarray(_programs(text)[1](*many))
    )


@pytest.mark.every_case
@pytest.mark.parametrize("K", [1, 40, 64, 130])
def test_ragged_k_and_batch_through_the_executor(K):
    """Through ``gemm._block_scaled`` (K padded with +0 elements and scales of 1.0, batch
    dimensions broadcast): the kernel interpreted and the XLA formulation agree."""
    rng = np.random.default_rng(K)
    Kp = -(-K // 64) * 64
    A, B, C, SA, SB = _operands(NVFP4, rng, (2,), 17, 9, Kp)
    nblk = -(-K // 16)
    A, B, SA, SB = A[..., :K], B[..., :K, :], SA[..., :nblk], SB[..., :nblk, :]
    cfg = gemm.config(_ins(NVFP4))
    run = jax.jit(lambda *x: _block_scaled.gemm_bits(cfg, x[0], x[1], x[2], x[3:]))
    args = (A[:1], B, C, SA[:1], SB)  # A and its scales broadcast over B's batch
    with _block_kernel.path("interpret"):
        got = np.asarray(run(*args))
    with _block_kernel.path("xla"):
        want = np.asarray(run(*args))
    assert got.shape == (2, 17, 9)
    np.testing.assert_array_equal(got, want)


def test_vmap_of_the_kernel():
    """jax.vmap over the executor (a batched pallas_call) gives the XLA bits."""
    A, B, C, SA, SB = _operands(MXFP4, np.random.default_rng(8), (2,), 16, 16, 128)
    cfg = gemm.config(_ins(MXFP4))
    one = lambda *x: _block_scaled.gemm_bits(cfg, x[0], x[1], x[2], x[3:])  # noqa: E731
    with _block_kernel.path("interpret"):
        got = np.asarray(jax.jit(jax.vmap(one))(A, B, C, SA, SB))
    np.testing.assert_array_equal(got, np.asarray(_programs(MXFP4)[1](A, B, C, SA, SB)))


def test_auto_keeps_the_cpu_on_xla():
    assert _block_kernel.MODE == "auto"
    want = None if jax.default_backend() != "gpu" else "compiled"
    assert _block_kernel.chosen() == want
    with _block_kernel.path("kernel"):
        assert _block_kernel.chosen() == ("compiled" if want else "interpret")


def test_path_rejects_unknown_modes():
    with pytest.raises(ValueError, match="mode: expected one of auto, kernel, interpret, xla"):
        with _block_kernel.path("fast"):
            pass


@pytest.mark.parametrize("text", [NVFP4, MXFP4])
def test_kernel_lowers_to_triton_for_cuda(text):
    """Every operation of the kernel has a Triton lowering rule: the compiled (not
    interpreted) kernel lowers for CUDA on any host (compiling it needs a GPU)."""
    A, B, C, SA, SB = _operands(text, np.random.default_rng(5), (), 64, 64, 128)
    ins = _ins(text)
    f = jax.jit(lambda *x: _block_kernel.gemm_bits(ins, *x, interpret=False))
    lowered = f.trace(A, B, C, SA, SB).lower(lowering_platforms=("cuda",))
    assert "xla.gpu.triton" in lowered.as_text()


def test_compiled_tiling_must_hold_whole_routines_per_thread():
    """The compiled fusion runs ``PACK`` elements per routine: a tiling with fewer
    elements per thread is refused before anything is built, naming the tiling."""
    A, B, C, SA, SB = _operands(NVFP4, np.random.default_rng(9), (), 16, 16, 64)
    small = _block_kernel.Tiles(bm=16, bn=16, num_warps=4)  # 2 elements a thread
    with pytest.raises(ValueError, match=r"2 elements of D per thread, not a multiple of PACK"):
        _block_kernel.gemm_bits(_ins(NVFP4), A, B, C, SA, SB, interpret=False, tiles=small)
