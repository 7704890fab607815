"""Kernel options of ``matmul``: split-K, input rounding, epilogues, fp8 scaling recipes.

Every expected value here comes from an independent reference written in this file: the
instruction's matrix-level ``ins.mma`` chained in a Python loop over hand-cut slices and
k-steps (never ``matmul``'s own tiling), the f32 partials, scales and epilogue terms
combined with NumPy float32 operations (IEEE, round to nearest even), the fused
multiply-add of the block recipe with exact fractions, and tf32 rounding with integer bit
operations. Slice boundaries are the measured ones (NUMERICS facts in docs/gemm.md), typed
out, not computed by the code under test.
"""

import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
S8 = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
F16ACC = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"
ARCH = "sm_90"
M, N = 16, 8


def _ins(text):
    return jaxmma.instruction(text, arch=ARCH)


@functools.cache
def _mma(text):
    return jax.jit(_ins(text).mma)


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint16) if x.dtype.itemsize == 2 else x.view(np.uint32)


def _f32(bits):
    return np.asarray(bits, np.uint32).view(np.float32)


def _operands(dtype, K, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((M, K)) * scale).astype(np.float32)
    B = (rng.standard_normal((K, N)) * scale).astype(np.float32)
    if dtype is not np.float32:
        A, B = A.astype(dtype), B.astype(dtype)
    return A, B


