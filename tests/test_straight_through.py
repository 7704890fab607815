"""The one straight-through rule (``jaxmma.util._ste.gemm``) behind every GEMM entry point:
the plain ``matmul``, ``matmul`` with kernel options and fp8 scales, ``ins.mma``,
``scaled_matmul`` and ``scaled_dot_general(grad="ste")``.

The oracle is the derivative written here with ``jnp`` on the operands the instruction
reads (rounded here with ``astype``, decoded by ml_dtypes): float32 GEMMs at HIGHEST
precision in the order the rule documents, compared as raw bits. None of it calls the
rule or the emulation's conversions.
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
NVF4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3"
)
F32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST
M, K, N = 24, 80, 16
mm = functools.partial(jaxmma.matmul, arch="sm_90")


def _normal(seed, shape, scale=1.0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape) * scale, F32)


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _dot(x, y):
    return jnp.matmul(x.astype(F32), y.astype(F32), precision=HIGHEST)


def _dot_t(x, y, x_axis, y_axis):
    """``x @ y`` contracting ``x_axis`` of x with ``y_axis`` of y: the transposed products
    of the reverse pass, in the layout JAX's transpose of a dot keeps (an explicit ``.T``
    first sums in another order on XLA:CPU, other bits)."""
    dn = (((x_axis,), (y_axis,)), ((), ()))
    return jax.lax.dot_general(x.astype(F32), y.astype(F32), dn, precision=HIGHEST)


def _read(x, dtype):
    """The values an instruction reads from float32 ``x``: rounded to nearest even into
    its element type (ml_dtypes' cast), back in float32."""
    return jnp.asarray(np.asarray(x).astype(dtype).astype(np.float32))


A, B, C = _normal(1, (M, K)), _normal(2, (K, N)), _normal(3, (M, N))
dA, dB, dC = _normal(4, (M, K)), _normal(5, (K, N)), _normal(6, (M, N))
G = _normal(7, (M, N))
Ab, Bb = _read(A, ml_dtypes.bfloat16), _read(B, ml_dtypes.bfloat16)

#: the paths of matmul: the plain one and two with kernel options (all end in float32)
PATHS = {
    "plain": {},
    "split_k": {"split_k": 2},
    "epilogue": {"epilogue": "f32"},
}


@pytest.mark.every_case
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_matmul_jvp_is_the_product_of_the_values_read(path, jit):
    def f(a, b, c):
        return mm(a, b, c, instruction=BF16, **PATHS[path])

    jvp = lambda p, t: jax.jvp(f, p, t)  # noqa: E731
    _, t = (jax.jit(jvp) if jit else jvp)((A, B, C), (dA, dB, dC))
    _same(t, _dot(dA, Bb) + _dot(Ab, dB) + dC)


@pytest.mark.every_case
@pytest.mark.parametrize("path", list(PATHS))
def test_matmul_vjp_is_the_transposed_product(path):
    def f(a, b, c):
        return mm(a, b, c, instruction=BF16, **PATHS[path])

    gA, gB, gC = jax.vjp(f, A, B, C)[1](G)
    _same(gA, _dot_t(G, Bb, 1, 1))
    _same(gB, _dot_t(Ab, G, 0, 0))
    _same(gC, G)


def test_alpha_beta_and_a_bias_enter_the_tangent_as_the_epilogue_computes():
    bias = _normal(8, (N,))
    dbias = _normal(9, (N,))

    def f(a, b, c):
        return mm(a, b, c, instruction=BF16, epilogue="f32", alpha=0.5, beta=-2.0)

    _, t = jax.jvp(f, (A, B, bias), (dA, dB, dbias))
    want = (_dot(dA, Bb) + _dot(Ab, dB)) * F32(0.5) + jnp.broadcast_to(F32(-2.0) * dbias, (M, N))
    _same(t, want)
    gbias = jax.grad(lambda c: jnp.sum(f(A, B, c) * G))(bias)
    np.testing.assert_allclose(gbias, -2.0 * np.asarray(G, np.float64).sum(0), rtol=1e-6)


def test_a_bf16_output_casts_the_float32_tangent_once():
    def f(a, b):
        return mm(a, b, instruction=BF16, out_dtype=jnp.bfloat16)

    _, t = jax.jvp(f, (A, B), (dA, dB))
    _same(t, (_dot(dA, Bb) + _dot(Ab, dB)).astype(jnp.bfloat16))


@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
def test_fp8_scales_have_the_tangent_of_the_scaled_product(kind):
    K2 = 256
    a, b = _normal(10, (M, K2)), _normal(11, (K2, N))
    shapes = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, 2), (2, 1))}[kind]
    sa, sb = (jnp.abs(_normal(12 + i, s)) + 0.5 for i, s in enumerate(shapes))
    dsa, dsb = (_normal(14 + i, s) for i, s in enumerate(shapes))
    da, db = _normal(16, (M, K2)), _normal(17, (K2, N))

    def f(a, b, x, y):
        return mm(a, b, instruction=E4M3, scale_a=x, scale_b=y)

    _, t = jax.jvp(f, (a, b, sa, sb), (da, db, dsa, dsb))
    aq, bq = _read(a, ml_dtypes.float8_e4m3fn), _read(b, ml_dtypes.float8_e4m3fn)
    if kind == "block":  # 1 x 128 and 128 x 128 blocks
        expand_a = lambda s: jnp.repeat(s, 128, axis=-1)  # noqa: E731
        expand_b = lambda s: jnp.repeat(jnp.repeat(s, 128, axis=0), N, axis=1)  # noqa: E731
    else:
        expand_a = expand_b = lambda s: s  # noqa: E731
    ea, eb = expand_a(sa), expand_b(sb)
    dva = da * ea + aq * expand_a(dsa)
    dvb = db * eb + bq * expand_b(dsb)
    _same(t, _dot(dva, bq * eb) + _dot(aq * ea, dvb))


