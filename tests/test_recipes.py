"""jaxmma.recipes: each recipe's scales and GEMMs against hand-written references (numpy
scales and casts, explicit jaxmma.matmul calls with explicit instructions and arch)."""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma import recipes

E4 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
E5E4 = "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32"
E4E5 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32"
MX8 = "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32.m128n256k32.f32.{a}.{b}.ue8m0"
MX4 = "tcgen05.mma.cta_group::1.kind::mxf4.block_scale.block32.m128n256k64.f32.e2m1.e2m1.ue8m0"
RNG = np.random.default_rng(2024)
mm = functools.partial(jaxmma.matmul, arch="sm_90")


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _cast(x, s, dtype):
    """numpy reference of a scaled cast: float32 x * s, to nearest even, saturating."""
    y = (np.asarray(x, np.float32) * np.float32(s)).astype(np.float32)
    fmax = float(ml_dtypes.finfo(dtype).max)
    return np.clip(y, -fmax, fmax).astype(dtype).astype(np.float32)


def _vjp(rec, x, w, g, state=None, key=None):
    y, vjp = jax.vjp(lambda a, b, s: rec.matmul(a, b, s, key=key), x, w, state)
    return (y, *vjp(g))


@pytest.fixture(scope="module")
def small():
    # x spans 1e-3 .. 1e3 in magnitude: unscaled e4m3 would saturate and underflow
    x = _f32(32, 64, scale=1e3)
    w = _f32(64, 32, scale=1e-3)
    g = _f32(32, 32, scale=1e-6)  # small gradients: e5m2 without a scale underflows
    return x, w, g


@pytest.mark.full  # make test within 5 minutes (7.2 s)
def test_current_scaling_scales_and_gemms_are_the_hand_written_ones(small):
    x, w, g = small
    rec = recipes.current_scaling()
    y, dx, dw, _ = _vjp(rec, x, w, g)
    sx = np.float32(448) / np.abs(x).max()
    sw = np.float32(448) / np.abs(w).max()
    sg = np.float32(57344) / np.abs(g).max()
    xq, wq = _cast(x, sx, ml_dtypes.float8_e4m3fn), _cast(w, sw, ml_dtypes.float8_e4m3fn)
    gq = _cast(g, sg, ml_dtypes.float8_e5m2)
    inv = lambda s: np.float32(1) / s  # noqa: E731
    want_y = mm(xq, wq, instruction=E4, promote_every=4, scale_a=inv(sx), scale_b=inv(sw))
    want_dx = mm(gq, wq.T.copy(), instruction=E5E4, promote_every=4, scale_a=inv(sg),
                 scale_b=inv(sw))  # fmt: skip
    want_dw = mm(xq.T.copy(), gq, instruction=E4E5, promote_every=4, scale_a=inv(sx),
                 scale_b=inv(sg))  # fmt: skip
    np.testing.assert_array_equal(_bits(y), _bits(want_y))
    np.testing.assert_array_equal(_bits(dx), _bits(want_dx))
    np.testing.assert_array_equal(_bits(dw), _bits(want_dw))
    # and it is useful: a few percent from the exact gradient, where unscaled e5m2 is 0
    exact = x.astype(np.float64).T @ g
    assert np.linalg.norm(np.asarray(dw) - exact) < 0.1 * np.linalg.norm(exact)
    assert np.mean(np.asarray(dw) == 0) < 0.01


