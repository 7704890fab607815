"""The product model of ``kind::mxf8f6f4`` (ue8m0; ``mma`` and ``tcgen05.mma``) as one
Pallas (Triton) kernel.

:func:`jaxmma.models._product_gemm.gemm_bits` truncates each of a k-step's 32 products
to the step's grid ``2**unit`` (``unit = e_max - 25``) before summing them; done one
product at a time that is 20-50 integer operations per product. This kernel computes the
same bits with the step's sums on the tensor cores. Each program holds one ``bm x bn``
tile of D (the f32 accumulator as int32 bits) across K, in a ``fori_loop`` over the
k-steps of 32, and per step:

* **The exact sum of the step's products but a few** (not truncated), from exponent
  windows: an element ``sig * 2**lsb`` whose lsb lies in window ``q`` (``lsb - L = W q
  + r``, ``0 <= r < W``, ``L`` the format's lowest lsb) enters window ``q``'s column
  block as the integer ``sig * 2**r``, at most 8 significant bits, exact in bfloat16.
  A pair of windows' bfloat16 dot sums integer products of at most 16 bits; the pairs
  of one offset ``W qa + W qb`` share a float32 accumulator, whose every partial sum
  stays below ``2**24`` (:func:`_windows` picks ``W`` so), so the tensor core's fused
  sums and accumulator hold it exactly. The products of offset ``o`` are in units of
  ``2**(L_a + L_b + o + e_sa + e_sb)``. Left out of the windows: in each row of A and
  each column of B, the step's two elements of lowest lsb (the *low* elements,
  :func:`_lows`), where a truncated product nearly always has a factor.
* **The low elements' products one at a time**, each from a dot of the low element's
  value alone (its row's other 31 set to 0) with the other operand's values: exact,
  then truncated to the grid (:func:`_low_terms`); a product of a row's and a
  column's low element counts once.
* **``e_max`` and the smallest lsb of the other products**, from two more bfloat16
  dots of powers of two: ``2**(6 max(order - R, -10))`` (``R`` the largest order in
  the row of A / column of B in the step) gives the largest ``order_a + order_b`` as
  ``floor(E / 6)`` of the sum's exponent, decided where that is above -10 (a clamped
  weight's product counts at most -10), and whether any product is nonzero;
  ``2**(-6 min(lsb - l, 10))`` over the elements other than the low ones (``l`` the
  smallest lsb there) gives a lower bound of their smallest ``lsb_a + lsb_b`` (exact
  unless above ``l_a + l_b + 10``). Sums of at most 32 powers of two: any order of
  addition, truncated or not, keeps the exponent within 5 of the largest term's.
* **The fusion**: where no product in the windows has its lsb below ``unit`` (each is
  a multiple of the grid), truncating them changes nothing, and the step is
  ``RZ_f32(trunc(C) + windows + low terms)``, formed one offset at a time as its dots
  finish (:class:`Fusion`): compiled, PTX routines per element with the exact partial
  sum in float64 (:data:`PTX`, :mod:`jaxmma.gemm._product_ptx`); interpreted, the same
  in int32 limbs (:data:`LIMBS`). Elsewhere (a product in the windows that the grid may
  truncate, a NaN or Inf element, ``e_max`` not decided), the whole tile's step runs
  the products one at a time (:func:`_per_product`:
  :func:`jaxmma.models._product_gemm._step`'s arithmetic), as a branch taken only then.

**How often the branch runs.** On MX-quantized normal data (e4m3, K = 4096) 1.2 % of the
element-steps truncate a product (the accumulator has grown above the step's largest
product in 91 % of the steps, and the grid follows it), and a ``16 x 64`` tile (the
kernel's) meets one in 97 % of its steps; with the low elements taken out, 0.0003 % of
the element-steps and 0.33 % of the tile-steps still need the branch
(``benchmarks/product_truncation.py``). Timings: benchmarks/RESULTS.md.

NaN scales and NaN C are applied as the model applies them (:func:`gemm_bits`).
``benchmarks/product_gpu.py --bits`` compares the compiled kernel with the XLA
formulation on raw bits and on MX-quantized data, and the tests run the kernel
interpreted against the per-step chain.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from .. import models, util
from ..bits import CANONICAL_NAN, FORMATS, fields, from_container
from . import _block_kernel, _modes, _product_ptx, _tiling

F32 = jnp.float32
BF16 = jnp.bfloat16
I32 = jnp.int32
U32 = jnp.uint32
L = 32  # products per k-step
MODEL = models.PRODUCT_MODEL
#: the order / lsb of an absent element, and a row's word where its step holds a NaN or Inf
_ABSENT = -(1 << 20)
_SPECIAL = -(1 << 24)
#: weights more than this far below the largest (or above the smallest) are clamped
#: there: 2**(-6 * 20), the product of two clamped ones, is a normal float32 number
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
TILES = Tiles(bm=16, bn=64, num_warps=2, num_stages=2)
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
def _lows(fin, lsb):
    """Per step (last axis, 32 elements): the indices of the two finite nonzero elements
    of lowest lsb (the first of equal ones; -1 where there are fewer), and the lowest
    lsb of the others (``-_ABSENT`` where there is none)."""
    idx = lax.broadcasted_iota(I32, lsb.shape, lsb.ndim - 1)
    rest = jnp.where(fin, lsb, -_ABSENT)
    ks = []
    for _ in range(2):
        low = jnp.min(rest, axis=-1, keepdims=True)
        k = jnp.min(jnp.where(rest == low, idx, L), axis=-1, keepdims=True)
        ks.append(jnp.where(low < -_ABSENT, k, -1)[..., 0])
        rest = jnp.where(idx == k, -_ABSENT, rest)
    return ks, jnp.min(rest, axis=-1)


def _operand(fmt: str, bits, scale_exp, win: int, n: int):
    """One operand's kernel arrays, its rows ``[..., R, K]`` (A, or B transposed),
    ``K = S * 32``, and its scale exponents ``[..., R, S]``:

    * the packed bfloat16 columns ``[..., R, S * (n + 5) * 32]``: per step, the ``n``
      windows' 32 integers (the row's two elements of lowest lsb left out: the *low*
      elements, :func:`_lows`), the 32 max-order weights, the 32 min-lsb weights of the
      others, the 32 values (exact), and for each low element the 32 values with all
      but its own set to 0;
    * the per-step words ``[..., R, S]``: the largest order plus the scale exponent, the
      lowest lsb of the elements other than the low ones plus the scale exponent
      (:data:`_SPECIAL` where the step holds a NaN or Inf element), the scale exponent
      plus the format's lowest lsb, and the low elements' indices;
    * for the per-product branch, float32 ``[..., R, K]``: the values (exact),
      ``2**order`` (0 for zero, NaN and Inf) and the engine's code (+-1, 0, +-Inf, NaN).
    """
    f = fields(fmt, from_container(bits, fmt))
    low = FORMATS[fmt].min_exp
    finite = (f.sig != 0) & ~f.nan & ~f.inf
    lsb = f.exp.astype(I32)
    order = lsb + FORMATS[fmt].mant_bits
    sig = jnp.where(finite, jnp.where(f.sign != 0, -f.sig.astype(I32), f.sig.astype(I32)), 0)
    value = sig.astype(F32) * _pow2(lsb)

    def steps(x):  # [..., R, K] -> [..., R, S, 32]
        return x.reshape(x.shape[:-1] + (-1, L))

    fin, lsb_s, order_s, value_s = steps(finite), steps(lsb), steps(order), steps(value)
    (k1, k2), third = _lows(fin, lsb_s)
    idx = lax.broadcasted_iota(I32, lsb_s.shape, lsb_s.ndim - 1)
    kept = fin & (idx != k1[..., None]) & (idx != k2[..., None])
    top = jnp.max(jnp.where(fin, order_s, _ABSENT), axis=-1, keepdims=True)
    rel = lsb_s - low
    q, r = rel // win, rel % win
    cols = [jnp.where(kept & (q == i), steps(sig) << r, 0).astype(F32) for i in range(n)]
    # below 2**(-6 * _REL) a weight is clamped there: it still shows a nonzero product
    up = jnp.maximum(order_s - top, -_REL)
    cols.append(jnp.where(fin, _pow2(6 * up), 0.0))
    cols.append(jnp.where(kept, _pow2(-6 * jnp.minimum(lsb_s - third[..., None], _REL)), 0.0))
    cols.append(value_s)
    cols += [jnp.where(idx == k[..., None], value_s, 0.0) for k in (k1, k2)]
    packed = jnp.stack(cols, axis=-2).astype(BF16)  # [..., R, S, n + 5, 32]
    packed = packed.reshape(packed.shape[:-3] + (-1,))
    special = jnp.any(steps(f.nan | f.inf), axis=-1)
    words = (
        top[..., 0] + scale_exp,
        jnp.where(special, I32(_SPECIAL), third + scale_exp),
        scale_exp + low,
        k1,
        k2,
    )
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
    pairs ``(g, k)`` of :func:`_limbs`; an Inf or NaN C passes through. (The kernel
    calls the pieces; the tests call this.)"""
    acc = _limb_start(c, unit)
    for g, k in terms:
        acc = _limb_term(acc, g, k)
    return _limb_end(acc, c, unit)


