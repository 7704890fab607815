"""The compiled product kernel fuses a step with PTX routines (``gemm._product_ptx``)
that only a GPU runs. Here the PTX interpreter (``_ptx_interp``, exact arithmetic on
rationals) runs their texts on raw inputs that meet the kernel's conditions (every term a
whole number of grid units), and its D bits must equal the interpreted kernel's int32
fusion (``_product_kernel._fuse``), which the product-kernel tests tie to the per-step
chain of the instruction model."""

import jax.numpy as jnp
import numpy as np
import pytest
from _block_inputs import raw_c
from _ptx_interp import _parse, _run

from jaxmma import models
from jaxmma.gemm import _product_kernel, _product_ptx

PAIRS = (("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e2m1", "e4m3"))


def _inputs(rng, n, offsets):
    """C bits (any, NaN and Inf included), ``unit`` from C's order up to 40 above it
    (or anywhere for a zero C, down to the lowest ``e_zero - F``, up to sums past
    ``2**128``), ``R - unit`` over the range where a window holds a product, the window
    sums (integers below ``2**24``, whole grid units, up to ``2**32`` of them) and ``t``
    (below ``2**29``); a
    tenth of the elements with ``t`` cancelling everything else."""
    model = models.PRODUCT_MODEL
    c = raw_c(rng, (4, n)).reshape(-1)[:n]
    field = (c >> 23) & 0xFF
    c_exp = np.maximum(field, 1).astype(np.int64) - 150
    low = model.e_zero("f32") - model.F
    unit = c_exp - 2 + rng.integers(0, 41, n)
    free = rng.integers(low, 160, n)
    unit = np.where((c & 0x7FFFFFFF) == 0, free, unit)
    unit = np.where(rng.random(n) < 0.1, rng.choice([low, low + 3, 100, 103], n), unit)
    # C's order is at most e_max = unit + F: its lsb at most 2 below the grid
    unit = np.where((c & 0x7FFFFFFF) == 0, unit, np.maximum(unit, c_exp - 2))
    unit = np.clip(unit, low, 200)
    kbase = rng.integers(-15 - max(offsets), 26, n)
    sums, total = [], np.zeros(n, object)
    for o in offsets:
        k = kbase + o
        whole = np.maximum(-k, 0)  # S is a multiple of 2**-k where k < 0
        top = np.minimum(24, 32 - np.maximum(k, 0)) - whole  # S * 2**k below 2**32
        m = np.array([int(rng.integers(0, 1 << int(b))) if b > 0 else 0 for b in top])
        m = np.where(rng.random(n) < 0.1, (1 << np.maximum(top, 0)) - 1, m)  # the largest
        s = (m << whole) * rng.choice([-1, 1], n)
        s = np.where((k > 25) | (k < -15) | (rng.random(n) < 0.15), 0, s)
        sums.append(s.astype(np.float32))
        total += np.array([int(x) * 2 ** int(kk) for x, kk in zip(s, k, strict=True)], object)
    t = rng.integers(-(1 << 29) + 1, 1 << 29, n)
    t = np.where(rng.random(n) < 0.2, 0, t)
    ct = np.trunc(c.view(np.float32).astype(np.float64) * 2.0 ** -unit.astype(np.float64))
    ct = np.where(np.isfinite(ct), ct, 0)
    cancel = -(total + ct.astype(object))
    ok = np.array([abs(x) < (1 << 29) and x == int(x) for x in cancel])
    pick = ok & (rng.random(n) < 0.1)
    t = np.array([int(x) if p else int(y) for x, y, p in zip(cancel, t, pick, strict=True)])
    return c.view(np.int32), unit.astype(np.int32), kbase.astype(np.int32), sums, t.astype(np.int32)


def _check_ptx(offsets, words, want):
    """Run the kernel's three routines in turn on each element's int32 ``words`` (C,
    unit, R - unit, the planes, t): ``start``, one ``add`` per offset, ``finish``, the
    float64 partial sum carried in a 64-bit register; compare with ``want`` (uint32 D
    bits), which must reach zeros, Inf or NaN, and subnormals."""
    start = _parse(_product_ptx.start_text())
    adds = [_parse(_product_ptx.add_text(o)) for o in offsets]
    finish = _parse(_product_ptx.finish_text())
    c, unit, r, *planes, t = [w.view(np.uint32) for w in words]
    got = []
    for i in range(len(c)):
        acc = _run(start, [int(c[i]), int(unit[i])])
        for prog, p in zip(adds, planes, strict=True):
            acc = _run(prog, [acc, int(r[i]), int(p[i])])
        got.append(_run(finish, [int(c[i]), int(unit[i]), acc, int(t[i])]))
    kinds = want & 0x7F800000
    assert (want == 0).any() and (kinds == 0x7F800000).any()  # zeros, Inf and NaN reached
    assert ((kinds == 0) & (want & 0x7FFFFF != 0)).any()  # subnormal results reached
    np.testing.assert_array_equal(np.array(got, np.uint32), want)


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_ptx_fusion_gives_the_int32_fusion_bits(pair):
    win = _product_kernel._windows(*pair)
    offsets = tuple(sorted({win.width * (i + j) for i, j in win.pairs}))
    rng = np.random.default_rng(5 + len(offsets))
    n = 400
    c, unit, kbase, sums, t = _inputs(rng, n, offsets)
    planes = {o: jnp.asarray(s) for o, s in zip(offsets, sums, strict=True)}
    want = _product_kernel._fuse(
        jnp.asarray(c), planes, jnp.asarray(unit), jnp.asarray(kbase + unit), jnp.asarray(t)
    )
    words = [c, unit, kbase] + [s.view(np.int32) for s in sums] + [t]
    _check_ptx(offsets, words, np.asarray(want).view(np.uint32))


