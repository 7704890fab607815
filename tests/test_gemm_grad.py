"""Derivatives of matmul and ins.mma (straight-through), and the agreement of the register
and matrix levels of every mma / mma.sp / block-scaled / wmma.mma form."""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _suite import params
from jax.test_util import check_grads

import jaxmma
from jaxmma import models
from jaxmma.models import _models

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
INS = jaxmma.instruction(BF16, arch="sm_90")
E5M2 = "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32"
RNG = np.random.default_rng(31)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _bf(x):
    """float32 -> its bf16 value (nearest even), as float64."""
    return np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float64)


def _bits(x):
    return np.asarray(x).view(np.uint32)


# A [2, 1, M, K] x B [3, K, N] + C [M, N]: batch broadcast and ragged sizes
SHAPES = ((2, 1, 20, 36), (3, 36, 12), (20, 12))


def _f(A, B, C):
    return jaxmma.matmul(A, B, C, instruction=INS)


def test_jvp_is_the_product_of_the_converted_values():
    A, B, C = (_f32(*s) for s in SHAPES)
    dA, dB, dC = (_f32(*s) for s in SHAPES)
    out, t = jax.jvp(_f, (A, B, C), (dA, dB, dC))
    np.testing.assert_array_equal(_bits(out), _bits(_f(A, B, C)))
    want = dA.astype(np.float64) @ _bf(B) + _bf(A) @ dB.astype(np.float64) + dC
    np.testing.assert_allclose(np.asarray(t), want, rtol=1e-5, atol=1e-5)


def test_vjp_is_the_transposed_product():
    A, B, C = (_f32(*s) for s in SHAPES)
    out, vjp = jax.vjp(_f, A, B, C)
    g = _f32(*out.shape).astype(np.float64)
    gA, gB, gC = vjp(g.astype(np.float32))
    np.testing.assert_allclose(
        np.asarray(gA),
        (g @ np.swapaxes(_bf(B), -1, -2)).sum(1, keepdims=True),
        rtol=1e-5,
        atol=1e-4,
    )
    np.testing.assert_allclose(
        np.asarray(gB), (np.swapaxes(_bf(A), -1, -2) @ g).sum(0), rtol=1e-5, atol=1e-4
    )
    np.testing.assert_allclose(np.asarray(gC), g.sum((0, 1)), rtol=1e-5, atol=1e-4)


def test_linearization_passes_check_grads_and_transposes():
    A, B, C = (_f32(*s) for s in SHAPES)
    _, lin = jax.linearize(_f, A, B, C)
    tangents = tuple(_f32(*s) for s in SHAPES)
    # lin is linear: numerical differences are exact up to f32 rounding
    check_grads(lin, tangents, order=1, modes=("fwd", "rev"), eps=1.0, atol=1e-2, rtol=1e-2)
    # dot-product test: <lin(t), c> == <t, lin^T(c)>
    c = _f32(2, 3, 20, 12)
    tr = jax.linear_transpose(lin, *tangents)(c)
    lhs = float(np.sum(np.asarray(lin(*tangents), np.float64) * c))
    rhs = sum(
        float(np.sum(np.asarray(x, np.float64) * y)) for x, y in zip(tangents, tr, strict=True)
    )
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))
    assert abs(lhs) > 1.0  # not trivially zero


def test_grad_instruction_runs_the_gradient_gemms_through_it():
    A, B = _f32(20, 36), _f32(36, 12)
    g = _f32(20, 12)
    f = lambda a, b: jaxmma.matmul(a, b, instruction=INS, grad_instruction=E5M2)  # noqa: E731
    _, vjp = jax.vjp(f, A, B)
    gA, gB = vjp(g)
    Av = _bf(A).astype(np.float32)
    Bv = _bf(B).astype(np.float32)
    want_a = jaxmma.matmul(g, Bv.T.copy(), instruction=E5M2, arch="sm_90")  # INS's arch
    want_b = jaxmma.matmul(Av.T.copy(), g, instruction=E5M2, arch="sm_90")
    np.testing.assert_array_equal(_bits(gA), _bits(want_a))
    np.testing.assert_array_equal(_bits(gB), _bits(want_b))
    exact = g.astype(np.float64) @ _bf(B).T
    assert not np.array_equal(np.asarray(gA, np.float64), exact)  # e5m2 rounding shows
    assert np.linalg.norm(np.asarray(gA) - exact) < 0.2 * np.linalg.norm(exact)


