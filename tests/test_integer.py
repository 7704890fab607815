"""Integer (``.s8/.u8/.s4/.u4``) and ``.b1`` mma against a Python-integer oracle.

The oracle is written here, apart from the code it checks: raw bits are sign-extended
with Python ints, products are summed exactly, C is added, and the result is wrapped to
32 bits or, with ``.satfinite``, clamped once to ``[INT32_MIN, INT32_MAX]`` (PTX ISA
9.7.14.5.14; docs/numerics.md: hardware-confirmed for the m16n8 integer forms). ``.b1`` is
``popc(a AND b)`` / ``popc(a XOR b)`` over the k bits, plus C, wrapped.
"""

import itertools
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma import spec
from jaxmma.arith import _integer

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
WIDTH = {"s8": 8, "u8": 8, "s4": 4, "u4": 4, "b1": 1}


# ---- the oracle ----------------------------------------------------------------------------
def value(bits: int, fmt: str) -> int:
    w = WIDTH[fmt]
    v = bits & ((1 << w) - 1)
    return v - (1 << w) if fmt.startswith("s") and v >> (w - 1) else v


def s32(bits: int) -> int:
    return bits - (1 << 32) if bits >> 31 else bits


def finish(exact: int, satfinite: bool) -> int:
    """An exact integer result -> s32 bits of D."""
    if satfinite:
        exact = min(max(exact, INT32_MIN), INT32_MAX)
    return exact % (1 << 32)


def oracle(A, B, C, atype, btype, *, satfinite=False, bitop=None, b_rows=False):
    """D bits ``[M, N]`` for one matrix product; B is ``[K, N]`` or ``[M, K, N]``."""
    M, K = A.shape
    N = C.shape[1]
    D = np.zeros((M, N), np.uint32)
    for m in range(M):
        Bm = B[m] if b_rows else B
        for n in range(N):
            a = [int(A[m, k]) for k in range(K)]
            b = [int(Bm[k, n]) for k in range(K)]
            if bitop == "and":
                total = sum((x & 1) & (y & 1) for x, y in zip(a, b, strict=True))
            elif bitop == "xor":
                total = sum((x & 1) ^ (y & 1) for x, y in zip(a, b, strict=True))
            else:
                total = sum(value(x, atype) * value(y, btype) for x, y in zip(a, b, strict=True))
            D[m, n] = finish(total + s32(int(C[m, n])), satfinite)
    return D


def test_oracle_basics():
    assert [value(b, "s4") for b in (0x7, 0x8, 0xF, 0x1F)] == [7, -8, -1, -1]
    assert [value(b, "u8") for b in (0xFF, 0x180)] == [255, 128]
    assert finish(INT32_MAX + 1, False) == 0x80000000
    assert finish(INT32_MAX + 1, True) == 0x7FFFFFFF
    assert finish(INT32_MIN - 5, True) == 0x80000000


# ---- vectors -------------------------------------------------------------------------------
def extremes(fmt):
    w = WIDTH[fmt]
    if fmt.startswith("s"):
        return [1 << (w - 1), (1 << (w - 1)) - 1, 0, (1 << w) - 1, 1]  # min, max, 0, -1, 1
    return [(1 << w) - 1, 0, 1, 1 << (w - 1)]


def raw(v: int, fmt: str) -> int:
    return v % (1 << WIDTH[fmt])