def _limb_start(c, unit):
    """C's term ``trunc(C / 2**unit)`` as the limbs ``(hi, lo)`` of a partial sum."""
    _, c_sig, c_exp = _c_fields(c)
    c_signed = jnp.where(c < 0, -c_sig, c_sig)
    return _limbs(c_signed, c_exp - unit)  # exact or C's truncation: k <= 2


def _limb_term(acc, g, k):
    """The partial sum plus ``g * 2**k`` (:func:`_limbs`)."""
    m, low = _limbs(g, k)
    return acc[0] + m, acc[1] + low


def _limb_end(acc, c, unit):
    """D's bits from the partial sum: carried, its magnitude truncated to float32."""
    hi, lo = acc
    hi = hi + (lo >> 16)
    lo = lo & 0xFFFF
    neg = hi < 0
    mh = jnp.where(neg, jnp.where(lo != 0, -hi - 1, -hi), hi)
    ml = jnp.where(neg & (lo != 0), 0x10000 - lo, lo)
    drop = jnp.maximum(16 - util.clz(mh), 0)  # mh's bits beyond 16
    mag = (mh << (16 - drop)) | (ml >> drop)  # truncated: the result keeps bits above
    bits = _block_kernel._round_rz(neg, mag, unit + drop)
    field, _, _ = _c_fields(c)
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
    it is not (some product, none of whose order sums reaches ``R_a + R_b - 9``, the
    row's and column's largest orders), and where the window sums and the low elements'
    products are not the step (that, a NaN or Inf in the row or column, or a product
    outside the low elements whose lsb may lie below the grid)."""
    anyp = vmax > 0  # every nonzero product has a weight of at least 2**-120
    m = _floor6(_exponent(vmax))
    decided = anyp & (m > -_REL)  # the clamped weights' products count at most -_REL
    unit = _e_max(c, decided, P + m) - MODEL.F
    least = Q - _floor6(_exponent(vmin))  # a lower bound of the others' smallest lsb + es
    special = Q < _SPECIAL // 2
    undecided = anyp & ~decided
    return unit, undecided, special | undecided | ((vmin > 0) & (least < unit))


def _low_terms(av, bv, lows_a, lows_b, s):
    """``sum trunc(a * b * s)`` (int32) over the products the windows left out: those of
    the row's low elements, and those of the column's that are not also the row's.
    ``av``/``bv`` the step's values ``[bm, 32]`` / ``[32, bn]``; ``lows_a`` per low
    element of the rows its index ``[bm, 1]`` and the values with all others set to 0
    ``[bm, 32]`` (``lows_b`` the columns', ``[1, bn]`` and ``[32, bn]``): the dot of the
    one with the other operand's values is that one product, exact."""

    def dot(x, y):
        return jnp.dot(x, y, preferred_element_type=F32)

    t = jnp.zeros(s.shape, I32)
    for _, a in lows_a:
        t = t + (dot(a, bv) * s).astype(I32)
    (ka1, _), (ka2, _) = lows_a
    for k, b in lows_b:
        twice = (k == ka1) | (k == ka2)
        t = t + jnp.where(twice, 0, (dot(av, b) * s).astype(I32))
    return t


def _scale(es, unit):
    """``2**(es - unit)`` as float32 (0 far below)."""
    x = es - unit
    return jnp.where(x < -100, F32(0), _pow2(jnp.clip(x, -126, 127)))


@dataclasses.dataclass(frozen=True)
class Fusion:
    """A step's fusion in three pieces, so that the kernel adds each window sum as soon
    as its dots are done: ``start(c, unit)`` the partial sum of C's term alone,
    ``add(acc, plane, r, offset)`` it plus a window sum ``plane`` (float32 integers) in
    units of ``2**(r + offset)`` over the grid, ``finish(acc, t, c, unit)`` D's bits
    with the int32 sum ``t`` of the truncated low products added
    (``RZ_f32(trunc(C) + sum + t)``; an Inf or NaN C passes through)."""

    start: Callable
    add: Callable
    finish: Callable


def _limb_add(acc, plane, r, offset):
    """:attr:`Fusion.add` in limbs."""
    return _limb_term(acc, plane.astype(I32), r + offset)


def _limb_finish(acc, t, c, unit):
    """:attr:`Fusion.finish` in limbs."""
    eight, zero = jnp.full(c.shape, 8, I32), jnp.zeros(c.shape, I32)
    acc = _limb_term(_limb_term(acc, t >> 8, eight), t & 0xFF, zero)
    return _limb_end(acc, c, unit)


#: interpreted: int32 limbs (``t`` split as 2**8 times its top bits and its low 8)
LIMBS = Fusion(_limb_start, _limb_add, _limb_finish)


def _asm(text, dtype, *args):
    """One result of ``dtype`` per element from the PTX ``text`` (``$0`` the result;
    int32 arguments, broadcast to the first one's shape, in 32-bit registers, the
    partial sums in 64-bit ones)."""
    shape = args[0].shape
    args = [x if x.dtype == np.int64 else jnp.broadcast_to(x, shape) for x in args]
    (out,) = plgpu.elementwise_inline_asm(
        text,
        args=args,
        constraints=",".join(
            ["=l" if dtype == np.int64 else "=r"]
            + ["l" if x.dtype == np.int64 else "r" for x in args]
        ),
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(shape, dtype)],
    )
    if out.dtype != dtype:  # a JAX that narrowed int64 without x64 would end here
        raise AssertionError(f"inline assembly result {out.dtype}, expected {dtype}")
    return out


