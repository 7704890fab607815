"""f32 elementwise functions as XLA:GPU computes them on an H100, on raw bits.

XLA:GPU's MLIR emitters compute f32 ``exp`` and ``log`` with CUDA's libdevice
(``__nv_expf``, ``__nv_logf``), ``rsqrt`` and ``sqrt`` with the approximate PTX
instructions, division with ``div.full.f32``, and ``tanh``, ``erf`` and ``logistic`` with
XLA's own expansions. Each function below is that computation, operation by operation,
every IEEE operation rounded as the GPU rounds it (FMAs once):

- :func:`logf`: libdevice's (CUDA 13.0, sm_90): the exponent taken off with integer
  operations (subnormals scaled by ``2**23`` first), a degree-9 polynomial in ``m - 1``
  by ``fma.rn.f32``, then ``e * ln 2`` added by one more FMA. IEEE operations only.
- :func:`expf`: libdevice's: ``j = floor(252 * sat(x * log2(e) / 256 + 1/2)) - 126``,
  ``r = x * log2(e) - j`` in two FMAs (log2(e) in a head and a tail), then
  ``ex2.approx.ftz.f32(r) * 2**j``.
- :func:`div_full`: ``div.full.f32``: ``a * rcp.approx(b)`` rounded once, with both
  operands scaled by 1/4 where ``|b| >= 2**126`` and ``b`` by ``2**24`` (the quotient
  back) where ``b`` is subnormal.
- :func:`rsqrt_approx`, :func:`sqrt_approx`: ``rsqrt.approx.f32`` and
  ``sqrt.approx.f32`` (XLA's f32 ``rsqrt`` and ``sqrt``).
- :func:`tanhf`: XLA's rational approximation (``EmitFastTanh``, FMA form): ``x``
  clamped to +-7.99881172180175781, numerator and denominator in ``x**2`` by FMAs, the
  quotient by ``div.full``; ``|x| < 0.0004`` gives ``x``.
- :func:`erff`: XLA's rational approximation of degree 9 / 12 (Eigen's coefficients) by
  FMAs and ``div.full``; ``|x| >= 3.7439211627767994`` (``erfinv(1 - 2**-23)``) gives
  +-1.
- :func:`logisticf`: XLA expands it to ``1 / (1 + exp(-x))``: :func:`expf`, an add and
  :func:`div_full`.

The special function unit's instructions are not specified bit for bit by the PTX ISA
(it gives error bounds only); they were measured on an H100 over every input:

- ``ex2.approx.ftz.f32``: ``|x|`` truncated to a fixed-point number ``n + k / 2**23``;
  ``2**x = T+[k] * 2**n`` for ``x >= 0`` and ``T-[k] * 2**-(n - 1)`` for ``x < 0``, with
  ``T+`` the results on ``[1, 2)`` halved and ``T-`` the results on ``[-2, -1)``; results
  below ``2**-126`` are +0 (0 of 2,248,146,944 inputs with ``|x| < 128`` differ).
- ``rcp.approx``, ``rsqrt.approx``, ``sqrt.approx``: the result's significand depends on
  the input's significand only (``rsqrt`` and ``sqrt``: and on the parity of its
  exponent), the exponent shifts (0 mismatches over every normal input); subnormal inputs
  are scaled by ``2**24`` first (the non-ftz forms).

The tables (results on ``[1, 2)``, ``[2, 4)`` and ``[-2, -1)``) ship in ``mufu_sm90.npz``
as first differences; ``python -m jaxmma.conformance._mufu_capture`` measures them again.
tests/test_gpu_math.py checks every function against XLA:GPU's results. The FMAs are the
int32 FFMA of :mod:`jaxmma.arith._fma32` (the general engine's bits, tested; about ten
times faster to compile and to run). Nothing here needs ``jax_enable_x64``.
"""

from __future__ import annotations

import functools
import os

import jax.numpy as jnp
import numpy as np

from . import _fma32, _int32