def batch(rng, atype, btype, M, N, K):
    """Four test cases ``[4, ...]``: random, extremes, and the +/- overflow edges."""
    As, Bs, Cs = [], [], []
    garbage = rng.getrandbits(32) & ~((1 << WIDTH[atype]) - 1)  # bits above the element
    As.append([[rng.getrandbits(32) for _ in range(K)] for _ in range(M)])
    Bs.append([[rng.getrandbits(32) for _ in range(N)] for _ in range(K)])
    Cs.append([[rng.getrandbits(32) for _ in range(N)] for _ in range(M)])
    c_edge = [0x7FFFFFFF, 0x80000000, 0x7FFFFFF0, 0x80000010, 0, 0xFFFFFFFF]
    As.append([[rng.choice(extremes(atype)) | garbage for _ in range(K)] for _ in range(M)])
    Bs.append([[rng.choice(extremes(btype)) for _ in range(N)] for _ in range(K)])
    Cs.append([[rng.choice(c_edge) for _ in range(N)] for _ in range(M)])
    # every product at its most positive (then most negative) value; C per column puts
    # the exact sum at INT32_MAX - 3 .. INT32_MAX + 4 (INT32_MIN + 3 .. INT32_MIN - 4)
    pa, pb = extremes(atype), extremes(btype)
    best = max(itertools.product(pa, pb), key=lambda p: value(p[0], atype) * value(p[1], btype))
    worst = min(itertools.product(pa, pb), key=lambda p: value(p[0], atype) * value(p[1], btype))
    for (x, y), edge, step in ((best, INT32_MAX, 1), (worst, INT32_MIN, -1)):
        total = K * value(x, atype) * value(y, btype)
        As.append([[x] * K for _ in range(M)])
        Bs.append([[y] * N for _ in range(K)])
        Cs.append([[(edge - total + step * (n - 3)) % (1 << 32) for n in range(N)]] * M)
    return (np.array(As, np.uint32), np.array(Bs, np.uint32), np.array(Cs, np.uint32))


def check(ins, A, B, C, *, b_rows=False):
    got = np.asarray(_integer.mma_bits(ins, A, B, C, b_rows=b_rows))
    for i in range(A.shape[0]):
        want = oracle(
            A[i],
            B[i],
            C[i],
            ins.atype,
            ins.btype,
            satfinite=ins.satfinite,
            bitop=ins.bitop,
            b_rows=b_rows,
        )
        np.testing.assert_array_equal(got[i], want, err_msg=f"{ins.text}, case {i}")


# ---- every integer form of the spec --------------------------------------------------------
INT_FORMS = [
    f for f in spec.FORMS if f.atype in ("s8", "u8", "s4", "u4") and f.opcode in ("mma", "wmma.mma")
]
B1_FORMS = [f for f in spec.FORMS if f.atype == "b1" and f.opcode in ("mma", "wmma.mma")]


def _text(form, satfinite=False, bitop=None):
    sp = f".{form.sparse}" if form.sparse else ""
    head = f"{form.opcode}{sp}.sync.aligned"
    if form.opcode == "wmma.mma":
        if bitop:
            return f"wmma.mma.{bitop}.popc.sync.aligned.row.col.{form.shape}.s32.b1.b1.s32"
        sat = ".satfinite" if satfinite else ""
        return f"{head}.row.col.{form.shape}.s32.{form.atype}.{form.btype}.s32{sat}"
    if bitop:
        return f"{head}.{form.shape}.row.col.s32.b1.b1.s32.{bitop}.popc"
    sat = ".satfinite" if satfinite else ""
    return f"{head}.{form.shape}.row.col{sat}.s32.{form.atype}.{form.btype}.s32"


def _ids(f):
    op = f".{f.bitops[0]}" if f.bitops else ""
    return f"{f.opcode}.{f.sparse or 'dense'}.{f.shape}.{f.atype}.{f.btype}{op}"


@pytest.mark.parametrize("form", INT_FORMS, ids=_ids)
def test_integer_forms(form):
    rng = random.Random(_ids(form))
    K = form.k // 2 if form.sparse else form.k  # sparse: the stored (compressed) K
    A, B, C = batch(rng, form.atype, form.btype, form.m, form.n, K)
    for sat in (False, True):
        ins = jaxmma.instruction(_text(form, sat), arch="sm_90")
        assert (ins.satfinite, ins.atype, ins.btype, ins.shape) == (
            sat,
            form.atype,
            form.btype,
            form.shape,
        )
        if form.sparse:  # B rows met by each stored A element: a K x N matrix per row
            rows = np.stack(
                [
                    np.stack([rng.sample(range(4 * K), K) for _ in range(form.m)])
                    for _ in range(A.shape[0])
                ]
            )
            Bfull = np.concatenate([B, B[:, ::-1], B ^ 0x55, B[:, ::-1] ^ 0xAA], axis=1)
            Brows = np.stack([Bfull[i][rows[i]] for i in range(A.shape[0])])
            check(ins, A, Brows, C, b_rows=True)
        else:
            check(ins, A, B, C)