def test_ptx_fusion_of_the_per_product_branch():
    """The branch hands the routines the sum of its first 16 truncated products as ``t``
    and the other 16's sum as two planes (top 23 bits at offset 8, low 8 at offset 0,
    ``R = unit``), each half anywhere in int32's range: the routines' bits are the int32
    fusion's, and those are the branch's earlier int32 sum of the four pieces."""
    rng = np.random.default_rng(11)
    n = 400
    c, unit, _, _, _ = _inputs(rng, n, (0,))
    big = (1 << 31) - 1
    halves = [rng.integers(-big, big + 1, n), rng.integers(-big, big + 1, n)]
    for h in halves:  # small, zero and extreme sums too
        h[: n // 4] >>= rng.integers(0, 31, n // 4)
        h[n // 4 : n // 4 + 20] = 0
        h[n // 4 + 20 : n // 4 + 30] = rng.choice([big, -big], 10)
    t0, t1 = (h.astype(np.int32) for h in halves)
    cancel = rng.random(n) < 0.1  # t0 = -t1: only C's term is left
    t0 = np.where(cancel & (t1 != -(1 << 31)), -t1, t0).astype(np.int32)
    planes = {0: (t1 & 0xFF).astype(np.float32), 8: (t1 >> 8).astype(np.float32)}
    j = jnp.asarray
    want = _product_kernel._fuse(
        j(c), {o: j(p) for o, p in planes.items()}, j(unit), j(unit), j(t0)
    )
    want = np.asarray(want).view(np.uint32)
    eight, zero = np.full(n, 8, np.int32), np.zeros(n, np.int32)
    terms = [(t0 >> 8, eight), (t0 & 0xFF, zero), (t1 >> 8, eight), (t1 & 0xFF, zero)]
    before = _product_kernel._round(j(c), j(unit), [(j(g), j(k)) for g, k in terms])
    np.testing.assert_array_equal(np.asarray(before).view(np.uint32), want)
    words = [c, unit, np.zeros(n, np.int32), planes[0].view(np.int32)]
    _check_ptx((0, 8), words + [planes[8].view(np.int32), t0], want)


def _interpreted_asm(text, *, args, constraints, pack, result_shape_dtypes):
    """``plgpu.elementwise_inline_asm`` run by the PTX interpreter element by element,
    with the operands checked against their constraints: a 64-bit register (``l``)
    takes an int64 array, a 32-bit one (``r``) a 32-bit array."""
    kinds = constraints.split(",")
    (out,) = result_shape_dtypes
    wide = np.dtype(out.dtype) == np.int64
    assert pack == 1 and len(kinds) == len(args) + 1
    assert kinds[0] == ("=l" if wide else "=r")
    words = []
    for a, kind in zip(args, kinds[1:], strict=True):
        a = np.asarray(a)
        assert (kind == "l") == (a.dtype == np.int64), (kind, a.dtype)
        words.append(np.broadcast_to(a, out.shape).view(np.uint64 if kind == "l" else np.uint32))
    prog = _parse(text)
    got = [_run(prog, [int(w[i]) for w in words]) for i in np.ndindex(out.shape)]
    return [np.array(got, np.uint64 if wide else np.uint32).reshape(out.shape).view(out.dtype)]


@pytest.mark.parametrize("pair", PAIRS[:2], ids=["-".join(p) for p in PAIRS[:2]])
def test_kernel_fusion_calls_give_the_int32_fusion_bits(pair, monkeypatch):
    """The compiled kernel's fusion as the kernel calls it (``_product_kernel.PTX``: its
    routines, their operands' order and register kinds, the 64-bit partial sum), with
    the inline assembly run by the interpreter, gives the interpreted kernel's bits. A
    tenth of the elements have zero window sums whose exponent over the grid is far
    outside float64's range (2**1024 would be an Inf word, and Inf * 0 NaN): the
    ``add`` routine clamps it."""
    monkeypatch.setattr(_product_kernel.plgpu, "elementwise_inline_asm", _interpreted_asm)
    win = _product_kernel._windows(*pair)
    offsets = tuple(sorted({win.width * (i + j) for i, j in win.pairs}))
    rng = np.random.default_rng(13 + len(offsets))
    n = 150
    c, unit, kbase, sums, t = _inputs(rng, n, offsets)
    far = rng.random(n) < 0.1
    # unclamped, 2**(k + o) for k + o = +-1024 would be an Inf word: Inf * 0 = NaN
    edge = np.array([1024, -1024, 2000, -2000])[rng.integers(0, 4, n)]
    kbase = np.where(far, edge - rng.choice(offsets, n), kbase).astype(np.int32)
    sums = [np.where(far, np.float32(0), s) for s in sums]
    j = jnp.asarray
    args = (j(c), {o: j(s) for o, s in zip(offsets, sums, strict=True)}, j(unit))
    args += (j(kbase + unit), j(t))
    got = _product_kernel._fused(_product_kernel.PTX, *args)
    want = _product_kernel._fused(_product_kernel.LIMBS, *args)
    assert np.asarray(got).dtype == np.int32 and far.any()
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
