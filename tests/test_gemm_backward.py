"""The backward pass of matmul: the arch it runs on, separate dgrad / wgrad instructions
(mixed e5m2 x e4m3 forms reading the forward's e4m3 operands), derivatives of every order
of the straight-through estimator, and stochastic rounding of float inputs."""

import functools
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma.gemm import _gemm

FP8 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
E5M2 = FP8.replace("e4m3", "e5m2")
E5E4 = "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32"  # dgrad: G x W^T
E4E5 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32"  # wgrad: X^T x G
BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
RNG = np.random.default_rng(24)


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _e4m3(x):
    return np.asarray(x).astype(ml_dtypes.float8_e4m3fn)


# --------------------------------------------------------------------------- arch
def test_text_without_arch_warns_once_naming_the_arch(monkeypatch):
    monkeypatch.setattr(_gemm, "_WARNED", set())
    A, B = _f32(16, 16), _f32(16, 8)
    with pytest.warns(jaxmma.DefaultArchWarning, match="emulating sm_120"):
        jaxmma.matmul(A, B, instruction=BF16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jaxmma.matmul(A, B, instruction=BF16)  # once per form
        jaxmma.matmul(A, B, instruction=BF16, arch="sm_90")  # named: no warning
        jaxmma.matmul(A, B, instruction=jaxmma.instruction(BF16, arch="sm_80"))


@pytest.fixture(scope="module")
def fp8_case():
    """x [32, 64] @ w [64, 128] on e4m3, cotangent g; gradients with mixed dgrad/wgrad."""
    x, w, g = _f32(32, 64), _f32(64, 128, scale=0.25), _f32(32, 128, scale=4.0)
    return x, w, g


def _vjp(x, w, g, **kw):
    _, vjp = jax.vjp(lambda a, b: jaxmma.matmul(a, b, instruction=FP8, **kw), x, w)
    return vjp(g)


def test_backward_runs_on_the_forward_arch(fp8_case):
    x, w, g = fp8_case
    dx, dw = _vjp(x, w, g, arch="sm_89", grad_instruction=E5M2)
    x8, w8 = _e4m3(x).astype(np.float32), _e4m3(w).astype(np.float32)
    mm = functools.partial(jaxmma.matmul, instruction=E5M2, arch="sm_89")
    np.testing.assert_array_equal(_bits(dx), _bits(mm(g, w8.T.copy())))
    np.testing.assert_array_equal(_bits(dw), _bits(mm(x8.T.copy(), g)))
    # the newest arch (the instruction's default) has other numerics for these operands
    other = jaxmma.matmul(g, w8.T.copy(), instruction=E5M2, arch="sm_120")
    assert not np.array_equal(_bits(dx), _bits(other))


@pytest.mark.full  # quick run: tests/test_recipes.py checks the mixed forms with scales
def test_dgrad_and_wgrad_mixed_forms_read_the_forward_e4m3_bits(fp8_case):
    x, w, g = fp8_case
    dx, dw = _vjp(x, w, g, arch="sm_90", dgrad_instruction=E5E4, wgrad_instruction=E4E5)
    x8, w8 = _e4m3(x), _e4m3(w)
    want_dx = jaxmma.matmul(g, jnp.asarray(w8.T.copy()), instruction=E5E4, arch="sm_90")
    want_dw = jaxmma.matmul(jnp.asarray(x8.T.copy()), g, instruction=E4E5, arch="sm_90")
    np.testing.assert_array_equal(_bits(dx), _bits(want_dx))
    np.testing.assert_array_equal(_bits(dw), _bits(want_dw))
    # e5m2 on both sides would round the e4m3 weights again: many change
    w8v = w8.astype(np.float32)
    assert np.mean(w8v.astype(ml_dtypes.float8_e5m2).astype(np.float32) != w8v) > 0.3
    # only one of them given: the other GEMM is exact
    dx1, dw1 = _vjp(x, w, g, arch="sm_90", dgrad_instruction=E5E4)
    np.testing.assert_array_equal(_bits(dx1), _bits(want_dx))
    np.testing.assert_allclose(
        np.asarray(dw1), x8.astype(np.float64).T @ g.astype(np.float64), rtol=1e-5, atol=1e-4
    )


def test_gradient_instruction_refused_on_an_arch_that_cannot_run_it():
    x, w = _f32(16, 16), _f32(16, 8)
    with pytest.raises(ValueError, match="sm_80"):
        jaxmma.matmul(x, w, instruction=BF16, arch="sm_80", grad_instruction=E5M2)


# --------------------------------------------------------------------------- higher order
def _bf(x):
    return np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float64)


@pytest.mark.full  # quick run: the Hessian test below
def test_jvp_of_grad_is_the_exact_product_at_the_converted_values():
    x, w, v = _f32(16, 32), _f32(32, 8), _f32(32, 8)
    f = lambda w: 0.5 * jnp.sum(jaxmma.matmul(x, w, instruction=BF16, arch="sm_90") ** 2)  # noqa: E731
    _, hv = jax.jvp(jax.grad(f), (w,), (v,))
    xb = _bf(x)
    np.testing.assert_allclose(np.asarray(hv), xb.T @ (xb @ v), rtol=1e-5, atol=1e-4)