U32 = jnp.uint32
I32 = jnp.int32
_MANT = (1 << 23) - 1
_INF = 0x7F800000
_NAN = 0x7FFFFFFF
_SIGN = np.uint32(0x80000000)
_TABLES = os.path.join(os.path.dirname(__file__), "mufu_sm90.npz")
TABLES = ("ex2_pos", "ex2_neg", "rcp", "rsqrt_even", "rsqrt_odd", "sqrt_even", "sqrt_odd")


@functools.cache
def tables() -> dict:
    """The measured tables (:data:`TABLES`), 2**23 result bits each, rebuilt exactly
    (integer sums) from their first differences."""
    out = {}
    with np.load(_TABLES) as z:
        for key in TABLES:
            d = np.concatenate([[z[key + "_first"]], z[key].astype(np.int64)])
            out[key] = np.cumsum(d).astype(np.uint32)
    return out


def _u(x):
    return jnp.asarray(x, U32)


def _c(v: float) -> np.uint32:
    return np.float32(v).view(np.uint32)


def _mul(x, y):
    return _int32.ieee_mul_f32(x, y)


def _fma(x, y, z):
    return _fma32.ieee_fma_f32(x, y, z)


def _field(x):
    return ((x >> 23) & 0xFF).astype(I32)


def _is_nan(x):
    return (x & 0x7FFFFFFF) > _INF


def ex2_approx_ftz(x_bits):
    """PTX ``ex2.approx.ftz.f32`` on an H100: uint32 bits in, uint32 bits out."""
    x = _u(x_bits)
    t = tables()
    pos, neg = jnp.asarray(t["ex2_pos"]), jnp.asarray(t["ex2_neg"])
    sign, e = x >> 31, _field(x)
    sig = (x & _MANT) | (1 << 23)
    # |x| * 2**23 truncated: sig * 2**(e - 127), below 2**30 for |x| < 128
    up = jnp.clip(e - 127, 0, 6).astype(U32)
    down = jnp.clip(127 - e, 0, 31).astype(U32)
    fixed = jnp.where(e >= 127, sig << up, jnp.where(e > 127 - 32, sig >> down, 0))
    n, k = (fixed >> 23).astype(I32), (fixed & _MANT).astype(I32)
    tp, tn = pos[k], neg[k]
    field = jnp.where(sign == 0, 127 + n, _field(tn) - (n - 1))
    out = (jnp.clip(field, 0, 255).astype(U32) << 23) | jnp.where(sign == 0, tp, tn) & _MANT
    out = jnp.where(field <= 0, U32(0), out)  # below 2**-126: +0 (ftz)
    big = e >= 127 + 7  # |x| >= 128, Inf included
    out = jnp.where(big | (field >= 255), jnp.where(sign == 0, U32(_INF), U32(0)), out)
    out = jnp.where(e == 0, _c(1.0), out)  # a zero or subnormal input counts as 0
    return jnp.where(_is_nan(x), U32(_NAN), out)


def _rcp_normal(b):
    """``rcp.approx.f32`` of ``b`` with an exponent field in [1, 252] (a normal result),
    0 (+-Inf), Inf (+-0) or NaN."""
    r = jnp.asarray(tables()["rcp"])[(b & _MANT).astype(I32)]
    sign, e = b & _SIGN, _field(b)
    out = sign | ((_field(r) - (e - 127)).astype(U32) << 23) | (r & _MANT)
    out = jnp.where(e == 0, sign | _INF, out)
    out = jnp.where(e == 255, sign, out)
    return jnp.where(_is_nan(b), U32(_NAN), out)


def div_full(a_bits, b_bits):
    """PTX ``div.full.f32`` on an H100 (XLA:GPU's f32 division): ``a / b``, bits."""
    a, b = jnp.broadcast_arrays(_u(a_bits), _u(b_bits))
    e = _field(b)
    big = e >= 253  # |b| >= 2**126 (Inf and NaN too): both scaled by 1/4
    sub = (e == 0) & ((b & _MANT) != 0)  # subnormal b: scaled by 2**24, the quotient back
    a2 = jnp.where(big, _mul(a, _c(0.25)), a)
    b2 = jnp.where(big, _mul(b, _c(0.25)), jnp.where(sub, _mul(b, _c(2.0**24)), b))
    q = _mul(a2, _rcp_normal(b2))
    return jnp.where(sub, _mul(q, _c(2.0**24)), q)


