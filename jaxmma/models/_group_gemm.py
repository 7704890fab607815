"""The group model of ``kind::mxf4`` / ``kind::mxf4nvf4`` for a whole GEMM, fast.

:func:`jaxmma.models._scaled.mma_bits` computes one k-step on ``[M, N, groups]`` arrays;
a GEMM chains it over K. This module computes the same chain with the same bits, in
the shape a CPU (or any XLA backend) runs well:

* the exact group sums of every k-step are float32 matrix products (an e2m1 value is a
  multiple of 1/2 below 6, so in half units a product is an integer of at most 144 and
  a group of 16 sums to at most 2,304): two groups share one product output as
  ``T0 + W * T1`` (``W`` = 4,609 > 2 * 2,304, every partial sum an integer below
  ``2**24``, exact in float32 in any order of addition), and one more product counts the
  nonzero products of all four groups of a step (``sum_g 32**g * count_g``, below
  ``2**20``): three outputs per k-step instead of eight;
* the scale fields are decoded once per operand, ``[M, K/16]`` and ``[K/16, N]``;
* the fusion of a step (``e_max`` from the scale exponents, truncation of each group
  and C to ``GROUP_F`` bits below it, the exact sum in two 24-bit limbs, f32 truncation)
  runs on whole ``[M, N]`` planes, one per group, unrolled, under a ``lax.scan`` over the
  k-steps;
* a NaN scale makes D NaN in its step and, through C, in every later one, so it is
  applied once at the end (rows of A or columns of B with any NaN scale), as is a NaN C.

The fusion is :func:`jaxmma.models._scaled._group_sum` written for planes; the tests
check the whole GEMM bit for bit against the per-step chain.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith, util
from ..bits import FORMATS, fields
from ._table import GROUP, GROUP_E_ZERO, GROUP_F

F32 = jnp.float32
I32 = jnp.int32
U32 = jnp.uint32
HIGHEST = jax.lax.Precision.HIGHEST
#: the weight of the second group of a pair in one matrix product output
W = 4609
#: groups per k-step of the dense mxf4* forms (k64)
STEP_GROUPS = 4
_MAX_GROUP = 16 * 144  # the largest |group sum| in half units squared
_LO = FORMATS["e2m1"].min_exp  # a half unit is 2**_LO


def supports(ins) -> bool:
    """Whether :func:`gemm_bits` computes ``ins`` (dense ``kind::mxf4*``, f32)."""
    return (
        ins.kind in ("mxf4", "mxf4nvf4")
        and not ins.sparse
        and ins.k == GROUP * STEP_GROUPS
        and ins.dtype == "f32"
        and ins.ctype == "f32"
    )


def half_units(bits):
    """e2m1 bits -> float32 signed value in half units (integers -12 ... 12)."""
    f = fields("e2m1", bits)
    mag = (f.sig << (f.exp - _LO).astype(U32)).astype(F32)
    return jnp.where(f.sign != 0, -mag, mag)


def scale_fields(stype: str, S):
    """Scale bits -> (exponent int32, significand int32, NaN bool) of ``stype``."""
    f = fields(stype, S)
    return f.exp, f.sig.astype(I32), f.nan


def _dot(x, y):
    """``x [..., M, k] @ y [..., k, N]`` in float32, exact for these integer operands."""
    nb = x.ndim - 2
    batch = tuple(range(nb))
    dn = (((nb + 1,), (nb,)), (batch, batch))
    return jax.lax.dot_general(x, y, dn, precision=HIGHEST, preferred_element_type=F32)


def _unpair(p):
    """``T0 + W * T1`` (an exact float32 integer, ``|T0|, |T1| <= 2,304``) -> int32
    ``(T0, T1)``.

    ``h = round(p / W)`` in float32 is ``T1`` or one off (``|T0 / W| < 0.4999`` and the
    float32 quotient is within ``3e-4`` of ``p / W``); ``p - h * W`` is exact (integers
    below ``2**24``), and one correction step puts it back into ``[-2304, 2304]``.
    """
    h = jnp.round(p * F32(1 / W))
    t0 = p - h * W
    fix = (t0 > _MAX_GROUP).astype(F32) - (t0 < -_MAX_GROUP).astype(F32)
    return (t0 - fix * W).astype(I32), (h + fix).astype(I32)


def _materialized(x):
    """``x`` (int32, ``|x| < 2**30``), in a form XLA computes apart from its readers.

    Inside the loop over k-steps, XLA:CPU fused the per-step slices of the scale
    fields into the ``[M, N]`` fusion, where the dynamic slice inside the loop body kept
    the loop from vectorizing (benchmarks/RESULTS.md has the timings). An integer
    remainder by a divisor XLA cannot see is constant is rated expensive and is not
    fused into a reader that broadcasts it: ``x % ((x & 0xFFFF) | 2**30)`` is ``x``
    (the divisor exceeds ``|x|``). Only the speed depends on it.
    """
    return jax.lax.rem(x, (x & 0xFFFF) | I32(1 << 30))


def _limbs(m, k):
    """``m * 2**k`` (uint32 ``m``) truncated toward zero, as int32 (low 24 bits, the
    bits above), as :func:`jaxmma.models._scaled._group_sum` splits its terms: a group
    term is below ``2**19`` with ``k <= 33 - 2 * (scale mantissa bits)``, C below
    ``2**24`` with ``k <= 12``, so the high part stays below ``2**22``."""
    mask = U32(0xFFFFFF)
    up = jnp.clip(k, 0, 24).astype(U32)
    low = jnp.where(k >= 0, (m & (mask >> up)) << up, m >> jnp.clip(-k, 0, 31).astype(U32))
    low = jnp.where(k <= -32, U32(0), low)
    high = jnp.where(k >= 24, m << jnp.clip(k - 24, 0, 31).astype(U32), m >> (U32(24) - up))
    high = jnp.where(k >= 0, high, U32(0))
    return low.astype(I32), high.astype(I32)


def _step(c, groups, man: int):
    """One k-step on planes: C bits (uint32 ``[..., M, N]``) and per group ``(T, nz, E,
    ss)`` (int32 group sum in half units squared, bool any nonzero product, int32 scale
    exponent sum, int32 scale significand product) -> D bits (NaN scales not applied)."""
    ci = jax.lax.bitcast_convert_type(c, I32)
    field = (ci >> 23) & 0xFF
    c_sig = (ci & 0x7FFFFF) | jnp.where(field != 0, I32(1 << 23), 0)
    c_exp = jnp.maximum(field, 1) - 150
    special = field == 0xFF
    c_sig = jnp.where(special, 0, c_sig)
    e_max = jnp.where(c_sig == 0, I32(GROUP_E_ZERO), c_exp + 23)
    for _, nz, E, ss in groups:  # a group counts for e_max unless it is all zero
        e_max = jnp.maximum(e_max, jnp.where(nz & (ss != 0), E + 2 * man, I32(GROUP_E_ZERO)))
    unit = e_max - GROUP_F
    lo = jnp.zeros_like(ci)
    hi = jnp.zeros_like(ci)
    for T, _, E, ss in groups:  # T * ss in units of 2**(E + 2 * e2m1's lowest exponent)
        m = (jnp.abs(T) * ss).astype(U32)
        low, high = _limbs(m, E + 2 * _LO - unit)
        neg = T < 0
        lo = lo + jnp.where(neg, -low, low)
        hi = hi + jnp.where(neg, -high, high)
    low, high = _limbs(c_sig.astype(U32), c_exp - unit)
    neg_c = ci < 0
    lo = lo + jnp.where(neg_c, -low, low)
    hi = hi + jnp.where(neg_c, -high, high)
    hi = hi + (lo >> 24)
    lo = lo & 0xFFFFFF
    neg = hi < 0
    mlo = jnp.where(neg & (lo != 0), 0x1000000 - lo, lo).astype(U32)
    mhi = jnp.where(neg, -hi - (lo != 0).astype(I32), hi).astype(U32)
    drop = jnp.maximum(31 - util.clz(mhi).astype(I32) - 7, 0).astype(U32)
    mag = jnp.where(mhi != 0, (mhi << (U32(24) - drop)) | (mlo >> drop), mlo)
    bits = arith.fixed_round_f32_rz(neg, mag, unit + drop.astype(I32))
    return jnp.where(special, c, bits)


def gemm_bits(ins, A, B, C, SA, SB):
    """The chain of ``ins`` (dense ``kind::mxf4*``) over K with the bits of
    :func:`jaxmma.models._scaled.mma_bits` chained step by step.

    Args:
      ins: a :func:`supports` instruction.
      A: uint32 e2m1 bits ``[..., M, K]``, K a multiple of ``ins.k``.
      B: uint32 ``[..., K, N]``.
      C: uint32 f32 bits ``[..., M, N]``.
      SA: uint32 scale bytes ``[..., M, K / block]``; SB ``[..., K / block, N]``.
      All with the same leading dimensions.

    Returns:
      uint32 f32 bits ``[..., M, N]``.
    """
    K = A.shape[-1]
    S = K // ins.k
    va, vb = half_units(A), half_units(B)
    rep = K // GROUP // SA.shape[-1]  # groups per scale: 1 (4X) or 2 (2X)
    ea, sa, na = scale_fields(ins.stype, jnp.repeat(SA, rep, axis=-1))  # [..., M, K/16]
    eb, sb, nb = scale_fields(ins.stype, jnp.repeat(SB, rep, axis=-2))  # [..., K/16, N]
    man = FORMATS[ins.stype].mant_bits
    k = ins.k
    # A's weights: 1 for the first group of a pair, W for the second (T0 + W T1); 32**g
    # for the nonzero indicators of group g of a step (the counts of four groups)
    w_pair = np.tile(np.repeat(np.array([1, W], np.float32), GROUP), k // (2 * GROUP))
    w_count = np.repeat((32.0 ** np.arange(STEP_GROUPS)).astype(np.float32), GROUP)

    def a_steps(x, width):  # [..., M, S * width] -> [S, ..., M, width]
        return jnp.moveaxis(x.reshape(x.shape[:-1] + (S, width)), -2, 0)

    def b_steps(x, width):  # [..., S * width, N] -> [S, ..., width, N]
        return jnp.moveaxis(x.reshape(x.shape[:-2] + (S, width) + x.shape[-1:]), -3, 0)

    def a_groups(x):  # [..., M, S * 4] -> [S, 4, ..., M, 1]
        return jnp.moveaxis(a_steps(x, STEP_GROUPS), -1, 1)[..., None]

    def b_groups(x):  # [..., S * 4, N] -> [S, 4, ..., 1, N]
        return jnp.moveaxis(b_steps(x, STEP_GROUPS), -2, 1)[..., None, :]

    def weighted(x, w):  # the weights along the last axis (no implicit rank promotion)
        return x * jnp.asarray(w).reshape((1,) * (x.ndim - 1) + w.shape)

    xs = (
        weighted(a_steps(va, k), w_pair),
        weighted(a_steps((va != 0).astype(F32), k), w_count),
        b_steps(vb, k),
        b_steps((vb != 0).astype(F32), k),
        a_groups(ea),
        a_groups(sa),
        b_groups(eb),
        b_groups(sb),
    )
    half = k // 2

    def step(c, x):
        aw, ai, b, bi, ea, sa, eb, sb = x
        t0, t1 = _unpair(_dot(aw[..., :half], b[..., :half, :]))
        t2, t3 = _unpair(_dot(aw[..., half:], b[..., half:, :]))
        q = _dot(ai, bi).astype(I32)
        ea, sa, eb, sb = (_materialized(x) for x in (ea, sa, eb, sb))
        groups = [
            (t, ((q >> (5 * g)) & 31) != 0, ea[g] + eb[g], sa[g] * sb[g])
            for g, t in enumerate((t0, t1, t2, t3))
        ]
        return _step(c, groups, man), None

    D = jax.lax.scan(step, C, xs)[0]
    nan = jnp.any(na, axis=-1)[..., :, None] | jnp.any(nb, axis=-2)[..., None, :]
    ci = jax.lax.bitcast_convert_type(C, I32)
    nan = nan | ((ci & 0x7FFFFFFF) > 0x7F800000)
    return jnp.where(nan, U32(0x7FFFFFFF), D)
