"""``tcgen05.mma.sp`` (PTX ISA 9.7.16.10.8): structured sparse A on Blackwell.

The reference here is independent of jaxmma's sparse code: it decodes the metadata
matrix by explicit loops from the spec's rules (1:2 for ``.kind::tf32``, 2:4 for
``f16``/``f8f6f4``/``mxf8f6f4``/``i8``, pair-wise 4:8 for ``mxf4*``), decompresses A,
and computes each row with the *dense* ``tcgen05.mma`` form of the kind (checked bit for
bit against MMA-Sim in tests/test_tcgen05.py) on the K/2 columns the metadata selects:
the stored products alone enter the dense kind's arithmetic (docs/tcgen05.md). Inputs
are random raw bits (NaN, Inf, subnormals; NaN and zero scales).
"""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma import sparse

SP = "tcgen05.mma.sp.cta_group::1"
MEANINGFUL = (0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b0110, 0b1110)  # 9.7.16.10.8.2-3
CHUNK = {"tf32": 2, "mxf4": 8, "mxf4nvf4": 8}


def _dense_twin(ins):
    """The dense form of the same kind, types and M, N, with K / 2."""
    text = ins.text.replace("tcgen05.mma.sp.", "tcgen05.mma.")
    text = re.sub(r"\.m(\d+)n(\d+)k(\d+)\.", lambda g: f".m{g[1]}n{g[2]}k{int(g[3]) // 2}.", text)
    return jaxmma.instruction(text)


def _bits(ins, fmt, shape, rng):
    """Random raw bits of an operand element in jaxmma's encoding: half raw bits of any
    value, half moderate values."""
    kind = ins.kind
    mid = rng.random(shape) < 0.5
    x = rng.normal(size=shape)
    if fmt == "f16":
        raw = rng.integers(0, 2**16, shape)
        mod = x.astype(np.float16).view(np.uint16)
    elif fmt == "bf16":
        raw = rng.integers(0, 2**16, shape)
        mod = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    elif fmt in ("tf32", "f32"):
        raw = rng.integers(0, 2**32, shape, dtype=np.uint64)
        mod = x.astype(np.float32).view(np.uint32)
    elif fmt == "s32":
        return rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    elif fmt == "e2m1":
        nib = rng.integers(0, 16, shape)
        return (nib if kind in ("mxf4", "mxf4nvf4") else nib << 2).astype(np.uint32)
    elif fmt in ("e3m2", "e2m3"):
        return rng.integers(0, 64, shape).astype(np.uint32)
    else:  # e4m3, e5m2, s8, u8
        return rng.integers(0, 256, shape).astype(np.uint32)
    return np.where(mid, mod, raw).astype(np.uint32)


def _scales(ins, shape, rng):
    if ins.stype == "ue8m0":  # a band near 1.0, and any byte (0xFF: NaN)
        s = np.where(
            rng.random(shape) < 0.7, rng.integers(120, 135, shape), rng.integers(0, 256, shape)
        )
    else:  # ue4m3: any byte (sign ignored, 0x7F NaN, 0 zero)
        s = rng.integers(0, 256, shape)
    s.flat[0], s.flat[-1] = (0xFF if ins.stype == "ue8m0" else 0x7F), 0
    return s.astype(np.uint8)