def test_plain_tangents_start_from_plus_zero_and_kernel_tangents_do_not():
    """The documented difference of the two rules kept bit for bit: a tangent of -0 (here
    only C moves) leaves the plain path as +0 and a kernel-options path as -0."""
    neg = jnp.full((M, N), -0.0, F32)
    for kw, want in (({}, 0x00000000), ({"split_k": 2}, 0x80000000)):
        _, t = jax.jvp(lambda c, kw=kw: mm(A, B, c, instruction=BF16, **kw), (C,), (neg,))
        assert np.all(_bits(t) == want), kw


def test_ins_mma_jvp_and_vjp():
    """The matrix level takes element dtypes (bf16 here): the values read are its own."""
    ins = jaxmma.instruction(BF16, arch="sm_90")
    bf = jnp.bfloat16
    a, b, c = Ab[:16, :16].astype(bf), Bb[:16, :8].astype(bf), C[:16, :8]
    da, db, dc = dA[:16, :16].astype(bf), dB[:16, :8].astype(bf), dC[:16, :8]
    _, t = jax.jvp(ins.mma, (a, b, c), (da, db, dc))
    _same(t, _dot(da, b) + _dot(a, db) + dc)
    g = G[:16, :8]
    ga, gb = jax.vjp(lambda a, b: ins.mma(a, b, c), a, b)[1](g)
    _same(ga, _dot_t(g, b, 1, 1).astype(bf))
    _same(gb, _dot_t(a, g, 0, 0).astype(bf))


def _scaled_operands():
    rng = np.random.default_rng(20)
    a = jnp.asarray(rng.standard_normal((2, 16, 64)), jnp.float8_e4m3fn)
    b = jnp.asarray(rng.standard_normal((2, 8, 64)), jnp.float8_e4m3fn)
    sa = jnp.asarray(np.exp2(rng.integers(-2, 3, (2, 16, 2))).astype(ml_dtypes.float8_e8m0fnu))
    sb = jnp.asarray(np.exp2(rng.integers(-2, 3, (2, 8, 2))).astype(ml_dtypes.float8_e8m0fnu))
    return a, b, sa, sb


def test_scaled_matmul_jvp_is_the_scaled_product():
    a, b, sa, sb = _scaled_operands()
    da = _normal(21, (2, 16, 64)).astype(jnp.float8_e4m3fn)
    db = _normal(22, (2, 8, 64)).astype(jnp.float8_e4m3fn)
    _, t = jax.jvp(lambda x, y: jaxmma.scaled_matmul(x, y, sa, sb), (a, b), (da, db))
    ea, eb = (jnp.repeat(s.astype(F32), 32, axis=-1) for s in (sa, sb))
    prod = functools.partial(jnp.einsum, "bmk,bnk->bmn", precision=HIGHEST)
    va, vb = a.astype(F32), b.astype(F32)
    _same(t, prod(da.astype(F32) * ea, vb * eb) + prod(va * ea, db.astype(F32) * eb))