def _half_power(x_bits, even: str, odd: str, sign_of_half: int):
    """``T[m] * 2**(sign_of_half * floor(e / 2))`` for ``x = m * 2**e`` (``T`` by the
    parity of ``e``), subnormal ``x`` scaled by ``2**24`` first; positive finite ``x``."""
    x = _u(x_bits)
    sub = _field(x) == 0
    x = jnp.where(sub, _mul(x, _c(2.0**24)), x)
    e = _field(x) - 127 - jnp.where(sub, 24, 0)
    odd_e = (e & 1) == 1
    m = (x & _MANT).astype(I32)
    t = jnp.where(odd_e, jnp.asarray(tables()[odd])[m], jnp.asarray(tables()[even])[m])
    half = (e - (e & 1)) // 2
    return ((_field(t) + sign_of_half * half).astype(U32) << 23) | (t & _MANT)


def rsqrt_approx(x_bits):
    """PTX ``rsqrt.approx.f32`` on an H100 (XLA:GPU's f32 ``rsqrt``), bits."""
    x = _u(x_bits)
    out = _half_power(x, "rsqrt_even", "rsqrt_odd", -1)
    mag, neg = x & 0x7FFFFFFF, (x >> 31) == 1
    out = jnp.where(mag == _INF, U32(0), out)
    out = jnp.where(neg | _is_nan(x), U32(_NAN), out)
    return jnp.where(mag == 0, (x & _SIGN) | _INF, out)  # +-0: +-Inf


def sqrt_approx(x_bits):
    """PTX ``sqrt.approx.f32`` on an H100 (XLA:GPU's f32 ``sqrt``), bits."""
    x = _u(x_bits)
    out = _half_power(x, "sqrt_even", "sqrt_odd", 1)
    mag, neg = x & 0x7FFFFFFF, (x >> 31) == 1
    out = jnp.where(mag == _INF, U32(_INF), out)
    out = jnp.where(neg | _is_nan(x), U32(_NAN), out)
    return jnp.where(mag == 0, x, out)  # +-0 stays


def _floor_252(s):
    """``floor(252 * s)`` for the f32 ``s`` in ``[0, 1]`` (bits), exactly: its 24-bit
    significand times 252 fits 32 bits."""
    e = _field(s)
    sig = (s & _MANT) | (1 << 23)
    shift = jnp.clip(150 - e, 0, 31).astype(U32)
    return jnp.where((e == 0) | (150 - e > 31), U32(0), (sig * U32(252)) >> shift)


def expf(x_bits):
    """libdevice ``__nv_expf`` (module docstring), bits."""
    x = _u(x_bits)
    t = _fma(x, np.uint32(0x3BBB989D), _c(0.5))  # x * log2(e) / 256 + 1/2
    sat = jnp.where(_is_nan(t) | (t >> 31 == 1), U32(0), jnp.minimum(t, _c(1.0)))
    n = _floor_252(sat)  # fma.rm(sat, 252, 12582913) = 12582913 + n
    j = n.astype(I32) - 126
    minus_j = jnp.asarray(j, jnp.float32).view(U32) ^ _SIGN  # neg.f32: j = 0 gives -0
    r = _fma(x, np.uint32(0x3FB8AA3B), minus_j)  # log2(e), its head
    r = _fma(x, np.uint32(0x32A57060), r)  # and its tail
    return _mul(ex2_approx_ftz(r), (n + U32(1)) << 23)  # times 2**j


_LOG = (0xBE055027, 0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B,
        0xBE7FFF22, 0x3EAAAA78, 0xBF000000)  # fmt: skip


