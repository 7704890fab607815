"""The float operations of a replay on raw bits, so that no subnormal is flushed.

XLA:CPU runs its programs with the x86 float unit's flush-to-zero and
denormals-are-zero modes on (measured, jax 0.10.2: ``1e-40 > 0`` is False,
``max(1e-40, 0)`` and ``1.5e-38 * 0.5`` are +0), while XLA:GPU keeps f32 subnormals. An
operation bound as it is would therefore give the CPU's bits, not the GPU's, wherever a
subnormal is read or produced. :func:`evaluate` computes the operations that
``gpu_replay`` otherwise binds and that a flushed subnormal changes, exactly as IEEE 754
defines them, on integer bits:

- ``add``, ``sub``, ``add_any``, ``mul``, ``square``, ``integer_pow`` (``y >= 1``, the
  squarings and products jax's own lowering forms): the f32 FADD / FMUL of
  :mod:`jaxmma.arith` (bf16 and f16 widened to f32 exactly, the result rounded back to
  nearest even, as XLA computes them);
- ``max``, ``min``, ``clamp``, comparisons: on the order of the bits (``-0`` and ``+0``
  compare equal, NaN as the bound operation gives it);
- ``sign``, ``floor``, ``ceil``, ``round`` of a subnormal: +-1, ``+0`` / ``-1``,
  ``+1`` / ``-0``, +-0;
- the sums of :mod:`._xla_sum`, ``x * fl(1/c)``, and the max / min reductions
  (:func:`maximum`).

Each value keeps the primitive's own derivative (the bits carry none). Operations on
integers, and float operations no subnormal can change (moves, negation, ``abs``,
conversions), are bound as they are.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import arith, bits, util

F32, U32, I32 = jnp.float32, jnp.uint32, jnp.int32
#: the float formats computed here (bits' dtype registry names them)
_FLOATS = ("f32", "bf16", "f16")
ARITHMETIC = frozenset({"add", "sub", "add_any", "mul", "integer_pow", "square"})
ORDER = frozenset({"max", "min", "clamp"})
COMPARE = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
ROUNDING = frozenset({"sign", "floor", "ceil", "round"})
#: the primitives :func:`evaluate` computes (on float operands)
NAMES = ARITHMETIC | ORDER | COMPARE | ROUNDING


def _format(dtype) -> str | None:
    fmt = bits.FORMAT_OF_DTYPE.get(jnp.dtype(dtype).name)
    return fmt if fmt in _FLOATS else None


def _fmt(x) -> str | None:
    return _format(x.dtype)


def _f32_bits(x):
    """f32 bits of a float32 / bfloat16 / float16 array, widened exactly."""
    fmt = _fmt(x)
    if fmt == "f32":
        return jax.lax.bitcast_convert_type(x, U32)
    raw = jax.lax.bitcast_convert_type(x, jnp.uint16).astype(U32)
    return arith.convert(raw, fmt, "f32")


def _from_f32_bits(bits, dtype):
    """``bits`` (f32) as ``dtype``, rounded to nearest even."""
    fmt = _format(dtype)
    if fmt == "f32":
        return jax.lax.bitcast_convert_type(bits, F32)
    out = arith.convert(bits, "f32", fmt).astype(jnp.uint16)
    return jax.lax.bitcast_convert_type(out, dtype)


def fadd(x, y):
    """IEEE ``x + y`` in the operands' (common) format, subnormals kept."""
    x, y = jnp.broadcast_arrays(x, y)
    return _from_f32_bits(arith.ieee_add(_f32_bits(x), _f32_bits(y), "f32"), x.dtype)


def fmul(x, y):
    """IEEE ``x * y`` in the operands' (common) format, subnormals kept."""
    x, y = jnp.broadcast_arrays(x, y)
    return _from_f32_bits(arith.fmul_f32(_f32_bits(x), _f32_bits(y)), x.dtype)


def _key(x):
    """An int32 key with the order of the values (``-0 < +0``; NaN aside)."""
    b = jax.lax.bitcast_convert_type(_f32_bits(x), I32)
    return jnp.where(b < 0, b ^ I32(0x7FFFFFFF), b)


def _from_key(k, dtype):
    b = jnp.where(k < 0, k ^ I32(0x7FFFFFFF), k)
    return _from_f32_bits(jax.lax.bitcast_convert_type(b, U32), dtype)


def _is_nan(x):
    return (_f32_bits(x) & U32(0x7FFFFFFF)) > U32(0x7F800000)


def _is_zero(x):
    return (_f32_bits(x) & U32(0x7FFFFFFF)) == 0


def _is_subnormal(x):
    b = _f32_bits(x)
    return ((b & U32(0x7F800000)) == 0) & ((b & U32(0x7FFFFF)) != 0)


def maximum(x, axes: tuple, is_max: bool):
    """The IEEE 754-2019 maximum (``is_max``) or minimum of ``x`` over ``axes``, ``-0 <
    +0``, as XLA:GPU reduces: where any element is NaN, the canonical NaN of the format
    (:func:`canonical_nan`), whatever the NaNs' payloads and signs."""
    k = _key(x)
    k = jnp.max(k, axis=axes) if is_max else jnp.min(k, axis=axes)
    out = _from_key(k, x.dtype)
    return _select(jnp.any(_is_nan(x), axis=axes), canonical_nan(out), out)


