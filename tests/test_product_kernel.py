"""The Pallas kernel of the ``kind::mxf8f6f4`` product model (``gemm._product_kernel``),
interpreted on the CPU, gives the bits of the per-step chain of ``mma`` instructions
(``gemm._chain.xla_gemm_bits``, the instruction model step by step): raw uint32 results
compared, NaN patterns, signed zeros and subnormals included.

Two kinds of input: raw bits with every hard case (most tiles take the per-product
branch there), and MX-quantized normal data, where the window sums alone must give the
bits (the kernel run without its per-product branch)."""

import functools

import jax
import ml_dtypes
import numpy as np
import pytest
from _block_inputs import mx_operands

import jaxmma
from jaxmma import gemm
from jaxmma.gemm import _block_scaled, _chain, _executors, _product_kernel

MXF8 = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.{a}.{b}.f32.ue8m0"
)
PAIRS = (("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e3m2", "e2m3"), ("e2m1", "e4m3"))
DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
}


def _text(pair):
    return MXF8.format(a=pair[0], b=pair[1])


@functools.cache
def _chain_program(text):
    cfg = gemm.config(jaxmma.instruction(text, arch="sm_120a"))
    return jax.jit(lambda A, B, C, SA, SB: _chain.xla_gemm_bits(cfg, A, B, C, scales=(SA, SB)))


def _kernel(text, **kw):
    ins = jaxmma.instruction(text, arch="sm_120a")
    return jax.jit(
        lambda A, B, C, SA, SB: _product_kernel.gemm_bits(
            ins, A, B, C, SA, SB, interpret=True, **kw
        )
    )


