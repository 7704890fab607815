"""The group model of ``kind::mxf4`` / ``kind::mxf4nvf4`` as one Pallas (Triton) kernel.

:func:`jaxmma.models._group_gemm.gemm_bits` runs a block-scaled GEMM as a ``lax.scan``
of whole-matrix operations; on a GPU, XLA writes every ``[M, N]`` plane of a k-step's
fusion to memory and reads it back. This module computes the same bits with one kernel:
each program holds one ``bm x bn`` tile of D (the f32 accumulator as int32 bits) across
K, in a ``fori_loop`` over the k-steps of 64, and per step

* computes the four exact group sums on the tensor cores: in half units an e2m1 value is
  an integer in [-12, 12]; times its scale's significand (at most 15, ue4m3) it is an
  integer of at most 180, exact in float16, and a group of 16 products sums to
  ``T * ss`` (group sum times the scale significands), an integer below ``2**19``; the
  group's 16 indicators of a nonzero element ride along in the same float16 dot (1 in
  A, 1/32 in B), which gives ``T * ss + count / 32`` exactly (:func:`_operands`): the
  count decides whether the group counts for ``e_max`` (a group whose products cancel
  to 0 still does, one whose products are all zero does not);
* runs the fusion of :func:`jaxmma.models._group_gemm._step` on the tile: compiled, as
  one PTX routine per element (:func:`_ptx_fuse`: each term truncated by one
  round-toward-zero float64 FMA, the exact sum in float64, its truncation to float32 by
  the device's round-toward-zero conversion); interpreted, in int32 operations the
  Triton lowering has (shifts clamped to [0, 31]; each group term split into two
  24-bit limbs by two shifts of ``|T ss| * 2**9``, :func:`_fuse`). The two compute the
  same bits by construction (their docstrings give the argument);
  ``benchmarks/block_scaled_gpu.py`` compares the compiled kernel with the XLA
  formulation on raw bits.

Prepared outside the kernel (elementwise, ``O(MK + KN)``): A and B as above with their
indicators, and per row of A (column of B) and scale block the scale's exponent (a
scale of significand 0 gets one so low that its groups never reach ``e_max``, as the
model's ``ss != 0`` test has it: its terms are 0 either way). A NaN scale makes D NaN
in its step and, through C, in every later step, and a NaN C stays NaN: the rows of A
and columns of B with any NaN scale, and NaN C, enter the kernel as a NaN C, which
every step passes through (an f32 special), so the kernel's D is the canonical NaN
exactly where :func:`~jaxmma.models._group_gemm.gemm_bits` makes it so.

:data:`MODE` chooses where the kernel runs; the bits never depend on it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from .. import models, util
from ..bits import CANONICAL_NAN, FORMATS
from ..models import GROUP, GROUP_E_ZERO, GROUP_F
from . import _modes, _tiling

F32 = jnp.float32
F16 = jnp.float16
I32 = jnp.int32
U32 = jnp.uint32
STEP_GROUPS = models.STEP_GROUPS
_LO = FORMATS["e2m1"].min_exp  # a half unit is 2**_LO
#: the exponent of a scale whose significand is 0: its groups never reach e_max (with
#: the other operand's largest scale exponent, 127, their order stays below the lowest
#: ``e_max``), and ``2**(E - unit)`` of two of them is still a normal float64 (:func:`_ptx_fuse`)
_ABSENT = -300
assert _ABSENT + 127 < GROUP_E_ZERO - (2 * 3 - 2 * _LO)  # below e_max - off (ue4m3's off)
assert 2 * _ABSENT + 2 * _LO - 221 > -1022
#: the exponent word of a group whose products are all zero: below every order, and its
#: (zero) term shifted out entirely
_NONE = -(1 << 22)
_MASK = 0xFFFFFF
#: 1.5 * 2**23 and its bits: ``bits(t + _MAGIC) - _MAGIC_BITS`` is ``t`` for an integer
#: float32 ``|t| < 2**22``
_MAGIC = 1.5 * 2**23
_MAGIC_BITS = 0x4B400000
_MAGIC_F32 = f"0f{_MAGIC_BITS:08X}"
#: ``lop3``'s table of ``(a & b) | c`` (``a``, ``b``, ``c`` read as 0xF0, 0xCC, 0xAA)
_SIGN_OR = (0xF0 & 0xCC) | 0xAA
#: elements of D per inline-assembly instance of the compiled fusion (:func:`_ptx_packed`):
#: one warp vote chooses the fast or the full routine for this many elements of each
#: thread (the choice among 2, 4, 8 and 16 is measured in benchmarks/RESULTS.md); it
#: must divide a tiling's elements per thread, ``bm * bn / (32 num_warps)``
PACK = 8
#: a bound that no exponent field reaches: a row or column that fails a condition of
#: the fast routine gets ``hi`` below every field (:func:`_bounds`)
_FAIL = 1 << 20

#: ``"auto"``: the kernel where the default backend is a GPU, the XLA formulation
#: elsewhere; ``"kernel"``: the kernel everywhere (interpreted off a GPU);
#: ``"interpret"``: the kernel in Pallas interpret mode; ``"xla"``: never the kernel
MODE = "auto"
MODES = ("auto", "kernel", "interpret", "xla")


def path(mode: str):
    """Run block-scaled GEMMs traced inside the block on ``mode`` (see :data:`MODE`;
    :func:`jaxmma.gemm._modes.switched`)."""
    return _modes.switched(sys.modules[__name__], mode)


def chosen() -> str | None:
    """How :data:`MODE` runs a covered GEMM now: ``"compiled"``, ``"interpret"`` or None
    (the XLA formulation)."""
    return _modes.kernel_run(MODE, never="xla")


@dataclasses.dataclass(frozen=True)
class Tiles:
    """The kernel's tiling: a ``bm x bn`` tile of D per program (each at least 16, the
    float16 dot's smallest), programs in groups of ``group_m`` tile rows (0: row-major
    order) so that neighbouring programs share tiles of A and B in the cache."""

    bm: int = 32
    bn: int = 64
    num_warps: int = 4
    num_stages: int = 2
    group_m: int = 8


#: tiling on the GPU: the fastest of ``benchmarks/block_scaled_gpu.py --tune`` on an H100
#: (NVFP4 4096^3; the timings of each tiling are in benchmarks/RESULTS.md). Static counts
#: for sm_90a in benchmarks/PALLAS_NOTES.md
TILES = Tiles(bm=32, bn=64, num_stages=3)
#: tiling on the GPU where a scale covers two groups of 16 (``scale_vec::2X``: MXFP4), the
#: faster of the two there (benchmarks/RESULTS.md, the float64 fusion)
PAIR_TILES = Tiles(bm=64, bn=32, num_stages=3)
#: tiling of interpreted runs (small: a CPU runs every program of the grid in turn)
INTERPRET_TILES = Tiles(bm=16, bn=16, group_m=0)


# ---- the fusion of a step, in int32 -----------------------------------------------------
def _round_rz(neg, mag, unit):
    """``(-1)**neg * mag * 2**unit`` (``mag`` int32 read as unsigned, ``unit >= -174``)
    truncated to f32 bits: :func:`jaxmma.arith._int32.round_f32_rz`, every shift in
    [0, 31]. The bit of ``mag`` that becomes the lsb, ``qs``, is at most 25 (as
    ``unit >= -174``), and ``qs < 0`` only where ``mag < 2**24``: ``mag >> 31`` is then 0,
    and ``mag << 31`` has no bit below 24."""
    p = 31 - util.clz(mag)
    lead = p + unit
    sub = lead < -126
    qs = jnp.where(sub, -149 - unit, p - 23)
    q = (lax.shift_right_logical(mag, _umin31(qs)) | (mag << _umin31(-qs))) & _MASK
    bits = jnp.where(sub, q, ((lead + 126) << 23) + q)  # + the hidden bit: exponent + 1
    bits = jnp.where(lead > 127, I32(0x7F800000), bits)
    bits = jnp.where(mag == 0, 0, bits)
    return bits | ((neg & (bits != 0)).astype(I32) << 31)


def _umin31(x):
    """``min(x, 31)`` of int32 ``x`` read as unsigned: a negative ``x`` gives 31."""
    return lax.bitcast_convert_type(jnp.minimum(lax.bitcast_convert_type(x, U32), U32(31)), I32)


def _shifts(r):
    """The shift amounts of :func:`_group_limbs` for ``r`` (any int32): ``M >> hr`` is the
    high limb, ``M >> R | M << L`` holds the low one in its low 24 bits. A negative
    ``r`` (only where ``m`` is 0) or ``u = r - 24`` gives 31 where it would be negative:
    ``M >> 31`` is 0 and ``M << 31`` has no bit below 24."""
    u = r - 24
    return _umin31(r), _umin31(u), _umin31(-u)


def _group_limbs(m, shifts):
    """``trunc(m * 2**(33 - r))`` (int32 ``0 <= m < 2**19``) as (low 24 bits, the bits
    above), ``shifts`` from :func:`_shifts`: with ``M = m * 2**9`` the high limb is
    ``M >> r`` and the low one the 24 bits of ``M`` below it, ``M >> (r - 24)`` or
    ``M << (24 - r)``."""
    hr, R, L = shifts
    M = m << 9
    return ((M >> R) | (M << L)) & _MASK, M >> hr


def _c_limbs(c_sig, k):
    """C's term ``trunc(c_sig * 2**k)`` (``c_sig < 2**24``; ``k <= 12`` where ``c_sig !=
    0``) as (low 24 bits, the bits above), as :func:`_group_limbs` with ``M = c_sig *
    2**7``: the high limb ``M >> (31 - k)``, the low one ``M >> (7 - k)`` or ``M << (k -
    7)`` in 24 bits."""
    M = c_sig << 7
    u = 7 - k
    return ((M >> _umin31(u)) | (M << _umin31(-u))) & _MASK, M >> _umin31(31 - k)


def _fuse(c, scale_groups, man: int):
    """:func:`jaxmma.models._group_gemm._step` on a tile, C bits (int32) in and out.

    ``scale_groups``: per group of columns sharing a scale (one group of 16 with
    ``scale_vec::4X``, two with ``2X``), a callable giving ``(nz, E)`` (bool any nonzero
    product, int32 ``ea + eb + 2 * e2m1's lowest exponent``: the exponent of a group
    sum's unit) and a tuple of callables, one per group of 16, giving the signed
    integer ``T * ss`` (the group sum times the scale significands). They are called
    once for ``e_max`` and once for the terms, so that only one group's planes are live
    at a time. The group terms are truncated at ``unit = e_max - GROUP_F``, ``m * 2**k``
    with ``m = |T ss| < 2**19`` and ``k = E - unit <= 33 - 2 * man`` (a group counts for
    ``e_max`` whenever ``m != 0``): :func:`_group_limbs` of ``r = 33 - k``."""
    field = (c >> 23) & 0xFF
    c_sig = (c & 0x7FFFFF) | jnp.where(field != 0, I32(1 << 23), 0)
    c_exp = jnp.maximum(field, 1) - 150
    special = field == 0xFF  # Inf or NaN C: D is C (what the step computes is dropped)
    # e_max - (2 man - 2 _LO): the group orders are E + 2 man - 2 _LO
    off = 2 * man - 2 * _LO
    f = jnp.where(c_sig == 0, I32(GROUP_E_ZERO - off), c_exp + (23 - off))
    for order, _ in scale_groups:  # a group counts for e_max unless it is all zero
        nz, E = order()
        f = jnp.maximum(f, jnp.where(nz, E, I32(GROUP_E_ZERO - off)))
    unit = f + (off - GROUP_F)
    low, high = _c_limbs(c_sig, c_exp - unit)
    sign = (c >> 31) | 1
    lo, hi = low * sign, high * sign
    g = unit + 33
    for order, terms in scale_groups:
        _, E = order(count=False)
        shifts = _shifts(g - E)
        for term in terms:
            ms = term()
            low, high = _group_limbs(jnp.abs(ms), shifts)
            sign = (ms >> 31) | 1
            lo = lo + low * sign
            hi = hi + high * sign
    hi = hi + (lo >> 24)  # the sum is hi * 2**24 + lo, 0 <= lo < 2**24
    lo = lo & _MASK
    s = hi >> 31  # -1 where the sum is negative: its magnitude is ~sum + 1
    lo = (lo ^ (s & _MASK)) - s
    hi = (hi ^ s) + (lo >> 24)
    lo = lo & _MASK
    drop = jnp.maximum(24 - util.clz(hi), 0)  # hi's bits beyond 8 push lo's lowest out
    mag = (hi << (24 - drop)) | (lo >> drop)
    bits = _round_rz(s != 0, mag, unit + drop)
    return jnp.where(special, c, bits)


# ---- the fusion of a step as one PTX routine per element (the compiled kernel) ---------
def _ptx_fuse(terms: int, rep: int, man: int) -> str:
    """PTX computing :func:`_fuse`'s D bits of one element from C's bits (``$1``), per
    group of 16 ``i`` its dot ``v = T ss + count / 32`` (float32 bits, ``$(2 + i)``) and
    per scale group ``j`` (``rep`` groups of 16 each) the exponent word ``E`` of its
    groups' unit (``$(2 + terms + j)``). The same arithmetic as :func:`_fuse_planes`,
    with the exact sum in float64 (the double-precision units, beside the integer ones):

    * ``m = T ss = floor(v)`` from ``w = v + 1.5 * 2**23`` rounded toward minus infinity
      (``|v| < 2**22``: the sum's unit is 1), and the group counts for ``e_max`` where
      ``v != 0`` (``count > 0``: ``m != 0`` only where ``count > 0``, and then ``|v| >=
      1/2``); ``e_max`` and ``unit`` as in :func:`_fuse`. ``m`` becomes float64 exactly
      through the word ``{bits(w), 2**52's high word}`` (the value ``2**52 + bits(w)``,
      less a constant), C by ``cvt.f64.f32``;
    * a term ``trunc(m * 2**k)`` (``|m| < 2**19``, ``k = E - unit <= 33 - 2 man``; C's
      ``trunc(c_sig * 2**k)`` with ``k = c_exp - unit <= 12``) is one
      ``fma.rz(m, 2**k, s)`` with ``s = 2**52`` of ``m``'s sign (``v``'s; C's for C, whose
      term is ``trunc(C * 2**-unit)``), less ``s``: the exact
      ``|m| 2**k + 2**52`` lies in ``[2**52, 2**53)``, where the float64 grid is the
      integers, so rounding toward zero keeps ``2**52 + floor(|m| 2**k)``. ``2**k`` is a
      normal float64 for every ``k`` that occurs (``E >= 2 * _ABSENT + 2 * _LO``, ``unit <=
      221``). Every term is an integer below ``2**46`` in magnitude, C's below ``2**36``:
      the float64 sum of the five is exact;
    * ``sum * 2**unit`` is exact in float64 (``-174 <= unit <= 221``) and
      ``cvt.rz.f32.f64`` truncates it to float32 (to 24 bits, or to the subnormal grid:
      one truncation where the model composes two on nested grids); ``|x| >= 2**128`` is
      Inf (the conversion would stop at the largest finite value), ``+ 0.0`` turns a -0
      into +0 as the model's zero, and an Inf or NaN C passes through.
    """
    off = 2 * man - 2 * _LO
    magic = "0f4B400000"  # 1.5 * 2**23
    high = 0x43300000  # the high word of 2**52
    lines = [
        "{",
        ".reg .pred %p<4>;",
        f".reg .pred %q<{terms + 1}>;",
        ".reg .b32 %r<16>;",
        f".reg .b32 %w<{terms + 1}>;",
        ".reg .b64 %rd<4>;",
        ".reg .f64 %fd<6>;",
        ".reg .f32 %f<4>;",
        "mov.b32 %r0, 0;",
        "bfe.u32 %r1, $1, 23, 8;",  # C's exponent field
        "max.u32 %r3, %r1, 1;",  # c_exp + 150
        f"add.s32 %r4, %r3, {23 - off - 150};",
        "mov.b32 %f1, $1;",
        "setp.eq.f32 %p2, %f1, 0f00000000;",  # +-0 (a subnormal is not 0)
        f"selp.b32 %r4, {GROUP_E_ZERO - off}, %r4, %p2;",
        "cvt.f64.f32 %fd1, %f1;",  # C, exactly
    ]
    for i in range(terms):
        lines += [
            f"mov.b32 %f1, ${2 + i};",
            f"add.rm.f32 %f2, %f1, {magic};",
            f"mov.b32 %w{i}, %f2;",
            f"setp.ne.f32 %q{i}, %f1, 0f00000000;",
        ]
    for j in range(terms // rep):
        for i in range(j * rep + 1, (j + 1) * rep):
            lines.append(f"or.pred %q{j * rep}, %q{j * rep}, %q{i};")
        lines += [
            f"selp.b32 %r9, ${2 + terms + j}, {_NONE}, %q{j * rep};",
            "max.s32 %r4, %r4, %r9;",
        ]
    lines += [
        f"add.s32 %r5, %r4, {off - GROUP_F};",  # unit
        # C's term trunc(C * 2**-unit): fma.rz(C, 2**-unit, s) - s, s = 2**52 of C's sign
        f"mov.b32 %r9, {high};",
        f"lop3.b32 %r6, $1, -2147483648, %r9, {_SIGN_OR};",  # (C & sign) | high
        "mov.b64 %rd2, {%r0, %r6};",
        "mov.b64 %fd2, %rd2;",
        "sub.s32 %r7, 1023, %r5;",
        "shl.b32 %r7, %r7, 20;",
        "mov.b64 %rd3, {%r0, %r7};",
        "mov.b64 %fd3, %rd3;",
        "fma.rz.f64 %fd1, %fd1, %fd3, %fd2;",
        "sub.rn.f64 %fd4, %fd1, %fd2;",
    ]
    for j in range(terms // rep):
        lines += [  # 2**k's high word: (E + 1023 - unit) << 20 = E * 2**20 + 2**-unit's
            f"mad.lo.s32 %r10, ${2 + terms + j}, 1048576, %r7;",
            "mov.b64 %rd3, {%r0, %r10};",
            "mov.b64 %fd3, %rd3;",
        ]
        for i in range(j * rep, (j + 1) * rep):
            lines += [
                f"mov.b64 %rd1, {{%w{i}, %r9}};",  # 2**52 + bits(w) = 2**52 + 0x4B400000 + m
                "mov.b64 %fd1, %rd1;",
                f"sub.rn.f64 %fd1, %fd1, 0d43300000{_MAGIC_BITS:08X};",
                # (v & sign) | high: v's sign is m's where m != 0
                f"lop3.b32 %r11, ${2 + i}, -2147483648, %r9, {_SIGN_OR};",
                "mov.b64 %rd2, {%r0, %r11};",
                "mov.b64 %fd2, %rd2;",
                "fma.rz.f64 %fd1, %fd1, %fd3, %fd2;",
                "sub.rn.f64 %fd1, %fd1, %fd2;",
                "add.rn.f64 %fd4, %fd4, %fd1;",
            ]
    regs = dict(zero="%r0", hi="%r12", out="%r13", inf="%r15", sel="%r14", b64="%rd3")
    regs |= dict(scale="%fd3", abs="%fd5", f32="%f1", big="%p1", c_special="%p2", field="%r1")
    lines += ptx_f32_out("%fd4", "%r5", regs) + ["}"]
    return "\n".join(lines)


def ptx_f32_out(total: str, unit: str, regs: dict, field_lines=()) -> list[str]:
    """The PTX lines that end a fusion routine whose exact sum in grid units is the
    float64 register ``total`` (:func:`_ptx_fuse`, :func:`jaxmma.gemm._product_ptx.finish_text`):
    ``$0 = cvt.rz.f32.f64(total * 2**unit)`` (``unit`` an int32 register or operand),
    a -0 made +0, Inf of the sign where ``|x| >= 2**128``, and C (``$1``) itself where
    its exponent field (``regs["field"]``, set by ``field_lines`` if given) is 255.
    ``regs`` names the caller's scratch registers: ``zero`` (a b32 holding 0), ``hi``,
    ``out``, ``inf``, ``sel`` (b32), ``b64``, ``scale``, ``abs`` (f64), ``f32``, ``big``,
    ``c_special`` (pred)."""
    r = regs
    return [
        f"mad.lo.s32 {r['hi']}, {unit}, 1048576, 1072693248;",  # 2**unit's high word
        f"mov.b64 {r['b64']}, {{{r['zero']}, {r['hi']}}};",
        f"mov.b64 {r['scale']}, {r['b64']};",
        f"mul.rn.f64 {total}, {total}, {r['scale']};",
        f"cvt.rz.f32.f64 {r['f32']}, {total};",
        f"add.rn.f32 {r['f32']}, {r['f32']}, 0f00000000;",  # -0 -> +0
        f"abs.f64 {r['abs']}, {total};",
        f"setp.ge.f64 {r['big']}, {r['abs']}, 0d47F0000000000000;",  # 2**128 or more: Inf
        f"mov.b32 {r['out']}, {r['f32']};",
        f"mov.b32 {r['inf']}, 2139095040;",
        f"lop3.b32 {r['sel']}, {r['out']}, -2147483648, {r['inf']}, {_SIGN_OR};",  # Inf, signed
        f"selp.b32 {r['out']}, {r['sel']}, {r['out']}, {r['big']};",
        *field_lines,
        f"setp.eq.u32 {r['c_special']}, {r['field']}, 255;",
        f"selp.b32 $0, $1, {r['out']}, {r['c_special']};",  # an Inf or NaN C passes through
    ]


def _bounds(eas, ebs, man: int):
    """The planes ``(lo, hi)`` of the fast routine's condition (:func:`_ptx_packed`) from
    the step's scale exponents: ``eas`` per scale group the ``[bm, 1]`` exponents of A's
    units (its words ``>> 4``), ``ebs`` the ``[1, bn]`` ones of B, ``E = ea + eb``.

    An element takes the fast routine where C's exponent field ``F`` (at least 1) has
    ``lo <= F <= hi``, or C is 0 and ``F <= hi``. With ``mx`` / ``mn`` the largest /
    smallest ``E`` of its groups (every group, counted or not) and ``off = 2 man - 2
    _LO`` (a group's order is ``E + off``), that holds only where

    * ``mx - mn <= GROUP_F - off``, ``F <= mn + 162`` and (C = 0 or ``F >= mx + off +
      115``): the model's unit is at most ``U = max(mx + off, F - 127) - GROUP_F``
      (``F - 127`` is C's order) and every group's unit ``E`` and C's ``F - 150`` are at
      least ``U``: no term is truncated, and the step is the exact sum truncated once to
      float32. The terms are multiples of ``2**U`` below ``2**(U + 46)``, so their float64
      sum in any order is that exact sum;
    * ``mx <= 105`` and ``F <= 250``: the sum stays below ``2**127`` (no overflow to Inf;
      an Inf or NaN C, field 255, takes the full routine).

    The bounds come from the rows' and columns' extremes (``mx <= max ea + max eb``,
    ``mn >= min ea + min eb``), each row's and column's spread held to 13 and ``GROUP_F -
    off - 13``: three integer operations per element, the rest on the vectors."""
    off = 2 * man - 2 * _LO
    amax, amin = functools.reduce(jnp.maximum, eas), functools.reduce(jnp.minimum, eas)
    bmax, bmin = functools.reduce(jnp.maximum, ebs), functools.reduce(jnp.minimum, ebs)
    bad_a = (amax > 52) | (amax - amin > 13)
    bad_b = (bmax > 53) | (bmax - bmin > GROUP_F - off - 13)
    hi_a = amin + (GROUP_F - 23 + 150) - jnp.where(bad_a, I32(_FAIL), 0)
    hi_b = bmin - jnp.where(bad_b, I32(_FAIL), 0)
    lo = (amax + (off + 150 - GROUP_F)) + bmax
    return lo, jnp.minimum(hi_a + hi_b, 250)


def _ptx_fast(terms: int, rep: int) -> list[str]:
    """PTX lines of the fast routine for one element (operands numbered as
    :func:`_ptx_fuse`'s): ``C + sum m 2**E`` in float64, exact where :func:`_bounds`
    admits the element, truncated to float32 by one ``cvt.rz.f32.f64``. ``m`` becomes
    float64 as in :func:`_ptx_fuse`; ``2**E`` from its high word ``(E + 1023) << 20``;
    a zero sum is +0 (a sum with an exact zero term rounds to +0), and the sum stays
    below ``2**127``."""
    lines = ["mov.b32 %g1, $1;", "cvt.f64.f32 %x1, %g1;", "mov.b32 %y0, 0;"]
    for j in range(terms // rep):
        lines += [
            f"mad.lo.s32 %y2, ${2 + terms + j}, 1048576, 1072693248;",
            "mov.b64 %yd1, {%y0, %y2};",
            "mov.b64 %x2, %yd1;",
        ]
        for i in range(j * rep, (j + 1) * rep):
            lines += [
                f"mov.b32 %g2, ${2 + i};",
                f"add.rm.f32 %g2, %g2, {_MAGIC_F32};",
                "mov.b32 %y3, %g2;",
                "mov.b32 %y4, 1127219200;",  # 2**52's high word
                "mov.b64 %yd2, {%y3, %y4};",
                "mov.b64 %x3, %yd2;",
                f"sub.rn.f64 %x3, %x3, 0d43300000{_MAGIC_BITS:08X};",
                "fma.rn.f64 %x1, %x3, %x2, %x1;",
            ]
    return lines + ["cvt.rz.f32.f64 %g3, %x1;", "mov.b32 $0, %g3;"]


def _ptx_packed(terms: int, rep: int, man: int, pack: int) -> str:
    """PTX for ``pack`` elements (Triton's packing: outputs ``$0 ...``, then each
    argument's ``pack`` elements in turn; the arguments C, the dots, the exponent words,
    ``lo`` and ``hi``): where every element of the warp meets :func:`_bounds`' condition
    (one ``vote.sync.all``, so that the warp takes one branch), the fast routine
    (:func:`_ptx_fast`) for each, else :func:`_ptx_fuse` for each (one copy of it, in a
    loop over the elements). Both give the model's bits; the fast one has no term to
    truncate, so it skips the sign-dependent truncation, the ``e_max`` and the overflow
    test."""
    nargs = 1 + terms + terms // rep
    lo, hi = 1 + nargs, 2 + nargs

    def numbered(text, e):
        def op(k):
            return e if k == 0 else pack + (k - 1) * pack + e

        return re.sub(r"\$(\d+)", lambda m: f"${op(int(m.group(1)))}", text)

    decl = [
        ".reg .pred %c<3>;",
        ".reg .b32 %y<6>;",
        ".reg .b64 %yd<3>;",
        ".reg .f64 %x<4>;",
        ".reg .f32 %g<4>;",
    ]
    test = [
        "bfe.u32 %y1, $1, 23, 8;",
        "max.u32 %y1, %y1, 1;",  # F
        f"setp.ge.s32 %c2, %y1, ${lo};",
        "mov.b32 %g1, $1;",
        "setp.eq.or.f32 %c2, %g1, 0f00000000, %c2;",  # C is 0, or F >= lo
        f"setp.le.and.s32 %c1, %y1, ${hi}, %c2;",
        "and.pred %all, %all, %c1;",
    ]
    lines = ["{", ".reg .pred %all;", "setp.eq.u32 %all, 0, 0;"]
    for e in range(pack):
        lines += ["{", *decl, *(numbered(x, e) for x in test), "}"]
    lines += ["vote.sync.all.pred %all, %all, -1;", "@!%all bra.uni FULL${:uid};"]
    for e in range(pack):
        lines += ["{", *decl, *(numbered(x, e) for x in _ptx_fast(terms, rep)), "}"]
    lines += ["bra.uni DONE${:uid};", "FULL${:uid}:"]
    # the full routine once, in a loop over the elements: each turn reads element 0's
    # registers and shifts the others down, and the results shift in at the top (less
    # code for ptxas than a copy per element)
    slot = [[f"%z{e * nargs + k}" for k in range(nargs)] for e in range(pack)]
    full = re.sub(
        r"\$(\d+)",
        lambda m: "%zo" if m.group(1) == "0" else slot[0][int(m.group(1)) - 1],
        _ptx_fuse(terms, rep, man),
    )
    lines += [
        "{",
        f".reg .b32 %z<{pack * nargs}>;",
        f".reg .b32 %o<{pack}>;",
        ".reg .b32 %zo, %n;",
        ".reg .pred %more;",
        *(f"mov.b32 %o{e}, 0;" for e in range(pack)),
        *(
            f"mov.b32 {slot[e][k]}, ${pack + k * pack + e};"
            for e in range(pack)
            for k in range(nargs)
        ),
        "mov.b32 %n, 0;",
        "LOOP${:uid}:",
        full,
        *(f"mov.b32 %o{e}, %o{e + 1};" for e in range(pack - 1)),
        f"mov.b32 %o{pack - 1}, %zo;",
        *(
            f"mov.b32 {slot[e][k]}, {slot[e + 1][k]};"
            for e in range(pack - 1)
            for k in range(nargs)
        ),
        "add.s32 %n, %n, 1;",
        f"setp.lt.s32 %more, %n, {pack};",
        "@%more bra.uni LOOP${:uid};",
        *(f"mov.b32 ${e}, %o{e};" for e in range(pack)),
        "}",
    ]
    return "\n".join(lines + ["DONE${:uid}:", "}"])


def _kernel(a_ref, b_ref, wa_ref, wb_ref, c_ref, d_ref, *, steps, man, rep, fuse):
    """Per group of 16, one float16 dot of 32 (:func:`_operands`: its 16 values and its
    16 indicators side by side) gives ``v = T ss + count / 32`` in float32, exactly; per
    scale group the exponent word ``E`` of its groups' unit, and its row and column parts
    (for :func:`_bounds`); ``fuse`` takes it from there (:func:`_fuse_ptx`,
    :func:`_fuse_planes`)."""
    k = GROUP * STEP_GROUPS
    per = STEP_GROUPS // rep  # scale groups per step

    def body(s, c):
        values, exps, eas, ebs = [], [], [], []
        for j in range(per):
            eas.append(wa_ref[:, pl.ds(s * per + j, 1)] >> 4)
            ebs.append(wb_ref[pl.ds(s * per + j, 1), :] >> 4)
            exps.append(eas[-1] + ebs[-1])
            for i in range(rep):
                g = j * rep + i  # group g of the step: columns [2 (64 s + 16 g), + 32)
                ks = pl.ds(pl.multiple_of(2 * (s * k + g * GROUP), 2 * GROUP), 2 * GROUP)
                values.append(jnp.dot(a_ref[:, ks], b_ref[ks, :], preferred_element_type=F32))
        return fuse(c, values, exps, man, rep, (eas, ebs))

    d_ref[...] = lax.fori_loop(0, steps, body, c_ref[...])


def _fuse_planes(c, values, exps, man: int, rep: int, scales=None):
    """The step's fusion on planes in int32 operations (:func:`_fuse`): ``values`` the
    dots ``T ss + count / 32`` of the step's groups of 16, ``exps`` the exponent word of
    each scale group's unit (``scales``, its row and column parts, unused)."""
    groups = []
    for j, e in enumerate(exps):
        vs = values[j * rep : (j + 1) * rep]
        ts = [jnp.floor(v) for v in vs]
        # count > 0: v != 0 (m != 0 only where count > 0, and then |v| >= 1/2)
        nz = functools.reduce(jnp.logical_or, [v != 0 for v in vs])
        # the integer t (|t| < 2**19) in the low bits of t + 1.5 * 2**23, exactly
        ms = [lax.bitcast_convert_type(t + F32(_MAGIC), I32) - I32(_MAGIC_BITS) for t in ts]
        order = jnp.where(nz, e, I32(_NONE))
        groups.append(
            (lambda count=True, o=order: (jnp.bool_(True), o), tuple(lambda m=m: m for m in ms))
        )
    return _fuse(c, groups, man)


def _fuse_ptx(c, values, exps, man: int, rep: int, scales):
    """:func:`_fuse_planes` as PTX, :data:`PACK` elements per routine
    (:func:`_ptx_packed`: the fast routine where :func:`_bounds` admits the warp's
    elements, else :func:`_ptx_fuse`)."""
    lo, hi = _bounds(*scales, man)
    args = [c] + [lax.bitcast_convert_type(v, I32) for v in values] + list(exps) + [lo, hi]
    (d,) = plgpu.elementwise_inline_asm(
        _ptx_packed(len(values), rep, man, PACK),
        args=args,
        constraints=",".join(["=r"] * PACK + ["r"] * (PACK * len(args))),
        pack=PACK,
        result_shape_dtypes=[jax.ShapeDtypeStruct(c.shape, I32)],
    )
    return d


# ---- operands and the call --------------------------------------------------------------
def _operands(ins, A, B, C, SA, SB):
    """The kernel's operands, leading dimensions kept: A ``[..., M, 2K]`` and B ``[...,
    2K, N]`` in float16, per group of 16 its 16 elements (half units times their scale
    significands: integers of at most 12 * 15, exact) followed by their 16 indicators of
    a nonzero element (1 in A, 1/32 in B); the scale words of A ``[..., M, K / block]``
    and B ``[..., K / block, N]`` (16 times the scale's exponent, plus ``2 * e2m1's
    lowest exponent`` for A, plus the scale's significand, at most 15: ``E = (wa >> 4) +
    (wb >> 4)`` is the exponent of a group sum's unit); and C (int32 bits) with the
    canonical NaN where D is NaN.

    A group's dot of 32 is then ``T ss + count / 32`` (``count`` its nonzero products,
    at most 16): every partial sum of it, in any order, is a multiple of 1/32 below
    ``2**19`` in magnitude, 24 significant bits, and every product is at most ``2**15``
    and at least 1/32 apart from 0, 20 bits: the tensor core's fused sums (25 bits
    below the largest term, docs/wgmma.md) and its float32 accumulator hold them
    exactly."""
    va = models.half_units(A)
    vb = models.half_units(B)
    ea, sa, na = models.scale_fields(ins.stype, SA)
    eb, sb, nb = models.scale_fields(ins.stype, SB)

    def word(e, s, extra):  # a scale of significand 0: its groups never reach e_max
        return (jnp.where(s == 0, I32(_ABSENT), e + extra) << 4) | s

    nan = jnp.any(na, axis=-1)[..., :, None] | jnp.any(nb, axis=-2)[..., None, :]
    ci = lax.bitcast_convert_type(C, I32)
    nan = nan | ((ci & 0x7FFFFFFF) > 0x7F800000)
    ci = jnp.where(nan, I32(CANONICAL_NAN["f32"]), ci)
    K = A.shape[-1]
    g, block = K // GROUP, K // SA.shape[-1]
    a = va * jnp.repeat(sa, block, axis=-1).astype(F32)
    b = vb * jnp.repeat(sb, block, axis=-2).astype(F32)
    ia, ib = (va != 0).astype(F32), (vb != 0).astype(F32) / 32
    lead_a, lead_b = a.shape[:-1], b.shape[:-2]
    a = jnp.stack([a.reshape(lead_a + (g, GROUP)), ia.reshape(lead_a + (g, GROUP))], -2)
    b = jnp.stack([b.reshape(lead_b + (g, GROUP, -1)), ib.reshape(lead_b + (g, GROUP, -1))], -3)
    a = a.reshape(lead_a + (2 * K,)).astype(F16)
    b = b.reshape(lead_b + (2 * K, b.shape[-1])).astype(F16)
    return a, b, word(ea, sa, 2 * _LO), word(eb, sb, 0), ci


def gemm_bits(ins, A, B, C, SA, SB, *, interpret=None, tiles: Tiles | None = None, fuse=None):
    """:func:`jaxmma.models._group_gemm.gemm_bits` (same arguments: K a multiple of
    ``ins.k``, all operands with the same leading dimensions) through the kernel, the
    same bits. ``interpret``: Pallas interpret mode (default: off a GPU). ``tiles``: the
    tiling (default :data:`TILES`, :data:`PAIR_TILES` for ``scale_vec::2X``,
    :data:`INTERPRET_TILES` interpreted). ``fuse``: the
    step's fusion in place of :func:`_fuse_ptx` / :func:`_fuse_planes` (benchmarks time
    the kernel without it)."""
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    lead = A.shape[:-2]
    M, K = A.shape[-2:]
    N = B.shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    G = SA.shape[-1]  # scale blocks along K
    rep = K // GROUP // G  # groups of 16 per scale: 1 (4X) or 2 (2X)
    t = tiles or (INTERPRET_TILES if interpret else TILES if rep == 1 else PAIR_TILES)
    per_thread = t.bm * t.bn // (32 * t.num_warps)
    if not interpret and per_thread % PACK:
        raise ValueError(
            f"tiles={t}: {per_thread} elements of D per thread, not a multiple of PACK={PACK} "
            "(the compiled fusion's elements per routine)"
        )
    Mp, Np = -(-M // t.bm) * t.bm, -(-N // t.bn) * t.bn
    a, b, wa, wb, c = _operands(ins, A, B, C, SA, SB)

    def prep(x, rows, cols):
        x = x.reshape((nb,) + x.shape[-2:])
        return jnp.pad(x, ((0, 0), (0, rows - x.shape[1]), (0, cols - x.shape[2])))

    a, b = prep(a, Mp, 2 * K), prep(b, 2 * K, Np)
    wa, wb, c = prep(wa, Mp, G), prep(wb, G, Np), prep(c, Mp, Np)
    gi, gj = Mp // t.bm, Np // t.bn

    grid, at = _tiling.grid_specs(nb, gi, gj, t)
    a_spec = pl.BlockSpec((None, t.bm, 2 * K), at("a"))
    b_spec = pl.BlockSpec((None, 2 * K, t.bn), at("b"))
    d_spec = pl.BlockSpec((None, t.bm, t.bn), at("d"))
    specs = [a_spec, b_spec] + [
        pl.BlockSpec((None, t.bm, G), at("a")),
        pl.BlockSpec((None, G, t.bn), at("b")),
        d_spec,
    ]
    kwargs = {}
    if not interpret:
        kwargs["compiler_params"] = plgpu.CompilerParams(
            num_warps=t.num_warps, num_stages=t.num_stages
        )
    man = FORMATS[ins.stype].mant_bits
    fuse = fuse or (_fuse_planes if interpret else _fuse_ptx)
    kernel = functools.partial(_kernel, steps=K // ins.k, man=man, rep=rep, fuse=fuse)
    d = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((nb, Mp, Np), I32),
        grid=grid,
        in_specs=specs,
        out_specs=d_spec,
        interpret=interpret,
        **kwargs,
    )(a, b, wa, wb, c)
    bits = lax.bitcast_convert_type(d[:, :M, :N], U32)
    return bits.reshape(lead + (M, N))
