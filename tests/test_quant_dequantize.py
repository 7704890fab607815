"""``_quant._dequantize`` (element x scale in float32, one multiply by the global scale)
against the exact product rounded once by the general IEEE sum (its former formulation,
kept here only as a reference): every e2m1 x ue4m3 pair and every MX element x ue8m0
scale, times global scales from the smallest subnormal to Inf and NaN."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxmma import arith, bits
from jaxmma.operands import _quant as Q

U32 = jnp.uint32


@jax.jit
def _reference(q):
    elements, scales = Q.raw_bits(q)
    e = bits.fields(q.fmt, elements)
    s = bits.fields(q.scale_fmt, jnp.repeat(scales, q.block, axis=q.axis))
    g = jnp.float32(1.0) if q.global_scale is None else q.global_scale
    g = g.reshape(g.shape + (1,) * (e.sig.ndim - g.ndim))
    g = jax.tree.map(lambda v: jnp.broadcast_to(v, e.sig.shape), Q._f32_fields(g))

    def zero(f):
        return (f.sig == 0) & ~f.nan & ~f.inf

    nan = e.nan | s.nan | g.nan | (e.inf & (zero(s) | zero(g))) | (g.inf & (zero(e) | zero(s)))
    inf = (e.inf | g.inf) & ~nan
    sig = jnp.where(nan | inf, U32(0), e.sig * s.sig * g.sig)
    lsb = e.exp + s.exp + g.exp
    term = arith.Terms((e.sign ^ g.sign).astype(U32), sig, lsb, lsb, nan, inf)
    raw = arith.ieee_sum(arith.Terms(*(v[..., None] for v in term)), "f32")
    return lax.bitcast_convert_type(raw, jnp.float32)


def _globals(n, seed):
    """float32 global scales: random bits, subnormals, powers of two, +-0, +-Inf, NaN."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    g[: n // 4] &= 0x807FFFFF  # subnormals
    g[n // 4 : n // 3] &= 0xFF800000  # powers of two
    g[:8] = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 1, 0x3F800000, 0x7F7FFFFF]
    return g.view(np.float32)


def _check(fmt, scale_fmt, ebits, sbits, gs):
    # all element x scale pairs in one [len(sbits), len(ebits)] tensor, per global scale
    el = jnp.asarray(np.tile(ebits, (len(sbits), 1)).astype(np.uint8))
    sc = jnp.asarray(np.asarray(sbits, np.uint8)[:, None])
    run = jax.jit(
        jax.vmap(
            lambda g: (
                Q._dequantize(Q.Quantized(el, sc, g, fmt, scale_fmt, len(ebits), -1)),
                _reference(Q.Quantized(el, sc, g, fmt, scale_fmt, len(ebits), -1)),
            )
        )
    )
    new, old = run(jnp.asarray(gs))
    new, old = np.asarray(new).view(np.uint32), np.asarray(old).view(np.uint32)
    bad = np.argwhere(new != old)
    assert len(bad) == 0, [
        (gs[i].view(np.uint32), j, k, new[i, j, k], old[i, j, k]) for i, j, k in bad[:5]
    ]


def test_nvfp4_every_pair_times_global_scales():
    _check("e2m1", "ue4m3", np.arange(16), np.arange(256), _globals(512, 0))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"])
def test_mx_every_pair(fmt):
    n = 2 ** bits.FORMATS[fmt].bits
    ebits, sbits = np.arange(n), np.arange(256)
    el = jnp.asarray(np.tile(ebits, (256, 1)).astype(np.uint8))
    q = Q.Quantized(el, jnp.asarray(sbits.astype(np.uint8)[:, None]), None, fmt, "ue8m0", n, -1)
    new = np.asarray(Q._dequantize(q)).view(np.uint32)
    old = np.asarray(_reference(q)).view(np.uint32)
    np.testing.assert_array_equal(new, old)


def test_global_scale_under_vmap_and_grad():
    x = jax.random.normal(jax.random.key(0), (4, 8, 32), jnp.float32)
    qs = jax.vmap(lambda v: Q.quantize_nvfp4(v))(x)
    np.testing.assert_array_equal(
        np.asarray(jax.vmap(Q._dequantize)(qs)).view(np.uint32),
        np.asarray(jax.vmap(_reference)(qs)).view(np.uint32),
    )
    q = Q.quantize_nvfp4(x[0])
    dg = jax.grad(lambda g: Q.dequantize(dataclasses.replace(q, global_scale=g)).sum())(
        q.global_scale
    )
    unit = _reference(dataclasses.replace(q, global_scale=jnp.float32(1.0)))
    assert float(dg) == pytest.approx(float(jnp.sum(unit)), rel=1e-6)


@pytest.mark.parametrize(
    "fmt,bad", [("e2m1", 0xF2), ("e2m1", 0x10), ("e3m2", 0x40), ("e2m3", 0x80)]
)
def test_element_bytes_beyond_the_format_poison_their_block(fmt, bad):
    """An edited element byte is no code of its format: not read as another code; its
    block is NaN (eagerly and under jit), the other blocks unchanged."""
    x = jnp.asarray(np.linspace(-3, 3, 64).reshape(2, 32), jnp.float32)
    q = Q.quantize_mx(x, fmt, block=16)
    edited = dataclasses.replace(q, elements=q.elements.at[0, 20].set(bad))
    want = np.asarray(Q.dequantize(q))
    for got in (Q.dequantize(edited), jax.jit(Q.dequantize)(edited)):
        got = np.asarray(got)
        assert np.isnan(got[0, 16:]).all()
        np.testing.assert_array_equal(got[0, :16], want[0, :16])
        np.testing.assert_array_equal(got[1], want[1])