def logf(x_bits):
    """libdevice ``__nv_logf`` (module docstring), bits."""
    x = _u(x_bits)
    neg = x >> 31 == 1
    small = ~neg & (x < U32(0x00800000))  # +0 and subnormals: scaled by 2**23
    x1 = jnp.where(small, _mul(x, _c(2.0**23)), x)
    e0 = jnp.where(small, _c(-23.0), U32(0))
    top = (x1 - U32(0x3F2AAAAB)) & U32(0xFF800000)  # the exponent, m in [2/3, 4/3)
    m = x1 - top
    e = jnp.asarray(top.view(I32), jnp.float32).view(U32)  # exact: a multiple of 2**23
    ef = _fma(e, _c(2.0**-23), e0)
    f = _int32.ieee_add_f32(m, _c(-1.0))
    p = _fma(np.uint32(_LOG[0]), f, np.uint32(_LOG[1]))
    for c in _LOG[2:]:
        p = _fma(p, f, np.uint32(c))
    r = _fma(_mul(f, p), f, f)
    r = _fma(ef, np.uint32(0x3F317218), r)  # + e ln 2
    special = neg | (x1 >= U32(_INF))  # negative, Inf, NaN: an FMA with Inf
    r = jnp.where(special, _fma(x1, _c(np.inf), _c(np.inf)), r)
    return jnp.where((x1 & 0x7FFFFFFF) == 0, _c(-np.inf), r)


def _poly(x2, coefficients):
    """Horner by FMAs: ``fma(r, x2, c)`` from the highest coefficient."""
    r = _c(coefficients[0])
    for c in coefficients[1:]:
        r = _fma(r, x2, _c(c))
    return r


_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)  # fmt: skip
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)  # fmt: skip
_TANH_CLAMP = 7.99881172180175781


def _clamp(x, c: float):
    """``min(max(x, -c), c)`` on f32 bits (NaN propagates)."""
    mag = jnp.minimum(x & 0x7FFFFFFF, _c(c))
    return jnp.where(_is_nan(x), x, (x & _SIGN) | mag)


def tanhf(x_bits):
    """XLA's f32 ``tanh`` (module docstring), bits."""
    x = _u(x_bits)
    xc = _clamp(x, _TANH_CLAMP)
    x2 = _mul(xc, xc)
    p = _mul(xc, _poly(x2, _TANH_P))
    q = _poly(x2, _TANH_Q)
    r = div_full(p, q)
    return jnp.where((x & 0x7FFFFFFF) < _c(0.0004), x, r)


_ERF_P = (0.00022905065861350646, 0.0034082910107109506, 0.050955695062380861,
          0.18520832239976145, 1.128379143519084)  # fmt: skip
_ERF_Q = (-1.1791602954361697e-7, 0.000023547966471313185, 0.0010179625278914885,
          0.014070470171167667, 0.11098505178285362, 0.49746925110067538, 1.0)  # fmt: skip
_ERF_ONE = 3.7439211627767994  # erfinv(1 - 2**-23)


def erff(x_bits):
    """XLA's f32 ``erf`` (module docstring), bits."""
    x = _u(x_bits)
    x2 = _mul(x, x)
    r = div_full(_mul(x, _poly(x2, _ERF_P)), _poly(x2, _ERF_Q))
    one = ~_is_nan(x) & ((x & 0x7FFFFFFF) >= _c(_ERF_ONE))
    return jnp.where(one, (x & _SIGN) | _c(1.0), r)


def logisticf(x_bits):
    """XLA's f32 ``logistic``, expanded to ``1 / (1 + exp(-x))``, bits."""
    x = _u(x_bits)
    e = expf(x ^ _SIGN)
    return div_full(_c(1.0), _int32.ieee_add_f32(_c(1.0), e))


#: jaxpr primitive -> (HLO opcodes the module shows for it, the function on bits)
FUNCTIONS = {
    "exp": (("exponential",), expf),
    "log": (("log",), logf),
    "tanh": (("tanh",), tanhf),
    "logistic": (("exponential", "divide"), logisticf),
    "erf": (("erf",), erff),
    "rsqrt": (("rsqrt",), rsqrt_approx),
    "sqrt": (("sqrt",), sqrt_approx),
    "div": (("divide",), div_full),
}
