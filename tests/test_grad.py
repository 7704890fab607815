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