def test_scaled_matmul_ue4m3_scale_tangent_has_the_sign_of_the_scale():
    """The instruction reads |scale| (ue4m3 ignores the sign bit): a negative scale's
    tangent enters with the opposite sign."""
    rng = np.random.default_rng(25)
    a = jnp.asarray(rng.integers(0, 16, (1, 16, 32)).astype(np.uint8).view(ml_dtypes.float4_e2m1fn))
    b = jnp.asarray(rng.integers(0, 16, (1, 8, 32)).astype(np.uint8).view(ml_dtypes.float4_e2m1fn))
    s = np.abs(rng.standard_normal((1, 16, 2))) + 0.5
    s[..., 1] *= -1
    sa = jnp.asarray(s.astype(ml_dtypes.float8_e4m3fn))
    sb = jnp.ones((1, 8, 2), jnp.float8_e4m3fn)
    ds = jnp.ones((1, 16, 2), jnp.float8_e4m3fn)
    _, t = jax.jvp(lambda x: jaxmma.scaled_matmul(a, b, x, sb), (sa,), (ds,))
    sign = jnp.repeat(jnp.sign(sa.astype(F32)), 16, axis=-1)
    prod = functools.partial(jnp.einsum, "bmk,bnk->bmn", precision=HIGHEST)
    _same(t, prod(a.astype(F32) * sign, b.astype(F32)))
    assert np.any(np.asarray(t) != 0)


def _loss(f, *xs):
    d = f(*xs).astype(F32)
    return jnp.sum(d * jnp.asarray(np.random.default_rng(30).random(d.shape), F32))


@pytest.mark.every_case
@pytest.mark.parametrize(
    "name",
    ["plain", "kernel", "scales", "dot_general", "ins.mma", "block-scaled", "sparse",
     "scaled_matmul", "scaled_dot_general"],
)  # fmt: skip
def test_no_path_differentiates_to_zero(name):
    """Every entry point gives every float operand a finite, non-zero gradient."""
    x, w, c = A[:16, :64], B[:64, :8], C[:16, :8]
    sparse = x * jnp.tile(jnp.asarray([1.0, 0.0, 1.0, 0.0], F32), 16)[None]
    cfg = jax.nn.get_scaled_dot_general_config("mxfp8")
    sp = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"
    ins = jaxmma.instruction(BF16, arch="sm_90")
    one = jnp.ones((), F32)
    cases = {
        "plain": (lambda a, b, c: mm(a, b, c, instruction=BF16), (x, w, c)),
        "kernel": (lambda a, b, c: mm(a, b, c, instruction=BF16, split_k=2,
                                      epilogue="rounded", out_dtype=jnp.bfloat16), (x, w, c)),
        "scales": (lambda a, b, s, t: mm(a, b, instruction=E4M3, scale_a=s, scale_b=t),
                   (x, w, one, one)),
        "dot_general": (lambda a, b: jaxmma.dot_general(
            a, b, (((1,), (0,)), ((), ())), instruction=BF16, arch="sm_90"), (x, w)),
        "ins.mma": (lambda a, b, c: ins.mma(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), c),
                    (x[:, :16], w[:16], c)),
        "block-scaled": (lambda a, b, c: jaxmma.matmul(a, b, c, instruction=NVF4,
                                                       arch="sm_120a"), (x, w, c)),
        "sparse": (lambda a, b, c: mm(a, b, c, instruction=sp), (sparse, w, c)),
        "scaled_matmul": (lambda a, b: jaxmma.scaled_matmul(
            a.astype(jnp.float8_e4m3fn)[None], b.T.astype(jnp.float8_e4m3fn)[None],
            jnp.ones((1, 16, 2), jnp.float8_e8m0fnu), jnp.ones((1, 8, 2), jnp.float8_e8m0fnu)),
            (x, w)),
        "scaled_dot_general": (lambda a, b: jaxmma.scaled_dot_general(
            a[None], b.T[None], (((2,), (2,)), ((0,), (0,))), configs=[cfg] * 3), (x, w)),
    }  # fmt: skip
    f, args = cases[name]
    grads = jax.grad(functools.partial(_loss, f), argnums=tuple(range(len(args))))(*args)
    for i, g in enumerate(grads):
        g = np.asarray(g, np.float64)
        assert g.shape == np.shape(args[i]) and np.all(np.isfinite(g)), (name, i)
        assert np.count_nonzero(g) > g.size // 4, (name, i, np.count_nonzero(g))