def _positions(ins, v: int, c: int) -> list[int]:
    """The dense columns that metadata value ``v`` of chunk ``c`` names, in stored order."""
    chunk = CHUNK.get(ins.kind, 4)
    i0, i1 = v & 3, v >> 2
    if chunk == 2:  # .kind::tf32: 0b0100 -> element 0, 0b1110 -> element 1
        return [2 * c + i0 // 2]
    if chunk == 4:
        return [4 * c + i0, 4 * c + i1]
    return [8 * c + 2 * i0, 8 * c + 2 * i0 + 1, 8 * c + 2 * i1, 8 * c + 2 * i1 + 1]


def _decompress(ins, Ac, e):
    """Explicit loops: dense A [M, K] and the selected columns [M, K/2] of each row."""
    M, K = Ac.shape[0], ins.k
    A = np.zeros((M, K), Ac.dtype)
    cols = np.zeros((M, K // 2), np.int64)
    for m in range(M):
        j = 0
        for c in range(e.shape[1]):
            for p in _positions(ins, int(e[m, c]), c):
                A[m, p] = Ac[m, j]
                cols[m, j] = p
                j += 1
    return A, cols


def _reference(ins, Ac, e, B, C, SA=None, SB=None, **kw):
    """Row by row: the dense form on the selected columns of the decompressed A and the
    rows of B they meet."""
    A, cols = _decompress(ins, Ac, e)
    rowsA = np.take_along_axis(A, cols, axis=1)[:, None, :]  # [M, 1, K/2]
    rowsB = B[cols]  # [M, K/2, N]
    scaled = {}
    if SA is not None:
        scaled = {"scale_a": SA[:, None, :], "scale_b": SB}
    D = _dense_twin(ins).mma(rowsA, rowsB, C[:, None, :], **scaled, **kw)
    return _raw(ins, D)[:, 0, :]


def _raw(ins, D):
    width = {"f16": jnp.uint16, "s32": jnp.uint32}.get(ins.dtype, jnp.uint32)
    if ins.dtype == "s32":
        D = jax.lax.bitcast_convert_type(D, jnp.uint32)
    else:
        D = jax.lax.bitcast_convert_type(D, width)
    return np.asarray(D).astype(np.uint32)


def _inputs(ins, n, seed):
    rng = np.random.default_rng(seed)
    M, K = ins.m, ins.k
    Ac = _bits(ins, ins.atype, (M, K // 2), rng)
    B = _bits(ins, ins.btype, (K, n), rng)
    C = _bits(ins, ins.ctype, (M, n), rng)
    C[: M // 8] = 0  # zero C rows
    vals = MEANINGFUL if CHUNK.get(ins.kind) != 2 else (0b0100, 0b1110)
    e = rng.choice(vals, size=(M, K // CHUNK.get(ins.kind, 4))).astype(np.uint32)
    kw = {}
    if ins.stype:
        nblk = {"1X": 1, "2X": 2, "4X": 4}[ins.scale_vec]
        kw = {"SA": _scales(ins, (M, nblk), rng), "SB": _scales(ins, (nblk, n), rng)}
    return Ac, e, B, C, kw


def _check(ins, n=16, seed=0, **mma_kw):
    Ac, e, B, C, kw = _inputs(ins, n, seed)
    want = _reference(ins, Ac, e, B, C, kw.get("SA"), kw.get("SB"), **mma_kw)
    scaled = {"scale_a": kw["SA"], "scale_b": kw["SB"]} if kw else {}
    idx = sparse.metadata_indices(ins, e)
    got = _raw(ins, ins.mma(Ac, B, C, metadata=idx, **scaled, **mma_kw))
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{ins.text}: {len(bad)} of {want.size} differ; first at {bad[0].tolist()}: "
        f"got {got[tuple(bad[0])]:#x}, reference {want[tuple(bad[0])]:#x}"
    )
    # the decompressed matrix is what the loops make
    dense, _ = _decompress(ins, Ac, e)
    assert np.array_equal(np.asarray(sparse.decompress(ins, Ac, e)), dense)
    return Ac, e, B, C, kw, want


QUICK = [
    f"{SP}.kind::f16.m128n16k32.f32.bf16.bf16",
    f"{SP}.kind::mxf4nvf4.block_scale.block16.m128n16k128.f32.e2m1.e2m1.ue4m3",
]
FULL = [
    f"{SP}.kind::f8f6f4.m64n16k64.f32.e3m2.e2m1",
    f"{SP}.kind::f16.m64n32k32.f16.f16.f16",
    f"{SP}.kind::f16.m128n32k32.f32.f16.f16.negate_a",
    f"{SP}.kind::tf32.m128n32k16.f32.tf32.tf32",
    f"{SP}.kind::f8f6f4.m128n32k64.f32.e4m3.e5m2",
    f"{SP}.kind::f8f6f4.m128n32k64.f16.e2m3.e4m3.negate_b",
    f"{SP}.kind::i8.m128n32k64.s32.s8.u8",
    f"{SP}.kind::i8.m128n32k64.s32.u8.s8.satfinite",
    f"{SP}.kind::mxf8f6f4.block_scale.m128n32k64.f32.e4m3.e2m1.ue8m0",
    f"{SP}.kind::mxf8f6f4.block_scale.m128n32k64.f32.e5m2.e3m2.ue8m0",
    f"{SP}.kind::mxf4.block_scale.m128n32k128.f32.e2m1.e2m1.ue8m0",
    f"{SP}.kind::mxf4nvf4.block_scale.block32.m128n32k128.f32.e2m1.e2m1.ue8m0",
    f"{SP}.kind::mxf4nvf4.block_scale.scale_vec::4X.m128n32k128.f32.e2m1.e2m1.ue8m0",
    "tcgen05.mma.sp.cta_group::2.kind::mxf4nvf4.block_scale.block16.m256n32k128.f32.e2m1"
    ".e2m1.ue4m3",
]


@pytest.mark.parametrize("text", QUICK)
def test_matches_dense_form_on_selected_columns(text):
    ins = jaxmma.instruction(text)
    Ac, e, B, C, kw, want = _check(ins)
    # the dense A, compressed by jaxmma, gives the bits of its own metadata
    dense, _ = _decompress(ins, Ac, e)
    vals, e2 = sparse.compress(ins, dense)
    scaled = {"scale_a": kw["SA"], "scale_b": kw["SB"]} if kw else {}
    got = _raw(ins, ins.mma(dense, B, C, **scaled))
    assert np.array_equal(got, _reference(ins, np.asarray(vals), np.asarray(e2), B, C, **kw))


@pytest.mark.full
@pytest.mark.parametrize("text", FULL)
def test_matches_dense_form_every_kind(text):
    ins = jaxmma.instruction(text)
    _check(ins, n=ins.n, seed=1)
    _check(ins, n=8, seed=2, enable_input_d=False)


def test_nan_in_pruned_rows_of_b_does_not_reach_d():
    """B's rows at pruned columns are never read (the dense form on the decompressed A
    would make 0 * Inf = NaN there)."""
    ins = jaxmma.instruction(QUICK[0])
    A = np.zeros((128, 32), ml_dtypes.bfloat16)
    A[:, 0::4], A[:, 1::4] = 1, 2  # stores columns 0, 1 of every chunk
    B = np.ones((32, 16), ml_dtypes.bfloat16)
    B[2::4] = np.inf
    B[3::4] = np.nan
    D = np.asarray(ins.mma(A, B, np.zeros((128, 16), np.float32)))
    assert np.all(D == 8 * 3.0)


def test_forms_and_idesc():
    ins = jaxmma.instruction(QUICK[0])
    assert ins.sparse == "sp" and ins.k == 32 and ins.text == QUICK[0]
    assert ins.idesc == 0x08040494  # bit 2 set: sparse
    assert jaxmma.tcgen05_instruction(0x08040494 | 3, kind="f16") == ins  # selector 3
    mx = jaxmma.instruction(QUICK[1])
    assert (mx.idesc >> 2) & 1 and mx.k == 128
    assert jaxmma.tcgen05_instruction(mx.idesc, kind="mxf4nvf4", scale_vec="block16") == mx
    with pytest.raises(ValueError, match="sparsity selector"):
        jaxmma.tcgen05_instruction(0x08040494 | 1, kind="f8f6f4")
    with pytest.raises(ValueError, match="m128n16k128"):  # block-scaled cta_group::2: M = 256
        jaxmma.instruction(
            "tcgen05.mma.sp.cta_group::2.kind::mxf4.block_scale.m128n16k128.f32.e2m1.e2m1.ue8m0"
        )
    with pytest.raises(ValueError, match="k32"):
        jaxmma.instruction(f"{SP}.kind::f16.m128n16k16.f32.bf16.bf16")


def test_errors_name_the_argument():
    ins = jaxmma.instruction(QUICK[0])
    A = np.zeros((128, 32), ml_dtypes.bfloat16)
    B = np.zeros((32, 16), ml_dtypes.bfloat16)
    C = np.zeros((128, 16), np.float32)
    e = np.full((128, 8), 0b0100, np.uint32)
    with pytest.raises(ValueError, match="^e: expected the metadata matrix"):
        sparse.metadata_indices(ins, e[:, :4])
    with pytest.raises(ValueError, match=r"e\[3, 5\] = 16"):
        bad = e.copy()
        bad[3, 5] = 16
        sparse.metadata_indices(ins, bad)
    with pytest.raises(ValueError, match=r"0b0000|= 0 describes"):
        sparse.metadata_indices(ins, np.where(np.arange(8) == 2, 0, e), check=True)
    sparse.metadata_indices(ins, np.where(np.arange(8) == 2, 0b0110, e), check=True)  # (2, 1)
    with pytest.raises(TypeError, match="^e: expected an integer"):
        sparse.metadata_indices(ins, e.astype(np.float32))
    with pytest.raises(ValueError, match="^selector=1"):
        sparse.metadata_indices(ins, e, 1)
    with pytest.raises(ValueError, match=r"^A, B: expected the dense A \[\.\.\., M, 32\]"):
        ins.mma(A[:, :16], B, C)
    with pytest.raises(ValueError, match=r"^A, B: expected the compressed"):
        ins.mma(A, B, C, metadata=sparse.metadata_indices(ins, e))
    with pytest.raises(ValueError, match="^metadata: expected int32"):
        ins.mma(A[:, :16], B, C, metadata=np.zeros((128, 8), np.int32))
    with pytest.raises(ValueError, match="^C: expected trailing shape"):
        ins.mma(A, B, C[:, :8])
    A[0, :3] = 1  # three non-zeros in chunk 0 of row 0
    with pytest.raises(ValueError, match=r"^A: row 0, chunk 0 .* has 3 non-zero"):
        ins.mma(A, B, C)
    dense = jaxmma.instruction("tcgen05.mma.cta_group::1.kind::f16.m128n16k16.f32.bf16.bf16")
    with pytest.raises(ValueError, match="^metadata: operands of tcgen05.mma.sp only"):
        dense.mma(A[:, :16], B[:16], C, metadata=np.zeros((128, 8), np.int32))
    tf = jaxmma.instruction(f"{SP}.kind::tf32.m128n16k16.f32.tf32.tf32")
    with pytest.raises(ValueError, match="0b0100, 0b1110"):
        sparse.metadata_indices(tf, np.full((128, 8), 0b1000, np.uint32), check=True)


def test_jit_vmap_grad_and_poison():
    ins = jaxmma.instruction(QUICK[0])
    keys = jax.random.split(jax.random.key(7), 2)
    A = sparse.prune(ins, jax.random.normal(keys[0], (2, 128, 32)).astype(jnp.bfloat16))
    B = jax.random.normal(keys[1], (32, 16)).astype(jnp.bfloat16)
    C = jnp.zeros((128, 16), jnp.float32)
    one = ins.mma(A[0], B, C)
    f = jax.jit(lambda a: ins.mma(a, B, C))
    assert np.array_equal(np.asarray(f(A[0])).view(np.uint32), np.asarray(one).view(np.uint32))
    # straight-through gradient: dD/dA of the stored elements, zero at the pruned ones
    g = np.asarray(jax.jit(jax.grad(lambda a: jnp.sum(ins.mma(a, B, C))))(A[0]), np.float32)
    want = np.ones((128, 16)) @ np.asarray(B, np.float64).T
    kept = np.asarray(A[0]) != 0
    assert np.allclose(g[kept], want.astype(ml_dtypes.bfloat16).astype(np.float32)[kept])
    # a traced A without the structure, unchecked: its row of D is NaN, the others kept
    bad = A[0].at[5, :4].set(1)
    D = np.asarray(f(bad))
    assert np.all(D[5].view(np.uint32) == 0x7FFFFFFF)
    assert np.array_equal(np.delete(D, 5, 0), np.delete(np.asarray(one), 5, 0))


@pytest.mark.full
def test_vmap_and_compressed_gradient():
    ins = jaxmma.instruction(QUICK[0])
    keys = jax.random.split(jax.random.key(8), 2)
    A = sparse.prune(ins, jax.random.normal(keys[0], (3, 128, 32)).astype(jnp.bfloat16))
    B = jax.random.normal(keys[1], (32, 16)).astype(jnp.bfloat16)
    C = jnp.zeros((128, 16), jnp.float32)
    mapped = jax.vmap(lambda a: ins.mma(a, B, C))(A)
    for i in range(3):
        assert np.array_equal(
            np.asarray(mapped[i]).view(np.uint32), np.asarray(ins.mma(A[i], B, C)).view(np.uint32)
        )
    # the compressed A's gradient: that of each stored element at its dense column
    vals, e = sparse.compress(ins, A[0])
    idx = sparse.metadata_indices(ins, e)
    g = np.asarray(jax.grad(lambda v: jnp.sum(ins.mma(v, B, C, metadata=idx)))(vals), np.float32)
    full = np.ones((128, 16)) @ np.asarray(B, np.float64).T  # d sum(A @ B) / dA
    want = np.take_along_axis(full, np.asarray(idx), axis=1)
    assert np.allclose(g, want.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_matmul_chains_the_instruction():
    """``jaxmma.matmul`` with a sparse form: the instruction chained along K (D the next
    C), 3 k-steps, M not a multiple of the instruction's."""
    ins = jaxmma.instruction(f"{SP}.kind::f8f6f4.m64n16k64.f32.e4m3.e4m3")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(70, 192)).astype(ml_dtypes.float8_e4m3fn)
    x = np.concatenate(
        [
            np.asarray(sparse.prune(ins, np.pad(x[:, s : s + 64], ((0, 58), (0, 0)))))[:70]
            for s in range(0, 192, 64)
        ],
        axis=1,
    )
    w = rng.normal(size=(192, 24)).astype(ml_dtypes.float8_e4m3fn)
    D = np.asarray(jaxmma.matmul(jnp.asarray(x), jnp.asarray(w), instruction=ins, check=True))
    acc = jnp.zeros((70, 24), jnp.float32)
    for s in range(0, 192, 64):
        acc = ins.mma(jnp.asarray(x[:, s : s + 64]), jnp.asarray(w[s : s + 64]), acc)
    assert np.array_equal(D.view(np.uint32), np.asarray(acc).view(np.uint32))
