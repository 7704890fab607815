"""The product model of ``kind::mxf8f6f4`` (ue8m0; ``mma`` and ``tcgen05.mma``) as one
Pallas (Triton) kernel.

:func:`jaxmma.models._product_gemm.gemm_bits` truncates each of a k-step's 32 products
to the step's grid ``2**unit`` (``unit = e_max - 25``) before summing them; done one
product at a time that is 20-50 integer operations per product. This kernel computes the
same bits with the step's sums on the tensor cores. Each program holds one ``bm x bn``
tile of D (the f32 accumulator as int32 bits) across K, in a ``fori_loop`` over the
k-steps of 32, and per step:

* **The exact sum of the step's products** (not truncated), from exponent windows: an
  element ``sig * 2**lsb`` whose lsb lies in window ``q`` (``lsb - L = W q + r``,
  ``0 <= r < W``, ``L`` the format's lowest lsb) enters window ``q``'s column block as
  the integer ``sig * 2**r``, at most 8 significant bits, exact in bfloat16. A pair of
  windows' bfloat16 dot sums integer products of at most 16 bits; the pairs of one
  offset ``W qa + W qb`` share a float32 accumulator, whose every partial sum stays
  below ``2**24`` (:func:`_windows` picks ``W`` so), so the tensor core's fused sums
  and accumulator hold it exactly. The products of offset ``o`` are in units of
  ``2**(L_a + L_b + o + e_sa + e_sb)``.
* **``e_max`` and the smallest lsb of a nonzero product**, from two more bfloat16 dots
  of powers of two: ``2**(6 (order - R))`` (``R`` the largest order in the row of A /
  column of B in the step; weights below ``2**-60`` left out) gives the largest
  ``order_a + order_b`` as ``floor(E / 6)`` of the sum's exponent, decided where that
  is at least -10 (every product left out is below it); ``2**(-6 min(lsb - l, 10))``
  (``l`` the smallest lsb there) gives a lower bound of the smallest ``lsb_a + lsb_b``
  (exact unless above ``l_a + l_b + 10``), and whether any product is nonzero. Sums of
  at most 32 powers of two: any order of addition, truncated or not, keeps the
  exponent within 5 of the largest term's.
* **The fusion**: where no nonzero product has its lsb below ``unit`` (every product is
  a multiple of the grid), truncating each product changes nothing, and the step is
  ``RZ_f32(trunc(C) + sum)`` with the exact sum above; :func:`_fuse` forms it in int32
  limbs. Elsewhere (a product the grid truncates, a NaN or Inf element, ``e_max`` not
  decided), the whole tile's step runs the products one at a time
  (:func:`_per_product`: :func:`jaxmma.models._product_gemm._step`'s arithmetic), as a
  branch taken only then.

**Why the branch is costly.** The window sums are exact and cheap, but the branch
is taken often: on MX-quantized normal data (e4m3, K = 4096) 1.2 % of the
element-steps truncate a product (the accumulator has grown above the step's largest
product in 91 % of the steps, and the grid follows it), and a ``16 x 128`` tile meets
one in nearly every step late in K (``benchmarks/product_truncation.py``). The branch
reads ``e_max`` off the dots where they decide it and the step's values as one block
of A and one of B, so per product it costs two multiplies, a conversion and an add
(its timings against the per-step chain: benchmarks/RESULTS.md).

NaN scales and NaN C are applied as the model applies them (:func:`gemm_bits`).
``benchmarks/product_gpu.py --bits`` compares the compiled kernel with the XLA
formulation on raw bits and on MX-quantized data, and the tests run the kernel
interpreted against the per-step chain.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from .. import models, util
from ..bits import CANONICAL_NAN, FORMATS, fields, from_container
from . import _block_kernel, _modes, _tiling

F32 = jnp.float32
BF16 = jnp.bfloat16
I32 = jnp.int32
U32 = jnp.uint32
L = 32  # products per k-step
MODEL = models.PRODUCT_MODEL
#: the order / lsb of an absent element, and a row's word where its step holds a NaN or Inf
_ABSENT = -(1 << 20)
_SPECIAL = -(1 << 24)
#: weights at most this far below the largest (or smallest) are kept: 2**(-6 * 20) is
#: a normal float32 number
_REL = 10

#: ``"auto"``: the kernel where the default backend is a GPU, the XLA formulation
#: (:mod:`jaxmma.models._product_gemm`) elsewhere; ``"off"``: never the kernel (on a GPU
#: the per-step chain); ``"kernel"``: the kernel everywhere (interpreted off a GPU);
#: ``"interpret"``: the kernel in Pallas interpret mode
MODE = "auto"
MODES = ("auto", "off", "kernel", "interpret")


def path(mode: str):
    """Run ``kind::mxf8f6f4`` GEMMs traced inside the block on ``mode`` (see :data:`MODE`;
    :func:`jaxmma.gemm._modes.switched`)."""
    return _modes.switched(sys.modules[__name__], mode)


def chosen() -> str | None:
    """How :data:`MODE` runs a covered GEMM now: ``"compiled"``, ``"interpret"`` or None."""
    return _modes.kernel_run(MODE, never="off")


Tiles = _block_kernel.Tiles
#: tiling on the GPU: the fastest of ``benchmarks/product_gpu.py --tune`` (benchmarks/RESULTS.md)
TILES = Tiles(bm=16, bn=128, num_warps=4, num_stages=2)
INTERPRET_TILES = Tiles(bm=16, bn=16, group_m=0)


# ---- the windows --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Windows:
    """Window width and count of A and B, and the offsets ``W (qa + qb)``."""

    width: int
    na: int
    nb: int

    @property
    def pairs(self):
        return [(qa, qb) for qa in range(self.na) for qb in range(self.nb)]


def _lsbs(fmt: str) -> tuple[int, int, int]:
    """The lowest and highest lsb of a finite nonzero element and its largest significand."""
    f = FORMATS[fmt]
    high = int(np.floor(np.log2(f.max)))
    return f.min_exp, high - f.mant_bits, 2 ** (f.mant_bits + 1) - 1


def _windows(atype: str, btype: str) -> Windows:
    """The widest window (at most 8 bits per integer, bfloat16's significand) for which
    every accumulator's partial sums stay below ``2**24``."""
    (la, ha, sa), (lb, hb, sb) = _lsbs(atype), _lsbs(btype)
    for w in range(8, 0, -1):
        if sa << (w - 1) >= 256 or sb << (w - 1) >= 256:
            continue
        win = Windows(w, -(-(ha - la + 1) // w), -(-(hb - lb + 1) // w))
        per = {}
        for qa, qb in win.pairs:
            per[qa + qb] = per.get(qa + qb, 0) + 1
        if max(per.values()) * L * (sa << (w - 1)) * (sb << (w - 1)) < 1 << 24:
            return win
    raise AssertionError("no window width")  # w = 1 always fits


def supports(ins) -> bool:
    """The forms the kernel computes: those of :func:`jaxmma.models.product_gemm_supports`."""
    return models.product_gemm_supports(ins)


# ---- operands -----------------------------------------------------------------------------
def _operand(fmt: str, bits, scale_exp, win: int, n: int):
    """One operand's kernel arrays, its rows ``[..., R, K]`` (A, or B transposed),
    ``K = S * 32``, and its scale exponents ``[..., R, S]``:

    * the packed bfloat16 columns ``[..., R, S * (n + 2) * 32]``: per step, the ``n``
      windows' 32 integers, the 32 max-order weights and the 32 min-lsb weights;
    * the per-step words ``[..., R, S]``: the largest order plus the scale exponent, the
      smallest lsb plus the scale exponent (:data:`_SPECIAL` where the step holds a NaN
      or Inf element), the scale exponent plus the format's lowest lsb;
    * for the per-product branch, float32 ``[..., R, K]``: the values (exact),
      ``2**order`` (0 for zero, NaN and Inf) and the engine's code (+-1, 0, +-Inf, NaN).
    """
    f = fields(fmt, from_container(bits, fmt))
    low = FORMATS[fmt].min_exp
    finite = (f.sig != 0) & ~f.nan & ~f.inf
    lsb = f.exp.astype(I32)
    order = lsb + FORMATS[fmt].mant_bits
    sig = jnp.where(finite, jnp.where(f.sign != 0, -f.sig.astype(I32), f.sig.astype(I32)), 0)

    def steps(x):  # [..., R, K] -> [..., R, S, 32]
        return x.reshape(x.shape[:-1] + (-1, L))

    fin, lsb_s, order_s = steps(finite), steps(lsb), steps(order)
    top = jnp.max(jnp.where(fin, order_s, _ABSENT), axis=-1, keepdims=True)
    least = jnp.min(jnp.where(fin, lsb_s, -_ABSENT), axis=-1, keepdims=True)
    rel = lsb_s - low
    q, r = rel // win, rel % win
    cols = [jnp.where(fin & (q == i), steps(sig) << r, 0).astype(F32) for i in range(n)]
    up = order_s - top
    cols.append(jnp.where(fin & (up >= -_REL), _pow2(6 * jnp.maximum(up, -_REL)), 0.0))
    cols.append(jnp.where(fin, _pow2(-6 * jnp.minimum(lsb_s - least, _REL)), 0.0))
    packed = jnp.stack(cols, axis=-2).astype(BF16)  # [..., R, S, n + 2, 32]
    packed = packed.reshape(packed.shape[:-3] + (-1,))
    special = jnp.any(steps(f.nan | f.inf), axis=-1)
    words = (
        top[..., 0] + scale_exp,
        jnp.where(special, I32(_SPECIAL), least[..., 0] + scale_exp),
        scale_exp + low,
    )
    value = sig.astype(F32) * _pow2(lsb)
    p2 = jnp.where(finite, _pow2(order), 0.0)
    inf = jnp.where(f.sign != 0, -jnp.inf, jnp.inf).astype(F32)
    code = jnp.where(f.nan, jnp.nan, jnp.where(f.inf, inf, jnp.sign(value))).astype(F32)
    return packed, words, (value, p2, code)


def _pow2(e):
    """``2.0**e`` for int32 ``-126 <= e <= 127``; 0.0 below."""
    bits = jnp.maximum(e + 127, 0) << 23
    return jnp.where(e < -126, F32(0), lax.bitcast_convert_type(bits, F32))


# ---- the fusion ---------------------------------------------------------------------------
def _limbs(g, k):
    """``g * 2**k`` (int32 ``|g| < 2**24``; exact where ``k < 0``, its magnitude below
    ``2**34``) as signed 16-bit limbs ``(mid, low)``: ``sign * (mid * 2**16 + low)``.
    Shifts clamped to [0, 31]: a shift past 31 only meets a ``g`` that leaves 0 there."""
    m = jnp.abs(g)
    up = jnp.clip(k, 0, 31)
    low_up = (m << up) & 0xFFFF
    mid_up = jnp.where(k <= 16, m >> jnp.clip(16 - k, 0, 31), m << jnp.clip(k - 16, 0, 31))
    t = m >> jnp.clip(-k, 0, 31)
    low = jnp.where(k >= 0, low_up, t & 0xFFFF)
    mid = jnp.where(k >= 0, mid_up, t >> 16)
    s = jnp.where(g < 0, -1, 1)
    return mid * s, low * s


def _c_fields(c):
    field = (c >> 23) & 0xFF
    sig = (c & 0x7FFFFF) | jnp.where(field != 0, I32(1 << 23), 0)
    exp = jnp.maximum(field, 1) - 150
    return field, sig, exp


def _round(c, unit, terms):
    """``RZ_f32(trunc(C / 2**unit) + sum of terms) * 2**unit`` as f32 bits: ``terms``
    pairs ``(g, k)`` of :func:`_limbs`; an Inf or NaN C passes through."""
    field, c_sig, c_exp = _c_fields(c)
    c_signed = jnp.where(c < 0, -c_sig, c_sig)
    hi, lo = _limbs(c_signed, c_exp - unit)  # exact or C's truncation: k <= 2
    for g, k in terms:
        m, low = _limbs(g, k)
        hi, lo = hi + m, lo + low
    hi = hi + (lo >> 16)
    lo = lo & 0xFFFF
    neg = hi < 0
    mh = jnp.where(neg, jnp.where(lo != 0, -hi - 1, -hi), hi)
    ml = jnp.where(neg & (lo != 0), 0x10000 - lo, lo)
    drop = jnp.maximum(16 - util.clz(mh), 0)  # mh's bits beyond 16
    mag = (mh << (16 - drop)) | (ml >> drop)  # truncated: the result keeps bits above
    bits = _block_kernel._round_rz(neg, mag, unit + drop)
    return jnp.where(field == 0xFF, c, bits)


def _exponent(v):
    return ((lax.bitcast_convert_type(v, I32) >> 23) & 0xFF) - 127


def _floor6(e):
    """``floor(e / 6)`` for int32 ``e >= -384``."""
    return lax.div(e + 384, I32(6)) - 64


def _e_max(c, found, prod):
    """The step's ``e_max``: C's order (``e_zero`` for a zero C), raised to ``prod``
    where ``found``."""
    _, c_sig, c_exp = _c_fields(c)
    e = jnp.where(c_sig == 0, I32(MODEL.e_zero("f32")), c_exp + 23)
    return jnp.where(found, jnp.maximum(e, prod), e)


def _grid(c, vmax, vmin, P, Q):
    """The step's grid from the weight dots; ``P, Q`` the words of the row plus those of
    the column. Returns per element ``unit`` (exact where ``e_max`` is decided), where
    it is not (some product, none of them within ``2**-60`` of the row's and column's
    largest), where the row or column holds a NaN or Inf, and where the window sums
    alone are not the step (any of these, or a product the grid truncates)."""
    anyp = vmin > 0
    m = _floor6(_exponent(vmax))
    decided = (vmax > 0) & (m >= -_REL)
    unit = _e_max(c, anyp & decided, P + m) - MODEL.F
    least = Q - _floor6(_exponent(vmin))  # a lower bound of the smallest lsb + es
    special = Q < _SPECIAL // 2
    undecided = anyp & ~decided
    return unit, undecided, special, special | undecided | (anyp & (least < unit))


def _fuse(c, sums, unit, R):
    """The step from the window sums (``{offset: float32 plane}``) where no product is
    truncated: ``RZ_f32(trunc(C) + sum)``."""
    return _round(c, unit, [(sums[o].astype(I32), R + o - unit) for o in sorted(sums)])


def _per_product(c, values, cols_a, cols_b, es, unit, undecided, special):
    """:func:`jaxmma.models._product_gemm._step` on the tile, one product at a time:
    ``values()`` gives the step's values as 32 ``[bm, 1]`` and 32 ``[1, bn]`` (one load
    of each block, split in registers), ``cols_a(i)`` / ``cols_b(i)`` product i's
    (value, 2**order, code) loaded alone; ``es`` the scale exponents' sums; ``unit``, ``undecided``,
    ``special`` from :func:`_grid`. The largest order is read off the products, and
    their codes summed, only where some element of the tile needs it."""

    def exact_unit():
        def top(i, pm):
            (_, pa, _), (_, pb, _) = cols_a(i), cols_b(i)
            return jnp.maximum(pm, pa * pb)

        pm = lax.fori_loop(0, L, top, jnp.zeros(c.shape, F32))
        return jnp.where(undecided, _e_max(c, pm > 0, _exponent(pm) + es) - MODEL.F, unit)

    unit = lax.cond(jnp.max(undecided.astype(I32)) > 0, exact_unit, lambda: unit)
    x = es - unit
    s = jnp.where(x < -100, F32(0), _pow2(jnp.clip(x, -126, 127)))

    va, vb = values()  # the step's 32 values of each row of A and column of B

    def half(start):
        t = None
        for i in range(start, start + L // 2):
            x = (va[i] * vb[i] * s).astype(I32)
            t = x if t is None else t + x
        return t

    zero = jnp.zeros(c.shape, I32)
    t0, t1 = half(0), half(L // 2)
    # each half below 2**31 (16 terms below 2**27): as 2**8 times its top 23 bits and
    # its low 8
    eight = jnp.full(c.shape, 8, I32)
    terms = [(t0 >> 8, eight), (t0 & 0xFF, zero), (t1 >> 8, eight), (t1 & 0xFF, zero)]
    bits = _round(c, unit, terms)

    def with_specials():
        def codes(i, code):
            (_, _, ca), (_, _, cb) = cols_a(i), cols_b(i)
            return code + ca * cb

        code = lax.fori_loop(0, L, codes, jnp.zeros(c.shape, F32))
        field, _, _ = _c_fields(c)
        c_nan = (field == 0xFF) & ((c & 0x7FFFFF) != 0)
        c_inf = (field == 0xFF) & ((c & 0x7FFFFF) == 0)
        c_special = jnp.where(c_inf, jnp.where(c < 0, -jnp.inf, jnp.inf), 0.0).astype(F32)
        sp = jnp.where(c_nan, F32(jnp.nan), c_special) + code
        out = jnp.where(sp == jnp.inf, I32(0x7F800000), bits)
        out = jnp.where(sp == -jnp.inf, I32(-0x800000), out)
        return jnp.where(sp != sp, I32(CANONICAL_NAN["f32"]), out)

    return lax.cond(jnp.max(special.astype(I32)) > 0, with_specials, lambda: bits)


# ---- the kernel ---------------------------------------------------------------------------
def _kernel(a_ref, b_ref, *refs, steps: int, win: Windows, low: int, branch: bool):
    """Per k-step: the weight dots and :func:`_grid`; then the window dots and
    :func:`_fuse`, or where the tile needs it, :func:`_per_product`."""
    pa, qa, ra, pb, qb, rb, fa_v, fa_p, fa_c, fb_v, fb_p, fb_c, c_ref, d_ref = refs
    na, nb = win.na + 2, win.nb + 2

    def body(s, c):
        def a_block(j):
            return a_ref[:, pl.ds(pl.multiple_of((s * na + j) * L, L), L)]

        def b_block(j):
            return b_ref[pl.ds(pl.multiple_of((s * nb + j) * L, L), L), :]

        def word(x, y):
            return x[:, pl.ds(s, 1)] + y[pl.ds(s, 1), :]

        def dot(x, y):
            return jnp.dot(x, y, preferred_element_type=F32)

        vmax = dot(a_block(na - 2), b_block(nb - 2))
        vmin = dot(a_block(na - 1), b_block(nb - 1))
        unit, undecided, special, fail = _grid(c, vmax, vmin, word(pa, pb), word(qa, qb))
        R = word(ra, rb)

        def windows():
            A = [a_block(j) for j in range(win.na)]
            B = [b_block(j) for j in range(win.nb)]
            sums: dict = {}
            for i, j in win.pairs:
                o = win.width * (i + j)
                sums[o] = dot(A[i], B[j]) if o not in sums else sums[o] + dot(A[i], B[j])
            return _fuse(c, sums, unit, R)

        def per_product():
            k0 = s * L

            def cols_a(i):
                return tuple(r[:, pl.ds(k0 + i, 1)] for r in (fa_v, fa_p, fa_c))

            def cols_b(i):
                return tuple(r[pl.ds(k0 + i, 1), :] for r in (fb_v, fb_p, fb_c))

            def values():
                a = jnp.split(fa_v[:, pl.ds(k0, L)], L, axis=1)
                b = jnp.split(fb_v[pl.ds(k0, L), :], L, axis=0)
                return a, b

            return _per_product(c, values, cols_a, cols_b, R - low, unit, undecided, special)

        if not branch:
            return windows()
        return lax.cond(jnp.max(fail.astype(I32)) > 0, per_product, windows)

    d_ref[...] = lax.fori_loop(0, steps, body, c_ref[...])


def gemm_bits(
    ins, A, B, C, SA, SB, *, interpret=None, tiles: Tiles | None = None, branch: bool = True
):
    """:func:`jaxmma.models._product_gemm.gemm_bits` (same arguments: K a multiple of
    32, all operands with the same leading dimensions) through the kernel, the same
    bits. ``interpret``: Pallas interpret mode (default: off a GPU); ``tiles``: the
    tiling (default :data:`TILES`, :data:`INTERPRET_TILES` interpreted); ``branch=False``
    leaves the per-product branch out (tests of the sums alone, on inputs that never
    need it; wrong elsewhere)."""
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    t = tiles or (INTERPRET_TILES if interpret else TILES)
    lead = A.shape[:-2]
    M, K = A.shape[-2:]
    N = B.shape[-1]
    S = K // L
    nbatch = int(np.prod(lead, dtype=np.int64))
    win = _windows(ins.atype, ins.btype)
    ea, _, nan_a = models.scale_fields("ue8m0", SA)
    eb, _, nan_b = models.scale_fields("ue8m0", SB)
    T = lambda x: jnp.swapaxes(x, -1, -2)  # noqa: E731
    a, wa, fa = _operand(ins.atype, A, ea, win.width, win.na)
    b, wb, fb = _operand(ins.btype, T(B), T(eb), win.width, win.nb)
    b, wb, fb = T(b), tuple(map(T, wb)), tuple(map(T, fb))
    c = lax.bitcast_convert_type(C, I32)
    Mp, Np = -(-M // t.bm) * t.bm, -(-N // t.bn) * t.bn

    def prep(x, rows, cols):
        x = x.reshape((nbatch,) + x.shape[-2:])
        return jnp.pad(x, ((0, 0), (0, rows - x.shape[1]), (0, cols - x.shape[2])))

    a_side = [prep(a, Mp, a.shape[-1])] + [prep(x, Mp, x.shape[-1]) for x in wa + fa]
    b_side = [prep(b, b.shape[-2], Np)] + [prep(x, x.shape[-2], Np) for x in wb + fb]
    gi, gj = Mp // t.bm, Np // t.bn
    grid, at = _tiling.grid_specs(nbatch, gi, gj, t)

    def spec(x, kind):
        shape = (t.bm, x.shape[-1]) if kind == "a" else (x.shape[-2], t.bn)
        return pl.BlockSpec((None,) + shape, at(kind))

    args = [a_side[0], b_side[0], *a_side[1:4], *b_side[1:4], *a_side[4:], *b_side[4:]]
    kinds = ["a", "b"] + ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    d_spec = pl.BlockSpec((None, t.bm, t.bn), at("d"))
    specs = [spec(x, k) for x, k in zip(args, kinds, strict=True)] + [d_spec]
    kwargs = {}
    if not interpret:
        kwargs["compiler_params"] = plgpu.CompilerParams(
            num_warps=t.num_warps, num_stages=t.num_stages
        )
    low = FORMATS[ins.atype].min_exp + FORMATS[ins.btype].min_exp
    kernel = functools.partial(_kernel, steps=S, win=win, low=low, branch=branch)
    d = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((nbatch, Mp, Np), I32),
        grid=grid,
        in_specs=specs,
        out_specs=d_spec,
        interpret=interpret,
        **kwargs,
    )(*args, prep(c, Mp, Np))
    bits = lax.bitcast_convert_type(d[:, :M, :N], U32).reshape(lead + (M, N))
    nan = jnp.any(nan_a, axis=-1)[..., :, None] | jnp.any(nan_b, axis=-2)[..., None, :]
    nan = nan | ((c & 0x7FFFFFFF) > 0x7F800000)
    return jnp.where(nan, U32(CANONICAL_NAN["f32"]), bits)
