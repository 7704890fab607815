"""Derivatives of the value functions: straight-through, never a silent zero (jaxmma.util._grad)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _suite import params

from jaxmma import formats as F
from jaxmma import quant as Q

X = jnp.asarray([[0.3, 5.0, -7.0, 1e-3, 2.5, -0.01, 100.0, 0.0] * 4], jnp.float32)
W = jnp.asarray(np.linspace(-2.0, 3.0, 32, dtype=np.float32)[None, :])  # cotangent weights


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1", "bf16", "f16", "tf32"])
def test_round_to_format_is_straight_through(fmt, dtype):
    x = X.astype(dtype)
    g = jax.grad(lambda v: jnp.sum(F.round_to_format(fmt, v) * W))(x)
    assert g.dtype == dtype
    want = np.asarray(W.astype(dtype), np.float32)  # the cotangent in x's dtype
    np.testing.assert_array_equal(np.asarray(g, np.float32), want)
    gj = jax.jit(jax.grad(lambda v: jnp.sum(F.round_to_format(fmt, v) * W)))(x)
    np.testing.assert_array_equal(np.asarray(gj, np.float32), want)


def test_round_to_format_value_unchanged():
    np.testing.assert_array_equal(
        np.asarray(F.round_to_format("e2m1", X)), np.asarray(F.decode("e2m1", F.encode("e2m1", X)))
    )


def test_encode_refuses_derivative():
    with pytest.raises(TypeError, match="x: formats.encode returns integer bits.*round_to_format"):
        jax.grad(lambda v: jnp.sum(F.decode("e4m3", F.encode("e4m3", v))))(X)
    # not differentiated with respect to x: no error
    jax.grad(lambda w: jnp.sum(F.decode("e4m3", F.encode("e4m3", X)) * w))(W)


@pytest.mark.parametrize(
    "fmt",
    # the quick run: one format of each width (8, 6, 4 bits)
    params(
        ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"],
        {"e4m3": 8, "e5m2": 8, "e3m2": 6, "e2m3": 6, "e2m1": 4}.get,
        salt="fq",
        ids=str,
    ),
)
def test_fake_quantize_mx(fmt):
    f = lambda v: jnp.sum(Q.fake_quantize_mx(v, fmt) * W)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(jax.grad(f)(X)), np.asarray(W))
    np.testing.assert_array_equal(
        np.asarray(Q.fake_quantize_mx(X, fmt)), np.asarray(Q.dequantize(Q.quantize_mx(X, fmt)))
    )
    np.testing.assert_array_equal(np.asarray(jax.vmap(jax.grad(f))(X[None])), np.asarray(W[None]))


def test_fake_quantize_nvfp4():
    f = lambda v: jnp.sum(Q.fake_quantize_nvfp4(v) * W)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(f))(X)), np.asarray(W))
    np.testing.assert_array_equal(
        np.asarray(Q.fake_quantize_nvfp4(X)), np.asarray(Q.dequantize(Q.quantize_nvfp4(X)))
    )


@pytest.mark.parametrize("quantize", [lambda v: Q.quantize_mx(v, "e4m3"), Q.quantize_nvfp4])
def test_quantize_refuses_derivative(quantize):
    with pytest.raises(TypeError, match="x: quantize_.*fake_quantize_mx"):
        jax.grad(lambda v: jnp.sum(Q.dequantize(quantize(v))))(X)


def test_dequantize_global_scale_derivative():
    """value = e * s * g: the derivative with respect to g is e * s (not zero)."""
    q = Q.quantize_nvfp4(X, global_scale=0.5)
    g = jax.grad(lambda s: jnp.sum(Q.dequantize(dataclasses.replace(q, global_scale=s)) * W))
    want = np.sum(np.asarray(Q.dequantize(q)) / 0.5 * np.asarray(W))
    np.testing.assert_allclose(float(g(jnp.float32(0.5))), want, rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_block_scales_refuse_a_derivative(jit):
    """Scales given as float8_e8m0fnu values are exponent bits: differentiating with
    respect to them is a clear TypeError, never a silent zero."""
    import jaxmma

    text = next(
        i.text
        for i in jaxmma.all_instructions()
        if "kind::mxf8f6f4" in i.text and "e4m3.e4m3" in i.text
    )
    ins = jaxmma.instruction(text, arch="sm_120a")
    A = jnp.ones((16, 32), jnp.float8_e4m3fn)
    B = jnp.ones((32, 8), jnp.float8_e4m3fn)
    C = jnp.zeros((16, 8), jnp.float32)
    SA = jnp.ones((16, 1), jnp.float8_e8m0fnu)
    SB = jnp.ones((1, 8), jnp.float8_e8m0fnu)
    g = jax.grad(lambda s: ins.mma(A, B, C, scale_a=s, scale_b=SB).sum())
    with pytest.raises(TypeError, match="scale_a: block scales .* no derivative"):
        (jax.jit(g) if jit else g)(SA)
    # the other operands still differentiate (straight through)
    gC = jax.grad(lambda c: ins.mma(A, B, c, scale_a=SA, scale_b=SB).sum())(C)
    assert float(gC.sum()) == 16 * 8


NV4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3"
)


@pytest.mark.parametrize("which", ["a", "b"])
def test_matmul_global_scale_derivative(which):
    """A ``Quantized`` NVFP4 operand's global scale g: D = (E S g) @ V, so dD/dg =
    (E S) @ V (dequantize's rule), never a silent zero; eager and under jit."""
    import jaxmma

    rng = np.random.default_rng(4)
    qa = Q.quantize_nvfp4(jnp.asarray(rng.standard_normal((16, 64)), jnp.float32))
    qb = Q.quantize_nvfp4(jnp.asarray(rng.standard_normal((64, 8)), jnp.float32), axis=-2)
    wt = jnp.asarray(rng.standard_normal((16, 8)), jnp.float32)
    q = qa if which == "a" else qb

    def f(g):
        r = dataclasses.replace(q, global_scale=g)
        a, b = (r, qb) if which == "a" else (qa, r)
        return jnp.sum(jaxmma.matmul(a, b, instruction=NV4, arch="sm_120a") * wt)

    unit = np.asarray(Q.dequantize(dataclasses.replace(q, global_scale=jnp.float32(1))), np.float64)
    va, vb = (np.asarray(Q.dequantize(x), np.float64) for x in (qa, qb))
    want = np.sum((unit @ vb if which == "a" else va @ unit) * np.asarray(wt, np.float64))
    for grad in (jax.grad(f), jax.jit(jax.grad(f))):
        got = float(grad(q.global_scale))
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert abs(want) > 1


def test_quantize_nvfp4_keeps_the_given_global_scale_tangent():
    """The given global scale comes back with its tangent: dequantize's derivative in it
    is e * s, through quantize_nvfp4 as on a container built by hand."""
    _, t = jax.jvp(
        lambda g: Q.quantize_nvfp4(X, global_scale=g).global_scale,
        (jnp.float32(0.5),),
        (jnp.float32(3.0),),
    )
    assert float(t) == 3.0
    q = Q.quantize_nvfp4(X, global_scale=0.5)
    want = np.sum(np.asarray(Q.dequantize(q), np.float64) / 0.5 * np.asarray(W, np.float64))
    f = lambda g: jnp.sum(Q.dequantize(Q.quantize_nvfp4(X, global_scale=g)) * W)  # noqa: E731
    np.testing.assert_allclose(float(jax.grad(f)(jnp.float32(0.5))), want, rtol=1e-6)


def test_fake_quantize_nvfp4_given_global_scale():
    """Straight through in x; in a given global scale, e * s (not zero, not an error)."""
    f = lambda v, g: jnp.sum(Q.fake_quantize_nvfp4(v, global_scale=g) * W)  # noqa: E731
    dx, dg = jax.jit(jax.grad(f, argnums=(0, 1)))(X, jnp.float32(0.5))
    np.testing.assert_array_equal(np.asarray(dx), np.asarray(W))
    q = Q.quantize_nvfp4(X, global_scale=0.5)
    want = np.sum(np.asarray(Q.dequantize(q), np.float64) / 0.5 * np.asarray(W, np.float64))
    np.testing.assert_allclose(float(dg), want, rtol=1e-6)
    np.testing.assert_array_equal(
        np.asarray(Q.fake_quantize_nvfp4(X, global_scale=0.5)), np.asarray(Q.dequantize(q))
    )
    # second order: d/dx of the straight-through 2 * fq(x) * 1 is 2 (e and s constant)
    sq = lambda v: jnp.sum(Q.fake_quantize_nvfp4(v, global_scale=0.5) ** 2)  # noqa: E731
    d2 = jax.grad(lambda v: jnp.sum(jax.grad(sq)(v)))(X)
    np.testing.assert_array_equal(np.asarray(d2), np.full(X.shape, 2.0, np.float32))


def test_nvfp4_global_scale_refuses_a_derivative():
    with pytest.raises(TypeError, match="x: nvfp4_global_scale .* no derivative"):
        jax.grad(Q.nvfp4_global_scale)(jnp.float32(2688.0))
