"""Raw-bit accumulator inputs shared by the block-scaled GEMM tests."""

import numpy as np

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
