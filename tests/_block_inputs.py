"""Raw-bit accumulator inputs shared by the block-scaled GEMM tests."""

import numpy as np

import jaxmma

#: C bits every block-scaled test mixes in: signed zeros, infinities, NaNs, the smallest
#: subnormals, the largest finite value
SPECIAL_C = np.array(
    [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF, 1, 0x80000001, 0x7F7FFFFF],
    np.uint32,
)


def raw_c(rng, shape):
    """C ``[..., M, N]`` as uint32 bits: normal values over wide magnitudes, 10 % special
    values, row 2 any bits at all, row 3 subnormals of both signs (the caller zeroes row 3
    of A so that C alone passes through the chain)."""
    N = shape[-1]
    C = rng.standard_normal(shape).astype(np.float32)
    C *= rng.choice(np.array([0, 1e-40, 1e-6, 1, 1e4, 1e37], np.float32), C.shape)
    C = C.view(np.uint32)
    special = rng.random(C.shape) < 0.1
    C[special] = rng.choice(SPECIAL_C, special.sum())
    C[..., 2, :] = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    C[..., 3, :] = rng.integers(1, 1 << 23, N, dtype=np.uint32) | np.uint32(0x80000000) * (
        np.arange(N) % 2 == 0
    )
    return C


#: NaN and Inf codes of the 8-bit formats (bits [6:0] after the sign)
_SPECIAL_CODES = {"e4m3": (0x7F,), "e5m2": (0x7C, 0x7D, 0x7F)}


def mx_operands(text, rng, lead, M, N, K):
    """kind::mxf8f6f4 raw bits with the hard cases: every code (subnormals, padding bits
    set), NaN and Inf elements in a few rows and columns, cancelling blocks, zero and -0
    elements, NaN / zero / tiny / largest scales (products below e_zero, overflow), C
    with NaN, Inf, subnormals, -0 and large values."""
    ins = jaxmma.instruction(text, arch="sm_120a")
    nblk = -(-K // 32)

    def elements(fmt, shape):
        x = rng.integers(0, 256, shape, dtype=np.uint32)
        for code in _SPECIAL_CODES.get(fmt, ()):  # finite everywhere but where placed
            x[(x & 0x7F) == code] ^= 0x40
        return x

    A = elements(ins.atype, lead + (M, K))
    B = elements(ins.btype, lead + (K, N))
    A[..., -1, :] = np.arange(K) % 256  # every code
    B[..., :, -1] = (np.arange(K) * 7) % 256
    for fmt, X, rows in ((ins.atype, A, (5, 6, 7)), (ins.btype, np.swapaxes(B, -1, -2), (4, 5))):
        for r, code in zip(rows, _SPECIAL_CODES.get(fmt, ()), strict=False):
            X[..., r, rng.integers(0, K, 2)] = code | (0x80 * (r % 2))
    A[..., 8, :] = 0  # zero products only
    A[..., 13, 31::32] = 0x7B  # the last product of each block the largest
    A[..., 9, ::3] = 0x80  # -0 among the products
    B[..., 16:32, 6] = B[..., 0:16, 6] ^ 0x80  # every block of row 10 cancels in column 6
    A[..., 10, 16:32] = A[..., 10, 0:16]
    SA = rng.integers(110, 140, lead + (M, nblk), dtype=np.uint32)
    SB = rng.integers(110, 140, lead + (nblk, N), dtype=np.uint32)
    wild_a = rng.random(SA.shape) < 0.1
    wild_b = rng.random(SB.shape) < 0.1
    scales = np.array([0x00, 0x01, 0x7F, 0xFE, 0xFF], np.uint32)
    SA[wild_a] = rng.choice(scales, wild_a.sum())
    SB[wild_b] = rng.choice(scales, wild_b.sum())
    SA[..., 1, :] = rng.integers(0, 255, SA.shape[-1])  # full range
    SA[..., 11, :] = 0x00  # products far below e_zero
    SA[..., 12, :] = 0xFE  # overflow to Inf in some steps
    SB[..., :, 7] = 0xFE
    C = raw_c(rng, lead + (M, N))
    C[..., 11, :] = 0
    A[..., 3, :] = 0  # C alone: subnormal C passes through the chain
    return A, B, C, SA, SB