def canonical_nan(like):
    """XLA:GPU's NaN of ``like``'s format, in ``like``'s shape: sign clear, every payload
    bit set (f32 ``0x7FFFFFFF``, bf16 / f16 ``0x7FFF``), what its max, min and clamp
    give for any NaN operand, as do its reductions (tests/golden/xla/xla-triton-max.npz:
    every NaN payload and sign, quiet and signaling, f32 and bf16)."""
    uint = _uint(like)
    nan = jnp.full(like.shape, bits.CANONICAL_NAN[_fmt(like)], uint)
    return jax.lax.bitcast_convert_type(nan, like.dtype)


def _uint(x):
    return U32 if x.dtype.itemsize == 4 else jnp.uint16


def _select(c, a, b):
    """``where(c, a, b)`` on the bits: XLA:CPU selects narrow floats through float32 and
    back, which turns every bf16 / f16 NaN into its own quiet NaN."""
    dtype, uint = a.dtype, _uint(a)
    a, b = (jax.lax.bitcast_convert_type(v, uint) for v in (a, b))
    return jax.lax.bitcast_convert_type(jnp.where(c, a, b), dtype)


def _pick(bound, x, y, is_max: bool):
    """``max`` / ``min`` of two operands by the order of their bits; the bound
    operation's own result where both are zeros; the canonical NaN where either is NaN."""
    kx, ky = _key(x), _key(y)
    out = _select((kx >= ky) == is_max, x, y)
    out = _select(_is_zero(x) & _is_zero(y), bound, out)
    return _select(_is_nan(x) | _is_nan(y), canonical_nan(out), out)


def _compare(name: str, x, y):
    x, y = jnp.broadcast_arrays(x, y)
    kx, ky = _key(x), _key(y)
    zeros = _is_zero(x) & _is_zero(y)
    kx = jnp.where(zeros, 0, kx)
    ky = jnp.where(zeros, 0, ky)
    nan = _is_nan(x) | _is_nan(y)
    out = {
        "eq": kx == ky,
        "ne": kx != ky,
        "lt": kx < ky,
        "le": kx <= ky,
        "gt": kx > ky,
        "ge": kx >= ky,
    }[name]
    return jnp.where(nan, name == "ne", out)


def integer_power(x, y: int):
    """``x ** y`` (``y >= 1``) by the products jax's lowering of ``integer_pow`` forms."""
    acc = None
    while y > 0:
        if y & 1:
            acc = x if acc is None else fmul(acc, x)
        y >>= 1
        if y > 0:
            x = fmul(x, x)
    return acc


def _rounded(name: str, bound, x):
    """``sign`` / ``floor`` / ``ceil`` / ``round``: the bound result, except of a
    subnormal (which the CPU reads as a zero)."""
    neg = (_f32_bits(x) >> U32(31)) != 0
    one, zero = jnp.ones_like(x), jnp.zeros_like(x)
    if name == "sign":
        sub = jnp.where(neg, -one, one)
    elif name == "floor":
        sub = jnp.where(neg, -one, zero)
    elif name == "ceil":
        sub = jnp.where(neg, -zero, one)
    else:
        sub = jnp.where(neg, -zero, zero)
    return jnp.where(_is_subnormal(x), sub, bound)


def covers(eqn) -> bool:
    """Whether :func:`evaluate` computes ``eqn``: one of :data:`NAMES` on f32, bf16 or
    f16 operands (``integer_pow`` with ``y >= 1``)."""
    name = eqn.primitive.name
    if name not in NAMES or not eqn.invars:
        return False
    if not all(_format(v.aval.dtype) for v in eqn.invars):
        return False
    return name != "integer_pow" or eqn.params["y"] >= 1


def _value(eqn, ins):
    name = eqn.primitive.name
    if name in ("add", "add_any"):
        return fadd(*ins)
    if name == "sub":
        x, y = ins
        return fadd(x, -jnp.asarray(y))
    if name == "mul":
        return fmul(*ins)
    if name == "integer_pow":
        return integer_power(ins[0], int(eqn.params["y"]))
    if name == "square":
        return fmul(ins[0], ins[0])
    bound = util.bind(eqn, ins)[0]
    if name in ("max", "min"):
        x, y = jnp.broadcast_arrays(*ins)
        return _pick(bound, x, y, name == "max")
    if name == "clamp":
        lo, x, hi = jnp.broadcast_arrays(*ins)
        m = _pick(jnp.maximum(x, lo), x, lo, True)
        return _pick(bound, m, hi, False)
    return _rounded(name, bound, ins[0])


def float_format(x) -> str | None:
    """``"f32"``, ``"bf16"``, ``"f16"`` for those arrays, else None."""
    return _fmt(x)


def with_derivative(eqn, fn, ins):
    """``fn(*ins)``, the value of ``eqn`` (one output) computed on bits, with the
    derivative of ``eqn``'s primitive itself."""

    @jax.custom_jvp
    def value(*vals):
        return fn(*vals)

    @value.defjvp
    def _(primals, tangents):
        _, t = jax.jvp(lambda *v: util.bind(eqn, list(v))[0], primals, tangents)
        return value(*primals), t

    return value(*ins)


def evaluate(eqn, ins) -> list:
    """``eqn``'s outputs (a list) computed as the module docstring says, with the
    primitive's own derivative."""
    ins = [jnp.asarray(x) for x in ins]
    if eqn.primitive.name in COMPARE:
        return [_compare(eqn.primitive.name, *ins)]
    return [with_derivative(eqn, lambda *v: _value(eqn, list(v)), ins)]