# ----------------------------------------------------------------------------- ins.mma
def test_ins_mma_bf16_gradients():
    A = jnp.asarray(_f32(16, 16), jnp.bfloat16)
    B = jnp.asarray(_f32(16, 8), jnp.bfloat16)
    C = jnp.asarray(_f32(16, 8))
    g = _f32(16, 8).astype(np.float64)
    gA, gB, gC = jax.grad(lambda a, b, c: jnp.sum(INS.mma(a, b, c) * g), (0, 1, 2))(A, B, C)
    Av, Bv = np.asarray(A, np.float64), np.asarray(B, np.float64)
    np.testing.assert_allclose(np.asarray(gA, np.float64), g @ Bv.T, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(np.asarray(gB, np.float64), Av.T @ g, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(np.asarray(gC), g, rtol=1e-6)
    assert np.abs(np.asarray(gA, np.float64)).sum() > 0


SP = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"


def test_ins_mma_sparse_gradients_dense_and_compressed():
    """Jitted, with the metadata a traced argument. An earlier rule also formed the product
    of the lifted A with B's instantiated zero tangent; XLA:CPU's YNNPACK dot fusion (jaxlib
    0.10.2 and 0.11.2) computed that product from uninitialized memory (wrong rows, up to
    1e38, in most compilations)."""
    ins = jaxmma.instruction(SP, arch="sm_90")
    A = jaxmma.sparse.prune(ins, jnp.asarray(_f32(16, 32), jnp.float16))
    B = jnp.asarray(_f32(32, 8), jnp.float16)
    C = jnp.zeros((16, 8), jnp.float32)
    dA = jnp.asarray(_f32(16, 32), jnp.float16)
    t = jax.jit(lambda a, d: jax.jvp(lambda a: ins.mma(a, B, C), (a,), (d,))[1])(A, dA)
    want = np.asarray(dA, np.float64) @ np.asarray(B, np.float64)
    np.testing.assert_allclose(np.asarray(t), want, rtol=1e-5, atol=1e-4)
    # compressed A with metadata: the tangent of a stored element meets its dense row of B
    values, e = jaxmma.sparse.compress(ins, A, registers=False)
    idx = jaxmma.sparse.metadata_indices(ins, e, 0)
    dv = jnp.asarray(_f32(16, 16), jnp.float16)
    dense = np.zeros((16, 32))
    np.put_along_axis(dense, np.asarray(idx), np.asarray(dv, np.float64), axis=1)
    for _ in range(3):  # fresh compilations (the fault came and went between them)
        fn = jax.jit(lambda v, i, d: jax.jvp(lambda v: ins.mma(v, B, C, metadata=i), (v,), (d,))[1])
        t = fn(values, idx, dv)
        np.testing.assert_allclose(
            np.asarray(t), dense @ np.asarray(B, np.float64), rtol=1e-5, atol=1e-4
        )
        jax.clear_caches()
    assert np.abs(np.asarray(t)).sum() > 0


def _dots(fn, *args) -> int:
    return str(jax.make_jaxpr(fn)(*args)).count("dot_general")


def test_a_constant_operand_adds_no_product_to_the_tangent():
    """The tangent with respect to one operand is one GEMM: no product with the zero
    tangent of a closed-over operand (ins.mma, matmul, scaled_matmul)."""
    A, B = jnp.asarray(_f32(16, 16), jnp.bfloat16), jnp.asarray(_f32(16, 8), jnp.bfloat16)
    C = jnp.zeros((16, 8), jnp.float32)
    fp8 = jnp.asarray(_f32(1, 16, 32), jnp.float8_e4m3fn)
    e8 = jnp.ones((1, 16, 1), jnp.float8_e8m0fnu)
    cases = (
        (lambda a: INS.mma(a, B, C), A),
        (lambda a: jaxmma.matmul(a, B, instruction=BF16, arch="sm_90"), A),
        (
            lambda a: jaxmma.scaled_matmul(a.astype(fp8.dtype), fp8[:, :8], e8, e8[:, :8]),
            fp8.astype(jnp.float32),
        ),
    )
    for fn, x in cases:
        jvp = lambda x, t, fn=fn: jax.jvp(fn, (x,), (t,))  # noqa: E731
        assert _dots(jvp, x, x) - _dots(fn, x) == 1, fn


BS = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e4m3.e4m3.f32.ue8m0"
)


def test_ins_mma_block_scaled_gradients_count_the_scales():
    ins = jaxmma.instruction(BS)
    A = jnp.asarray(_f32(16, 32), jnp.float8_e4m3fn)
    B = jnp.asarray(_f32(32, 8), jnp.float8_e4m3fn)
    C = jnp.asarray(_f32(16, 8))
    SA = np.where(RNG.random((16, 1)) < 0.5, 0x80, 0x7E).astype(np.uint8)  # 2 or 0.5
    SB = np.where(RNG.random((1, 8)) < 0.5, 0x81, 0x7F).astype(np.uint8)  # 4 or 1
    sa = 2.0 ** (SA.astype(np.float64) - 127)
    sb = 2.0 ** (SB.astype(np.float64) - 127)
    Av, Bv = np.asarray(A, np.float64) * sa, np.asarray(B, np.float64) * sb
    dA = jnp.asarray(_f32(16, 32), jnp.float8_e4m3fn)
    dB = jnp.asarray(_f32(32, 8), jnp.float8_e4m3fn)
    f = lambda a, b: ins.mma(a, b, C, scale_a=SA, scale_b=SB)  # noqa: E731
    _, t = jax.jvp(f, (A, B), (dA, dB))
    want = (np.asarray(dA, np.float64) * sa) @ Bv + Av @ (np.asarray(dB, np.float64) * sb)
    np.testing.assert_allclose(np.asarray(t), want, rtol=1e-5, atol=1e-4)
    # Quantized inputs: the derivative reaches C (elements and scales are integer bits)
    qa = jaxmma.quant.quantize_mx(jnp.asarray(_f32(16, 32)), "e4m3")
    qb = jaxmma.quant.quantize_mx(jnp.asarray(_f32(32, 8)), "e4m3", axis=-2)
    gC = jax.jit(jax.grad(lambda c: jnp.sum(ins.mma(qa, qb, c) * 3.0)))(C)
    np.testing.assert_array_equal(np.asarray(gC), np.full((16, 8), 3.0, np.float32))
    # matmul on floats quantized inside: the tangent of the dequantized values
    X, Y = _f32(16, 64), _f32(64, 8)
    dX = _f32(16, 64)
    _, t = jax.jvp(lambda x: jaxmma.matmul(x, Y, instruction=ins), (X,), (dX,))
    Yq = jaxmma.quant.dequantize(jaxmma.quant.quantize_mx(jnp.asarray(Y), "e4m3", axis=-2))
    np.testing.assert_allclose(
        np.asarray(t), dX.astype(np.float64) @ np.asarray(Yq, np.float64), rtol=1e-5, atol=1e-4
    )


# ----------------------------------------------------------------------------- levels
FORMS = [i for i in jaxmma.all_instructions() if i.opcode in ("mma", "wmma.mma")]


def _spy(monkeypatch):
    """Replace mma_bits (in models' interface and in _models) by a recorder that returns
    +0 bits of D's shape."""
    calls = []

    def spy(ins, A, B, C, *, scales=None, model=None, sparse_idx=None):
        calls.append((ins, A.shape, B.shape, C.shape, scales is None, sparse_idx is None))
        lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2], C.shape[:-2])
        return jnp.zeros(lead + C.shape[-2:], C.dtype)

    monkeypatch.setattr(_models, "mma_bits", spy)
    monkeypatch.setattr(models, "mma_bits", spy)  # the name the floors above call
    return calls


