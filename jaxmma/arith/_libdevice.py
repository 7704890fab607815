"""f32 ``exp`` and ``log`` as XLA:GPU computes them on an H100, on raw bits.

XLA:GPU lowers f32 ``exp`` and ``log`` to CUDA's libdevice (``__nv_expf``, ``__nv_logf``,
no flush to zero). Compiled for sm_90 (CUDA 13.0), they are these PTX sequences:

- ``logf``: the input's exponent taken off with integer operations (subnormals scaled by
  ``2**23`` first), a polynomial of degree 9 in ``m - 1`` by ``fma.rn.f32``, then
  ``e * ln 2`` added by one more FMA; 0 gives ``-Inf``, Inf and NaN pass through an FMA
  with Inf. Only IEEE operations: :func:`logf` computes each with the same rounding.
- ``expf``: ``j = floor(252 * sat(x * log2(e) / 256 + 1/2)) - 126`` (two FMAs, one of them
  rounding down), the reduced argument ``r = x * log2(e) - j`` in two FMAs (log2(e) split
  in a head and a tail), then ``ex2.approx.ftz.f32(r) * 2**j``.

``ex2.approx.ftz.f32`` is the H100's special function unit (MUFU.EX2), whose bits the PTX
ISA does not specify (it gives a maximum error only). Measured on an H100 over every f32
input ``x`` with ``|x| < 128``: it truncates ``|x|`` to a fixed-point number with 23
fraction bits, ``n + k / 2**23``, and returns one of two tables of 2**23 results scaled by
a power of two: ``2**x = T+[k] * 2**n`` for ``x >= 0`` and ``T-[k] * 2**-(n + 1)`` for
``x < 0``, where ``T+`` holds ``ex2(1 + k / 2**23) / 2`` and ``T-`` holds
``ex2(-(1 + k / 2**23)) * 2`` (0 of 2,247,753,729 results differ). The tables ship in
``ex2_sm90.npz`` (first differences of the result bits). Results below ``2**-126`` flush
to +0; ``|x| >= 128``, NaN, Inf and subnormal inputs follow the PTX ISA's special cases
(they do not occur inside ``expf``).

Both functions reproduce XLA:GPU's f32 ``jnp.exp`` and ``jnp.log`` on the probe inputs of
``tests/golden/xla/xla-models-*.npz`` (4096 each, three processes), captured before the
tables were measured. Nothing here needs ``jax_enable_x64``.
"""

from __future__ import annotations

import functools
import os

import jax.numpy as jnp
import numpy as np

from . import _ieee, _int32

U32 = jnp.uint32
_MANT = (1 << 23) - 1
_TABLES = os.path.join(os.path.dirname(__file__), "ex2_sm90.npz")


@functools.cache
def _ex2_tables() -> tuple[np.ndarray, np.ndarray]:
    """``(T+, T-)``: the 2**23 result bits of ``ex2.approx.ftz.f32`` on ``[1, 2)`` and
    on ``[-2, -1)``, rebuilt exactly (integer sums) from their first differences."""
    with np.load(_TABLES) as z:
        out = []
        for key in ("ex2_pos", "ex2_neg"):
            d = np.concatenate([[z[key + "_first"]], z[key].astype(np.int64)])
            out.append(np.cumsum(d).astype(np.uint32))
    return out[0], out[1]


def _u(x):
    return jnp.asarray(x, U32)


def _bits(v: float) -> np.uint32:
    return np.float32(v).view(np.uint32)


def ex2_approx_ftz(x_bits):
    """PTX ``ex2.approx.ftz.f32`` on an H100: uint32 bits in, uint32 bits out."""
    x = _u(x_bits)
    pos, neg = (jnp.asarray(t) for t in _ex2_tables())
    sign = x >> 31
    e = ((x >> 23) & 0xFF).astype(jnp.int32)
    sig = (x & _MANT) | (1 << 23)
    # |x| * 2**23 truncated: sig * 2**(e - 127) (below 2**30 for |x| < 128)
    up = jnp.clip(e - 127, 0, 6).astype(U32)
    down = jnp.clip(127 - e, 0, 31).astype(U32)
    fixed = jnp.where(e >= 127, sig << up, jnp.where(e > 127 - 32, sig >> down, 0))
    n = (fixed >> 23).astype(jnp.int32)
    k = (fixed & _MANT).astype(jnp.int32)
    tp, tn = pos[k], neg[k]
    field = jnp.where(sign == 0, 127 + n, (tn >> 23).astype(jnp.int32) - (n - 1))
    mant = jnp.where(sign == 0, tp & _MANT, tn & _MANT)
    out = (jnp.clip(field, 0, 255).astype(U32) << 23) | mant
    big = e >= 127 + 7  # |x| >= 128, Inf and NaN included
    out = jnp.where(field <= 0, U32(0), out)  # below 2**-126: +0 (ftz)
    out = jnp.where(big | (field >= 255), jnp.where(sign == 0, U32(0x7F800000), U32(0)), out)
    out = jnp.where(e == 0, U32(0x3F800000), out)  # a subnormal or zero input is 0: 2**0
    nan = (e == 0xFF) & ((x & _MANT) != 0)
    return jnp.where(nan, U32(0x7FFFFFFF), out)


