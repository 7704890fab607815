"""The two computations of the kind::mxf4* group sums give the same bits: float32 matrix
products of the integer magnitudes (dense forms) and the elementwise integer products
(the path sparse forms take, run here on B's rows repeated for every row of A)."""

import jax
import numpy as np
import pytest

import jaxmma
from jaxmma.models import _scaled

FORMS = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3",
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0",
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0",
)


def _run():
    """``_scaled.mma_bits`` as one compiled program (a fresh one per call: the fusion test
    swaps a module function between runs); op by op it would compile hundreds."""
    return jax.jit(
        lambda ins, *a, **kw: _scaled.mma_bits(ins, *a, **kw),
        static_argnums=0,
        static_argnames="b_rows",
    )


SPECIAL_SCALES = np.array([0x00, 0x01, 0x38, 0x7F, 0x80, 0xFE, 0xFF], np.uint32)
SPECIAL_C = np.array(
    [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 1, 0x80000001, 0x7F7FFFFF], np.uint32
)


@pytest.mark.parametrize("text", FORMS)
def test_group_sums_as_matrix_products_match_the_elementwise_sums(text):
    ins = jaxmma.instruction(text)
    rng = np.random.default_rng(7)
    M, N, K = 16, 8, 128
    nb = jaxmma.layouts.num_blocks(ins)
    A = rng.integers(0, 16, (4, M, K), dtype=np.uint32)
    B = rng.integers(0, 16, (4, K, N), dtype=np.uint32)
    A[0, :, :32] = 0  # whole groups of zero products
    A[1, :, :16] = 0x8  # -0
    B[2, :64] = rng.choice(np.array([1, 9], np.uint32), (64, N))  # cancelling +-0.5
    C = rng.integers(0, 2**32, (4, M, N), dtype=np.uint64).astype(np.uint32)
    C[3] = rng.choice(SPECIAL_C, (M, N))
    SA = rng.integers(0, 256, (4, M, 2 * nb), dtype=np.uint32)
    SB = rng.integers(0, 256, (4, 2 * nb, N), dtype=np.uint32)
    SA[1:3] = rng.choice(SPECIAL_SCALES, (2, M, 2 * nb))
    SB[2:4] = rng.choice(SPECIAL_SCALES, (2, 2 * nb, N))
    fast = np.asarray(_run()(ins, A, B, C, (SA, SB)))
    rows = np.broadcast_to(B[:, None], (4, M, K, N))
    slow = np.asarray(_run()(ins, A, rows, C, (SA, SB), b_rows=True))
    assert fast.dtype == np.uint32 and fast.shape == (4, M, N)
    np.testing.assert_array_equal(fast, slow)
    assert np.isnan(fast.view(np.float32)).any()  # NaN scales and C reached the sums


MXF8 = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0",
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e5m2.e2m1.f32.ue8m0",
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e3m2.e2m3.f32.ue8m0",
)


@pytest.mark.parametrize("text", MXF8)
def test_mxf8f6f4_on_the_fixed_engine_matches_the_general_engine(text):
    ins = jaxmma.instruction(text)
    rng = np.random.default_rng(11)
    M, N, K = 16, 8, 64
    A = rng.integers(0, 256, (4, M, K), dtype=np.uint32)
    B = rng.integers(0, 256, (4, K, N), dtype=np.uint32)
    # kind::f8f6f4 byte containers of random element bits
    A = np.array(jaxmma.formats.to_container(ins.atype, A & ((1 << _bits(ins.atype)) - 1)))
    B = np.array(jaxmma.formats.to_container(ins.btype, B & ((1 << _bits(ins.btype)) - 1)))
    A[0, :, :8] = 0
    C = rng.integers(0, 2**32, (4, M, N), dtype=np.uint64).astype(np.uint32)
    C[3] = rng.choice(SPECIAL_C, (M, N))
    SA = rng.integers(0, 256, (4, M, 2), dtype=np.uint32)
    SB = rng.integers(0, 256, (4, 2, N), dtype=np.uint32)
    SA[1] = rng.choice(SPECIAL_SCALES, (M, 2))
    SB[2] = rng.choice(SPECIAL_SCALES, (2, N))
    SA[3], SB[3] = 127 + rng.integers(-3, 4, (M, 2)), 127 + rng.integers(-3, 4, (2, N))
    fast = np.asarray(_run()(ins, A, B, C, (SA, SB)))
    rows = np.broadcast_to(B[:, None], (4, M, K, N))
    slow = np.asarray(_run()(ins, A, rows, C, (SA, SB), b_rows=True))
    np.testing.assert_array_equal(fast, slow)
    assert np.isnan(fast.view(np.float32)).any()


def _bits(fmt):
    return {"e4m3": 8, "e5m2": 8, "e3m2": 6, "e2m3": 6, "e2m1": 4}[fmt]


@pytest.mark.parametrize("text", FORMS)
def test_group_fusion_in_int32_matches_the_multi_limb_sum(text, monkeypatch):
    ins = jaxmma.instruction(text)
    rng = np.random.default_rng(5)
    M, N, K, nb = 16, 8, 64, jaxmma.layouts.num_blocks(ins)
    outs = []
    A = rng.integers(0, 16, (6, M, K), dtype=np.uint32)
    B = rng.integers(0, 16, (6, K, N), dtype=np.uint32)
    A[0, :, :16] = 0
    C = rng.integers(0, 2**32, (6, M, N), dtype=np.uint64).astype(np.uint32)
    C[1] = rng.choice(SPECIAL_C, (M, N))
    C[2] = rng.integers(0, 2**23, (M, N)).astype(np.uint32)  # subnormal C
    SA = rng.integers(0, 256, (6, M, nb), dtype=np.uint32)
    SB = rng.integers(0, 256, (6, nb, N), dtype=np.uint32)
    SA[3], SB[3] = rng.choice(SPECIAL_SCALES, (M, nb)), rng.choice(SPECIAL_SCALES, (nb, N))
    SA[4], SB[4] = 0x7F + rng.integers(-2, 3, (M, nb)), 0x7F + rng.integers(-2, 3, (nb, N))
    SA[5], SB[5] = rng.integers(0, 8, (M, nb)), rng.integers(0, 8, (nb, N))  # tiny scales
    for fusion in (_scaled._group_sum, _scaled._group_sum_wide):
        monkeypatch.setattr(_scaled, "_group_sum", fusion)
        outs.append(np.asarray(_run()(ins, A, B, C, (SA, SB))))
    np.testing.assert_array_equal(outs[0], outs[1])
    f = outs[0].view(np.float32)
    assert np.isnan(f).any() and (np.abs(f) > 1).any() and (np.abs(f) < 2.0**-10).any()
