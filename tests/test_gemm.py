"""jaxmma.matmul against a GEMM written here from the instruction-level function.

The reference is a plain Python loop over the m x n output tiles and the k-steps that
chains ``ins.mma`` (the matrix level of one instruction, checked against hardware per
instruction): D of one step is C of the next, A, B and C are padded with +0 to whole
tiles and steps. With ``promote_every=P`` each group of P steps (and the remainder)
starts from +0 and is added into an f32 total that starts at C by NumPy's float32
addition (one round-to-nearest add). Results are compared as raw bits.

Also: float32 inputs converted to the element type give the bits of inputs converted
here beforehand (round to nearest even; saturating for fp8 and integers).
"""

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _suite import params

import jaxmma

M, N, K = 40, 24, 100  # ragged against every tile shape used below
DTYPES = {
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "tf32": np.float32,
    "f32": np.float32,
    "f64": np.float64,
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "s8": np.int8,
    "u8": np.uint8,
    "s4": np.uint8,  # raw bits in the low nibble
    "u4": np.uint8,
    "b1": np.uint8,  # raw bit 0
    "s32": np.int32,
}


def _bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


@functools.cache
def _step(ins):
    if ins.shape == "m8n8k4" and ins.atype == "f16":  # ins.mma takes the four 8x8 matrices
        four = lambda x: jnp.broadcast_to(x, (4, *x.shape))  # noqa: E731
        return jax.jit(lambda A, B, C: ins.mma(four(A), four(B), four(C))[0])
    return jax.jit(lambda A, B, C: ins.mma(A, B, C))


@functools.cache
def _sparse_step(ins):
    """ins.mma on a dense 2:4 tile compressed here with the public sparse API."""

    def step(A, B, C):
        values, e = jaxmma.sparse.compress(ins, A, registers=False)
        idx = jaxmma.sparse.metadata_indices(ins, e, 0)
        return ins.mma(values, B, C, metadata=idx)

    return jax.jit(step)


def _ceil(x, t):
    return -(-x // t) * t


def _pad(x, shape):
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(0, s) for s in x.shape)] = x
    return out