def test_delayed_scaling_uses_the_history_and_returns_the_next_state(small):
    x, w, g = small
    rec = recipes.delayed_scaling(history=4)
    state = {
        "x": jnp.asarray([100.0, 2000.0, 0.0, 0.0], jnp.float32),
        "w": jnp.asarray([5e-3, 1e-3, 2e-3, 0.0], jnp.float32),
        "g": jnp.asarray([1e-5, 0.0, 0.0, 0.0], jnp.float32),
    }
    y, dx, dw, new = _vjp(rec, x, w, g, state)
    sx, sw, sg = (np.float32(448) / np.float32(2000), np.float32(448) / np.float32(5e-3),
                  np.float32(57344) / np.float32(1e-5))  # fmt: skip
    xq, wq = _cast(x, sx, ml_dtypes.float8_e4m3fn), _cast(w, sw, ml_dtypes.float8_e4m3fn)
    inv = lambda s: np.float32(1) / s  # noqa: E731
    want_y = mm(xq, wq, instruction=E4, promote_every=4, scale_a=inv(sx), scale_b=inv(sw))
    np.testing.assert_array_equal(_bits(y), _bits(want_y))
    gq = _cast(g, sg, ml_dtypes.float8_e5m2)
    want_dx = mm(gq, wq.T.copy(), instruction=E5E4, promote_every=4, scale_a=inv(sg),
                 scale_b=inv(sw))  # fmt: skip
    np.testing.assert_array_equal(_bits(dx), _bits(want_dx))
    for k, a, old in (("x", x, state["x"]), ("w", w, state["w"]), ("g", g, state["g"])):
        want = np.concatenate([[np.abs(a).max()], np.asarray(old)[:-1]]).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(new[k]), want)
    # a fresh state (zeros) gives scale 1 at the first step
    assert all(np.all(np.asarray(v) == 0) for v in rec.init().values())


def test_dot_general_is_the_recipe_in_a_dense_layer(small):
    x, w, _ = small
    rec = recipes.current_scaling()
    dg = rec.dot_general()
    x3 = x.reshape(2, 16, 64)
    out = jax.lax.dot_general  # the signature it stands in for
    del out
    y = dg(x3, w, (((2,), (0,)), ((), ())))
    np.testing.assert_array_equal(_bits(y), _bits(rec.matmul(x, w).reshape(2, 16, 32)))


def test_bad_options_and_state_are_clear_errors_at_trace_time(small):
    x, w, _ = small
    with pytest.raises(ValueError, match="amax_compute: expected one of"):
        recipes.delayed_scaling(amax_compute="mean")
    with pytest.raises(ValueError, match="grad_rounding: expected one of"):
        recipes.current_scaling(grad_rounding="up")
    with pytest.raises(ValueError, match="history: expected an int >= 1"):
        recipes.delayed_scaling(history=0)
    with pytest.raises(ValueError, match="g_fmt: expected one of"):
        recipes.rowwise(g_fmt="e2m1")
    rec = recipes.delayed_scaling(history=16)
    bad = {k: jnp.zeros((8,), jnp.float32) for k in ("x", "w", "g")}
    with pytest.raises(ValueError, match="history of x has shape \\(8,\\).*history=16"):
        jax.jit(lambda s: rec.matmul(x, w, s))(bad)
    with pytest.raises(ValueError, match="state: expected recipe.init"):
        rec.matmul(x, w, None)
    sr = recipes.current_scaling(grad_rounding="stochastic")
    y = sr.matmul(x, w)  # the forward draws nothing: no key needed
    with pytest.raises(ValueError, match="key: recipe 'current_scaling' rounds gradients"):
        jax.grad(lambda a: jnp.sum(sr.matmul(a, w)))(x)
    # a recipe that draws nothing ignores a key (one key for every layer of a model)
    y_key = recipes.current_scaling().matmul(x, w, key=jax.random.key(0))
    np.testing.assert_array_equal(_bits(y_key), _bits(y))
    with pytest.raises(ValueError, match="arch"):
        recipes.current_scaling(arch="sm_80")  # no fp8 mma on Ampere
    with pytest.raises(ValueError, match="g_fmt: expected one of \\['e4m3', 'e5m2'\\]"):
        recipes.mxfp8(g_fmt="e2m1")
    with pytest.raises(ValueError, match="instruction: the forward GEMM multiplies e2m1 by e2m1"):
        recipes.mxfp4(instruction=MX8.format(a="e4m3", b="e4m3"))
    with pytest.raises(ValueError, match="instructions: the forward GEMM needs .*ue8m0 scales"):
        recipes.mxfp8(instructions=(recipes.nvfp4().forward,) * 3)


