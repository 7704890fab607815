"""``.f64`` ``mma``: a chain of IEEE 754 binary64 fused multiply-adds in k order.

PTX ISA 9.7.14.5.14 ("Precision of the element-wise multiplication and addition operation
is identical to that of .f64 precision fused multiply-add"; rounding modifiers ``.rn``
(the default), ``.rz``, ``.rm``, ``.rp``) and 9.7.14.4.5 (``wmma.mma`` ``.f64``, default
``.rn``). docs/numerics.md: the f64 forms behave as a chain of IEEE fma in k order with the
instruction's rounding mode: ``acc = C; acc = fma(A[m, k], B[k, n], acc)`` for
``k = 0 .. K-1``, each fma rounded once.

JAX has no fma with a rounding mode, so :func:`fma_bits` computes it on the raw bits with
unsigned 64-bit integer arithmetic: the 53 x 53-bit significand product is formed exactly
as a 128-bit integer (two uint64 limbs), the addend is aligned to it with a sticky bit,
the two are added or subtracted, and the result is normalised and rounded once.

IEEE 754 rules kept (2019, sections 6.3 and 7.2): subnormal inputs and results (no
flush); overflow gives Inf or the largest finite value by mode and sign; an exact zero
sum of opposite-signed operands is +0 (-0 under ``rm``), and the sum of two zeros of one
sign keeps the sign; ``Inf * 0`` and ``Inf - Inf`` are invalid.

Checked here on an H100 (sm_90a build) at register level: 409,600 output registers,
every one equal, of ``m8n8k4`` (``.rn``, ``.rz``, ``.rm``, ``.rp`` and no modifier),
``m16n8k4`` ``.rn``, ``m16n8k8`` ``.rm`` and ``m16n8k16`` ``.rn``/``.rz``/``.rp`` on random
doubles, subnormals, signed zeros, cancellations, overflow and halfway products (so the
chain runs in k order, one rounding per fma), and a NaN probe (``m8n8k4`` ``.rn``/``.rz``/
``.rm``, ``m16n8k16`` ``.rn``; quiet and signalling NaNs of random payloads and signs, Inf
and zeros in every operand) that fixes the NaN rules, which the spec leaves open:

* a NaN operand propagates, quieted (bit 51 set), sign and payload kept; when several
  operands of one fma are NaN, B's element wins, then the accumulator (C or the previous
  fma), then A's element;
* an invalid operation without NaN operands gives ``0xFFF8000000000000`` (not the
  ``0x7FFFFFFF``-style canonical NaN of the f32 forms).

``tests/test_float64.py`` pins a sample of these hardware vectors (``HW_CHAINS``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import util

ROUNDINGS = ("rn", "rz", "rm", "rp")
DEFAULT_NAN = 0xFFF8_0000_0000_0000  # the NaN of an invalid operation (H100)
QUIET = 0x0008_0000_0000_0000
INF = 0x7FF0_0000_0000_0000
MAX_FINITE = 0x7FEF_FFFF_FFFF_FFFF  # float.fromhex("0x1.fffffffffffffp1023")
SIGN = 0x8000_0000_0000_0000
FRAC = (1 << 52) - 1
U64 = jnp.uint64


def x64_enabled() -> bool:
    """Whether 64-bit types are on (``jax_enable_x64``, also inside ``jax.enable_x64``)."""
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def _need_x64() -> None:
    if not x64_enabled():
        raise ValueError(
            ".f64 forms need 64-bit types: enable jax_enable_x64 (for example "
            "jax.config.update('jax_enable_x64', True))"
        )


def _u(x):
    return jnp.asarray(x, U64)


# ---- shifts by traced amounts (int32, any value >= 0) --------------------------------------
def _shl(x, s):
    y = lax.shift_left(x, jnp.clip(s, 0, 63).astype(U64))
    return jnp.where(s >= 64, _u(0), y)


def _shr(x, s):
    y = lax.shift_right_logical(x, jnp.clip(s, 0, 63).astype(U64))
    return jnp.where(s >= 64, _u(0), y)


def _mask(s):
    """The ``s`` low bits set, for int32 ``0 <= s``; all 64 when ``s >= 64``."""
    return jnp.where(s >= 64, _u(2**64 - 1), _shl(_u(1), s) - _u(1))


# ---- 128-bit unsigned integers as (hi, lo) uint64 pairs ----------------------------------
def _shl128(hi, lo, s):
    """``(hi, lo) << s`` for int32 ``0 <= s < 128`` (bits above 127 dropped)."""
    big = s >= 64
    h_small = _shl(hi, s) | _shr(lo, 64 - s)
    return (jnp.where(big, _shl(lo, s - 64), h_small), jnp.where(big, _u(0), _shl(lo, s)))


def _shr128(hi, lo, s):
    """``(hi, lo) >> s`` for int32 ``s >= 0``."""
    big = s >= 64
    l_small = _shr(lo, s) | jnp.where(s == 0, _u(0), _shl(hi, 64 - s))
    return (jnp.where(big, _u(0), _shr(hi, s)), jnp.where(big, _shr(hi, s - 64), l_small))


def _low128(hi, lo, s):
    """``(hi, lo) mod 2**s`` for int32 ``s >= 0``."""
    return hi & jnp.where(s >= 64, _mask(s - 64), _u(0)), lo & _mask(s)


def _shr128_jam(hi, lo, s):
    """``(hi, lo) >> s`` with every shifted-out bit OR-ed into bit 0 (sticky)."""
    rh, rl = _shr128(hi, lo, s)
    dh, dl = _low128(hi, lo, s)
    return rh, rl | ((dh | dl) != 0).astype(U64)


def _add128(ah, al, bh, bl):
    lo = al + bl
    return ah + bh + (lo < al).astype(U64), lo


def _sub128(ah, al, bh, bl):
    """``a - b`` modulo 2**128."""
    return ah - bh - (al < bl).astype(U64), al - bl


def _lt128(ah, al, bh, bl):
    return (ah < bh) | ((ah == bh) & (al < bl))


def _clz128(hi, lo):
    return jnp.where(hi != 0, util.clz(hi), 64 + util.clz(lo)).astype(jnp.int32)


def _mul53(a, b):
    """Exact product of two uint64 values below 2**53, as a 128-bit (hi, lo) pair."""
    m32 = _u(0xFFFF_FFFF)
    a0, a1, b0, b1 = a & m32, a >> 32, b & m32, b >> 32
    mid = a0 * b1 + a1 * b0  # < 2**54
    lo = a0 * b0
    lo2 = lo + (mid << 32)
    return a1 * b1 + (mid >> 32) + (lo2 < lo).astype(U64), lo2


# ---- fields --------------------------------------------------------------------------------
def _decode(x):
    """(sign, normalised significand in [2**52, 2**53) (0 for zero), exponent, flags)."""
    sign = x >> 63
    e = ((x >> 52) & _u(0x7FF)).astype(jnp.int32)
    m = x & _u(FRAC)
    nan, inf = (e == 0x7FF) & (m != 0), (e == 0x7FF) & (m == 0)
    zero = (e == 0) & (m == 0)
    sig = jnp.where(e != 0, m | _u(1 << 52), m)
    exp = jnp.maximum(e, 1) - 1075  # value = sig * 2**exp
    n = jnp.where(zero, 0, util.clz(sig).astype(jnp.int32) - 11)  # subnormals: normalise
    return sign, _shl(sig, n), exp - n, nan, inf, zero


def _round(sign, hi, lo, unit, rounding: str):
    """Round ``(-1)**sign * (hi, lo) * 2**unit`` (nonzero, below 2**127) to binary64 bits."""
    top = 127 - _clz128(hi, lo) + unit  # exponent of the leading bit
    lsb = jnp.maximum(top - 52, -1074)  # exponent of the result's last bit
    r = lsb - unit  # bits to drop (negative: exact, shift left)
    _, ql = _shr128(hi, lo, jnp.maximum(r, 0))
    q = jnp.where(r < 0, _shl128(hi, lo, jnp.clip(-r, 0, 127))[1], ql)
    q = jnp.where(r >= 128, _u(0), q)
    dh, dl = _low128(hi, lo, jnp.clip(r, 0, 128))  # dropped bits
    hh, hl = _shl128(_u(0), _u(1), jnp.clip(r - 1, 0, 127))  # half an ulp
    inexact = (r > 0) & ((dh | dl) != 0)
    half_ok = (r >= 1) & (r <= 128)  # the half-ulp point is a bit of the 128-bit window
    above = half_ok & _lt128(hh, hl, dh, dl)
    tie = half_ok & (hh == dh) & (hl == dl)
    if rounding == "rn":
        up = above | (tie & ((q & _u(1)) == 1))
    elif rounding == "rz":
        up = jnp.zeros(q.shape, bool)
    elif rounding == "rp":
        up = inexact & (sign == 0)
    else:  # rm
        up = inexact & (sign == 1)
    q = q + up.astype(U64)
    mag = (lsb + 1074).astype(U64) << _u(52)
    mag = mag + q  # a carry into 2**53 (or 2**52 from subnormals) bumps the exponent field
    if rounding == "rn":
        ovf = _u(INF)
    elif rounding == "rz":
        ovf = _u(MAX_FINITE)
    elif rounding == "rp":
        ovf = jnp.where(sign == 0, _u(INF), _u(MAX_FINITE))
    else:
        ovf = jnp.where(sign == 1, _u(INF), _u(MAX_FINITE))
    mag = jnp.where(mag >= _u(INF), ovf, mag)
    return (sign << 63) | mag


def fma_bits(a, b, c, rounding: str = "rn"):
    """IEEE 754 binary64 ``fma(a, b, c)`` on raw bits with a static rounding mode.

    The exact ``a * b + c`` rounded once (PTX ``fma.{rn,rz,rm,rp}.f64``); NaN results as
    the H100 gives them inside ``mma`` (module docstring): the NaN of ``b``, else ``c``,
    else ``a``, quieted; ``0xFFF8000000000000`` for an invalid operation.

    Args:
      a, b, c: uint64 arrays of binary64 bits; they broadcast together.
      rounding: ``"rn"``, ``"rz"``, ``"rm"`` or ``"rp"`` (static).
    Returns:
      uint64 array of the broadcast shape: the bits of the result.
    Raises:
      ValueError: an unknown rounding mode, or ``jax_enable_x64`` off.
    """
    _need_x64()
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding: expected one of {ROUNDINGS}, got {rounding!r}")
    a, b, c = jnp.broadcast_arrays(_u(a), _u(b), _u(c))
    sa, ma, ea, nan_a, inf_a, zero_a = _decode(a)
    sb, mb, eb, nan_b, inf_b, zero_b = _decode(b)
    sc, mc, ec, nan_c, inf_c, zero_c = _decode(c)
    sp = sa ^ sb

    # the product as a 106-bit integer with its leading bit at bit 105
    ph, pl = _mul53(ma, mb)
    ep = ea + eb
    low = (ph >> 41) == 0  # product below 2**105: one bit left
    ph, pl = _shl128(ph, pl, low.astype(jnp.int32))
    ep = ep - low.astype(jnp.int32)
    # the addend the same way (c * 2**53); a zero addend never enters the sum
    ch, cl = mc >> 11, mc << 53
    ec = jnp.where(zero_c, jnp.int32(-(2**20)), ec - 53)

    # align the smaller exponent to the larger one with 20 spare bits below both (2 would
    # do: a shift that drops bits leaves at most one bit of cancellation) and every bit
    # shifted out jammed into bit 0, so that the sum is odd exactly when it is inexact
    p_big = ep >= ec
    bh, bl = jnp.where(p_big, ph, ch), jnp.where(p_big, pl, cl)
    xh, xl = jnp.where(p_big, ch, ph), jnp.where(p_big, cl, pl)
    s_big, s_small = jnp.where(p_big, sp, sc), jnp.where(p_big, sc, sp)
    d = jnp.abs(ep - ec)
    unit = jnp.maximum(ep, ec) - 20
    bh, bl = _shl128(bh, bl, jnp.int32(20))
    xh, xl = _shl128(xh, xl, jnp.int32(20))
    xh, xl = _shr128_jam(xh, xl, d)
    # add or subtract the magnitudes
    same = s_big == s_small
    sh, sl = _add128(bh, bl, xh, xl)
    neg = ~same & _lt128(bh, bl, xh, xl)  # only when d == 0
    dh, dl = _sub128(bh, bl, xh, xl)
    nh, nl = _sub128(xh, xl, bh, bl)
    rh = jnp.where(same, sh, jnp.where(neg, nh, dh))
    rl = jnp.where(same, sl, jnp.where(neg, nl, dl))
    sign = jnp.where(neg, s_small, s_big)
    exact_zero = (rh == 0) & (rl == 0)
    out = _round(sign, jnp.where(exact_zero, _u(1), rh), rl, unit, rounding)

    # zeros: a zero sum of opposite signs is +0 (-0 under rm); same signs keep it
    zero_sign = _u(SIGN) if rounding == "rm" else _u(0)
    out = jnp.where(exact_zero, zero_sign, out)
    zero_p = zero_a | zero_b
    both_zero = jnp.where(sp == sc, sp << 63, zero_sign)
    out = jnp.where(zero_p, jnp.where(zero_c, both_zero, c), out)
    # infinities and NaN
    inf_p = inf_a | inf_b
    out = jnp.where(inf_c, c, out)
    out = jnp.where(inf_p, (sp << 63) | _u(INF), out)
    invalid = (inf_a & zero_b) | (zero_a & inf_b) | (inf_p & inf_c & (sp != sc))
    out = jnp.where(invalid, _u(DEFAULT_NAN), out)
    for nan, x in ((nan_a, a), (nan_c, c), (nan_b, b)):  # the last one wins: b, c, a
        out = jnp.where(nan, x | _u(QUIET), out)
    return out


def mma_bits(ins, A, B, C):
    """Raw-bit ``D = A @ B + C`` of an ``.f64`` form: an fma chain in k order.

    PTX: ``mma.sync.aligned.{m8n8k4,m16n8k4,m16n8k8,m16n8k16}.row.col.f64.f64.f64.f64{.rnd}``
    and ``wmma.mma.sync.aligned.m8n8k4.alayout.blayout.f64.f64.f64.f64{.rnd}`` (PTX ISA
    9.7.14.5.14, 9.7.14.4.5). ``D[m, n]`` is ``acc = C[m, n]``, then ``acc = fma(A[m, k],
    B[k, n], acc)`` for ``k = 0 .. K-1``, each rounded with ``ins.rounding`` (``.rn`` when
    the instruction names none).

    Args:
      ins: the :class:`jaxmma.Instruction`; reads ``atype`` and ``rounding``.
      A: uint64 ``[..., M, K]`` binary64 bits.
      B: uint64 ``[..., K, N]``.
      C: uint64 ``[..., M, N]``.
    Returns:
      uint64 ``[..., M, N]``: the bits of D. Leading dimensions broadcast.
    Raises:
      ValueError: ``jax_enable_x64`` is off, a form that is not ``.f64``, or mismatched
        shapes.
      TypeError: operands that are not uint64.

    Example:
      >>> import jax, jaxmma, numpy as np
      >>> ins = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64.rz")
      >>> A = np.full((8, 4), 0x3FF0000000000000, np.uint64)  # 1.0
      >>> C = np.zeros((8, 8), np.uint64)
      >>> with jax.enable_x64(True):
      ...     hex(int(mma_bits(ins, A, A.T, C)[0, 0]))  # 4.0
      '0x4010000000000000'
    """
    _need_x64()
    if ins.atype != "f64" or ins.btype != "f64":
        raise ValueError(f"atype/btype: expected f64, got .{ins.atype} and .{ins.btype}")
    rounding = ins.rounding or "rn"
    A, B, C = (jnp.asarray(x) for x in (A, B, C))
    for name, x in (("A", A), ("B", B), ("C", C)):
        if x.dtype != jnp.uint64:
            raise TypeError(f"{name}: expected uint64 binary64 bits, got {x.dtype}")
    if A.ndim < 2 or B.ndim < 2 or C.ndim < 2:
        raise ValueError(
            f"expected A [..., M, K], B [..., K, N], C [..., M, N]; got shapes "
            f"{A.shape}, {B.shape}, {C.shape}"
        )
    (M, K), (K2, N) = A.shape[-2:], B.shape[-2:]
    if K2 != K or tuple(C.shape[-2:]) != (M, N):
        raise ValueError(
            f"expected B [..., {K}, N] and C [..., {M}, N] for A {A.shape}; got "
            f"B {B.shape}, C {C.shape}"
        )
    return _chain(A, B, C, rounding=rounding)


@functools.partial(util.jit, static_argnames="rounding")
def _chain(A, B, C, *, rounding: str):
    """The fma chain over k (jitted once per shape and mode, also when called eagerly)."""
    (M, K), N = A.shape[-2:], B.shape[-1]
    lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2], C.shape[:-2])
    acc = jnp.broadcast_to(C, lead + (M, N))
    a_k = jnp.moveaxis(jnp.broadcast_to(A, lead + (M, K)), -1, 0)[..., :, None]  # [K,...,M,1]
    b_k = jnp.moveaxis(jnp.broadcast_to(B, lead + (K, N)), -2, 0)[..., None, :]  # [K,...,1,N]

    def step(acc, ab):
        return fma_bits(ab[0], ab[1], acc, rounding), None

    acc, _ = lax.scan(step, acc, (a_k, b_k))
    return acc