@pytest.mark.parametrize("form", B1_FORMS, ids=_ids)
def test_b1_forms(form):
    rng = random.Random(_ids(form))
    ins = jaxmma.instruction(_text(form, bitop=form.bitops[0]), arch="sm_90")
    assert ins.bitop == form.bitops[0]
    M, N, K = form.m, form.n, form.k
    A = np.array(
        [
            [[rng.getrandbits(1) for _ in range(K)] for _ in range(M)],
            [[1] * K] * M,
            [[rng.getrandbits(1) for _ in range(K)] for _ in range(M)],
        ],
        np.uint32,
    )
    B = np.array(
        [[[rng.getrandbits(1) for _ in range(N)] for _ in range(K)], [[1] * N] * K, [[0] * N] * K],
        np.uint32,
    )
    C = np.array(
        [
            [[rng.getrandbits(32) for _ in range(N)] for _ in range(M)],
            [[0x7FFFFFFF - n for n in range(N)]] * M,
            [[0xFFFFFFFF] * N] * M,
        ],
        np.uint32,
    )
    check(ins, A, B, C)
    if form.bitops[0] == "and":  # all ones: popc = K; INT32_MAX + K wraps negative
        d = np.asarray(_integer.mma_bits(ins, A[1], B[1], C[1]))
        assert d[0, 0] == (0x7FFFFFFF + K) % 2**32


def test_b1_bits_above_bit0_are_ignored():
    ins = jaxmma.instruction(
        "mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.xor.popc", arch="sm_90"
    )
    rng = np.random.default_rng(0)
    A = rng.integers(0, 2, (8, 128), dtype=np.uint32)
    B = rng.integers(0, 2, (128, 8), dtype=np.uint32)
    C = np.zeros((8, 8), np.uint32)
    want = np.asarray(_integer.mma_bits(ins, A, B, C))
    got = np.asarray(_integer.mma_bits(ins, A | 0xFFFE, B | 0x10, C))
    np.testing.assert_array_equal(got, want)


def test_satfinite_is_one_clamp_at_the_end():
    # partial sums pass INT32_MAX on the way, the final sum is back in range: no clamp
    ins = jaxmma.instruction(
        "mma.sync.aligned.m8n8k16.row.col.satfinite.s32.s8.s8.s32", arch="sm_90"
    )
    A = np.zeros((8, 16), np.uint32)
    A[0, :8], A[0, 8:] = 0x7F, 0x81  # 127 then -127
    B = np.full((16, 8), 0x7F, np.uint32)
    C = np.full((8, 8), 0x7FFFFF00, np.uint32)
    d = np.asarray(_integer.mma_bits(ins, A, B, C))
    assert d[0, 0] == 0x7FFFFF00  # 8 * 127**2 - 8 * 127**2 + C
    A[0, 8:] = 0x7F
    assert np.asarray(_integer.mma_bits(ins, A, B, C))[0, 0] == 0x7FFFFFFF


def test_accumulate_overflow_detection():
    rng = random.Random(11)
    edges = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x7FFFFFFE, 0x80000001]
    totals = [rng.randint(-(2**21), 2**21) for _ in range(300)] + [0, -1, 1, 2**21, -(2**21)]
    cs = [rng.getrandbits(32) for _ in range(300)] + edges[:5]
    cs += [rng.choice(edges) for _ in range(len(totals) - len(cs))]
    t = jnp.asarray(np.array(totals, np.int32))
    c = jnp.asarray(np.array(cs, np.uint32))
    for sat in (False, True):
        got = np.asarray(_integer.accumulate(t, c, satfinite=sat))
        want = [finish(x + s32(y), sat) for x, y in zip(totals, cs, strict=True)]
        assert [int(g) for g in got] == want


def test_errors():
    ins = jaxmma.instruction("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32", arch="sm_90")
    A, B, C = (
        np.zeros((8, 16), np.uint32),
        np.zeros((16, 8), np.uint32),
        np.zeros((8, 8), np.uint32),
    )
    with pytest.raises(TypeError, match="uint32"):
        _integer.mma_bits(ins, A.astype(np.int32), B, C)
    with pytest.raises(ValueError, match="trailing shape"):
        _integer.mma_bits(ins, A, B[:8], C)
    with pytest.raises(ValueError, match="too large"):
        _integer.mma_bits(ins, np.zeros((8, 2**17), np.uint32), np.zeros((2**17, 8), np.uint32), C)
    f64 = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", arch="sm_90")
    with pytest.raises(ValueError, match="atype"):
        _integer.mma_bits(f64, A, B, C)


