"""Doubles on their way in: the one float64 rule of every entry point (docs/dtypes.md).

A *host double* is a value JAX has not seen yet: a Python float (or int, or a list of
them), a NumPy float64 array or scalar. With ``jax_enable_x64`` off JAX would make it
float32 on the way in, a rounding of its own before the one the entry point applies;
with x64 on it keeps float64. Three kinds of entry point read doubles, each by one rule:

* values rounded into an element format (``formats.encode``, ``matmul`` operands with or
  without ``input_rounding``, an epilogue's C): :func:`prepare`. The result is one
  rounding of the double, in the mode asked for, x64 on or off. With x64 on the double
  goes on as it is; with x64 off it becomes the float32 value that rounds (same mode,
  same saturation) to the same bits: the double itself where float32 holds it; else,
  for float formats narrower than f32, the double rounded to odd (float32 keeps at least
  two bits more than any of them in every binade); for ``.f32`` the double rounded on
  the host in the mode asked for; for integer formats the integer result itself (wrapped
  or saturated on the host). Where no float32 value can stand for the double, it is a
  TypeError with x64 on as well as off, so that the two never differ: stochastic
  rounding of a double that float32 does not hold (the random bits are drawn inside the
  program), and an ``.s32`` result that float32 does not hold.
* values the quantizers compute with in float32: :func:`exact_float32` (doubles that
  float32 holds exactly; every other double, and a float64 array, is a TypeError).
* factors a kernel holds in float32 itself (fp8 scales, alpha, beta):
  :func:`nearest_float32`, one rounding to nearest float32.
"""

from __future__ import annotations

import jax
import numpy as np

ROUNDINGS = ("rn", "rna", "rz", "rm", "rp", "stochastic")
SIGN = np.uint32(0x80000000)


def x64() -> bool:
    """Whether JAX keeps float64 (``jax_enable_x64``)."""
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def is_host_double(x) -> bool:
    """Whether ``x`` holds doubles that JAX has not seen yet: Python floats (and ints),
    NumPy float64 arrays and scalars, lists and tuples of them."""
    if isinstance(x, bool | np.bool_):
        return False
    if isinstance(x, int | float | list | tuple):
        try:
            return np.asarray(x).dtype.kind in "if"
        except (ValueError, TypeError):  # ragged nesting: left to the caller's checks
            return False
    return isinstance(x, np.ndarray | np.floating) and x.dtype == np.float64


def _first(d, where) -> float:
    return float(d[where].flat[0])


def _refuse(name: str, why: str, value: float, rounding: str, fmt: str):
    raise TypeError(
        f"{name}: the float64 value {value!r} {why} (.{fmt}, rounding={rounding!r}), x64 on "
        "or off alike; pass float32 values (x.astype(np.float32)), or with x64 on a "
        "jax.Array (jnp.asarray(x)) to round from the double inside the program"
    )


def _step(r, up):
    """float32 ``r`` moved one step in magnitude: away from zero where ``up`` is 1, toward
    it where -1 (from +-Inf toward zero: the largest finite value)."""
    bits = r.view(np.uint32)
    mag = (bits & ~SIGN).astype(np.int64) + up
    return ((bits & SIGN) | mag.astype(np.uint32)).view(np.float32)


def _f32(d, r, inexact, rounding: str):
    """The doubles rounded into float32 by ``rounding`` on the host (``r``: to nearest)."""
    rd = r.astype(np.float64)
    neg = np.signbit(r)
    if rounding == "rz":
        up = np.where(inexact & (np.abs(rd) > np.abs(d)), -1, 0)
    elif rounding == "rm":
        up = np.where(inexact & (rd > d), np.where(neg, 1, -1), 0)
    elif rounding == "rp":
        up = np.where(inexact & (rd < d), np.where(neg, -1, 1), 0)
    elif rounding == "rna":  # a tie that rn took toward zero goes away from it
        with np.errstate(over="ignore", invalid="ignore"):
            other = _step(r, np.ones(r.shape, np.int64)).astype(np.float64)
            tie = inexact & (np.abs(rd) < np.abs(d)) & (np.abs(d - rd) == np.abs(other - d))
        up = np.where(tie, 1, 0)
    else:
        return r
    return _step(r, up)


