"""jaxmma.scaled_matmul / scaled_dot_general against references written here.

The reference GEMM chains ``ins.mma`` (the matrix level of one block-scaled instruction)
over the k-steps of every 16 x 8 output tile, from +0, with element and scale bits placed
here as the spec encodes them (``kind::mxf8f6f4``: e2m1 in bits [5:2] of a byte, e3m2 /
e2m3 in bits [5:0]; ``mxf4*``: one nibble). The quantize-inside path is checked against
jax.nn's recipe written here in NumPy (MX: ``amax / max`` rounded up to a power of two;
NVFP4: ``amax / 6`` in float32 rounded to nearest e4m3, elements rounded to nearest).
Results are compared as raw bits.
"""

import doctest
import functools
import pathlib
import re
import types

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma.gemm import _scaled_dot

MMA = "mma.sync.aligned."
MXF8 = MMA + "m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.{a}.{b}.f32.ue8m0"
NVF4 = MMA + "m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3"
MXF4 = MMA + "m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0"
DTYPE = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
}
WIDTH = {"e4m3": 8, "e5m2": 8, "e3m2": 6, "e2m3": 6, "e2m1": 4}
SCALE = {"ue8m0": ml_dtypes.float8_e8m0fnu, "ue4m3": ml_dtypes.float8_e4m3fn}
ONE = {"ue8m0": 0x7F, "ue4m3": 0x38}
DN = (((2,), (2,)), ((0,), (0,)))
B_, M_, N_ = 2, 20, 12  # ragged against the 16 x 8 tiles


def _u32(x):
    return np.asarray(x).view(np.uint32)