def _quantized(rng, rows, K, fmt):
    """OCP MX quantization written out here: blocks of 32 along K, the scale
    ``2**(floor(log2(amax)) - emax)``, elements rounded to nearest and saturated."""
    x = rng.standard_normal((rows, K // 32, 32))
    emax = int(np.floor(np.log2(float(ml_dtypes.finfo(DTYPES[fmt]).max))))
    e = np.floor(np.log2(np.abs(x).max(-1))) - emax
    top = float(ml_dtypes.finfo(DTYPES[fmt]).max)
    v = np.clip(x / 2.0 ** e[..., None], -top, top).astype(DTYPES[fmt])
    return v.view(np.uint8).astype(np.uint32).reshape(rows, K), (e + 127).astype(np.uint32)


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_raw_bits_give_the_chains_bits(pair):
    text = _text(pair)
    A, B, C, SA, SB = mx_operands(text, np.random.default_rng(8), (2,), 24, 40, 128)
    got = np.asarray(_kernel(text)(A, B, C, SA, SB))
    want = np.asarray(_chain_program(text)(A, B, C, SA, SB))
    np.testing.assert_array_equal(got, want)
    f = got.view(np.float32)
    assert np.isnan(f).any() and np.isinf(f).any()  # the hard cases were reached


TCGEN05 = (
    "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32.m128n256k32.f32.{a}.{b}.ue8m0"
)


@pytest.mark.parametrize("pair", [PAIRS[0], ("e5m2", "e2m1")], ids=["e4m3-e4m3", "e5m2-e2m1"])
def test_tcgen05_forms_take_the_kernel_and_the_product_executor(pair):
    """``tcgen05.mma`` ``kind::mxf8f6f4`` (block32) has the ``mma`` forms' model: the
    kernel and the XLA product executor give its own per-step chain's bits."""
    ins = jaxmma.instruction(TCGEN05.format(a=pair[0], b=pair[1]), arch="sm_100a")
    cfg = gemm.config(ins)
    ops = mx_operands(_text(pair), np.random.default_rng(4), (2,), 24, 40, 96)
    want = np.asarray(
        jax.jit(lambda A, B, C, SA, SB: _chain.xla_gemm_bits(cfg, A, B, C, scales=(SA, SB)))(*ops)
    )
    kernel = jax.jit(lambda *x: _product_kernel.gemm_bits(ins, *x, interpret=True))
    np.testing.assert_array_equal(np.asarray(kernel(*ops)), want)
    assert _block_scaled.covers(cfg, ((), ()))  # off a GPU: the XLA product executor
    run = jax.jit(lambda A, B, C, SA, SB: _executors.gemm_bits(cfg, A, B, C, scales=(SA, SB)))
    np.testing.assert_array_equal(np.asarray(run(*ops)), want)


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_window_sums_alone_give_the_bits_on_quantized_data(pair):
    """Without the per-product branch: every step of these tiles is computed from the
    exact window sums, and the result is still the chain's (C zero and C from a previous
    GEMM, ragged N)."""
    text = _text(pair)
    rng = np.random.default_rng(3)
    M, N, K = 32, 40, 256
    A, SA = _quantized(rng, M, K, pair[0])
    Bt, SBt = _quantized(rng, N, K, pair[1])
    B, SB = Bt.T.copy(), SBt.T.copy()
    C = (rng.standard_normal((M, N)) * 100).astype(np.float32).view(np.uint32)
    C[: M // 2] = 0
    got = np.asarray(_kernel(text, branch=False)(A, B, C, SA, SB))
    want = np.asarray(_chain_program(text)(A, B, C, SA, SB))
    np.testing.assert_array_equal(got, want)


def _truncating(tiny: int):
    """448 * 448 - 448 * 448 sets the grid at 2**(16 - 25); ``tiny`` products of
    1.5 * 2**-9 (at k = 1, 3, 5, ...) each truncate to 2**-9 on it."""
    M, N, K = 16, 16, 32
    A = np.zeros((M, K), np.uint32)
    B = np.zeros((K, N), np.uint32)
    A[:, 0], B[0, :] = 0x7E, 0x7E  # 448 * 448
    A[:, 2], B[2, :] = 0xFE, 0x7E  # -448 * 448
    for i in range(tiny):
        A[:, 1 + 2 * i], B[1 + 2 * i, :] = 0x1C, 0x10  # 1.5 * 2**-4 * 2**-5
    C = np.zeros((M, N), np.uint32)
    SA = np.full((M, 1), 127, np.uint32)
    SB = np.full((1, N), 127, np.uint32)
    return A, B, C, SA, SB


def test_the_two_lowest_elements_are_truncated_one_product_at_a_time():
    """Two truncated products, each the lowest-lsb element of its row of A and its
    column of B: the windows leave them out and add their truncated values, 2**-9 each,
    so the window sums alone give the model's 2**-8 (their exact sum is 3 * 2**-9)."""
    text = _text(PAIRS[0])
    ops = _truncating(2)
    want = np.asarray(_chain_program(text)(*ops))
    assert (want.view(np.float32) == 2.0**-8).all()
    np.testing.assert_array_equal(np.asarray(_kernel(text, branch=False)(*ops)), want)


def test_more_truncated_products_take_the_per_product_branch():
    """With four, the third and fourth stay in the windows, where they sum exactly to
    3 * 2**-9 before any truncation: the window sums alone give 2 * 2**-9 + 3 * 2**-9,
    the model (and the kernel) 4 * 2**-9."""
    text = _text(PAIRS[0])
    ops = _truncating(4)
    want = np.asarray(_chain_program(text)(*ops))
    assert (want.view(np.float32) == 4 * 2.0**-9).all()
    np.testing.assert_array_equal(np.asarray(_kernel(text)(*ops)), want)
    alone = np.asarray(_kernel(text, branch=False)(*ops)).view(np.float32)
    assert (alone == 5 * 2.0**-9).all()  # the branch was needed


@pytest.mark.full  # the quick run keeps make test within 5 minutes; CI runs it
def test_the_executor_takes_the_kernel_with_broadcast_and_ragged_shapes():
    text = _text(PAIRS[0])
    cfg = gemm.config(jaxmma.instruction(text, arch="sm_120a"))
    A, B, C, SA, SB = mx_operands(text, np.random.default_rng(2), (3,), 17, 9, 96)
    run = jax.jit(
        lambda *x: _executors.gemm_bits(cfg, x[0][:1], x[1], x[2], scales=(x[3][:1], x[4]))
    )
    with _product_kernel.path("interpret"):
        assert _block_scaled.covers(cfg, ((), ()))
        got = np.asarray(run(A, B, C, SA, SB))
    want = np.asarray(_chain_program(text)(A[:1], B, C, SA[:1], SB))
    np.testing.assert_array_equal(got, want)


def test_windows_keep_every_partial_sum_exact():
    """The window width of each pair: its integers fit bfloat16's 8 bits, and the pairs
    that share an accumulator sum below 2**24 (recomputed here from the formats)."""
    for a, b in [(x, y) for x in DTYPES for y in DTYPES]:
        w = _product_kernel._windows(a, b)
        tops = []
        for fmt, n in ((a, w.na), (b, w.nb)):
            info = ml_dtypes.finfo(DTYPES[fmt])
            sig = 2 ** (info.nmant + 1) - 1
            assert sig << (w.width - 1) < 256, (a, b, w)
            lsb_lo = int(np.log2(float(info.smallest_subnormal)))
            lsb_hi = int(np.floor(np.log2(float(info.max)))) - info.nmant
            assert n * w.width >= lsb_hi - lsb_lo + 1 > (n - 1) * w.width, (fmt, w)
            tops.append(sig << (w.width - 1))
        shared = max(sum(1 for i in range(w.na) if 0 <= s - i < w.nb) for s in range(w.na + w.nb))
        assert shared * 32 * tops[0] * tops[1] < 2**24, (a, b, w)


def test_rows_and_columns_with_fewer_than_two_elements():
    """Rows of A and columns of B with no, one or two nonzero elements in a step (a low
    element absent, index -1; or every element low): the window sums and the low
    elements' products still give the chain's bits, with the branch and without it."""
    text = _text(PAIRS[0])
    rng = np.random.default_rng(12)
    M, N, K = 24, 40, 96
    A, SA = _quantized(rng, M, K, "e4m3")
    Bt, SBt = _quantized(rng, N, K, "e4m3")
    for X in (A, Bt):
        for r in range(12):
            keep = r % 3  # 0, 1 or 2 nonzero elements in each step of 32
            for s in range(K // 32):
                cols = rng.permutation(32)[keep:] + 32 * s
                X[r, cols] = 0
    B, SB = Bt.T.copy(), SBt.T.copy()
    C = (rng.standard_normal((M, N)) * 10).astype(np.float32).view(np.uint32)
    want = np.asarray(_chain_program(text)(A, B, C, SA, SB))
    np.testing.assert_array_equal(np.asarray(_kernel(text)(A, B, C, SA, SB)), want)
    np.testing.assert_array_equal(np.asarray(_kernel(text, branch=False)(A, B, C, SA, SB)), want)