def _integer(d, f, rounding: str, saturate: bool, name: str):
    """The integer results themselves (wrapped or saturated as the encoder does), as the
    float32 values that encode to them."""
    a = np.abs(d)
    with np.errstate(invalid="ignore"):
        fl = np.floor(a)
        frac = a - fl
        odd = np.fmod(fl, 2) == 1
        inc = {
            "rn": (frac > 0.5) | ((frac == 0.5) & odd),
            "rna": frac >= 0.5,
            "rz": np.zeros(d.shape, bool),
            "rm": (frac > 0) & np.signbit(d),
            "rp": (frac > 0) & ~np.signbit(d),
        }[rounding]
        n = np.copysign(fl + inc, d)
    max_neg = 2.0 ** (f.bits - 1) if f.signed else 0.0
    if saturate:  # one past the range saturates as any value past it does
        n = np.clip(n, -max_neg, f.max + 1)
    else:
        w = 2.0**f.bits
        with np.errstate(invalid="ignore"):  # +-Inf, NaN: kept as they are
            n = np.where(np.isfinite(n), np.fmod(np.fmod(n, w) + w, w), n)
        n = np.where(np.isfinite(n) & (n > f.max), n - w, n)
    with np.errstate(over="ignore", invalid="ignore"):
        r = n.astype(np.float32)
        bad = np.isfinite(n) & (r.astype(np.float64) != n)
    if bad.any():
        _refuse(name, "gives an integer that float32 cannot hold", _first(d, bad), rounding, f.name)
    return r


def to_float32(x, f, rounding: str = "rn", saturate: bool = False, name: str = "x"):
    """Host doubles -> float32 values whose rounding into format ``f`` (``rounding``,
    ``saturate``) gives the bits of one rounding of the doubles (see the module
    docstring); TypeError where no float32 value can."""
    d = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = d.astype(np.float32)
        inexact = (r.astype(np.float64) != d) & ~np.isnan(d)
    if rounding == "stochastic":
        if inexact.any():
            _refuse(
                name, "is not a float32 value, and stochastic rounding draws its bits inside "
                "the program", _first(d, inexact), rounding, f.name,
            )  # fmt: skip
        return r
    if f.kind != "float":
        return _integer(d, f, rounding, saturate, name)
    if not inexact.any():
        return r
    if f.name == "f32":
        return _f32(d, r, inexact, rounding)
    bits = r.view(np.uint32)
    away = np.abs(r.astype(np.float64)) > np.abs(d)  # rn went up (or to Inf): one step back
    bits = np.where(inexact & away, bits - np.uint32(1), bits)
    return np.where(inexact, bits | np.uint32(1), bits).view(np.float32)


def prepare(x, f, rounding: str = "rn", saturate: bool = False, name: str = "x"):
    """``x`` ready for a rounding into format ``f``: host doubles as float64 (x64 on) or
    as :func:`to_float32` makes them (x64 off), with the same errors either way; anything
    else unchanged."""
    if not is_host_double(x) or f.bits == 64:
        return x
    r = to_float32(x, f, rounding, saturate, name)
    return np.asarray(x, np.float64) if x64() else r


def exact_float32(x, name: str, allowed: str = "float32, float16 or bfloat16"):
    """The quantizers' doubles: host doubles that float32 holds exactly -> float32; any
    other double (a float64 array under x64 too) is a TypeError. Anything else unchanged."""
    if isinstance(x, jax.Array) and x.dtype == np.float64:
        raise TypeError(
            f"{name}: expected {allowed}, got a float64 array (converting it would round "
            "every value once more before the quantization; pass x.astype(jnp.float32) if "
            "that is intended)"
        )
    if not is_host_double(x) or np.asarray(x).dtype != np.float64:  # ints: not floats
        return x
    d = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = d.astype(np.float32)
        inexact = (r.astype(np.float64) != d) & ~np.isnan(d)
    if inexact.any():
        raise TypeError(
            f"{name}: expected {allowed}, got float64 values that float32 cannot hold (e.g. "
            f"{_first(d, inexact)!r}; converting them would round every value once more "
            "before the quantization; pass x.astype(np.float32) if that is intended)"
        )
    return r


def nearest_float32(x):
    """A factor the kernel holds in float32 (fp8 scales): host doubles and float64 arrays
    rounded once to nearest float32, x64 on or off. Anything else unchanged."""
    if isinstance(x, jax.Array) and x.dtype == np.float64:
        return x.astype(np.float32)
    if is_host_double(x):
        return np.asarray(x, np.float64).astype(np.float32)
    return x
