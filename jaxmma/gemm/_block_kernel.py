"""The group model of ``kind::mxf4`` / ``kind::mxf4nvf4`` as one Pallas (Triton) kernel.

:func:`jaxmma.models._group_gemm.gemm_bits` runs a block-scaled GEMM as a ``lax.scan``
of whole-matrix operations; on a GPU, XLA writes every ``[M, N]`` plane of a k-step's
fusion to memory and reads it back. This module computes the same bits with one kernel:
each program holds one ``bm x bn`` tile of D (the f32 accumulator as int32 bits) across
K, in a ``fori_loop`` over the k-steps of 64, and per step

* computes the four exact group sums on the tensor cores: in half units an e2m1 value is
  an integer in [-12, 12]; times its scale's significand (at most 15, ue4m3) it is an
  integer of at most 180, exact in float16, and a group of 16 products sums to
  ``T * ss`` (group sum times the scale significands), an integer below ``2**19``, so a
  float16 ``jnp.dot`` of the group's 16 columns from zero into float32 is exact; one
  more such dot of 0/1 indicators per scale block counts its nonzero products (a group
  whose products cancel to 0 still counts for ``e_max``, one whose products are all zero
  does not);
* runs the fusion of :func:`jaxmma.models._group_gemm._step` on the tile in int32
  operations the Triton lowering has (shifts clamped to [0, 31]); each group term is
  split into the two 24-bit limbs by two shifts of ``|T ss| * 2**9`` (:func:`_fuse`).

Prepared outside the kernel (elementwise, ``O(MK + KN)``): A and B as above and their
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
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from ..bits import _formats
from ..models import _group_gemm
from ..models._table import GROUP, GROUP_E_ZERO, GROUP_F
from . import _modes

F32 = jnp.float32
F16 = jnp.float16
I32 = jnp.int32
U32 = jnp.uint32
CANONICAL_NAN = 0x7FFFFFFF
STEP_GROUPS = _group_gemm.STEP_GROUPS
_LO = _formats.FORMATS["e2m1"].min_exp  # a half unit is 2**_LO
#: the exponent of a scale whose significand is 0: its groups never reach e_max
_ABSENT = -(1 << 20)
_MASK = 0xFFFFFF
#: 1.5 * 2**23 and its bits: ``bits(t + _MAGIC) - _MAGIC_BITS`` is ``t`` for an integer
#: float32 ``|t| < 2**22``
_MAGIC = 1.5 * 2**23
_MAGIC_BITS = 0x4B400000

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
    if MODE == "xla":
        return None
    on_gpu = jax.default_backend() == "gpu"
    if MODE == "auto":
        return "compiled" if on_gpu else None
    if MODE == "interpret" or not on_gpu:
        return "interpret"
    return "compiled"


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


#: tiling on the GPU: the fastest of ``benchmarks/block_scaled_gpu.py --tune`` on an H200
#: (2026-11-26, NVFP4 4096^3: 16 x 64 over 4 warps, 2 stages, 9.2 ms; 32 x 64: 10.2 ms;
#: 64 x 64 over 8 warps 11.9 ms; larger tiles spill: the fusion keeps about ten int32
#: planes of the tile live). Static counts for sm_90a in benchmarks/PALLAS_NOTES.md
TILES = Tiles(bm=16, bn=64)
#: tiling of interpreted runs (small: a CPU runs every program of the grid in turn)
INTERPRET_TILES = Tiles(bm=16, bn=16, group_m=0)


# ---- the fusion of a step, in int32 -----------------------------------------------------
def _round_rz(neg, mag, unit):
    """``(-1)**neg * mag * 2**unit`` (``mag`` int32 read as unsigned, ``unit >= -174``)
    truncated to f32 bits: :func:`jaxmma.arith._int32.round_f32_rz`, every shift in
    [0, 31]. The bit of ``mag`` that becomes the lsb, ``qs``, is at most 25 (as
    ``unit >= -174``), and ``qs < 0`` only where ``mag < 2**24``: ``mag >> 31`` is then 0,
    and ``mag << 31`` has no bit below 24."""
    p = 31 - lax.clz(mag)
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
    drop = jnp.maximum(24 - lax.clz(hi), 0)  # hi's bits beyond 8 push lo's lowest out
    mag = (hi << (24 - drop)) | (lo >> drop)
    bits = _round_rz(s != 0, mag, unit + drop)
    return jnp.where(special, c, bits)


def _kernel(a_ref, b_ref, ia_ref, ib_ref, wa_ref, wb_ref, c_ref, d_ref, *, steps, man, rep, fuse):
    k = GROUP * STEP_GROUPS
    per = STEP_GROUPS // rep  # scale groups per step

    def body(s, c):
        def cols(g, width):
            return pl.ds(pl.multiple_of(s * k + g * GROUP, GROUP), width)

        def order(j, count=True):  # scale group j of the step
            E = wa_ref[:, pl.ds(s * per + j, 1)] + wb_ref[pl.ds(s * per + j, 1), :]
            if not count:
                return None, E
            ks = cols(j * rep, GROUP * rep)
            n = jnp.dot(ia_ref[:, ks], ib_ref[ks, :], preferred_element_type=F32)
            return n > 0, E

        def term(g):
            ks = cols(g, GROUP)
            t = jnp.dot(a_ref[:, ks], b_ref[ks, :], preferred_element_type=F32)
            # the integer t (|t| < 2**19) in the low bits of t + 1.5 * 2**23, exactly
            return lax.bitcast_convert_type(t + F32(_MAGIC), I32) - I32(_MAGIC_BITS)

        scale_groups = [
            (
                functools.partial(order, j),
                tuple(functools.partial(term, j * rep + i) for i in range(rep)),
            )
            for j in range(per)
        ]
        return fuse(c, scale_groups, man)

    d_ref[...] = lax.fori_loop(0, steps, body, c_ref[...])


# ---- operands and the call --------------------------------------------------------------
def _operands(ins, A, B, C, SA, SB):
    """The kernel's operands, leading dimensions kept: A and B in float16 half units
    times their scale significands (at most 12 * 15, exact; a group's dot is then
    ``T * ss``, below ``2**19``), their 0/1 indicators of nonzero elements, the
    exponent words of A ``[..., M, K / block]`` (``+ 2 * e2m1's lowest exponent``) and B
    ``[..., K / block, N]``, and C (int32 bits) with the canonical NaN where D is NaN."""
    K = A.shape[-1]
    va = _group_gemm._half_units(A)
    vb = _group_gemm._half_units(B)
    block = K // SA.shape[-1]
    ea, sa, na = _group_gemm._scale_fields(ins.stype, SA)
    eb, sb, nb = _group_gemm._scale_fields(ins.stype, SB)

    def word(e, s, extra):  # a scale of significand 0: its groups never reach e_max
        return jnp.where(s == 0, I32(_ABSENT), e + extra)

    a = va * jnp.repeat(sa, block, axis=-1).astype(F32)
    b = vb * jnp.repeat(sb, block, axis=-2).astype(F32)
    nan = jnp.any(na, axis=-1)[..., :, None] | jnp.any(nb, axis=-2)[..., None, :]
    ci = lax.bitcast_convert_type(C, I32)
    nan = nan | ((ci & 0x7FFFFFFF) > 0x7F800000)
    ci = jnp.where(nan, I32(CANONICAL_NAN), ci)
    return (
        a.astype(F16),
        b.astype(F16),
        (va != 0).astype(F16),
        (vb != 0).astype(F16),
        word(ea, sa, 2 * _LO),
        word(eb, sb, 0),
        ci,
    )


def gemm_bits(ins, A, B, C, SA, SB, *, interpret=None, tiles: Tiles | None = None, fuse=None):
    """:func:`jaxmma.models._group_gemm.gemm_bits` (same arguments: K a multiple of
    ``ins.k``, all operands with the same leading dimensions) through the kernel, the
    same bits. ``interpret``: Pallas interpret mode (default: off a GPU). ``tiles``: the
    tiling (default :data:`TILES`, :data:`INTERPRET_TILES` interpreted). ``fuse``: the
    step's fusion in place of :func:`_fuse` (benchmarks time the kernel without it)."""
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    t = tiles or (INTERPRET_TILES if interpret else TILES)
    lead = A.shape[:-2]
    M, K = A.shape[-2:]
    N = B.shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    G = SA.shape[-1]  # scale blocks along K
    Mp, Np = -(-M // t.bm) * t.bm, -(-N // t.bn) * t.bn
    a, b, ia, ib, wa, wb, c = _operands(ins, A, B, C, SA, SB)

    def prep(x, rows, cols):
        x = x.reshape((nb,) + x.shape[-2:])
        return jnp.pad(x, ((0, 0), (0, rows - x.shape[1]), (0, cols - x.shape[2])))

    a, ia, wa = (prep(x, Mp, x.shape[-1]) for x in (a, ia, wa))
    b, ib, wb = (prep(x, x.shape[-2], Np) for x in (b, ib, wb))
    c = prep(c, Mp, Np)
    gi, gj = Mp // t.bm, Np // t.bn

    def tile(p):  # program p of a batch element -> (row, column) of its tile of D
        if not t.group_m or gi <= t.group_m:
            return p // gj, p % gj
        width = t.group_m * gj
        first = (p // width) * t.group_m
        rows = jnp.minimum(gi - first, t.group_m)
        return first + (p % width) % rows, (p % width) // rows

    # the tiles on the grid's first axis (CUDA's x, up to 2**31 - 1 programs; y and z
    # take at most 65,535), the batch on the second, unless the batch is the larger
    batch_first = nb > gi * gj

    def at(kind):
        def index(*ids):
            z, p = ids if batch_first else ids[::-1]
            i, j = tile(p)
            return {"a": (z, i, 0), "b": (z, 0, j), "d": (z, i, j)}[kind]

        return index

    a_spec = pl.BlockSpec((None, t.bm, K), at("a"))
    b_spec = pl.BlockSpec((None, K, t.bn), at("b"))
    d_spec = pl.BlockSpec((None, t.bm, t.bn), at("d"))
    specs = [
        a_spec,
        b_spec,
        a_spec,
        b_spec,
        pl.BlockSpec((None, t.bm, G), at("a")),
        pl.BlockSpec((None, G, t.bn), at("b")),
        d_spec,
    ]
    kwargs = {}
    if not interpret:
        kwargs["compiler_params"] = plgpu.CompilerParams(
            num_warps=t.num_warps, num_stages=t.num_stages
        )
    man = _formats.FORMATS[ins.stype].mant_bits
    rep = K // GROUP // G  # groups of 16 per scale: 1 (4X) or 2 (2X)
    kernel = functools.partial(_kernel, steps=K // ins.k, man=man, rep=rep, fuse=fuse or _fuse)
    d = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((nb, Mp, Np), I32),
        grid=(nb, gi * gj) if batch_first else (gi * gj, nb),
        in_specs=specs,
        out_specs=d_spec,
        interpret=interpret,
        **kwargs,
    )(a, b, ia, ib, wa, wb, c)
    bits = lax.bitcast_convert_type(d[:, :M, :N], U32)
    return bits.reshape(lead + (M, N))