def _abstract(ins):
    """(register-level args, kwargs), (matrix-level args, kwargs) as ShapeDtypeStructs."""
    from jaxmma import operands

    S = jax.ShapeDtypeStruct
    wide = ins.atype == "f64"
    reg = {
        o.name: S((32, o.nregs), jnp.uint64 if o.reg_bits == 64 else jnp.uint32)
        for o in ins.operands
    }
    rargs, rkw = [reg["a"], reg["b"], reg["c"]], {}
    if ins.opcode == "wmma.mma":
        shapes = {"a": (ins.m, ins.k), "b": (ins.k, ins.n), "c": (ins.m, ins.n)}
    else:
        shapes = {op: operands.matrix_shape(ins, op) for op in "abc"}
    elem = lambda fmt: jnp.uint64 if wide else jnp.uint32  # noqa: E731
    margs = [
        S(shapes["a"], elem(ins.atype)),
        S(shapes["b"], elem(ins.btype)),
        S(shapes["c"], elem(ins.ctype)),
    ]
    mkw = {}
    if ins.sparse:
        rargs.append(S((32,), jnp.uint32))
        rkw["selector"] = 0
        margs[0] = S((ins.m, ins.k // 2), margs[0].dtype)
        mkw["metadata"] = S((ins.m, ins.k // 2), jnp.int32)
    if ins.stype:
        rkw.update(scale_a=S((32,), jnp.uint32), scale_b=S((32,), jnp.uint32))
        sa, sb = operands.scale_shapes(ins)
        mkw.update(scale_a=S(sa, jnp.uint8), scale_b=S(sb, jnp.uint8))
    return (rargs, rkw), (margs, mkw)


def _eval(fn, args, kw):
    names = list(kw)
    return jax.eval_shape(
        lambda *xs: fn(*xs[: len(args)], **dict(zip(names, xs[len(args) :], strict=True))),
        *args,
        *kw.values(),
    )


@pytest.mark.parametrize("chunk", range(4))
def test_every_form_reaches_the_one_model_at_both_levels(chunk, monkeypatch):
    forms = FORMS[chunk::4]
    calls = _spy(monkeypatch)
    with jax.enable_x64(True):
        for ins in forms:
            (rargs, rkw), (margs, mkw) = _abstract(ins)
            # the spy sees raw bits, so the selectors are static ints
            rkw = {k: v for k, v in rkw.items() if k != "selector"}
            calls.clear()
            fn = functools.partial(ins, selector=0) if ins.sparse else ins
            d = _eval(fn, rargs, rkw)
            assert d.shape == (32, ins.nregs["d"]), ins.text
            reg_calls = list(calls)
            calls.clear()
            D = _eval(ins.mma, margs, mkw)
            mat_calls = list(calls)
            assert len(reg_calls) == 1 and len(mat_calls) == 1, ins.text
            r, m = reg_calls[0], mat_calls[0]
            assert r[0] == ins and m[0] == ins, ins.text
            assert r[1:] == m[1:], (ins.text, r[1:], m[1:])
            assert D.shape[-2:] == r[3][-2:], ins.text
    assert FORMS and len(FORMS) == 484


def _random_operand(ins, op, rng, batch=()):
    (o,) = [x for x in ins.operands if x.name == op]
    regs = rng.integers(0, 2**32, batch + (32, o.nregs), dtype=np.uint64).astype(np.uint32)
    # well-formed element values: keep exponents moderate in 16-bit halves (no NaN flood)
    return jnp.asarray(regs & np.uint32(0xBFFFBFFF if o.elem_bits == 16 else 0xBFFFFFFF))


NUMERIC = [
    ("wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32", "sm_90"),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.f16.f32", "sm_90"),
    ("wmma.mma.sync.aligned.col.row.m32n8k16.f32.f16", "sm_90"),
    ("wmma.mma.sync.aligned.row.col.m8n32k16.f16.f16", "sm_90"),
    (BF16, "sm_90"),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_89"),
    ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f16", "sm_90"),
]


@pytest.mark.parametrize(
    "text,arch",
    params(NUMERIC, lambda ta: (ta[0].split(".")[0], "e4m3" in ta[0]), ids=lambda ta: ta[0]),
)
def test_register_and_matrix_level_bits_agree(text, arch):
    ins = jaxmma.instruction(text, arch=arch)
    rng = np.random.default_rng(41)
    a, b, c = (_random_operand(ins, op, rng) for op in "abc")
    d = jax.jit(ins)(a, b, c)
    if ins.opcode == "wmma.mma":  # the fragment maps the register level itself uses
        from jaxmma.instructions import _wmma

        unfragment = lambda op, x: _wmma._unfragment(_wmma.operand_layout(ins, op), x, op, ins)  # noqa: E731
    else:
        unfragment = ins.unfragment
    A, B, C = (unfragment(op, x) for op, x in (("a", a), ("b", b), ("c", c)))
    D = jax.jit(ins.mma)(A, B, C)
    got = np.asarray(unfragment("d", d))
    want = np.asarray(D).view(np.uint16 if ins.dtype == "f16" else np.uint32)
    np.testing.assert_array_equal(got.astype(want.dtype), want)
    assert len(np.unique(want)) > want.size // 4  # not a degenerate result