def test_batch_broadcast():
    ins = jaxmma.instruction(
        "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.u4.s4.s32", arch="sm_90"
    )
    rng = random.Random(2)
    A, B, C = batch(rng, "u4", "s4", 16, 8, 32)
    got = np.asarray(_integer.mma_bits(ins, A[:, None], B[None], C[None, :1]))  # [4, 4, M, N]
    for i, j in itertools.product(range(4), range(4)):
        want = oracle(A[i], B[j], C[0], "u4", "s4", satfinite=True)
        np.testing.assert_array_equal(got[i, j], want)


# ---- the public API ------------------------------------------------------------------------
PUBLIC = [
    "mma.sync.aligned.m8n8k16.row.col.satfinite.s32.s8.u8.s32",
    "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32",
    "mma.sync.aligned.m16n8k64.row.col.satfinite.s32.s4.u4.s32",
    "mma.sync.aligned.m8n8k32.row.col.s32.u4.u4.s32",
    "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc",
    "mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.xor.popc",
]


@pytest.mark.parametrize("text", PUBLIC)
def test_public_api(text):
    ins = jaxmma.instruction(text, arch="sm_90")
    rng = random.Random(text)
    M, N, K = ins.m, ins.n, ins.k
    if ins.atype == "b1":
        A = np.array([[rng.getrandbits(1) for _ in range(K)] for _ in range(M)], np.uint32)
        B = np.array([[rng.getrandbits(1) for _ in range(N)] for _ in range(K)], np.uint32)
        C = np.array(
            [[rng.choice([0x7FFFFFFF, rng.getrandbits(32)]) for _ in range(N)] for _ in range(M)],
            np.uint32,
        )
    else:
        A, B, C = (x[1] for x in batch(rng, ins.atype, ins.btype, M, N, K))  # the extremes
    want = oracle(A, B, C, ins.atype, ins.btype, satfinite=ins.satfinite, bitop=ins.bitop)
    D = ins.mma(A, B, C)  # raw bits in, s32 out
    assert D.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(D).view(np.uint32), want)
    # the matrix level ignores raw bits above the element; fragments refuse concrete ones
    width = {"s4": 4, "u4": 4, "s8": 8, "u8": 8, "b1": 1}
    A = np.asarray(A) & np.uint32((1 << width[ins.atype]) - 1)
    B = np.asarray(B) & np.uint32((1 << width[ins.btype]) - 1)
    a, b, c = ins.fragment("a", A), ins.fragment("b", B), ins.fragment("c", C)
    for fn in (ins, jax.jit(ins)):
        d = fn(a, b, c)
        assert d.dtype == jnp.uint32 and d.shape == (32, ins.nregs["d"])
        np.testing.assert_array_equal(np.asarray(ins.unfragment("d", d)), want)
    d = jax.vmap(ins)(jnp.stack([a, a]), jnp.stack([b, b]), jnp.stack([c, c]))
    np.testing.assert_array_equal(np.asarray(ins.unfragment("d", d[1])), want)


def test_public_api_element_dtypes():
    ins = jaxmma.instruction(
        "mma.sync.aligned.m8n8k16.row.col.satfinite.s32.s8.s8.s32", arch="sm_90"
    )
    rng = np.random.default_rng(4)
    A = rng.integers(-128, 128, (8, 16), dtype=np.int8)
    B = rng.integers(-128, 128, (16, 8), dtype=np.int8)
    C = rng.integers(INT32_MIN, INT32_MAX, (8, 8), dtype=np.int64).astype(np.int32)
    D = np.asarray(ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C)))
    want = oracle(
        A.view(np.uint8).astype(np.uint32),
        B.view(np.uint8).astype(np.uint32),
        C.view(np.uint32),
        "s8",
        "s8",
        satfinite=True,
    )
    np.testing.assert_array_equal(D.view(np.uint32), want)