def _floor_252(s_bits):
    """``floor(252 * s)`` for the f32 ``s`` in ``[0, 1]`` (bits), exactly: the 24-bit
    significand times 252 fits 32 bits."""
    e = ((s_bits >> 23) & 0xFF).astype(jnp.int32)
    sig = (s_bits & _MANT) | (1 << 23)
    shift = jnp.clip(150 - e, 0, 31).astype(U32)
    return jnp.where((e == 0) | (150 - e > 31), U32(0), (sig * U32(252)) >> shift)


def expf(x_bits):
    """libdevice ``__nv_expf`` as compiled for sm_90 (module docstring): f32 bits in and
    out, every operation rounded as the GPU rounds it."""
    x = _u(x_bits)
    t = _ieee.ffma_f32(x, np.uint32(0x3BBB989D), _bits(0.5))  # x * log2(e) / 256 + 1/2
    fields = (t >> 23) & 0xFF
    nan = (fields == 0xFF) & ((t & _MANT) != 0)
    sat = jnp.where(nan | (t >> 31 == 1), U32(0), jnp.minimum(t, _bits(1.0)))  # cvt.sat
    n = _floor_252(sat)  # fma.rm(s, 252, 12582913) = 12582913 + n
    j = n.astype(jnp.int32) - 126
    # -j as neg.f32 gives it (j = 0: -0); exact, |j| <= 126
    minus_j = jnp.asarray(j, jnp.float32).view(U32) ^ U32(1 << 31)
    r = _ieee.ffma_f32(x, np.uint32(0x3FB8AA3B), minus_j)  # log2(e)
    r = _ieee.ffma_f32(x, np.uint32(0x32A57060), r)  # the tail of log2(e)
    scale = (n + U32(1)) << 23  # 2**j, a normal number
    return _int32.ieee_mul_f32(ex2_approx_ftz(r), scale)


_LOG_POLY = (0xBE055027, 0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B,
             0xBE7FFF22, 0x3EAAAA78, 0xBF000000)  # fmt: skip


def logf(x_bits):
    """libdevice ``__nv_logf`` as compiled for sm_90 (module docstring): f32 bits in and
    out, every operation rounded as the GPU rounds it."""
    x = _u(x_bits)
    neg = x >> 31 == 1
    small = ~neg & (x < U32(0x00800000))  # +0 and subnormals: scaled by 2**23
    x1 = jnp.where(small, _int32.ieee_mul_f32(x, _bits(2.0**23)), x)
    e0 = jnp.where(small, _bits(-23.0), U32(0))
    top = (x1 - U32(0x3F2AAAAB)) & U32(0xFF800000)  # the exponent, m in [2/3, 4/3)
    m = x1 - top
    e = jnp.asarray(top.view(jnp.int32), jnp.float32).view(U32)  # exact: a multiple of 2**23
    ef = _ieee.ffma_f32(e, _bits(2.0**-23), e0)
    f = _int32.ieee_add_f32(m, _bits(-1.0))
    p = _ieee.ffma_f32(np.uint32(_LOG_POLY[0]), f, np.uint32(_LOG_POLY[1]))
    for c in _LOG_POLY[2:]:
        p = _ieee.ffma_f32(p, f, np.uint32(c))
    q = _int32.ieee_mul_f32(f, p)
    r = _ieee.ffma_f32(q, f, f)
    r = _ieee.ffma_f32(ef, np.uint32(0x3F317218), r)  # ln 2
    inf = _bits(np.inf)
    special = neg | (x1 >= U32(0x7F800000))  # negative, Inf, NaN: an FMA with Inf
    r = jnp.where(special, _ieee.ffma_f32(x1, inf, inf), r)
    zero = (x1 & U32(0x7FFFFFFF)) == 0
    return jnp.where(zero, _bits(-np.inf), r)