def test_nvfp4_2d_weight_quantizer_against_numpy():
    w = _f32(32, 48)
    w[:16, 16:32] *= 100  # one block far larger than the rest
    qw, qwt = recipes.quantize_nvfp4_2d(jnp.asarray(w))
    g = np.float32(np.abs(w).max()) / np.float32(6 * 448)
    np.testing.assert_array_equal(np.float32(qw.global_scale), g)
    blocks = np.abs(w).reshape(2, 16, 3, 16).max(axis=(1, 3))
    s = (blocks / (np.float32(6) * g)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    s = s.astype(np.float32)
    full = np.repeat(np.repeat(s, 16, 0), 16, 1) * g  # the divisor, in float32
    e = (w / full).astype(np.float32).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)
    # the value: element * scale * global, exact, rounded once to float32
    want = e * np.repeat(np.repeat(s, 16, 0), 16, 1).astype(np.float64) * np.float64(g)
    want = want.astype(np.float32)
    np.testing.assert_array_equal(np.asarray(jaxmma.quant.dequantize(qw)), want)
    np.testing.assert_array_equal(np.asarray(jaxmma.quant.dequantize(qwt)), want.T)


@pytest.mark.parametrize("jit", [False, True])
def test_nvfp4_2d_weight_quantizer_propagates_nan_and_inf(jit):
    """A 16 x 16 block holding NaN or Inf gets the NaN scale 0x7F and elements rounded
    without scaling, the bits quant.quantize_nvfp4 gives a 1 x 16 block holding it (the
    Inf block had the finite scale 448 and the NaN block +0 elements); the GEMM output
    columns that read such a block are NaN, the others finite."""
    w = _f32(64, 64)
    w[3, 5], w[20, 40] = np.nan, np.inf
    quantize = jax.jit(recipes.quantize_nvfp4_2d) if jit else recipes.quantize_nvfp4_2d
    qw, qwt = quantize(jnp.asarray(w))
    q1 = jaxmma.quant.quantize_nvfp4(jnp.asarray(w), axis=-2)  # 1 x 16 blocks along K
    el, sc = np.asarray(qw.elements), np.asarray(qw.scales)
    for k, n in ((3, 5), (20, 40)):
        kb, nb = slice(k // 16 * 16, k // 16 * 16 + 16), slice(n // 16 * 16, n // 16 * 16 + 16)
        assert (sc[k // 16, nb] == 0x7F).all()
        np.testing.assert_array_equal(el[kb, n], np.asarray(q1.elements)[kb, n])
        assert np.asarray(q1.scales)[k // 16, n] == 0x7F
        # the block's finite values: rounded without scaling (ml_dtypes, saturating at 6)
        fin = np.isfinite(w[kb, nb])
        e2m1 = np.clip(w[kb, nb], -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
        np.testing.assert_array_equal(el[kb, nb][fin], e2m1[fin])
    np.testing.assert_array_equal(np.asarray(qwt.elements), el.T)  # w^T: the same bits
    assert (np.asarray(qwt.scales)[5 // 16, 0:16] == 0x7F).all()
    x = _f32(64, 64)
    rec = recipes.nvfp4(grad_rounding="rn", hadamard=False)
    y = (jax.jit(rec.matmul) if jit else rec.matmul)(x, w)
    bad = np.zeros(64, bool)
    bad[0:16] = bad[32:48] = True
    assert np.isnan(np.asarray(y)[:, bad]).all()
    assert np.isfinite(np.asarray(y)[:, ~bad]).all()


def test_nvfp4_pads_ragged_sizes_and_draws_the_hadamard_signs_from_the_key():
    """M, K, N = 20, 40, 10 (no multiple of 16): the recipe on x, w and G zero-padded by
    hand to 64, sliced, bit for bit, forward and gradients. With round to nearest, the
    Hadamard signs are jax.random.rademacher(split(key, 3)[2]): wgrad is the hand-written
    GEMM on inputs transformed with them; another key, other signs and another dw; the
    same key, the same bits. Evaluation needs no key; a gradient without one is an error
    naming it."""
    rec = recipes.nvfp4(grad_rounding="rn")  # hadamard=True
    x, w, g = _f32(20, 40), _f32(40, 10), _f32(20, 10)
    pad = lambda a: np.pad(a, [(0, 64 - n) for n in a.shape])  # noqa: E731
    k1, k2 = jax.random.key(1), jax.random.key(2)
    y, dx, dw, _ = _vjp(rec, x, w, g, key=k1)
    yp, dxp, dwp, _ = _vjp(rec, pad(x), pad(w), pad(g), key=k1)
    np.testing.assert_array_equal(_bits(y), _bits(yp[:20, :10]))
    np.testing.assert_array_equal(_bits(dx), _bits(dxp[:20, :40]))
    np.testing.assert_array_equal(_bits(dw), _bits(dwp[:40, :10]))
    signs = [
        np.asarray(jax.random.rademacher(jax.random.split(k, 3)[2], (16,)), np.float32)
        for k in (k1, k2)
    ]
    assert (signs[0] != signs[1]).any()
    hx, hg = (recipes.hadamard_rows(jnp.asarray(pad(a)), signs[0]) for a in (x, g))
    want_dw = jaxmma.matmul(
        jaxmma.quant.quantize_nvfp4(hx.T), jaxmma.quant.quantize_nvfp4(hg, axis=-2),
        instruction=rec.forward, arch="sm_100a",
    )  # fmt: skip
    np.testing.assert_array_equal(_bits(dwp), _bits(want_dw))
    y2, dx2, dw2, _ = _vjp(rec, x, w, g, key=k2)
    np.testing.assert_array_equal(_bits(y2), _bits(y))  # nothing random before wgrad
    np.testing.assert_array_equal(_bits(dx2), _bits(dx))
    assert (_bits(dw2) != _bits(dw)).mean() > 0.5
    np.testing.assert_array_equal(_bits(_vjp(rec, x, w, g, key=k1)[2]), _bits(dw))
    np.testing.assert_array_equal(_bits(rec.matmul(x, w)), _bits(y))  # no key: evaluation
    with pytest.raises(ValueError, match=r"key: recipe 'nvfp4' draws its random Hadamard"):
        jax.grad(lambda a: jnp.sum(rec.matmul(a, w)))(x)


def _mx_gemms(x, w, g, fmts, instructions, arch="sm_100a", pad_to=64, **kw):
    """The three GEMMs of an MX recipe by hand: x, w, G zero-padded to ``pad_to``, each
    operand quantized along its GEMM's K (quant.quantize_mx, ``kw``), sliced back."""
    M, K, N = x.shape[0], x.shape[1], w.shape[1]
    pad = lambda a: np.pad(a, [(0, -n % pad_to) for n in a.shape])  # noqa: E731
    x, w, g = pad(x), pad(w), pad(g)
    xf, wf, gf = fmts
    gkw = kw.pop("g_kw", {})
    q = functools.partial(jaxmma.quant.quantize_mx, **kw)
    mm = functools.partial(jaxmma.matmul, arch=arch)
    fwd, dgrad, wgrad = instructions
    y = mm(q(x, xf), q(w, wf, axis=-2), instruction=fwd)
    dx = mm(q(g, gf, **gkw.get("dgrad", {})), q(w.T.copy(), wf, axis=-2), instruction=dgrad)
    dw = mm(q(x.T.copy(), xf), q(g, gf, axis=-2, **gkw.get("wgrad", {})), instruction=wgrad)
    return y[:M, :N], dx[:M, :K], dw[:K, :N]


def test_mxfp4_forward_is_the_hand_written_gemm_at_ragged_sizes():
    """MXFP4 (OCP MX, torchao's MX linear) fprop: x and w along K, e2m1 with floor ue8m0
    scales per 32 on tcgen05 kind::mxf4; M, K, N = 40, 72, 24 padded with zeros to
    multiples of 64. (Its backward GEMMs: the full sweep.)"""
    x, w = _f32(40, 72, scale=30.0), _f32(72, 24)
    rec = recipes.mxfp4()
    assert rec.pad_to == 64
    xp, wp = np.pad(x, ((0, 24), (0, 56))), np.pad(w, ((0, 56), (0, 40)))
    q = jaxmma.quant.quantize_mx
    want = jaxmma.matmul(q(xp, "e2m1"), q(wp, "e2m1", axis=-2), instruction=MX4, arch="sm_100a")
    np.testing.assert_array_equal(_bits(rec.matmul(x, w)), _bits(want[:40, :24]))


def test_hadamard_rows_keeps_the_product():
    x, y = _f32(32, 8), _f32(32, 4)
    signs = jnp.asarray(np.where(RNG.random(16) < 0.5, -1.0, 1.0), jnp.float32)
    hx, hy = recipes.hadamard_rows(x, signs), recipes.hadamard_rows(y, signs)
    np.testing.assert_allclose(np.asarray(hx).T @ np.asarray(hy), x.T @ y, rtol=1e-4, atol=1e-4)
    assert not np.allclose(np.asarray(hx), x)


def test_loss_scaling():
    st = recipes.dynamic_init(8.0)
    ok, st = recipes.dynamic_update(st, {"a": jnp.ones(3)}, period=2)
    assert bool(ok) and float(st["scale"]) == 8.0 and int(st["good"]) == 1
    ok, st = recipes.dynamic_update(st, {"a": jnp.ones(3)}, period=2)
    assert float(st["scale"]) == 16.0 and int(st["good"]) == 0
    ok, st = recipes.dynamic_update(st, {"a": jnp.array([1.0, jnp.inf])}, period=2)
    assert not bool(ok) and float(st["scale"]) == 8.0
    g = recipes.unscale({"a": jnp.full(2, 6.0)}, 4.0)
    np.testing.assert_array_equal(np.asarray(g["a"]), [1.5, 1.5])
    assert float(recipes.scale_loss(jnp.float32(0.5), 4.0)) == 2.0
    with pytest.raises(ValueError, match="period"):
        recipes.dynamic_update(st, {}, period=0)


# --------------------------------------------------------------------------- full sweep
@pytest.mark.full
def test_blockwise_scales_and_gemms_are_the_hand_written_ones():
    x, w, g = _f32(256, 256, scale=10.0), _f32(256, 128, scale=0.01), _f32(256, 128, scale=1e-4)
    rec = recipes.blockwise()
    y, dx, dw, _ = _vjp(rec, x, w, g)
    ax = np.abs(x).reshape(256, 2, 128).max(-1)  # [M, K/128]
    aw = np.abs(w).reshape(2, 128, 1, 128).max(axis=(1, 3))  # [K/128, N/128]
    sx, sw = np.float32(448) / ax, np.float32(448) / aw
    xq = _cast(x, np.repeat(sx, 128, 1), ml_dtypes.float8_e4m3fn)
    wq = _cast(w, np.repeat(np.repeat(sw, 128, 0), 128, 1), ml_dtypes.float8_e4m3fn)
    want_y = mm(xq, wq, instruction=E4, scale_a=np.float32(1) / sx, scale_b=np.float32(1) / sw)
    np.testing.assert_array_equal(_bits(y), _bits(want_y))
    ag = np.abs(g).reshape(256, 1, 128).max(-1)  # [M, N/128]
    sg = np.float32(448) / ag
    gq = _cast(g, np.repeat(sg, 128, 1), ml_dtypes.float8_e4m3fn)
    want_dx = mm(gq, wq.T.copy(), instruction=E4, scale_a=np.float32(1) / sg,
                 scale_b=(np.float32(1) / sw).T.copy())  # fmt: skip
    np.testing.assert_array_equal(_bits(dx), _bits(want_dx))
    # wgrad: x^T in 1 x 128 blocks along M, G in 128 x 128 blocks
    axt = np.abs(x.T).reshape(256, 2, 128).max(-1)  # [K, M/128]
    sxt = np.float32(448) / axt
    xtq = _cast(x.T.copy(), np.repeat(sxt, 128, 1), ml_dtypes.float8_e4m3fn)
    ag2 = np.abs(g).reshape(2, 128, 1, 128).max(axis=(1, 3))  # [M/128, N/128]
    sg2 = np.float32(448) / ag2
    gq2 = _cast(g, np.repeat(np.repeat(sg2, 128, 0), 128, 1), ml_dtypes.float8_e4m3fn)
    want_dw = mm(xtq, gq2, instruction=E4, scale_a=np.float32(1) / sxt,
                 scale_b=np.float32(1) / sg2)  # fmt: skip
    np.testing.assert_array_equal(_bits(dw), _bits(want_dw))
    exact = x.astype(np.float64).T @ g
    assert np.linalg.norm(np.asarray(dw) - exact) < 0.1 * np.linalg.norm(exact)


@pytest.mark.full
def test_nvfp4_forward_and_dgrad_are_the_hand_written_gemms():
    x, w, g = _f32(64, 64), _f32(64, 64), _f32(64, 64)
    rec = recipes.nvfp4(grad_rounding="rn", hadamard=False)
    y, dx, dw, _ = _vjp(rec, x, w, g)
    qw, qwt = recipes.quantize_nvfp4_2d(jnp.asarray(w))
    nv = functools.partial(jaxmma.matmul, instruction=rec.forward, arch="sm_100a")
    want_y = nv(jaxmma.quant.quantize_nvfp4(x), qw)
    np.testing.assert_array_equal(_bits(y), _bits(want_y))
    want_dx = nv(jaxmma.quant.quantize_nvfp4(g), qwt)
    np.testing.assert_array_equal(_bits(dx), _bits(want_dx))
    want_dw = nv(jaxmma.quant.quantize_nvfp4(x.T.copy()), jaxmma.quant.quantize_nvfp4(g, axis=-2))
    np.testing.assert_array_equal(_bits(dw), _bits(want_dw))


@pytest.mark.full
def test_mxfp4_gemms_are_the_hand_written_ones_at_ragged_sizes():
    """MXFP4's three GEMMs: fprop x and w along K, dgrad G and w^T along N (w quantized
    again), wgrad x^T and G along M; M, K, N = 40, 72, 24 padded to multiples of 64."""
    x, w, g = _f32(40, 72, scale=30.0), _f32(72, 24), _f32(40, 24, scale=1e-3)
    got = _vjp(recipes.mxfp4(), x, w, g)[:3]
    want = _mx_gemms(x, w, g, ("e2m1",) * 3, (MX4,) * 3)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.full
def test_mxfp8_e5m2_gradients_ceil_scales_and_stochastic_rounding_by_hand():
    """MXFP8 with e5m2 gradients (.e5m2.e4m3 dgrad, .e4m3.e5m2 wgrad), ceil scales and
    stochastic gradients: G's random bits from split(key) (dgrad, wgrad) as
    quant.quantize_mx draws them; M = 48 padded to 64 (the forms' k is 32: lcm 32)."""
    x, w, g = _f32(48, 64, scale=1e3), _f32(64, 32), _f32(48, 32, scale=1e-6)
    rec = recipes.mxfp8(g_fmt="e5m2", scale_rounding="ceil", grad_rounding="stochastic")
    assert rec.pad_to == 32
    key = jax.random.key(7)
    got = _vjp(rec, x, w, g, key=key)[:3]
    k1, k2 = jax.random.split(key)
    sr = lambda k: {"rounding": "stochastic", "key": k}  # noqa: E731
    texts = (MX8.format(a="e4m3", b="e4m3"), MX8.format(a="e5m2", b="e4m3"),
             MX8.format(a="e4m3", b="e5m2"))  # fmt: skip
    want = _mx_gemms(x, w, g, ("e4m3", "e4m3", "e5m2"), texts, pad_to=32,
                     scale_rounding="ceil", g_kw={"dgrad": sr(k1), "wgrad": sr(k2)})  # fmt: skip
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    with pytest.raises(ValueError, match="key: recipe 'mxfp8' rounds gradients"):
        jax.grad(lambda a: jnp.sum(rec.matmul(a, w)))(x)


@pytest.mark.full
def test_the_sm_120a_forms_are_one_argument_away():
    """recipes.mxfp8 / nvfp4 on sm_120a's block-scaled mma.sync (the forms of the matmul
    examples): the GEMMs are the hand-written ones on those forms."""
    x, w, g = _f32(32, 64), _f32(64, 32), _f32(32, 32)
    mx = ("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32"
          ".e4m3.e4m3.f32.ue8m0")  # fmt: skip
    rec = recipes.mxfp8(arch="sm_120a", instructions=(mx,) * 3)
    got = _vjp(rec, x, w, g)[:3]
    want = _mx_gemms(x, w, g, ("e4m3",) * 3, (mx,) * 3, arch="sm_120a", pad_to=32)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    nv = ("mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32"
          ".e2m1.e2m1.f32.ue4m3")  # fmt: skip
    rec = recipes.nvfp4(arch="sm_120a", instruction=nv, grad_rounding="rn", hadamard=False)
    x = _f32(64, 64)
    qw, _ = recipes.quantize_nvfp4_2d(jnp.asarray(w))
    want = jaxmma.matmul(jaxmma.quant.quantize_nvfp4(x), qw, instruction=nv, arch="sm_120a")
    np.testing.assert_array_equal(_bits(rec.matmul(x, w)), _bits(want))


@pytest.mark.full
def test_rowwise_forward_is_the_hand_written_gemm(small):
    x, w, _ = small
    y = recipes.rowwise().matmul(x, w)
    sx = np.float32(448) / np.abs(x).max(1, keepdims=True)
    sw = np.float32(448) / np.abs(w).max(0, keepdims=True)
    xq, wq = _cast(x, sx, ml_dtypes.float8_e4m3fn), _cast(w, sw, ml_dtypes.float8_e4m3fn)
    want = mm(xq, wq, instruction=E4, promote_every=4, scale_a=np.float32(1) / sx,
              scale_b=np.float32(1) / sw)  # fmt: skip
    np.testing.assert_array_equal(_bits(y), _bits(want))


@pytest.mark.full
def test_a_jitted_training_step_with_delayed_scaling_and_stochastic_gradients():
    x, t = _f32(64, 32), _f32(64, 32)
    w = _f32(32, 32, scale=0.1)
    rec = recipes.delayed_scaling(history=4, grad_rounding="stochastic")

    @jax.jit
    def step(w, state, key):
        loss = lambda w, s: jnp.mean((rec.matmul(x, w, s, key=key) - t) ** 2)  # noqa: E731
        value, (gw, new_state) = jax.value_and_grad(loss, argnums=(0, 1))(w, state)
        return w - 0.1 * gw, new_state, value

    state = rec.init()
    losses = []
    for i in range(6):
        w, state, value = step(w, state, jax.random.key(i))
        losses.append(float(value))
    assert losses[-1] < losses[0]
    assert np.all(np.asarray(state["x"]) > 0)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: recipes.scale_from_amax(jnp.float32(2.0), "e3m2"), ValueError, "fmt.*e4m3"),
        (lambda: recipes.scale_loss(jnp.float32(1.0), "1024"), TypeError, "scale"),
        (lambda: recipes.quantize_nvfp4_2d(jnp.ones((24, 32))), ValueError, "multiples of 16"),
        (lambda: recipes.quantize_nvfp4_2d(jnp.ones((32,))), ValueError, "2-D"),
        (lambda: recipes.hadamard_rows(jnp.ones((20, 8)), jnp.ones(16)), ValueError, "M a mult"),
        (lambda: recipes.hadamard_rows(jnp.ones((16, 8)), jnp.ones(8)), ValueError, "signs"),
    ],
)
def test_helpers_refuse_bad_arguments_by_name(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.full  # 128-blocks at three padded sizes: a compile of its own (10 s)
def test_blockwise_takes_ragged_sizes_as_zero_padded_tensors():
    """M, K and N off the 128-blocks: the output and both gradients are those of the
    recipe on the zero-padded tensors, sliced (a kernel's zero-filled tiles)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((72, 200)).astype(np.float32)
    w = rng.standard_normal((200, 136)).astype(np.float32)
    rec = recipes.blockwise()
    assert rec.pad_to == 128

    def loss(f, x, w):
        y = f(x, w)
        return jnp.sum(y * y), y

    def ragged(x, w):
        return rec.matmul(x, w)

    def padded(x, w):
        xp = jnp.pad(x, ((0, 128 - 72), (0, 256 - 200)))
        wp = jnp.pad(w, ((0, 256 - 200), (0, 256 - 136)))
        return rec.matmul(xp, wp)[:72, :136]

    (_, y1), g1 = jax.jit(
        jax.value_and_grad(lambda x, w: loss(ragged, x, w), (0, 1), has_aux=True)
    )(x, w)
    (_, y2), g2 = jax.jit(
        jax.value_and_grad(lambda x, w: loss(padded, x, w), (0, 1), has_aux=True)
    )(x, w)
    assert y1.shape == (72, 136)
    for a, b in zip((y1, *g1), (y2, *g2), strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))