def _ceil(x, t):
    return -(-x // t) * t


@functools.cache
def _mma(text):
    ins = jaxmma.instruction(text)
    return ins, jax.jit(lambda A, B, C, SA, SB: ins.mma(A, B, C, scale_a=SA, scale_b=SB))


def chained(text, a, b, sa, sb, fa, fb):
    """(M, K) x (N, K) element bits with (M, K/bs), (N, K/bs) scale bits -> f32 (M, N):
    each 16 x 8 tile chains ins.mma over the k-steps from +0."""
    ins, step = _mma(text)
    nblk = {"1X": 1, "2X": 2, "4X": 4}[text.split("scale_vec::")[1][:2]]
    bs = ins.k // nblk
    M, K = a.shape
    N = b.shape[0]
    Mp, Np, Kp = _ceil(M, 16), _ceil(N, 8), _ceil(K, ins.k)

    def put(x, shape, fill=0):
        out = np.full(shape, fill, np.uint8)
        out[: x.shape[0], : x.shape[1]] = x
        return out

    def container(bits, fmt):
        return bits << 2 if (fmt == "e2m1" and ins.kind == "mxf8f6f4") else bits

    A = put(container(a, fa), (Mp, Kp))
    Bm = put(container(b, fb), (Np, Kp)).T  # [K, N]
    SA = put(sa, (Mp, Kp // bs), ONE[ins.stype])
    SB = put(sb, (Np, Kp // bs), ONE[ins.stype]).T
    tiles_a = A.reshape(Mp // 16, 1, 16, Kp)
    tiles_b = Bm.reshape(Kp, Np // 8, 8).transpose(1, 0, 2)[None]  # [1, Nt, K, 8]
    sa_t = SA.reshape(Mp // 16, 1, 16, Kp // bs)
    sb_t = SB.reshape(Kp // bs, Np // 8, 8).transpose(1, 0, 2)[None]
    d = np.zeros((Mp // 16, Np // 8, 16, 8), np.float32)
    for s in range(Kp // ins.k):
        ks, blk = slice(s * ins.k, (s + 1) * ins.k), slice(s * nblk, (s + 1) * nblk)
        d = np.asarray(
            step(tiles_a[..., ks], tiles_b[..., ks, :], d, sa_t[..., blk], sb_t[..., blk, :])
        )
    return d.transpose(0, 2, 1, 3).reshape(Mp, Np)[:M, :N]


def _elements(rng, fmt, shape):
    """Random element bits of every pattern (NaN and Inf included where the format has them)."""
    return rng.integers(0, 1 << WIDTH[fmt], shape).astype(np.uint8)


def _scales(rng, stype, shape):
    if stype == "ue8m0":
        s = rng.integers(118, 137, shape).astype(np.uint8)
        s.reshape(-1)[:2] = (0xFF, 0x00)  # a NaN scale, the smallest scale
        return s
    s = rng.integers(0, 256, shape).astype(np.uint8)
    s.reshape(-1)[:2] = (0x7F, 0x00)  # NaN, zero
    return s


def _as(bits, fmt):
    """Element bits -> an array of the ml_dtypes type (jax arrays; NumPy for 6-bit types)."""
    x = bits.view(DTYPE[fmt])
    return x if WIDTH[fmt] == 6 else jnp.asarray(x)


MATMULS = [
    # (lhs fmt, rhs fmt, scale, K, instruction given or None -> the default form)
    ("e4m3", "e4m3", "ue8m0", 96, None),
    ("e5m2", "e4m3", "ue8m0", 64, None),
    ("e3m2", "e2m3", "ue8m0", 64, None),
    ("e2m1", "e2m1", "ue8m0", 64, None),
    ("e2m1", "e2m1", "ue4m3", 80, None),
    ("e2m1", "e2m1", "ue8m0", 96, MXF4),
]


def _default(fa, fb, st):
    return NVF4 if st == "ue4m3" else MXF8.format(a=fa, b=fb)


@pytest.mark.parametrize("fa,fb,st,K,text", MATMULS, ids=lambda x: str(x).split(".")[-1][:8])
def test_scaled_matmul_is_the_chained_instruction(fa, fb, st, K, text):
    rng = np.random.default_rng(K)
    text_used = text or _default(fa, fb, st)
    bs = 16 if st == "ue4m3" else 32
    a, b = _elements(rng, fa, (B_, M_, K)), _elements(rng, fb, (B_, N_, K))
    sa, sb = _scales(rng, st, (B_, M_, K // bs)), _scales(rng, st, (B_, N_, K // bs))
    lhs, rhs = _as(a, fa), _as(b, fb)
    ls, rs = jnp.asarray(sa.view(SCALE[st])), jnp.asarray(sb.view(SCALE[st]))
    got = jaxmma.scaled_matmul(lhs, rhs, ls, rs, instruction=text)
    want = np.stack([chained(text_used, a[i], b[i], sa[i], sb[i], fa, fb) for i in range(B_)])
    assert got.shape == (B_, M_, N_) and got.dtype == jnp.float32
    np.testing.assert_array_equal(_u32(got), _u32(want))
    # the same bits as jaxmma.matmul on Quantized operands holding these bits
    Q = jaxmma.quant.Quantized
    qa = Q(jnp.asarray(a), jnp.asarray(sa), None, fa, st, bs, -1)
    qb = Q(jnp.asarray(b.swapaxes(1, 2)), jnp.asarray(sb.swapaxes(1, 2)), None, fb, st, bs, -2)
    np.testing.assert_array_equal(_u32(jaxmma.matmul(qa, qb, instruction=text_used)), _u32(want))


def test_scaled_matmul_raw_bits_with_an_instruction():
    rng = np.random.default_rng(3)
    a, b = _elements(rng, "e3m2", (1, 16, 32)), _elements(rng, "e2m1", (1, 8, 32))
    sa, sb = _scales(rng, "ue8m0", (1, 16, 1)), _scales(rng, "ue8m0", (1, 8, 1))
    text = MXF8.format(a="e3m2", b="e2m1")
    got = jaxmma.scaled_matmul(a, b, sa, sb, instruction=text, arch="sm_120a")
    want = chained(text, a[0], b[0], sa[0], sb[0], "e3m2", "e2m1")
    np.testing.assert_array_equal(_u32(got[0]), _u32(want))
    with pytest.raises(TypeError, match="instruction="):
        jaxmma.scaled_matmul(a, b, sa, sb)


def test_preferred_element_type_rounds_the_f32_result():
    rng = np.random.default_rng(4)
    a, b = _elements(rng, "e4m3", (1, 16, 32)), _elements(rng, "e4m3", (1, 8, 32))
    s = np.full((1, 16, 1), 0x7F, np.uint8)
    args = (_as(a, "e4m3"), _as(b, "e4m3"), s.view(SCALE["ue8m0"]), s[:, :8].view(SCALE["ue8m0"]))
    f32 = jaxmma.scaled_matmul(*args)
    bf16 = jaxmma.scaled_matmul(*args, preferred_element_type=jnp.bfloat16)
    assert bf16.dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        np.asarray(bf16).view(np.uint16),
        np.asarray(f32).astype(ml_dtypes.bfloat16).view(np.uint16),
    )


# ----------------------------------------------------------------------------- quantize inside
def _mx_recipe(x, dtype, block):
    """jax.nn's MX recipe on float32 x [..., K]: the scale is amax / max rounded up to a
    power of two (exact here, in float64), elements x / scale clipped to +-max, nearest."""
    mx = float(ml_dtypes.finfo(dtype).max)
    xb = x.astype(np.float64).reshape(x.shape[:-1] + (-1, block))
    q = np.abs(xb).max(-1) / mx
    m, e = np.frexp(q)
    e = np.where(m == 0.5, e - 1, e)  # q = 2**e exactly stays
    e = np.where(q == 0, -127, e)
    el = np.clip(xb / np.exp2(e)[..., None], -mx, mx).astype(dtype).reshape(x.shape)
    return el, (e + 127).astype(np.uint8)


def _nvfp4_recipe(x, g, block=16):
    """jax.nn's NVFP4 recipe, in float32 as it computes: x / g, amax / 6 clipped to 448 and
    rounded to e4m3, x / scale clipped to +-6 and rounded to e2m1."""
    xg = (x / np.float32(g)).astype(np.float32)
    xb = xg.reshape(x.shape[:-1] + (-1, block))
    s = np.clip(np.abs(xb).max(-1) / np.float32(6), 0, 448).astype(ml_dtypes.float8_e4m3fn)
    el = np.clip(xb / s.astype(np.float32)[..., None], -6, 6).astype(ml_dtypes.float4_e2m1fn)
    return el.reshape(x.shape), s


def _bits8(x):
    return np.asarray(x).view(np.uint8)


def _recipe_gemm(mode, x, w, g=(1.0, 1.0), fmt="e4m3", wfmt=None, out=np.float32):
    """scaled_dot_general of x [B, M, K], w [B, N, K] by the recipe and chained ins.mma."""
    wfmt = wfmt or fmt
    res = []
    for i in range(x.shape[0]):
        if mode == "nvfp4":
            (a, sa), (b, sb) = _nvfp4_recipe(x[i], g[0]), _nvfp4_recipe(w[i], g[1])
            d = chained(NVF4, _bits8(a), _bits8(b), _bits8(sa), _bits8(sb), "e2m1", "e2m1")
            d = d * (np.float32(g[0]) * np.float32(g[1]))
        else:
            (a, sa), (b, sb) = _mx_recipe(x[i], DTYPE[fmt], 32), _mx_recipe(w[i], DTYPE[wfmt], 32)
            text = MXF8.format(a=fmt, b=wfmt)
            d = chained(text, _bits8(a), _bits8(b), sa, sb, fmt, wfmt)
        res.append(d)
    return np.stack(res).astype(out)


def _config(mode, dtype=None, g=None):
    c = jax.nn.get_scaled_dot_general_config(mode, g)
    if dtype is not None:
        c = type(c)(c.mode, c.block_size, dtype, c.scale_type, c.global_scale, c.infer_only)
    return c


def _normal(seed, shape, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize(
    "mode,g,fmt,wfmt",
    [
        ("mxfp8", None, "e4m3", "e4m3"),
        ("mxfp8", None, "e5m2", "e3m2"),
        ("nvfp4", None, "e2m1", "e2m1"),
        ("nvfp4", 0.125, "e2m1", "e2m1"),
    ],
)
def test_scaled_dot_general_quantizes_as_jax_nn(mode, g, fmt, wfmt):
    x, w = _normal(1, (B_, M_, 64), 3.0), _normal(2, (B_, N_, 64), 0.01)
    gs = None if g is None else jnp.asarray([g], jnp.float32)
    cx = _config(mode, DTYPE[fmt] if mode == "mxfp8" else None, gs)
    cw = _config(mode, DTYPE[wfmt] if mode == "mxfp8" else None, gs)
    got = jaxmma.scaled_dot_general(x, w, DN, configs=[cx, cw, cx])
    gg = (1.0, 1.0) if g is None else (g, g)
    want = _recipe_gemm(mode, x, w, gg, fmt, wfmt)
    np.testing.assert_array_equal(_u32(got), _u32(want))
    bf = jaxmma.scaled_dot_general(x, w, DN, jnp.bfloat16, configs=[cx, cw, cx])
    np.testing.assert_array_equal(
        np.asarray(bf).view(np.uint16), want.astype(ml_dtypes.bfloat16).view(np.uint16)
    )


def test_scaled_dot_general_rounds_no_double_twice():
    """Doubles follow the quantizers' rule, as matmul on the same block-scaled form: those
    float32 holds give the float32 input's bits (jax.nn's recipe above); the others, and
    float64 arrays under x64, are a TypeError naming the operand (they were cast to float32
    and quantized: two roundings)."""
    x, w = _normal(3, (B_, M_, 64), 3.0), _normal(4, (B_, N_, 64))
    cfg = _config("mxfp8")
    got = jaxmma.scaled_dot_general(
        x.astype(np.float64), w.astype(np.float64), DN, configs=[cfg] * 2
    )
    np.testing.assert_array_equal(_u32(got), _u32(_recipe_gemm("mxfp8", x, w)))
    inexact = x.astype(np.float64) * (1 + 2.0**-40)
    q = lambda v, axis: jaxmma.quant.quantize_mx(v, "e4m3", axis=axis, scale_rounding="ceil")  # noqa: E731
    with pytest.raises(TypeError, match="A: expected float32.*float64 values that float32"):
        jaxmma.matmul(inexact[0], w[0].T, instruction=MXF8.format(a="e4m3", b="e4m3"), quantize=q)
    with pytest.raises(TypeError, match="lhs: expected float32.*float64 values that float32"):
        jaxmma.scaled_dot_general(inexact, w, DN, configs=[cfg] * 2)
    with jax.enable_x64(True):
        with pytest.raises(TypeError, match="rhs: expected float32.*float64 values"):
            jaxmma.scaled_dot_general(
                x, w.astype(np.float64) * (1 + 2.0**-40), DN, configs=[cfg] * 2
            )
        with pytest.raises(TypeError, match="lhs: expected float32.*a float64 array"):
            jaxmma.scaled_dot_general(jnp.asarray(x, jnp.float64), w, DN, configs=[cfg] * 2)


def test_scaled_dot_general_dimension_numbers():
    """Contracting and batch dims anywhere, no batch dims: the output is lax.dot_general's
    shape, and the values are the (B, M, K) x (B, N, K) product of the moved operands."""
    x, w = _normal(5, (64, 3, 16)), _normal(6, (8, 64, 3))
    cfg = _config("mxfp8")
    got = jaxmma.scaled_dot_general(x, w, (((0,), (1,)), ((1,), (2,))), configs=[cfg] * 3)
    assert got.shape == (3, 16, 8)
    want = _recipe_gemm("mxfp8", x.transpose(1, 2, 0), w.transpose(2, 0, 1))
    np.testing.assert_array_equal(_u32(got), _u32(want))
    x2, w2 = _normal(7, (16, 64)), _normal(8, (64, 8))
    got2 = jaxmma.scaled_dot_general(x2, w2, (((1,), (0,)), ((), ())), configs=[cfg] * 3)
    want2 = _recipe_gemm("mxfp8", x2[None], w2.T[None])[0]
    np.testing.assert_array_equal(_u32(got2), _u32(want2))


def test_configs_none_is_lax_dot_general():
    x, w = _normal(9, (4, 8)), _normal(10, (8, 5))
    dn = (((1,), (0,)), ((), ()))
    got = jaxmma.scaled_dot_general(x, w, dn)
    np.testing.assert_array_equal(_u32(got), _u32(jax.lax.dot_general(x, w, dn)))


# ----------------------------------------------------------------------------- transformations
def test_jit_and_vmap_give_the_eager_bits():
    rng = np.random.default_rng(11)
    a, b = _elements(rng, "e2m1", (3, 16, 32)), _elements(rng, "e2m1", (3, 8, 32))
    sa, sb = _scales(rng, "ue4m3", (3, 16, 2)), _scales(rng, "ue4m3", (3, 8, 2))
    args = (
        _as(a, "e2m1"),
        _as(b, "e2m1"),
        jnp.asarray(sa.view(SCALE["ue4m3"])),
        jnp.asarray(sb.view(SCALE["ue4m3"])),
    )
    eager = jaxmma.scaled_matmul(*args)
    want = np.stack([chained(NVF4, a[i], b[i], sa[i], sb[i], "e2m1", "e2m1") for i in range(3)])
    np.testing.assert_array_equal(_u32(eager), _u32(want))
    np.testing.assert_array_equal(_u32(jax.jit(jaxmma.scaled_matmul)(*args)), _u32(want))
    mapped = jax.vmap(jaxmma.scaled_matmul)(*(x[:, None] for x in args))  # a batch of B = 1
    np.testing.assert_array_equal(_u32(mapped[:, 0]), _u32(want))

    x, w = _normal(12, (2, 3, 16, 64)), _normal(13, (2, 3, 8, 64))
    cfg = [_config("nvfp4")] * 3
    sdg = functools.partial(jaxmma.scaled_dot_general, dimension_numbers=DN, configs=cfg)
    want = np.stack([_recipe_gemm("nvfp4", x[i], w[i]) for i in range(2)])
    np.testing.assert_array_equal(_u32(jax.jit(jax.vmap(sdg))(x, w)), _u32(want))
    np.testing.assert_array_equal(_u32(jax.vmap(sdg)(x, w)), _u32(want))


def _dequantized(mode, x):
    """The float values the instruction multiplies, by the recipe (float64)."""
    if mode == "nvfp4":
        el, s = _nvfp4_recipe(x, 1.0)
        sv = s.astype(np.float64)
    else:
        el, s = _mx_recipe(x, ml_dtypes.float8_e4m3fn, 32)
        sv = np.exp2(s.astype(np.float64) - 127)
    bs = x.shape[-1] // s.shape[-1]
    return el.astype(np.float64) * np.repeat(sv, bs, axis=-1)


@pytest.mark.parametrize("mode", ["mxfp8", "nvfp4"])
def test_straight_through_gradient(mode):
    """grad="ste": dL = G @ R_q, dR = G^T @ L_q, with the dequantized operands."""
    x, w = _normal(14, (1, 16, 64)), _normal(15, (1, 8, 64))
    G = _normal(16, (1, 16, 8))
    cfg = [_config(mode)] * 3

    def f(x, w):
        return jnp.sum(jaxmma.scaled_dot_general(x, w, DN, configs=cfg) * G)

    gx, gw = jax.jit(jax.grad(f, argnums=(0, 1)))(x, w)
    xq, wq = _dequantized(mode, x[0]), _dequantized(mode, w[0])
    np.testing.assert_allclose(gx[0], G[0] @ wq, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw[0], G[0].T @ xq, rtol=1e-5, atol=1e-6)
    gx2, _ = jax.grad(f, argnums=(0, 1))(x, w)  # eager: the same
    np.testing.assert_array_equal(_u32(gx2), _u32(gx))


def test_configs_gradient_mxfp8_quantizes_the_backward_gemms():
    """grad="configs" (jax.nn's rule): dL = Q(G) @ Q(R) with both quantized along N, dR
    = Q(G^T) @ Q(L) along M, each on the block-scaled instruction."""
    x, w = _normal(17, (1, 32, 64)), _normal(18, (1, 32, 64), 2.0)
    G = _normal(19, (1, 32, 32), 0.1)
    cfg = [_config("mxfp8")] * 3

    def f(x, w):
        return jnp.sum(jaxmma.scaled_dot_general(x, w, DN, configs=cfg, grad="configs") * G)

    gx, gw = jax.grad(f, argnums=(0, 1))(x, w)
    want_x = _recipe_gemm("mxfp8", G, w.transpose(0, 2, 1))  # [B, M, N] x [B, K, N]
    want_w = _recipe_gemm("mxfp8", G.transpose(0, 2, 1), x.transpose(0, 2, 1))
    np.testing.assert_array_equal(_u32(gx), _u32(want_x))
    np.testing.assert_array_equal(_u32(gw), _u32(want_w))


def test_configs_gradient_nvfp4_is_float32_with_the_clipping_mask():
    x, w = _normal(20, (1, 16, 32)), _normal(21, (1, 8, 32))
    g = 2.0**-12  # 6 * 448 * g = 0.65625: larger values clip
    cfg = [_config("nvfp4", g=jnp.asarray([g], jnp.float32))] * 3
    G = _normal(22, (1, 16, 8))

    def f(x, w):
        return jnp.sum(jaxmma.scaled_dot_general(x, w, DN, configs=cfg, grad="configs") * G)

    gx, gw = jax.grad(f, argnums=(0, 1))(x, w)
    keep_x, keep_w = np.abs(x) <= 0.65625, np.abs(w) <= 0.65625
    assert 0 < keep_x.mean() < 1
    want_x = np.where(keep_x, np.einsum("bmn,bnk->bmk", G, w), 0)
    want_w = np.where(keep_w, np.einsum("bmn,bmk->bnk", G, x), 0)
    np.testing.assert_allclose(gx, want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, want_w, rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(gx)[~keep_x] == 0)


def test_scaled_matmul_gradient_is_straight_through():
    """Through x.astype(e4m3): d/dx sum(G * out) = (G @ (b * sb)) * sa, rounded to e4m3 on
    the way back (jax's rule for the cast). Values chosen so every sum is exact."""
    rng = np.random.default_rng(23)
    x = rng.integers(-8, 9, (1, 16, 32)).astype(np.float32) / 4
    b = rng.integers(-8, 9, (1, 8, 32)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    sa = np.full((1, 16, 1), 2.0, ml_dtypes.float8_e8m0fnu)
    sb = np.full((1, 8, 1), 0.5, ml_dtypes.float8_e8m0fnu)
    G = rng.integers(-3, 4, (1, 16, 8)).astype(np.float32)

    def f(x):
        out = jaxmma.scaled_matmul(x.astype(jnp.float8_e4m3fn), jnp.asarray(b), sa, sb)
        return jnp.sum(out * G)

    want = (G[0] @ (b[0].astype(np.float32) * 0.5)) * 2.0
    want = want.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    for fn in (jax.grad(f), jax.jit(jax.grad(f))):
        np.testing.assert_array_equal(np.asarray(fn(jnp.asarray(x)))[0], want)


@pytest.mark.full  # the straight-through gradient test covers the scales' tangent
def test_scaled_matmul_gradient_of_ue4m3_scales():
    rng = np.random.default_rng(24)
    a = rng.integers(0, 16, (1, 16, 16)).astype(np.uint8).view(ml_dtypes.float4_e2m1fn)
    b = rng.integers(0, 16, (1, 8, 16)).astype(np.uint8).view(ml_dtypes.float4_e2m1fn)
    sb = np.full((1, 8, 1), 1.0, ml_dtypes.float8_e4m3fn)
    G = rng.integers(-2, 3, (1, 16, 8)).astype(np.float32)

    def f(s):
        out = jaxmma.scaled_matmul(jnp.asarray(a), jnp.asarray(b), s.astype(jnp.float8_e4m3fn), sb)
        return jnp.sum(out * G)

    g = jax.grad(f)(jnp.ones((1, 16, 1), jnp.float32))
    av, bv = a[0].astype(np.float64), b[0].astype(np.float64)
    want = np.sum(av * (G[0] @ bv), axis=1, keepdims=True)  # exact: small integer sums
    want = want.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(g)[0], want)


def test_e8m0_scales_refuse_a_derivative():
    a, b = jnp.ones((1, 16, 32), jnp.float8_e4m3fn), jnp.ones((1, 8, 32), jnp.float8_e4m3fn)
    sb = jnp.ones((1, 8, 1), jnp.float8_e8m0fnu)

    def f(s):
        return jnp.sum(jaxmma.scaled_matmul(a, b, s, sb))

    with pytest.raises(TypeError, match="lhs_scales: float8_e8m0fnu"):
        jax.grad(f)(jnp.ones((1, 16, 1), jnp.float8_e8m0fnu))


# ----------------------------------------------------------------------------- errors
def _fp8(shape):
    return jnp.ones(shape, jnp.float8_e4m3fn)


def _e8(shape):
    return jnp.ones(shape, jnp.float8_e8m0fnu)


SHAPE_ERRORS = [
    ((16, 64), (1, 8, 64), (1, 16, 2), (1, 8, 2)),  # not 3-D
    ((1, 16, 64), (1, 8, 32), (1, 16, 2), (1, 8, 2)),  # K differs
    ((1, 16, 64), (2, 8, 64), (1, 16, 2), (1, 8, 2)),  # B differs
    ((1, 16, 64), (1, 8, 64), (1, 16, 2), (1, 8, 1)),  # scale K differs
    ((1, 16, 64), (1, 8, 64), (1, 12, 2), (1, 8, 2)),  # scale M differs
]


@pytest.mark.parametrize("shapes", SHAPE_ERRORS)
def test_shape_errors_are_jax_nn_s(shapes):
    args = (_fp8(shapes[0]), _fp8(shapes[1]), _e8(shapes[2]), _e8(shapes[3]))
    with pytest.raises(ValueError) as theirs:
        jax.nn.scaled_matmul(*args)
    with pytest.raises(type(theirs.value)):
        jaxmma.scaled_matmul(*args)


def test_what_no_instruction_runs_is_refused_clearly():
    a, b = _fp8((1, 16, 64)), _fp8((1, 8, 64))
    with pytest.raises(ValueError, match=r"block size: 8 .*allowed: 32"):
        jaxmma.scaled_matmul(a, b, _e8((1, 16, 8)), _e8((1, 8, 8)))
    with pytest.raises(TypeError, match="mixed scale types ue8m0 and ue4m3"):
        jaxmma.scaled_matmul(a, b, _e8((1, 16, 2)), _fp8((1, 8, 2)))
    with pytest.raises(TypeError, match=r"lhs: .*float32 elements; expected one of"):
        jaxmma.scaled_matmul(a.astype(jnp.float32), b, _e8((1, 16, 2)), _e8((1, 8, 2)))
    with pytest.raises(TypeError, match="float4_e2m1fn elements only"):
        jaxmma.scaled_matmul(a, b, _fp8((1, 16, 4)), _fp8((1, 8, 4)))
    with pytest.raises(ValueError, match="not a whole number of blocks"):
        jaxmma.scaled_matmul(a, b, _e8((1, 16, 3)), _e8((1, 8, 3)))
    with pytest.raises(TypeError, match="preferred_element_type: expected one of"):
        jaxmma.scaled_matmul(a, b, _e8((1, 16, 2)), _e8((1, 8, 2)), jnp.int32)
    bf16 = MMA + "m16n8k16.row.col.f32.bf16.bf16.f32"
    with pytest.raises(ValueError, match="dense block-scaled"):
        jaxmma.scaled_matmul(a, b, _e8((1, 16, 2)), _e8((1, 8, 2)), instruction=bf16, arch="sm_90")
    with pytest.raises(ValueError, match="sm_120a"):
        jaxmma.scaled_matmul(a, b, _e8((1, 16, 2)), _e8((1, 8, 2)), arch="sm_100a")


def test_scaled_dot_general_errors():
    x, w = jnp.ones((1, 16, 64), jnp.float32), jnp.ones((1, 8, 64), jnp.float32)
    cfg = _config("mxfp8")
    for impl in (jax.nn.scaled_dot_general, jaxmma.scaled_dot_general):
        with pytest.raises(TypeError):
            impl(x, w, DN, jnp.int32, configs=[cfg] * 3)
    with pytest.raises(TypeError, match="preferred_element_type: expected one of"):
        jaxmma.scaled_dot_general(x, w, DN, jnp.int32, configs=[cfg] * 3)
    with pytest.raises(TypeError, match="mixed scale types"):
        jaxmma.scaled_dot_general(x, w, DN, configs=[cfg, _config("nvfp4"), cfg])
    bad = types.SimpleNamespace(**{**vars_of(cfg), "mode": "int8"})
    with pytest.raises(
        ValueError, match=r"configs\[0\].mode: expected one of \['mxfp8', 'nvfp4'\]"
    ):
        jaxmma.scaled_dot_general(x, w, DN, configs=[bad, cfg, cfg])
    small = types.SimpleNamespace(**{**vars_of(cfg), "block_size": 8})
    with pytest.raises(
        ValueError, match=r"configs\[0\].block_size, configs\[1\].block_size: 8 .*allowed: 32"
    ):
        jaxmma.scaled_dot_general(x, w, DN, configs=[small, small, small])
    # every config error names the config and its field (issue #37)
    named = [
        ([cfg, small, cfg], ValueError, r"configs\[0\].block_size, configs\[1\].block_size: "),
        ([cfg, _config("nvfp4"), cfg], TypeError, r"configs\[0\].scale_type, configs\[1\]"),
        ([types.SimpleNamespace(**{**vars_of(cfg), "data_type": "nope"}), cfg], TypeError,
         r"configs\[0\].data_type: expected a dtype, got 'nope'"),
        ([cfg, types.SimpleNamespace(**{**vars_of(cfg), "scale_type": 3})], TypeError,
         r"configs\[1\].scale_type: expected a dtype"),
    ]  # fmt: skip
    for configs, exc, match in named:
        with pytest.raises(exc, match=match):
            jaxmma.scaled_dot_general(x, w, DN, configs=configs)
    with pytest.raises(ValueError, match=r"configs\[2\].block_size, configs\[1\].block_size"):
        jaxmma.scaled_dot_general(x, w, DN, configs=[cfg, cfg, small], grad="configs")
    mxf4 = MXF4
    with pytest.raises(TypeError, match=r"configs\[0\].data_type: .*kind::mxf4.* takes .e2m1"):
        jaxmma.scaled_dot_general(x, w, DN, configs=[cfg, cfg], instruction=mxf4)
    with pytest.raises(ValueError, match=r"grad: expected one of \['ste', 'configs'\]"):
        jaxmma.scaled_dot_general(x, w, DN, configs=[cfg] * 3, grad="exact")
    with pytest.raises(ValueError, match="contracting"):
        jaxmma.scaled_dot_general(x, w[:, :, :32], DN, configs=[cfg] * 3)


def vars_of(cfg):
    return {
        f: getattr(cfg, f)
        for f in ("mode", "block_size", "data_type", "scale_type", "global_scale", "infer_only")
    }


def test_jax_nn_does_not_run_on_this_backend_but_jaxmma_does():
    if jax.default_backend() != "cpu":
        pytest.skip("jax.nn.scaled_matmul's CPU refusal")
    a, s = _fp8((1, 16, 64)), _e8((1, 16, 2))
    try:  # jax 0.10 refuses on a CPU; later releases may run their own reference there
        jax.nn.scaled_matmul(a, a, s, s)
    except NotImplementedError:
        pass
    assert float(jaxmma.scaled_matmul(a, a, s, s)[0, 0, 0]) == 64.0


def test_docstring_examples_and_the_docs_example():
    assert doctest.testmod(_scaled_dot).failed == 0
    doc = pathlib.Path(__file__).resolve().parents[1] / "docs" / "scaled_dot.md"
    (block,) = re.findall(r"```python\n(import jax.*?)```", doc.read_text(), flags=re.S)
    scope = {}
    exec(compile(block, "docs/scaled_dot.md", "exec"), scope)
    assert float(scope["einsum"][0, 0, 0]) == 512 + 2**-14  # f32 rounds to nearest
    assert float(scope["mma"][0, 0, 0]) == 512.0  # the tensor core truncates


def test_stands_in_for_a_flax_dense_dot_general():
    """flax's ``nn.Dense(dot_general=...)`` passes ``precision=``: accepted (ignored), and
    the layer's output is the function's own on its inputs, bit for bit."""
    import flax.linen as nn

    cfg = [jax.nn.get_scaled_dot_general_config("mxfp8")] * 2
    dg = functools.partial(jaxmma.scaled_dot_general, configs=cfg)
    layer = nn.Dense(32, use_bias=False, dot_general=dg)
    x = jax.random.normal(jax.random.key(0), (4, 64), jnp.float32)
    params = layer.init(jax.random.key(1), x)
    got = layer.apply(params, x)
    want = jaxmma.scaled_dot_general(
        x, params["params"]["kernel"], (((1,), (0,)), ((), ())), configs=cfg
    )
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