def reference(ins, A, B, C, promote_every=None):
    """D = A @ B + C for one problem (2-D NumPy arrays), tile by tile, step by step."""
    m, n, k = ins.m, ins.n, ins.k
    (Mx, Kx), Nx = A.shape, B.shape[1]
    Mp, Np, Kp = _ceil(Mx, m), _ceil(Nx, n), _ceil(Kx, k)
    Ap, Bp, Cp = _pad(A, (Mp, Kp)), _pad(B, (Kp, Np)), _pad(C, (Mp, Np))
    step = _sparse_step(ins) if ins.sparse else _step(ins)
    S, P = Kp // k, promote_every
    D = None
    for i, j in itertools.product(range(Mp // m), range(Np // n)):
        rows, cols = slice(i * m, (i + 1) * m), slice(j * n, (j + 1) * n)
        a = [Ap[rows, s * k : (s + 1) * k] for s in range(S)]
        b = [Bp[s * k : (s + 1) * k, cols] for s in range(S)]
        ctype = Cp.dtype  # D of one step is C of the next, in C's type (cvt.rn)
        if P is None:
            d = Cp[rows, cols]
            for s in range(S):
                d = step(a[s], b[s], np.asarray(d).astype(ctype))
            d = np.asarray(d)
        else:
            d = Cp[rows, cols].astype(np.float32)
            for g0 in range(0, S, P):
                acc = np.zeros((m, n), ctype)  # +0
                for s in range(g0, min(g0 + P, S)):
                    acc = step(a[s], b[s], np.asarray(acc).astype(ctype))
                d = d + np.asarray(acc, np.float32)  # IEEE f32 add, nearest even
        if D is None:
            D = np.zeros((Mp, Np), d.dtype)
        D[rows, cols] = d
    return D[:Mx, :Nx]


def _rand(rng, fmt, shape, scale=1.0):
    if fmt in ("s8",):
        return rng.integers(-128, 128, shape).astype(np.int8)
    if fmt == "u8":
        return rng.integers(0, 256, shape).astype(np.uint8)
    if fmt in ("s4", "u4"):
        return rng.integers(0, 16, shape).astype(np.uint8)
    if fmt == "b1":
        return rng.integers(0, 2, shape).astype(np.uint8)
    if fmt == "s32":
        return rng.integers(-(2**20), 2**20, shape).astype(np.int32)
    x = rng.standard_normal(shape) * scale
    if fmt == "tf32":  # any float32 bits: the instruction ignores the low 13
        return x.astype(np.float32)
    return x.astype(DTYPES[fmt])


def _operands(ins, seed, shapes=((M, K), (K, N), (M, N))):
    rng = np.random.default_rng(seed)
    scale = {"e4m3": 4.0, "e5m2": 64.0}
    A = _rand(rng, ins.atype, shapes[0], scale.get(ins.atype, 1.0))
    B = _rand(rng, ins.btype, shapes[1], scale.get(ins.btype, 1.0))
    C = _rand(rng, ins.ctype, shapes[2])
    if ins.sparse:
        A = _prune(ins, A)
    return A, B, C


def _prune(ins, A):
    """A with the form's 2:4 (1:2 for .tf32) structure, pruned tile by tile."""
    m, k = ins.m, ins.k
    (Mx, Kx) = A.shape
    Mp, Kp = _ceil(Mx, m), _ceil(Kx, k)
    tiles = _pad(A, (Mp, Kp)).reshape(Mp // m, m, Kp // k, k).transpose(0, 2, 1, 3)
    pruned = np.asarray(jaxmma.sparse.prune(ins, tiles)).transpose(0, 2, 1, 3)
    return pruned.reshape(Mp, Kp)[:Mx, :Kx]


def _check(ins, A, B, C, promote_every=None):
    got = jaxmma.matmul(A, B, C, instruction=ins, promote_every=promote_every)
    lead = np.broadcast_shapes(A.shape[:-2], B.shape[:-2], C.shape[:-2])
    want = np.stack(
        [
            reference(
                ins,
                np.broadcast_to(A, lead + A.shape[-2:])[idx],
                np.broadcast_to(B, lead + B.shape[-2:])[idx],
                np.broadcast_to(C, lead + C.shape[-2:])[idx],
                promote_every,
            )
            for idx in np.ndindex(*lead)
        ]
    ).reshape(lead + (A.shape[-2], B.shape[-1]))
    assert got.shape == want.shape and got.dtype == want.dtype
    g, w = _bits(got), _bits(want)
    if not np.array_equal(g, w):
        bad = np.argwhere(g != w)
        pytest.fail(
            f"{ins.text} ({ins.arch}), promote_every={promote_every}: {len(bad)}/{g.size} "
            f"elements differ; first at {tuple(bad[0])}: matmul {g[tuple(bad[0])]:#x}, "
            f"reference {w[tuple(bad[0])]:#x}"
        )
    return got


MMA = "mma.sync.aligned."
FLOAT_FORMS = [
    (MMA + "m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90"),
    (MMA + "m16n8k16.row.col.f32.f16.f16.f32", "sm_80"),
    (MMA + "m16n8k16.row.col.f16.f16.f16.f16", "sm_90"),
    (MMA + "m16n8k8.row.col.f32.tf32.tf32.f32", "sm_90"),
    (MMA + "m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_90"),
    (MMA + "m16n8k32.row.col.f16.e5m2.e4m3.f16", "sm_90"),
    (MMA + "m16n8k32.row.col.f32.e4m3.e4m3.f32", "sm_89"),
    (MMA + "m16n8k32.row.col.f32.e5m2.e4m3.f32", "sm_100"),
    ("wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32", "sm_90"),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32", "sm_90"),
    (MMA + "m8n8k4.row.col.f32.f16.f16.f16", "sm_80"),
]


def _family(text_arch):
    """Opcode, input family and m8n8k4 or not: the quick run checks one form of each."""
    ins = jaxmma.instruction(*text_arch)
    fam = {"e4m3": "fp8", "e5m2": "fp8", "f16": "16", "bf16": "16"}.get(ins.atype, ins.atype)
    return ins.opcode, fam, ins.shape == "m8n8k4"


@pytest.mark.parametrize(
    "text,arch", params(FLOAT_FORMS, _family, ids=lambda x: f"{x[0].replace(MMA, '')}-{x[1]}")
)
def test_float_forms_match_chained_mma(text, arch):
    ins = jaxmma.instruction(text, arch=arch)
    _check(ins, *_operands(ins, 1))


PROMOTE = [
    (MMA + "m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_90", 2),
    (MMA + "m16n8k32.row.col.f32.e4m3.e4m3.f32", "sm_89", 3),
    (MMA + "m8n8k4.row.col.f32.f16.f16.f16", "sm_80", 4),
]


@pytest.mark.parametrize(
    "text,arch,P",
    # one fp8 case a run; m8n8k4 (its own chain model, covered above) in the full sweep
    params(
        PROMOTE[:2],
        lambda x: "fp8",
        salt="promote",
        ids=lambda x: f"{x[0].replace(MMA, '')}-{x[1]}-{x[2]}",
    )
    + [
        pytest.param(
            *PROMOTE[2], marks=pytest.mark.full, id="m8n8k4.row.col.f32.f16.f16.f16-sm_80-4"
        )
    ],
)
def test_promote_every_matches_the_reference(text, arch, P):
    ins = jaxmma.instruction(text, arch=arch)
    A, B, C = _operands(ins, 2, ((M, 5 * ins.k + 3), (5 * ins.k + 3, N), (M, N)))  # 6 steps
    got = _check(ins, A, B, C, promote_every=P)
    plain = jaxmma.matmul(A, B, C, instruction=ins)
    assert not np.array_equal(_bits(got), _bits(plain))  # promotion changes the sums


def test_promote_every_beyond_the_steps_is_one_group():
    ins = jaxmma.instruction(MMA + "m16n8k32.row.col.f32.e4m3.e5m2.f32", arch="sm_90")
    A, B, C = _operands(ins, 3)
    _check(ins, A, B, C, promote_every=1000)


INT_FORMS = [
    (MMA + "m16n8k32.row.col.s32.s8.s8.s32", "sm_90"),
    (MMA + "m16n8k32.row.col.satfinite.s32.s8.u8.s32", "sm_90"),
    (MMA + "m16n8k32.row.col.s32.u8.s8.s32", "sm_80"),
    (MMA + "m16n8k64.row.col.s32.s4.u4.s32", "sm_90"),
    (MMA + "m16n8k64.row.col.satfinite.s32.s4.s4.s32", "sm_90"),
    (MMA + "m16n8k256.row.col.s32.b1.b1.s32.and.popc", "sm_90"),
    (MMA + "m16n8k256.row.col.s32.b1.b1.s32.xor.popc", "sm_80"),
]


@pytest.mark.parametrize("text,arch", INT_FORMS, ids=lambda x: x.replace(MMA, ""))
def test_integer_forms_match_chained_mma(text, arch):
    ins = jaxmma.instruction(text, arch=arch)
    A, B, C = _operands(ins, 4, ((M, 2 * ins.k + 7), (2 * ins.k + 7, N), (M, N)))
    _check(ins, A, B, C)


def test_s32_wraps_or_saturates_across_steps():
    """C near the s32 limits: the chain overflows; .satfinite clamps, plain forms wrap."""
    wrap = jaxmma.instruction(MMA + "m16n8k32.row.col.s32.s8.s8.s32", arch="sm_90")
    sat = jaxmma.instruction(MMA + "m16n8k32.row.col.satfinite.s32.s8.s8.s32", arch="sm_90")
    rng = np.random.default_rng(5)
    A = np.full((M, K), 127, np.int8)  # every product of a column has B's sign there
    B = np.repeat(np.where(rng.random((1, N)) < 0.5, -128, 127), K, axis=0).astype(np.int8)
    C = np.where(rng.random((M, N)) < 0.5, 2**31 - 1000, -(2**31) + 1000).astype(np.int32)
    dw = _check(wrap, A, B, C)
    ds = _check(sat, A, B, C)
    differ = np.asarray(dw) != np.asarray(ds)
    assert differ.any()
    assert np.isin(np.asarray(ds)[differ], [2**31 - 1, -(2**31)]).all()


@pytest.mark.parametrize(
    "text,arch",
    [
        (MMA + "m8n8k4.row.col.f64.f64.f64.f64", "sm_80"),
        (MMA + "m16n8k8.row.col.f64.f64.f64.f64", "sm_90"),
    ],
    ids=["m8n8k4", "m16n8k8"],
)
def test_f64_matches_chained_mma(text, arch):
    with jax.enable_x64(True):
        ins = jaxmma.instruction(text, arch=arch)
        A, B, C = _operands(ins, 6, ((20, 13), (13, 12), (20, 12)))
        D = _check(ins, A, B, C)
        assert D.dtype == np.float64


def test_f64_without_x64_is_a_clear_error():
    ins = jaxmma.instruction(MMA + "m8n8k4.row.col.f64.f64.f64.f64", arch="sm_80")
    assert not jax.config.jax_enable_x64
    with pytest.raises(ValueError, match="jax_enable_x64"):
        jaxmma.matmul(np.ones((8, 4)), np.ones((4, 8)), instruction=ins)


SPARSE_FORMS = [
    ("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32", "sm_90"),
    ("mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.tf32.tf32.f32", "sm_90"),
    ("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e5m2.f32", "sm_89"),
    ("mma.sp.sync.aligned.m16n8k64.row.col.s32.s8.s8.s32", "sm_80"),
]


@pytest.mark.parametrize("text,arch", SPARSE_FORMS, ids=lambda x: x.split(".aligned.")[-1])
def test_sparse_forms_match_chained_mma_with_metadata(text, arch):
    ins = jaxmma.instruction(text, arch=arch)
    A, B, C = _operands(ins, 7, ((M, 2 * ins.k + 8), (2 * ins.k + 8, N), (M, N)))
    _check(ins, A, B, C)


# ----------------------------------------------------------------------------- block scale
ONE = {"ue8m0": 0x7F, "ue4m3": 0x38}  # the scale 1.0


def _slice_q(q, rows, ks, blocks, axis):
    """The [rows, ks] tile of a Quantized operand (A: axis -1, B: axis -2)."""
    if axis == -1:
        return dataclasses.replace(
            q, elements=q.elements[rows, ks], scales=q.scales[rows, blocks], global_scale=None
        )
    return dataclasses.replace(
        q, elements=q.elements[ks, rows], scales=q.scales[blocks, rows], global_scale=None
    )


def _pad_q(q, shape, scale_shape, one):
    el = _pad(np.asarray(q.elements), shape)
    sc = np.full(scale_shape, one, np.uint8)
    s = np.asarray(q.scales)
    sc[: s.shape[0], : s.shape[1]] = s
    return dataclasses.replace(q, elements=el, scales=sc)


@functools.cache
def _q_step(ins):
    return jax.jit(lambda qa, qb, C: ins.mma(qa, qb, C))


def block_scaled_reference(ins, qa, qb, C):
    m, n, k = ins.m, ins.n, ins.k
    from jaxmma import operands  # the geometry only: scales per k-step

    nblk = operands.num_blocks(ins)
    bs = k // nblk
    (Mx, Kx), Nx = qa.shape, qb.shape[1]
    Mp, Np, Kp = _ceil(Mx, m), _ceil(Nx, n), _ceil(Kx, k)
    one = ONE[ins.stype]
    pa = _pad_q(qa, (Mp, Kp), (Mp, Kp // bs), one)
    pb = _pad_q(qb, (Kp, Np), (Kp // bs, Np), one)
    step, S = _q_step(ins), Kp // k
    D = np.zeros((Mp, Np), np.float32)
    scaled = qa.global_scale is not None or qb.global_scale is not None
    Cp = np.zeros((Mp, Np), np.float32) if scaled else _pad(C, (Mp, Np))
    for i, j in itertools.product(range(Mp // m), range(Np // n)):
        rows, cols = slice(i * m, (i + 1) * m), slice(j * n, (j + 1) * n)
        d = Cp[rows, cols]
        for s in range(S):
            ks, blocks = slice(s * k, (s + 1) * k), slice(s * nblk, (s + 1) * nblk)
            d = step(_slice_q(pa, rows, ks, blocks, -1), _slice_q(pb, cols, ks, blocks, -2), d)
        D[rows, cols] = np.asarray(d)
    D = D[:Mx, :Nx]
    if qa.global_scale is None and qb.global_scale is None:
        return D  # the chains started from C
    ga = np.float32(1 if qa.global_scale is None else qa.global_scale)
    gb = np.float32(1 if qb.global_scale is None else qb.global_scale)
    return D * (ga * gb) + C  # the epilogue: one f32 multiply, one f32 add


BS = MMA + "m16n8k{k}.row.col.kind::{kind}.block_scale.scale_vec::{v}.f32.{a}.{b}.f32.{s}"
BLOCK_FORMS = [
    (BS.format(k=32, kind="mxf8f6f4", v="1X", a="e4m3", b="e2m1", s="ue8m0"), 64),
    (BS.format(k=64, kind="mxf4", v="2X", a="e2m1", b="e2m1", s="ue8m0"), 96),
    (BS.format(k=64, kind="mxf4nvf4", v="4X", a="e2m1", b="e2m1", s="ue4m3"), 80),
]


def _quantizer(ins, fmt):
    from jaxmma import operands

    block = operands.block_size(ins)
    if ins.stype == "ue4m3":
        return functools.partial(jaxmma.quant.quantize_nvfp4, block=block)
    return functools.partial(jaxmma.quant.quantize_mx, fmt=fmt, block=block)


@pytest.mark.parametrize("text,K_", BLOCK_FORMS, ids=lambda x: str(x).split("kind::")[-1][:12])
def test_block_scaled_matches_chained_mma(text, K_):
    ins = jaxmma.instruction(text)
    rng = np.random.default_rng(8)
    X = rng.standard_normal((M, K_)).astype(np.float32)
    Y = rng.standard_normal((K_, N)).astype(np.float32)
    C = rng.standard_normal((M, N)).astype(np.float32)
    qa = _quantizer(ins, ins.atype)(jnp.asarray(X), axis=-1)
    qb = _quantizer(ins, ins.btype)(jnp.asarray(Y), axis=-2)
    want = block_scaled_reference(ins, qa, qb, C)
    got = jaxmma.matmul(qa, qb, C, instruction=ins)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # float inputs are quantized by matmul as the test did above
    got_f = jaxmma.matmul(X, Y, C, instruction=ins)
    np.testing.assert_array_equal(_bits(got_f), _bits(want))
    rel = np.linalg.norm(np.asarray(got) - (X @ Y + C)) / np.linalg.norm(X @ Y + C)
    assert rel < 0.3  # quantized, but a product of these matrices


@pytest.mark.parametrize("exps", [(-70, -78), (-80, -80), (-20, -10)])
def test_nvfp4_global_scales_keep_subnormals(exps):
    """NVFP4's epilogue multiplies by the per-tensor scales' float32 product with IEEE
    arithmetic on every backend: a subnormal product (2**-148), one that rounds to 0
    (2**-160: every output a zero of D's sign, -0 included) and a normal one; numpy's
    float32 (which keeps subnormals) is the oracle. XLA:CPU's own multiply flushed them
    to zero."""
    text = BLOCK_FORMS[2][0]
    ins = jaxmma.instruction(text)
    rng = np.random.default_rng(12)
    X = rng.standard_normal((M, 64)).astype(np.float32)
    Y = rng.standard_normal((64, N)).astype(np.float32)
    C = rng.standard_normal((M, N)).astype(np.float32) * np.float32(1e-39)
    qa = _quantizer(ins, ins.atype)(jnp.asarray(X), axis=-1)
    qb = _quantizer(ins, ins.btype)(jnp.asarray(Y), axis=-2)
    D = block_scaled_reference(
        ins,
        dataclasses.replace(qa, global_scale=None),
        dataclasses.replace(qb, global_scale=None),
        np.zeros((M, N), np.float32),
    )
    ga, gb = (np.float32(2.0**e) for e in exps)
    qa = dataclasses.replace(qa, global_scale=jnp.float32(ga))
    qb = dataclasses.replace(qb, global_scale=jnp.float32(gb))
    want = D * (ga * gb)
    got = jaxmma.matmul(qa, qb, instruction=ins)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    got_c = jax.jit(lambda qa, qb, C: jaxmma.matmul(qa, qb, C, instruction=ins))(qa, qb, C)
    np.testing.assert_array_equal(_bits(got_c), _bits(want + C))
    w = _bits(want)
    if exps == (-70, -78):  # subnormal outputs and zeros reached
        assert (((w & 0x7F800000) == 0) & ((w & 0x7FFFFF) != 0)).sum() > M * N // 2
    if exps == (-80, -80):
        assert (w == 0x80000000).any() and (w == 0).any()


# ----------------------------------------------------------------------------- batches
def test_batch_broadcast_matches_per_problem_reference():
    ins = jaxmma.instruction(MMA + "m16n8k16.row.col.f32.bf16.bf16.f32", arch="sm_90")
    rng = np.random.default_rng(9)
    A = _rand(rng, "bf16", (2, 1, 20, 36))
    B = _rand(rng, "bf16", (3, 36, 12))
    C = _rand(rng, "f32", (20, 12))
    D = _check(ins, A, B, C)
    assert D.shape == (2, 3, 20, 12)


def test_c_none_is_plus_zero():
    ins = jaxmma.instruction(MMA + "m16n8k16.row.col.f32.bf16.bf16.f32", arch="sm_90")
    A, B, _ = _operands(ins, 10)
    got = jaxmma.matmul(A, B, instruction=ins)
    want = reference(ins, A, B, np.zeros((M, N), np.float32))
    np.testing.assert_array_equal(_bits(got), _bits(want))


# ----------------------------------------------------------------------------- conversion
SPECIAL = np.array([0.0, -0.0, 1.0, 1e9, -1e9, np.inf, -np.inf, 2.5, -3.5, 1e-30, 300.0, 500.0])


def _floats(rng, shape):
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    flat = x.reshape(-1)
    flat[: SPECIAL.size] = SPECIAL
    return x


def _convert(fmt, x):
    """float32 -> the element type: nearest even; fp8 and integers saturate."""
    if fmt in ("e4m3", "e5m2"):
        big = float(ml_dtypes.finfo(DTYPES[fmt]).max)
        return np.clip(x, -big, big).astype(DTYPES[fmt])
    if fmt in ("s8", "u8", "s4", "u4"):
        lo, hi = {"s8": (-128, 127), "u8": (0, 255), "s4": (-8, 7), "u4": (0, 15)}[fmt]
        v = np.clip(np.rint(np.nan_to_num(x, nan=0.0)), lo, hi).astype(np.int64)
        if fmt in ("s4", "u4"):
            return (v & 0xF).astype(np.uint8)
        return v.astype(DTYPES[fmt])
    with np.errstate(over="ignore"):
        return x.astype(DTYPES[fmt])  # f16 / bf16: nearest even, overflow to Inf


@pytest.mark.parametrize(
    "text,arch",
    [
        (MMA + "m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90"),
        (MMA + "m16n8k16.row.col.f16.f16.f16.f16", "sm_90"),
        (MMA + "m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_90"),
        (MMA + "m16n8k32.row.col.s32.s8.u8.s32", "sm_90"),
        (MMA + "m16n8k64.row.col.s32.s4.u4.s32", "sm_90"),
    ],
    ids=lambda x: x.replace(MMA, ""),
)
def test_float32_inputs_are_converted_to_the_element_type(text, arch):
    ins = jaxmma.instruction(text, arch=arch)
    rng = np.random.default_rng(11)
    X, Y = _floats(rng, (M, K)), _floats(rng, (K, N))
    if ins.atype.startswith("s") or ins.atype.startswith("u"):
        X, Y = X / 8, Y / 8  # mostly in range, the specials still saturate
    C = _rand(rng, ins.ctype, (M, N))
    got = jaxmma.matmul(X, Y, C, instruction=ins)
    want = jaxmma.matmul(_convert(ins.atype, X), _convert(ins.btype, Y), C, instruction=ins)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # float16 inputs to a bf16 / fp8 form are converted too
    if ins.atype in ("bf16", "e4m3"):
        with np.errstate(over="ignore"):
            X16 = X.astype(np.float16)
        got16 = jaxmma.matmul(X16, Y, C, instruction=ins)
        want16 = jaxmma.matmul(_convert(ins.atype, X16.astype(np.float32)), Y, C, instruction=ins)
        np.testing.assert_array_equal(_bits(got16), _bits(want16))


def test_float32_c_is_rounded_to_an_f16_accumulator():
    ins = jaxmma.instruction(MMA + "m16n8k16.row.col.f16.f16.f16.f16", arch="sm_90")
    A, B, C = _operands(ins, 12)
    C32 = np.random.default_rng(12).standard_normal((M, N)).astype(np.float32)
    got = jaxmma.matmul(A, B, C32, instruction=ins)
    want = jaxmma.matmul(A, B, C32.astype(np.float16), instruction=ins)
    np.testing.assert_array_equal(_bits(got), _bits(want))