def chain(text, A, B, c=None):
    """The instruction chained over the k-steps of ``A [M, K] @ B [K, N]`` from ``c``
    (+0 when None); K is zero-padded to a multiple of k here. f32 bits."""
    ins = _ins(text)
    k = ins.k
    pad = -A.shape[1] % k
    A = np.concatenate([A, np.zeros((M, pad), A.dtype)], axis=1)
    B = np.concatenate([B, np.zeros((pad, N), B.dtype)], axis=0)
    d = jnp.zeros((M, N), jnp.float32) if c is None else jnp.asarray(c)
    for s in range(A.shape[1] // k):
        d = _mma(text)(A[:, s * k : (s + 1) * k], B[s * k : (s + 1) * k], d)
    return _bits(d)


def promoted_chain(text, A, B, P):
    """Groups of P k-steps from +0, each added into an f32 total (from +0) by one
    float32 add."""
    ins = _ins(text)
    k = ins.k
    pad = -A.shape[1] % k
    A = np.concatenate([A, np.zeros((M, pad), A.dtype)], axis=1)
    B = np.concatenate([B, np.zeros((pad, N), B.dtype)], axis=0)
    total = np.zeros((M, N), np.float32)
    steps = A.shape[1] // k
    for g in range(0, steps, P):
        e = min(steps, g + P) * k
        total = total + _f32(chain(text, A[:, g * k : e], B[g * k : e]))
    return total.view(np.uint32)


def add_in_order(parts):
    acc = _f32(parts[0])
    for p in parts[1:]:
        acc = acc + _f32(p)
    return acc.view(np.uint32)


# ----------------------------------------------------------------------------- split-K
CUBLAS_CASES = [
    # (K, S, T, slice bounds): 4096 / 3 at T = 64 is the H100 capture (1408, 1408, 1280);
    # 8192 / 6: five of 1408, the last 1152; a ragged K whose last slice is short
    (4096, 3, 64, [0, 1408, 2816, 4096]),
    (8192, 6, 64, [0, 1408, 2816, 4224, 5632, 7040, 8192]),
    (1000, 3, 64, [0, 384, 768, 1000]),
    (1000, 4, 16, [0, 256, 512, 768, 1000]),
]


@pytest.mark.parametrize("K,S,T,bounds", CUBLAS_CASES)
def test_cublas_split_is_a_loop_over_slices(K, S, T, bounds):
    A, B = _operands(jnp.bfloat16, K, seed=K + S)
    got = jaxmma.matmul(A, B, instruction=BF16, arch=ARCH, split_k=S, k_tile=T)
    parts = [chain(BF16, A[:, a:b], B[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    want = add_in_order(parts)
    assert np.array_equal(_bits(got), want)
    # and it is not the unsplit chain (the test could fail)
    assert not np.array_equal(want, chain(BF16, A, B))


def test_split_slices_promote_on_their_own():
    K, S, T, P = 1024, 3, 64, 4  # slices of 384, 384, 256: promotion groups restart
    A, B = _operands(jnp.float8_e4m3fn, K, seed=3, scale=2.0)
    got = jaxmma.matmul(A, B, instruction=E4M3, arch=ARCH, split_k=S, k_tile=T, promote_every=P)
    bounds = [0, 384, 768, 1024]
    parts = [
        promoted_chain(E4M3, A[:, a:b], B[a:b], P) for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    assert np.array_equal(_bits(got), add_in_order(parts))


def test_split_with_c_in_the_chain_starts_the_first_slice():
    K = 512
    A, B = _operands(jnp.bfloat16, K, seed=5)
    C = np.random.default_rng(6).standard_normal((M, N)).astype(np.float32) * 8
    got = jaxmma.matmul(A, B, C, instruction=BF16, arch=ARCH, split_k=2, k_tile=64)
    parts = [chain(BF16, A[:, :256], B[:256], C), chain(BF16, A[:, 256:], B[256:])]
    assert np.array_equal(_bits(got), add_in_order(parts))


def _tf32_rn(x):
    """f32 -> tf32 (f32 register, low 13 bits zero), to nearest even, integer steps."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = b + 0xFFF + ((b >> 13) & 1)
    return (b & 0xFFFFE000).astype(np.uint32).view(np.float32)


def _tf32_rna(x):
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def _tf32_rz(x):
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def test_cutlass_split_puts_the_partial_tile_first():
    # K = 1012, S = 3: slices of roundup4(ceil(1012 / 3)) = 340, the last 332; with a K
    # tile of 32, each slice's first tile holds 20 (the last: 12) elements followed by +0,
    # so the k8 groups after it are offset by 4 from the slice's own multiples of 8
    K, S, T = 1012, 3, 32
    A, B = _operands(np.float32, K, seed=7)
    got = jaxmma.matmul(
        A, B, instruction=TF32, arch=ARCH, split_k=S, k_tile=T, split_rule="cutlass",
        input_rounding="rn",
    )  # fmt: skip
    Ar, Br = _tf32_rn(A), _tf32_rn(B)
    parts = []
    for a, b, lead in ((0, 340, 20), (340, 680, 20), (680, 1012, 12)):
        za, zb = np.zeros((M, T - lead), np.float32), np.zeros((T - lead, N), np.float32)
        sa = np.concatenate([Ar[:, a : a + lead], za, Ar[:, a + lead : b]], axis=1)
        sb = np.concatenate([Br[a : a + lead], zb, Br[a + lead : b]], axis=0)
        parts.append(chain(TF32, sa, sb))
    want = add_in_order(parts)
    assert np.array_equal(_bits(got), want)
    # the zeros matter: the same slices without them give other bits
    flat = add_in_order(
        [chain(TF32, Ar[:, a:b], Br[a:b]) for a, b in ((0, 340), (340, 680), (680, 1012))]
    )
    assert not np.array_equal(want, flat)


def test_cutlass_without_a_split_still_puts_the_partial_tile_first():
    # split_k=1: one slice of K = 1012; with a K tile of 32 its first tile holds 1012 %
    # 32 = 20 elements, then 12 +0s; C starts the chain (the plain chain of a whole K
    # would give other bits)
    K, T = 1012, 32
    A, B = _operands(np.float32, K, seed=8)
    C = np.random.default_rng(9).standard_normal((M, N)).astype(np.float32)
    got = jaxmma.matmul(
        A, B, C, instruction=TF32, arch=ARCH, split_k=1, k_tile=T, split_rule="cutlass",
        input_rounding="rn",
    )  # fmt: skip
    Ar, Br = _tf32_rn(A), _tf32_rn(B)
    za, zb = np.zeros((M, T - 20), np.float32), np.zeros((T - 20, N), np.float32)
    sa = np.concatenate([Ar[:, :20], za, Ar[:, 20:]], axis=1)
    sb = np.concatenate([Br[:20], zb, Br[20:]], axis=0)
    want = np.asarray(chain(TF32, sa, sb, C), np.uint32)
    assert np.array_equal(_bits(got), want)
    assert not np.array_equal(want, np.asarray(chain(TF32, Ar, Br, C), np.uint32))


@pytest.mark.parametrize("reduce_order", ["halving", ((0, 1), (2, 3)), (((0, 3), 1), 2)])
def test_xla_split_and_reduce_orders(reduce_order):
    K, S = 512, 4
    A, B = _operands(jnp.bfloat16, K, seed=11, scale=4.0)
    got = jaxmma.matmul(
        A, B, instruction=BF16, arch=ARCH, split_k=S, split_rule="xla", split_reduce=reduce_order
    )
    p = [
        _f32(chain(BF16, A[:, i * 128 : (i + 1) * 128], B[i * 128 : (i + 1) * 128]))
        for i in range(S)
    ]
    want = {
        "halving": (p[0] + p[2]) + (p[1] + p[3]),
        ((0, 1), (2, 3)): (p[0] + p[1]) + (p[2] + p[3]),
        (((0, 3), 1), 2): ((p[0] + p[3]) + p[1]) + p[2],
    }[reduce_order]
    assert np.array_equal(_bits(got), want.view(np.uint32))


def test_split_options_take_numpy_ints():
    """NumPy ints in split_k and a pairing tree are ints (an IndexError from inside the
    reduction before)."""
    A, B = _operands(jnp.bfloat16, 256, seed=17)
    kw = dict(instruction=BF16, arch=ARCH, split_rule="xla")
    got = jaxmma.matmul(A, B, split_k=np.int64(2), split_reduce=(np.int32(1), np.int64(0)), **kw)
    parts = [chain(BF16, A[:, :128], B[:128]), chain(BF16, A[:, 128:], B[128:])]
    assert np.array_equal(_bits(got), add_in_order(parts[::-1]))


def test_split_k_one_is_the_default_chain():
    A, B = _operands(jnp.bfloat16, 300, seed=12)
    C = np.ones((M, N), np.float32)
    a = jaxmma.matmul(A, B, C, instruction=BF16, arch=ARCH)
    b = jaxmma.matmul(A, B, C, instruction=BF16, arch=ARCH, split_k=1)
    assert np.array_equal(_bits(a), _bits(b))
    assert np.array_equal(_bits(a), chain(BF16, A, B, C))


# ----------------------------------------------------------------------------- rounding
@pytest.mark.parametrize(
    "mode,fn", [("rn", _tf32_rn), ("rna", _tf32_rna), ("rz", _tf32_rz), (None, _tf32_rz)]
)
def test_tf32_input_rounding(mode, fn):
    K = 96
    A, B = _operands(np.float32, K, seed=13)
    got = jaxmma.matmul(A, B, instruction=TF32, arch=ARCH, input_rounding=mode)
    assert np.array_equal(_bits(got), chain(TF32, fn(A), fn(B)))


def test_tf32_roundings_differ():
    A, B = _operands(np.float32, 256, seed=14)
    outs = [
        _bits(jaxmma.matmul(A, B, instruction=TF32, arch=ARCH, input_rounding=m))
        for m in ("rn", "rna", "rz")
    ]
    assert not np.array_equal(outs[0], outs[2])
    # rn and rna differ only on exact ties, which random f32 inputs almost never hit
    ties = [((x.view(np.uint32) & 0x1FFF) == 0x1000).any() for x in (A, B)]
    assert np.array_equal(outs[0], outs[1]) == (not any(ties))


def test_bf16_input_rounding_from_float32():
    A, B = _operands(np.float32, 64, seed=15)
    got = jaxmma.matmul(A, B, instruction=BF16, arch=ARCH, input_rounding="rz")
    trunc = lambda x: (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)  # noqa: E731
    want = chain(BF16, trunc(A).astype(jnp.bfloat16), trunc(B).astype(jnp.bfloat16))
    assert np.array_equal(_bits(got), want)


# ----------------------------------------------------------------------------- epilogues
def _bf16(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


def test_epilogue_f32_adds_c_after_the_chain():
    A, B = _operands(jnp.bfloat16, 1024, seed=16)
    C = (np.random.default_rng(17).standard_normal((M, N)) * 32).astype(np.float32)
    got = jaxmma.matmul(A, B, C, instruction=BF16, arch=ARCH, epilogue="f32")
    want = _f32(chain(BF16, A, B)) + C
    assert np.array_equal(_bits(got), want.view(np.uint32))
    assert not np.array_equal(_bits(got), chain(BF16, A, B, C))  # C in the chain differs


def test_epilogue_rounded_rounds_twice():
    A, B = _operands(jnp.bfloat16, 1024, seed=18)
    C = _bf16(np.random.default_rng(19).standard_normal((M, N)) * 32)
    got = jaxmma.matmul(
        A, B, C, instruction=BF16, arch=ARCH, epilogue="rounded", out_dtype=jnp.bfloat16
    )
    acc = _f32(chain(BF16, A, B))
    want = _bf16(_bf16(acc).astype(np.float32) + C.astype(np.float32))
    assert got.dtype == jnp.bfloat16
    assert np.array_equal(_bits(got), want.view(np.uint16))
    once = _bf16(acc + C.astype(np.float32))
    assert not np.array_equal(want.view(np.uint16), once.view(np.uint16))


def test_alpha_beta_beta_c_then_one_fma():
    A, B = _operands(jnp.bfloat16, 512, seed=20)
    C = (np.random.default_rng(21).standard_normal((M, N)) * 4).astype(np.float32)
    alpha, beta = 0.7, -1.3
    got = jaxmma.matmul(
        A, B, C, instruction=BF16, arch=ARCH, epilogue="f32", alpha=alpha, beta=beta
    )
    acc = _f32(chain(BF16, A, B))
    bc = np.float32(beta) * C  # one f32 multiply
    want = np.array(
        [[_fma_f32(np.float32(alpha), acc[i, j], bc[i, j]) for j in range(N)] for i in range(M)],
        np.float32,
    )
    assert np.array_equal(_bits(got), want.view(np.uint32))
    assert not np.array_equal(want, np.float32(alpha) * acc + bc)


def test_out_dtype_converts_once():
    A, B = _operands(jnp.bfloat16, 4096, seed=22)
    got = jaxmma.matmul(
        A, B, instruction=BF16, arch=ARCH, split_k=3, k_tile=64, out_dtype=jnp.bfloat16
    )
    parts = [chain(BF16, A[:, a:b], B[a:b]) for a, b in ((0, 1408), (1408, 2816), (2816, 4096))]
    want = _bf16(_f32(add_in_order(parts)))
    assert np.array_equal(_bits(got), want.view(np.uint16))


def test_f16_accumulator_epilogue():
    A, B = _operands(jnp.float16, 64, seed=23)
    C = np.random.default_rng(24).standard_normal((M, N)).astype(np.float16)
    got = jaxmma.matmul(
        A, B, C, instruction=F16ACC, arch=ARCH, epilogue="f32", out_dtype=jnp.float16
    )
    acc = np.asarray(chain(F16ACC, A, B, np.zeros((M, N), np.float16))).view(np.float16)
    want = (acc.astype(np.float32) + C.astype(np.float32)).astype(np.float16)
    assert np.array_equal(_bits(got), want.view(np.uint16))


# ----------------------------------------------------------------------------- recipes
def _scales(shape, seed):
    rng = np.random.default_rng(seed)
    return (2.0 ** rng.integers(-3, 4, shape) * rng.uniform(1, 2, shape)).astype(np.float32)


def test_per_tensor_scales_multiply_once_after_the_chain():
    A, B = _operands(jnp.float8_e4m3fn, 512, seed=25, scale=2.0)
    sa, sb = _scales((), 26), _scales((), 27)
    got = jaxmma.matmul(
        A, B, instruction=E4M3, arch=ARCH, promote_every=4, scale_a=jnp.asarray(sa),
        scale_b=jnp.asarray(sb), out_dtype=jnp.bfloat16,
    )  # fmt: skip
    acc = _f32(promoted_chain(E4M3, A, B, 4))
    want = _bf16(acc * (np.float32(sa) * np.float32(sb)))
    assert np.array_equal(_bits(got), want.view(np.uint16))


def test_row_wise_scales():
    A, B = _operands(jnp.float8_e4m3fn, 256, seed=28, scale=2.0)
    sa, sb = _scales((M, 1), 29), _scales((1, N), 30)
    got = jaxmma.matmul(A, B, instruction=E4M3, arch=ARCH, scale_a=sa, scale_b=sb)
    acc = _f32(chain(E4M3, A, B))
    want = (acc * sb) * sa  # B's scale first, as the H100 capture shows
    assert np.array_equal(_bits(got), want.view(np.uint32))
    assert not np.array_equal(want, acc * (sa * sb))


def _fma_f32(x, y, z):
    """RN_f32(x * y + z) with exact fractions (finite inputs)."""
    exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    c = np.float32(float(exact))
    best = min(
        (c, np.nextafter(c, np.float32(np.inf)), np.nextafter(c, np.float32(-np.inf))),
        key=lambda v: (abs(Fraction(float(v)) - exact), int(np.float32(v).view(np.uint32)) & 1),
    )
    return np.float32(best)


def test_block_scales_fma_each_group():
    K = 384  # three 128-wide groups
    A, B = _operands(jnp.float8_e4m3fn, K, seed=31, scale=2.0)
    sa, sb = _scales((M, 3), 32), _scales((3, 1), 33)
    got = jaxmma.matmul(A, B, instruction=E4M3, arch=ARCH, scale_a=sa, scale_b=sb)
    P = [
        _f32(chain(E4M3, A[:, g * 128 : (g + 1) * 128], B[g * 128 : (g + 1) * 128]))
        for g in range(3)
    ]
    total = np.zeros((M, N), np.float32)
    for g in range(3):
        s = sa[:, g : g + 1] * sb[g, 0]  # one f32 multiply per element
        for i in range(M):
            for j in range(N):
                total[i, j] = _fma_f32(P[g][i, j], s[i, 0], total[i, j])
    assert np.array_equal(_bits(got), total.view(np.uint32))
    # a separate multiply and add differs somewhere
    sep = np.zeros((M, N), np.float32)
    for g in range(3):
        sep = sep + P[g] * (sa[:, g : g + 1] * sb[g, 0])
    assert not np.array_equal(total, sep)


def test_block_scales_with_batched_a():
    # scales without batch dimensions beside a batched A (exact sums: powers of two)
    rng = np.random.default_rng(7)
    A = jnp.asarray(rng.integers(-4, 5, (2, 24, 300)), jnp.bfloat16)
    B = jnp.asarray(rng.integers(-4, 5, (300, 40)), jnp.bfloat16)
    sa = np.exp2(rng.integers(-3, 4, (24, 3))).astype(np.float32)
    sb = np.exp2(rng.integers(-3, 4, (3, 1))).astype(np.float32)
    got = jaxmma.matmul(A, B, instruction=BF16, arch=ARCH, scale_a=sa, scale_b=sb)
    ea = np.asarray(A, np.float64) * np.repeat(sa, 128, axis=1)[:, :300]
    eb = np.asarray(B, np.float64) * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1)[:300, :40]
    assert got.shape == (2, 24, 40)
    assert np.array_equal(np.asarray(got), np.einsum("zmk,kn->zmn", ea, eb).astype(np.float32))


@pytest.mark.full  # the quick run keeps make test within 5 minutes; CI runs it
def test_block_scales_batched_for_a_only():
    # per-batch activation scales [2, M, G] beside unbatched weight scales [G, N / 128]
    rng = np.random.default_rng(8)
    A = jnp.asarray(rng.integers(-4, 5, (2, 24, 300)), jnp.bfloat16)
    B = jnp.asarray(rng.integers(-4, 5, (300, 40)), jnp.bfloat16)
    sa = np.exp2(rng.integers(-3, 4, (2, 24, 3))).astype(np.float32)
    sb = np.exp2(rng.integers(-3, 4, (3, 1))).astype(np.float32)
    got = jaxmma.matmul(A, B, instruction=BF16, arch=ARCH, scale_a=sa, scale_b=sb)
    ea = np.asarray(A, np.float64) * np.repeat(sa, 128, axis=2)[:, :, :300]
    eb = np.asarray(B, np.float64) * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1)[:300, :40]
    assert got.shape == (2, 24, 40)
    assert np.array_equal(np.asarray(got), np.einsum("zmk,kn->zmn", ea, eb).astype(np.float32))


def test_scaled_c_enters_the_epilogue():
    A, B = _operands(jnp.float8_e4m3fn, 128, seed=34, scale=2.0)
    sa, sb = _scales((), 35), _scales((), 36)
    C = np.random.default_rng(37).standard_normal((M, N)).astype(np.float32)
    got = jaxmma.matmul(
        A, B, C, instruction=E4M3, arch=ARCH, scale_a=sa, scale_b=sb, epilogue="f32"
    )
    want = _f32(chain(E4M3, A, B)) * (sa * sb) + C
    assert np.array_equal(_bits(got), want.view(np.uint32))


# ----------------------------------------------------------------------------- errors
A16, B16 = _operands(jnp.bfloat16, 64, seed=40)
A8, B8 = _operands(jnp.float8_e4m3fn, 256, seed=41)
BAD = [
    ("split0", BF16, dict(split_k=0), ValueError, "split_k"),
    ("split-float", BF16, dict(split_k=2.0), TypeError, "split_k"),
    ("split-bool", BF16, dict(split_k=True), TypeError, "split_k"),
    ("tile-ragged", BF16, dict(split_k=2, k_tile=24), ValueError, "k_tile.*multiple.*16"),
    ("tile-zero", BF16, dict(k_tile=0), ValueError, "k_tile"),
    ("rule", BF16, dict(split_k=2, split_rule="magma"), ValueError, "split_rule"),
    ("reduce", BF16, dict(split_k=2, split_reduce="tree"), ValueError, "split_reduce"),
    ("reduce-tree", BF16, dict(split_k=3, split_reduce=(0, 1)), ValueError, "split_reduce"),
    ("halving-odd", BF16, dict(split_k=3, split_reduce="halving"), ValueError, "split_reduce"),
    ("empty-slice", BF16, dict(split_k=8, k_tile=16), ValueError, "split_k.*empty"),
    ("huge-split", BF16, dict(split_k=10**12), ValueError, "split_k.*at most K"),
    ("huge-split-cutlass", BF16, dict(split_k=10**12, split_rule="cutlass"), ValueError, "at most"),
    ("rounding", BF16, dict(input_rounding="up"), ValueError, "input_rounding"),
    ("rounding-int", S8, dict(input_rounding="rn"), ValueError, "input_rounding.*s8"),
    ("epilogue", BF16, dict(epilogue="bias"), ValueError, "epilogue"),
    ("rounded-no-out", BF16, dict(epilogue="rounded"), ValueError, "out_dtype"),
    ("alpha-no-epilogue", BF16, dict(alpha=2.0), ValueError, "alpha"),
    ("alpha-type", BF16, dict(epilogue="f32", alpha="2"), TypeError, "alpha"),
    ("out-dtype", BF16, dict(out_dtype=jnp.int8), ValueError, "out_dtype"),
    ("split-int-acc", S8, dict(split_k=2), ValueError, "split_k"),
    ("grad-ins", BF16, dict(split_k=2, grad_instruction=BF16), ValueError, "grad_instruction"),
]


@pytest.mark.parametrize("text,kw,exc,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_options(text, kw, exc, match):
    if "s8" in text:
        A, B = np.ones((M, 64), np.int8), np.ones((64, N), np.int8)
    else:
        A, B = A16, B16
    with pytest.raises(exc, match=match):
        jaxmma.matmul(A, B, instruction=text, arch=ARCH, **kw)


ONE = np.float32(1)


def _ones(*shape):
    return np.ones(shape, np.float32)


BAD_SCALES = [
    ("one-missing", dict(scale_a=ONE), ValueError, "scale_b: missing"),
    ("dtype", dict(scale_a=np.ones((), np.float16), scale_b=ONE), TypeError, "scale_a.*float32"),
    ("shape", dict(scale_a=_ones(M), scale_b=_ones(N)), ValueError, r"\[16, 1\]"),
    ("block-shape", dict(scale_a=_ones(M, 3), scale_b=_ones(2, 1)), ValueError, "ceil"),
    (
        "block-promote",
        dict(scale_a=_ones(M, 2), scale_b=_ones(2, 1), promote_every=4),
        ValueError,
        "promote_every",
    ),
    (
        "block-split",
        dict(scale_a=_ones(M, 2), scale_b=_ones(2, 1), split_k=2),
        ValueError,
        "split_k",
    ),
    ("c-in-chain", dict(scale_a=ONE, scale_b=ONE, C=_ones(M, N)), ValueError, "C: with scales"),
    # batch dimensions of the scales that A and B do not have (A8, B8 have none)
    (
        "row-batch",
        dict(scale_a=_ones(3, M, 1), scale_b=_ones(1, N)),
        ValueError,
        r"scale_a.*\(3,\)",
    ),
    (
        "block-batch",
        dict(scale_a=_ones(M, 2), scale_b=_ones(2, 2, 1)),
        ValueError,
        "scale_b.*batch",
    ),
]


@pytest.mark.parametrize(
    "kw,exc,match", [b[1:] for b in BAD_SCALES], ids=[b[0] for b in BAD_SCALES]
)
def test_bad_scales(kw, exc, match):
    kw = dict(kw)
    C = kw.pop("C", None)
    with pytest.raises(exc, match=match):
        jaxmma.matmul(A8, B8, C, instruction=E4M3, arch=ARCH, **kw)


def test_scales_with_f16_accumulators_refused():
    with pytest.raises(ValueError, match="scale_a.*f32 accumulator"):
        jaxmma.matmul(
            A16.astype(jnp.float16), B16.astype(jnp.float16), instruction=F16ACC, arch=ARCH,
            scale_a=np.float32(1), scale_b=np.float32(1),
        )  # fmt: skip


# ----------------------------------------------------------------------------- transforms
KW = dict(instruction=E4M3, arch=ARCH, split_k=2, k_tile=64, out_dtype=jnp.bfloat16)


def test_jit_gives_the_eager_bits():
    A, B = _operands(jnp.float8_e4m3fn, 256, seed=50)
    sa, sb = _scales((M, 1), 51), _scales((1, N), 52)
    f = lambda a, b, x, y: jaxmma.matmul(a, b, scale_a=x, scale_b=y, **KW)  # noqa: E731
    assert np.array_equal(_bits(f(A, B, sa, sb)), _bits(jax.jit(f)(A, B, sa, sb)))


def test_vmap_gives_the_per_item_bits():
    As = np.stack([_operands(jnp.bfloat16, 256, seed=s)[0] for s in (53, 54)])
    _, B = _operands(jnp.bfloat16, 256, seed=55)
    f = functools.partial(
        jaxmma.matmul, instruction=BF16, arch=ARCH, split_k=3, k_tile=32, epilogue="f32"
    )
    C = np.ones((M, N), np.float32)
    got = jax.vmap(lambda a: f(a, B, C))(As)
    for i in range(2):
        assert np.array_equal(_bits(got[i]), _bits(f(As[i], B, C)))


def test_grad_is_straight_through_including_the_scales():
    rng = np.random.default_rng(56)
    K = 256
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    sa, sb = _scales((M, 2), 57), _scales((2, 1), 58)
    C = rng.standard_normal((M, N)).astype(np.float32)
    G = rng.standard_normal((M, N)).astype(np.float32)

    def loss(a, b, x, y, c):
        d = jaxmma.matmul(a, b, c, instruction=E4M3, arch=ARCH, scale_a=x, scale_b=y,
                          epilogue="f32", alpha=0.5)  # fmt: skip
        return jnp.sum(d * G)

    grads = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(A, B, sa, sb, C)
    # the tangent of 0.5 * (A_q * SA) @ (B_q * SB) + C at the e4m3 values A_q, B_q
    Aq = A.astype(jnp.float8_e4m3fn).astype(np.float64)
    Bq = B.astype(jnp.float8_e4m3fn).astype(np.float64)
    ea = np.repeat(sa.astype(np.float64), 128, axis=1)
    eb = np.repeat(sb.astype(np.float64), 128, axis=0)
    G64 = G.astype(np.float64)
    dA = 0.5 * (G64 @ (Bq * eb).T) * ea
    dB = 0.5 * ((Aq * ea).T @ G64) * eb
    dEA = 0.5 * (G64 @ (Bq * eb).T) * Aq
    dEB = 0.5 * ((Aq * ea).T @ G64) * Bq
    dsa = dEA.reshape(M, 2, 128).sum(-1)
    dsb = dEB.reshape(2, 128, N).sum((1, 2))[:, None]
    for got, want in zip(grads, (dA, dB, dsa, dsb, G64), strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-5, atol=1e-5)


def test_dot_general_takes_the_options():
    A, B = _operands(jnp.bfloat16, 1000, seed=60)
    kw = dict(instruction=BF16, arch=ARCH, split_k=3, k_tile=64, out_dtype=jnp.bfloat16)
    got = jaxmma.dot_general(A, B, (((1,), (0,)), ((), ())), **kw)
    parts = [chain(BF16, A[:, a:b], B[a:b]) for a, b in ((0, 384), (384, 768), (768, 1000))]
    assert np.array_equal(_bits(got), _bf16(_f32(add_in_order(parts))).view(np.uint16))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(split_k=2), "split_k=2: not modelled for sparse"),
        (dict(epilogue="f32", alpha=2.0), "epilogue='f32', alpha=2.0: not modelled for sparse"),
        (dict(input_rounding="rz"), "input_rounding='rz': not modelled for sparse"),
        (dict(scale_a=ONE, scale_b=ONE), "scale_a: not modelled for sparse"),
    ],
)
def test_sparse_forms_name_the_option_they_refuse(kw, match):
    sparse = "mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"
    A = jnp.zeros((16, 32), jnp.bfloat16)
    with pytest.raises(ValueError, match=match):
        jaxmma.matmul(A, jnp.ones((32, 8), jnp.bfloat16), instruction=sparse, arch=ARCH, **kw)


def test_scales_batch_check_holds_under_jit():
    f = jax.jit(lambda a, b, sa, sb: jaxmma.matmul(a, b, instruction=E4M3, arch=ARCH,
                                                    scale_a=sa, scale_b=sb))  # fmt: skip
    with pytest.raises(ValueError, match=r"scale_a.*batch dimensions \(3,\)"):
        f(A8, B8, _ones(3, M, 1), _ones(1, N))


# ----------------------------------------------------------------------------- doubles
def _round_double(d, p, mode):
    """Doubles of the normal range rounded to ``p`` significant bits, exactly in NumPy."""
    m, e = np.frexp(d)
    s = m * 2.0**p  # exact: a power-of-two scaling
    r = {"rz": np.trunc(s), "rn": np.rint(s), "rna": np.sign(s) * np.floor(np.abs(s) + 0.5)}
    return np.ldexp(r[mode], e - p)


def _host_doubles(shape, p, seed):
    """Doubles float32 does not hold: half of them within 2**-40 of a grid point or a tie
    of ``p`` significant bits (where rounding through float32 first gives other bits)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    g = rng.integers(2 ** (p - 1), 2**p, shape) + rng.choice([0.0, 0.5], shape)
    near = np.ldexp(g, rng.integers(-p - 3, -p + 3, shape)) * (
        1 + rng.choice([-1.0, 1.0], shape) * 2.0**-40
    )
    return np.where(rng.random(shape) < 0.5, near * rng.choice([-1.0, 1.0], shape), x)


@pytest.mark.parametrize(
    "text,p,mode", [(BF16, 8, "rz"), (BF16, 8, "rna"), (BF16, 8, "rn"), (TF32, 11, "rz")]
)
def test_host_doubles_take_the_input_rounding(text, p, mode):
    """NumPy float64 operands are rounded once, from the double, in ``input_rounding``
    (with x64 off, as with it on: tests/test_x64.py); also through dot_general."""
    assert not jax.config.jax_enable_x64
    K = 64
    A, B = _host_doubles((M, K), p, 70), _host_doubles((K, N), p, 71)
    ra, rb = _round_double(A, p, mode), _round_double(B, p, mode)
    # the test can fail: rounding through float32 first gives other operands
    assert not np.array_equal(_round_double(A.astype(np.float32).astype(np.float64), p, mode), ra)
    dtype = jnp.bfloat16 if text == BF16 else np.float32  # tf32 values: exact in float32
    want = chain(text, ra.astype(dtype), rb.astype(dtype))
    got = jaxmma.matmul(A, B, instruction=text, arch=ARCH, input_rounding=mode)
    assert np.array_equal(_bits(got), want)
    dn = (((1,), (0,)), ((), ()))
    got = jaxmma.dot_general(A, B, dn, instruction=text, arch=ARCH, input_rounding=mode)
    assert np.array_equal(_bits(got), want)


def test_host_doubles_with_stochastic_rounding():
    """Doubles float32 holds are rounded stochastically as float32 (the documented draw:
    top dropped bits + random bits carry); others are a TypeError naming the operand."""
    A32, B32 = _operands(np.float32, 32, seed=72)
    key = jax.random.key(5)
    got = jaxmma.matmul(
        A32.astype(np.float64), B32.astype(np.float64), instruction=BF16, arch=ARCH,
        rounding="stochastic", key=key,
    )  # fmt: skip

    def bf16(x, which):
        r = np.asarray(jax.random.bits(jax.random.split(key)[which], x.shape, jnp.uint32))
        b = x.view(np.uint32)
        up = (b & np.uint32(0xFFFF)) << np.uint32(16) > ~r
        return ((b >> np.uint32(16)) + up).astype(np.uint16).view(ml_dtypes.bfloat16)

    assert np.array_equal(_bits(got), chain(BF16, bf16(A32, 0), bf16(B32, 1)))
    with pytest.raises(TypeError, match=r"A: the float64 value .*'stochastic'"):
        jaxmma.matmul(
            _host_doubles((M, 32), 8, 73), B32, instruction=BF16, arch=ARCH,
            rounding="stochastic", key=key,
        )  # fmt: skip


def test_epilogue_c_of_host_doubles_rounds_once_into_the_output():
    """An epilogue's C of doubles is rounded once, to nearest, into the output type (it
    was read as raw bits with x64 off, and rounded twice with x64 on)."""
    C = _host_doubles((M, N), 8, 74)
    Z = np.zeros((M, 16), ml_dtypes.bfloat16)
    got = jaxmma.matmul(
        Z, Z.T[:, :N], C, instruction=BF16, arch=ARCH, epilogue="f32", out_dtype=jnp.bfloat16
    )
    want = _round_double(C, 8, "rn").astype(np.float32).astype(ml_dtypes.bfloat16)  # exact
    assert not np.array_equal(C.astype(np.float32).astype(ml_dtypes.bfloat16), want)
    assert np.array_equal(_bits(got), want.view(np.uint16))


def test_float64_scales_are_rounded_to_nearest_float32_once():
    """Python-float and float64 scales: the float32 scales nearest to them, x64 on or
    off (tests/test_x64.py)."""
    want = jaxmma.matmul(
        A8, B8, instruction=E4M3, arch=ARCH, scale_a=np.float32(0.1), scale_b=np.float32(3.0)
    )
    for sa in (0.1, np.float64(0.1), np.array(0.1)):
        got = jaxmma.matmul(A8, B8, instruction=E4M3, arch=ARCH, scale_a=sa, scale_b=3.0)
        assert np.array_equal(_bits(got), _bits(want))


def test_a_bias_broadcasts_over_rows_as_f_linear_adds_it():
    # C = bias [N] (F.linear): the epilogue adds bias[j] to every row of the chain's
    # result with one float32 add; its gradient sums the rows of the cotangent
    A, B = _operands(jnp.bfloat16, 64, seed=21)
    bias = np.random.default_rng(22).standard_normal(N).astype(np.float32) * 3
    got = jaxmma.matmul(A, B, bias, instruction=BF16, arch=ARCH, epilogue="f32")
    want = (_f32(chain(BF16, A, B)) + bias[None, :]).view(np.uint32)
    assert np.array_equal(_bits(got), want)
    G = np.random.default_rng(23).integers(-4, 5, (M, N)).astype(np.float32)
    for kw in ({}, dict(epilogue="f32")):
        f = lambda b, kw=kw: jnp.sum(  # noqa: E731
            jaxmma.matmul(A, B, b, instruction=BF16, arch=ARCH, **kw) * G
        )
        np.testing.assert_array_equal(np.asarray(jax.grad(f)(jnp.asarray(bias))), G.sum(0))
    bad = lambda c: jaxmma.matmul(A, B, c, instruction=BF16, arch=ARCH, epilogue="f32")  # noqa: E731
    for call in (bad, jax.jit(bad)):  # the same ValueError eagerly and at trace time
        with pytest.raises(ValueError, match=r"C: .*bias \[8\]"):
            call(bias[:3])