def _ptx_start(c, unit):
    return _asm(_product_ptx.start_text(), np.int64, c, unit)


def _ptx_add(acc, plane, r, offset):
    bits = lax.bitcast_convert_type(plane, I32)
    return _asm(_product_ptx.add_text(offset), np.int64, acc, r, bits)


def _ptx_finish(acc, t, c, unit):
    return _asm(_product_ptx.finish_text(), I32, c, unit, acc, t)


#: compiled: the partial sum in float64 (:mod:`jaxmma.gemm._product_ptx`)
PTX = Fusion(_ptx_start, _ptx_add, _ptx_finish)


def _fused(fusion: Fusion, c, sums, unit, R, t):
    """The step from the window sums (``{offset: float32 plane}``) and the low elements'
    truncated products ``t`` where no other product is truncated."""
    acc = fusion.start(c, unit)
    for o in sorted(sums):
        acc = fusion.add(acc, sums[o], R - unit, o)
    return fusion.finish(acc, t, c, unit)


def _fuse(c, sums, unit, R, t):
    """:func:`_fused` in int32 limbs (the tests' reference for the PTX routines)."""
    return _fused(LIMBS, c, sums, unit, R, t)


def _per_product(c, cols_a, cols_b, es, unit, undecided, fusion):
    """:func:`jaxmma.models._product_gemm._step` on the tile, one product at a time:
    ``cols_a(i)`` / ``cols_b(i)`` product i's (value, 2**order, code), ``[bm, 1]`` and
    ``[1, bn]``, loaded in a loop (the branch is rare: a loop keeps its registers few,
    and so the kernel's); ``es`` the scale exponents' sums; ``unit`` and ``undecided``
    from :func:`_grid`; ``fusion`` the kernel's (:data:`PTX` or :data:`LIMBS`), which
    sums the truncated products with C.

    Two loops and no branch inside: the first reads the largest product (the exact
    ``e_max`` where the weights left it undecided) and sums the products' codes (NaN,
    Inf); the second truncates the products to the grid, the first 16 and the last 16
    into two int32 sums."""
    z = jnp.zeros(c.shape, F32)

    def first(i, x):
        (_, pa, ca), (_, pb, cb) = cols_a(i), cols_b(i)
        return jnp.maximum(x[0], pa * pb), x[1] + ca * cb

    pm, code = lax.fori_loop(0, L, first, (z, z))
    exact = _e_max(c, pm > 0, _exponent(pm) + es) - MODEL.F
    unit = jnp.where(undecided, exact, unit)
    s = _scale(es, unit)

    def add(i, t):
        (va, _, _), (vb, _, _) = cols_a(i), cols_b(i)
        (wa, _, _), (wb, _, _) = cols_a(i + L // 2), cols_b(i + L // 2)
        return t[0] + (va * vb * s).astype(I32), t[1] + (wa * wb * s).astype(I32)

    zero = jnp.zeros(c.shape, I32)
    t0, t1 = lax.fori_loop(0, L // 2, add, (zero, zero))
    # each half is below 2**31 (16 terms below 2**27 each): one enters the fusion as its
    # int32 term, the other as two exact float32 planes in grid units, its top 23 bits
    # (units of 2**8: offset 8) and its low 8 (offset 0), with R = unit
    planes = {0: (t1 & 0xFF).astype(F32), 8: (t1 >> 8).astype(F32)}
    bits = _fused(fusion, c, planes, unit, unit, t0)
    # a NaN or Inf element, or C: the engine's special values (code is finite elsewhere,
    # and then only a NaN C changes: to the canonical NaN, which it becomes at the end)
    field, _, _ = _c_fields(c)
    c_nan = (field == 0xFF) & ((c & 0x7FFFFF) != 0)
    c_inf = (field == 0xFF) & ((c & 0x7FFFFF) == 0)
    c_special = jnp.where(c_inf, jnp.where(c < 0, -jnp.inf, jnp.inf), 0.0).astype(F32)
    sp = jnp.where(c_nan, F32(jnp.nan), c_special) + code
    out = jnp.where(sp == jnp.inf, I32(0x7F800000), bits)
    out = jnp.where(sp == -jnp.inf, I32(-0x800000), out)
    return jnp.where(sp != sp, I32(CANONICAL_NAN["f32"]), out)


# ---- the kernel ---------------------------------------------------------------------------
def _kernel(a_ref, b_ref, *refs, steps: int, win: Windows, low: int, branch: bool, fusion):
    """Per k-step: the two weight dots and :func:`_grid`; then the window dots, the low
    elements' products (:func:`_low_terms`) and ``fusion`` (:data:`PTX` compiled,
    :data:`LIMBS` interpreted), or where the tile needs it, :func:`_per_product`."""
    words_a, words_b = refs[0:5], refs[5:10]
    fa_v, fa_p, fa_c, fb_v, fb_p, fb_c, c_ref, d_ref = refs[10:]
    na, nb = win.na + 5, win.nb + 5

    def body(s, c):
        def a_block(j):
            return a_ref[:, pl.ds(pl.multiple_of((s * na + j) * L, L), L)]

        def b_block(j):
            return b_ref[pl.ds(pl.multiple_of((s * nb + j) * L, L), L), :]

        def col(x):
            return x[:, pl.ds(s, 1)]

        def row(y):
            return y[pl.ds(s, 1), :]

        def word(i):
            return col(words_a[i]) + row(words_b[i])

        def dot(x, y):
            return jnp.dot(x, y, preferred_element_type=F32)

        vmax = dot(a_block(win.na), b_block(win.nb))
        vmin = dot(a_block(win.na + 1), b_block(win.nb + 1))
        unit, undecided, fail = _grid(c, vmax, vmin, word(0), word(1))
        R = word(2)

        # the windows' loads ahead of the branch, where the pipeline prefetches them (a
        # load inside a branch is not: e4m3 at 4096^3 on an H200, 35.3 -> 32.5 ms)
        A = [a_block(j) for j in range(win.na)]
        B = [b_block(j) for j in range(win.nb)]
        av, bv = a_block(win.na + 2), b_block(win.nb + 2)
        lows_a = [(col(words_a[3 + i]), a_block(win.na + 3 + i)) for i in range(2)]
        lows_b = [(row(words_b[3 + i]), b_block(win.nb + 3 + i)) for i in range(2)]

        def windows():
            # one offset's dots at a time, each sum added to the partial sum as soon as
            # they are done. With one routine taking all offsets' sums the kernel used
            # every register (255 a thread) and spilled; e4m3 at 4096^3 on an H200 went
            # from 33.2 to 30.6 ms
            acc = fusion.start(c, unit)
            for o in sorted({win.width * (i + j) for i, j in win.pairs}):
                pairs = [(i, j) for i, j in win.pairs if win.width * (i + j) == o]
                plane = dot(A[pairs[0][0]], B[pairs[0][1]])
                for i, j in pairs[1:]:
                    plane = plane + dot(A[i], B[j])
                acc = fusion.add(acc, plane, R - unit, o)
            t = _low_terms(av, bv, lows_a, lows_b, _scale(R - low, unit))
            return fusion.finish(acc, t, c, unit)

        def per_product():
            k0 = s * L

            def cols_a(i):
                return tuple(r[:, pl.ds(k0 + i, 1)] for r in (fa_v, fa_p, fa_c))

            def cols_b(i):
                return tuple(r[pl.ds(k0 + i, 1), :] for r in (fb_v, fb_p, fb_c))

            return _per_product(c, cols_a, cols_b, R - low, unit, undecided, fusion)

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

    args = [a_side[0], b_side[0], *a_side[1:6], *b_side[1:6], *a_side[6:], *b_side[6:]]
    kinds = ["a", "b"] + ["a"] * 5 + ["b"] * 5 + ["a"] * 3 + ["b"] * 3
    d_spec = pl.BlockSpec((None, t.bm, t.bn), at("d"))
    specs = [spec(x, k) for x, k in zip(args, kinds, strict=True)] + [d_spec]
    kwargs = {}
    if not interpret:
        kwargs["compiler_params"] = plgpu.CompilerParams(
            num_warps=t.num_warps, num_stages=t.num_stages
        )
    low = FORMATS[ins.atype].min_exp + FORMATS[ins.btype].min_exp
    fusion = LIMBS if interpret else PTX
    kernel = functools.partial(_kernel, steps=S, win=win, low=low, branch=branch, fusion=fusion)
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