@pytest.mark.full
def test_grad_of_grad_through_dot_general():
    x, w = _f32(16, 32), _f32(32, 8)
    xb = _bf(x)
    # d/dw sum(grad) = x^T x 1
    dg = functools.partial(jaxmma.dot_general, instruction=BF16, arch="sm_90")
    h = lambda w: 0.5 * jnp.sum(dg(x, w, (((1,), (0,)), ((), ()))) ** 2)  # noqa: E731
    gg = jax.grad(lambda w: jnp.sum(jax.grad(h)(w)))(w)
    np.testing.assert_allclose(np.asarray(gg), xb.T @ (xb @ np.ones((32, 8))), rtol=1e-5, atol=1e-4)


def test_hessian_matches_finite_differences_of_the_straight_through_gradient():
    x, w = _f32(16, 8), _f32(8, 8)
    f = lambda w: 0.5 * jnp.sum(jaxmma.matmul(x, w, instruction=TF32, arch="sm_90") ** 2)  # noqa: E731
    H = np.asarray(jax.hessian(f)(w)).reshape(64, 64)
    grad = jax.jit(jax.grad(f))
    eps = 0.25
    for i in (0, 9, 63):  # columns of the Hessian by central differences
        e = np.zeros(64, np.float32)
        e[i] = eps
        e = e.reshape(8, 8)
        fd = (np.asarray(grad(w + e), np.float64) - np.asarray(grad(w - e))) / (2 * eps)
        np.testing.assert_allclose(H[:, i], fd.reshape(-1), rtol=2e-2, atol=2e-2)
    assert np.abs(H).max() > 1.0


@pytest.mark.full
def test_ins_mma_hessian():
    ins = jaxmma.instruction(BF16, arch="sm_90")
    A = jnp.asarray(_f32(16, 16), jnp.bfloat16)
    B = jnp.asarray(_f32(16, 8), jnp.bfloat16)
    C = jnp.zeros((16, 8), jnp.float32)
    H = jax.hessian(lambda b: 0.5 * jnp.sum(ins.mma(A, b, C) ** 2))(B)
    Av = np.asarray(A, np.float64)
    # d2/dB[k,n] dB[l,m] = (A^T A)[k, l] delta(n, m)
    want = np.einsum("kl,nm->knlm", Av.T @ Av, np.eye(8))
    np.testing.assert_allclose(np.asarray(H, np.float64), want, rtol=2e-2, atol=2e-1)


def test_forward_mode_over_gradient_gemms_is_refused_naming_the_option(fp8_case):
    x, w, _ = fp8_case
    f = lambda w: jnp.sum(  # noqa: E731
        jaxmma.matmul(x, w, instruction=FP8, arch="sm_90", wgrad_instruction=E4E5) ** 2
    )
    with pytest.raises(TypeError, match="wgrad_instruction"):
        jax.jvp(jax.grad(f), (w,), (w,))
    with pytest.raises(TypeError, match="wgrad_instruction"):
        jax.jvp(f, (w,), (w,))


# --------------------------------------------------------------------------- rounding
E4M3_GRID = np.unique(
    np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
)
E4M3_GRID = E4M3_GRID[np.isfinite(E4M3_GRID)]


def _stochastic(A, key):
    """A rounded stochastically to e4m3, read back exactly through an identity B."""
    eye = jnp.eye(A.shape[1], dtype=jnp.float8_e4m3fn)
    return np.asarray(
        jaxmma.matmul(A, eye, instruction=FP8, arch="sm_90", rounding="stochastic", key=key),
        np.float64,
    )


def test_stochastic_rounding_picks_a_neighbour_unbiased_and_per_key():
    vals = np.array([0.3, -1.7, 5.1, 100.0, 0.0123, -3.0, 447.0, 2.0**-8], np.float32)
    A = np.tile(vals[None, :], (512, 4))  # 512 x 32: each value 2048 times
    D = _stochastic(A, jax.random.key(7))
    hi = E4M3_GRID[np.searchsorted(E4M3_GRID, A.astype(np.float64), side="left")]
    lo = E4M3_GRID[np.searchsorted(E4M3_GRID, A.astype(np.float64), side="right") - 1]
    assert np.all((D == lo) | (D == hi))
    np.testing.assert_array_equal(D[:, 5], -3.0)  # exact values never move
    for j, v in enumerate(vals):  # unbiased: the mean of 2048 draws is near the value
        col = D[:, j::8].reshape(-1)
        spread = hi[0, j] - lo[0, j]
        assert abs(col.mean() - v) < 0.06 * spread + 1e-12, (v, col.mean())
    np.testing.assert_array_equal(D, _stochastic(A, jax.random.key(7)))
    assert not np.array_equal(D, _stochastic(A, jax.random.key(8)))


def test_rounding_errors_at_trace_time():
    A, B = _f32(16, 32), _f32(32, 8)
    mm = functools.partial(jaxmma.matmul, instruction=FP8, arch="sm_90")
    with pytest.raises(ValueError, match="key: rounding='stochastic' needs"):
        jax.jit(lambda a: mm(a, B, rounding="stochastic"))(A)
    with pytest.raises(ValueError, match="key: only used with rounding='stochastic'"):
        mm(A, B, key=jax.random.key(0))
    with pytest.raises(ValueError, match="input_rounding: expected None or one of"):
        mm(A, B, rounding="up")
    with pytest.raises(ValueError, match="rounding: the same option"):
        mm(A, B, rounding="rn", input_rounding="rz")
