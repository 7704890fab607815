"""MX and NVFP4 block quantization: float arrays -> element bits and scale bits.

(Public later as ``jaxmma.quant``.) A tensor is cut along one axis (the K axis of a
matrix product) into blocks of ``block`` consecutive elements; every block gets one scale
and its elements are rounded to a narrow format after division by the scale:

* MX (OCP Microscaling Formats v1.0): MXFP8 (``e4m3``, ``e5m2``), MXFP6 (``e3m2``,
  ``e2m3``), MXFP4 (``e2m1``), blocks of 32, ``ue8m0`` (power-of-two) scales.
* NVFP4: ``e2m1`` elements, blocks of 16, ``ue4m3`` scales, and one float32 scale per
  tensor (NVIDIA's recipe, see :func:`quantize_nvfp4`).

The results feed the ``.block_scale`` ``mma`` forms (``kind::mxf8f6f4``, ``kind::mxf4``,
``kind::mxf4nvf4``) through :func:`jaxmma._scaling.as_operands`.

Every division and rounding is exact: the quotient ``x / scale`` is computed as a
rational number with integer arithmetic and rounded once (``rn``: to nearest even;
``stochastic``: the 32 most significant bits of the discarded fraction, with a sticky
bit ORed into their lowest bit, plus 32 random bits; a carry rounds up in magnitude, as
:func:`jaxmma._formats.encode` does). Results are the same on CPU and GPU, under ``jit``
and ``vmap``.

Choices where the recipes are silent (``docs/block_scaling.md``):

* A block whose largest magnitude is 0 gets the smallest scale (ue8m0 ``0x00`` =
  2**-127; ue4m3 ``0x00`` = 0); a block holding NaN or Inf gets a NaN scale (``0xFF``,
  ``0x7F``) and its elements hold ``x`` rounded without scaling (they decode to NaN
  anyway). Elements of a block with a zero ue4m3 scale are +0.
* ``quantize_nvfp4``'s global amax ignores NaN and Inf; a tensor of zeros gets global
  scale 1.0; a global scale that would round to 0 becomes 2**-149.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .. import util
from ..bits import (
    CANONICAL_NAN,
    F8F6F4,
    FORMATS,
    check_array_like,
    check_numeric,
    encode,
    exact_float32,
    fields,
    nearest_float32,
    round_float,
    special_bits,
)

U32 = jnp.uint32
MX_FORMATS = F8F6F4
SCALE_FORMATS = ("ue8m0", "ue4m3")
ScaleRounding = Literal["floor", "ceil", "nearest"]
ElementRounding = Literal["rn", "stochastic"]
SCALE_ROUNDINGS: tuple[str, ...] = get_args(ScaleRounding)
ELEMENT_ROUNDINGS: tuple[str, ...] = get_args(ElementRounding)
NVFP4_BLOCK = 16
#: NVIDIA's NVFP4 global scale divides the tensor's amax by e2m1 max x e4m3 max.
NVFP4_GLOBAL_DIVISOR = 6 * 448  # 2688
_SMALLEST_F32 = float.fromhex("0x1p-149")


_NO_DERIVATIVE = (
    "x: {name} returns integer element and scale bits, which have no derivative with "
    "respect to x; for quantization-aware training use jaxmma.quant.fake_quantize_mx / "
    "fake_quantize_nvfp4 (dequantize(quantize(x)) with the straight-through derivative)"
)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=("elements", "scales", "global_scale"),
    meta_fields=("fmt", "scale_fmt", "block", "axis"),
)
@dataclasses.dataclass(frozen=True)
class Quantized:
    """A block-quantized tensor (a pytree; the format names, block and axis are static).

    Attributes:
      elements: uint8 raw element bits (one byte per element, the format's bits in the
        low bits; the XLA runtime has no 6-bit float type, so no ml_dtypes type is used),
        the shape of the original tensor.
      scales: uint8 raw scale bits (``.ue8m0`` or ``.ue4m3``; a NaN scale is ``0xFF`` /
        ``0x7F``), that shape with ``shape[axis] // block`` at ``axis``.

    :func:`raw_bits` gives both as uint32, as the instructions take them.
      global_scale: float32 ``[]``, the per-tensor scale of NVFP4 (None for MX); under
        ``vmap`` it gains the mapped (leading) axes.
      fmt: element format (``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"``, ``"e2m1"``).
      scale_fmt: ``"ue8m0"`` or ``"ue4m3"``.
      block: elements per scale.
      axis: the blocked axis, negative (counted from the end, so batch axes can be added).

    The value of an element is ``decode(fmt, e) * decode(scale_fmt, s) * global_scale``
    (:func:`dequantize`).
    """

    elements: jax.Array
    scales: jax.Array
    global_scale: jax.Array | None
    fmt: str
    scale_fmt: str
    block: int
    axis: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.elements.shape)


def check_quantized(q, name: str, *, matrix: bool = False) -> Quantized:
    """``q`` as :func:`quantize_mx` / :func:`quantize_nvfp4` make it, or an error naming
    ``name`` (every entry point calls this, so an edited container is refused).

    Checked: the type; ``fmt``, ``scale_fmt``, ``block`` and ``axis``; ``elements`` and
    ``scales`` uint8 (raw bits: float8 scales would be read by value); ``scales`` of the
    shape the elements, ``axis`` and ``block`` give; ``global_scale`` None or float32 of
    a shape that leads ``elements.shape`` (the axes ``vmap`` added; with ``matrix``, the
    batch axes of a ``[..., rows, cols]`` operand only), never the blocked axis.

    Raises:
      TypeError: not a Quantized; a dtype. ValueError: a static field or a shape.
    """
    if not isinstance(q, Quantized):
        raise TypeError(f"{name}: expected a Quantized tensor, got {type(q).__name__}")
    if q.fmt not in MX_FORMATS:
        raise ValueError(f"{name}: Quantized.fmt={q.fmt!r}; allowed: {list(MX_FORMATS)}")
    if q.scale_fmt not in SCALE_FORMATS:
        raise ValueError(
            f"{name}: Quantized.scale_fmt={q.scale_fmt!r}; allowed: {list(SCALE_FORMATS)}"
        )
    for field in ("elements", "scales"):
        x = getattr(q, field)
        dtype = getattr(x, "dtype", None)
        if dtype is None or not hasattr(x, "shape") or np.dtype(dtype) != np.uint8:
            raise TypeError(
                f"{name}: Quantized.{field} must be uint8 raw bits, got "
                f"{dtype if dtype is not None else type(x).__name__}"
                + (
                    " (float8 values are not bit patterns: store "
                    "jax.lax.bitcast_convert_type(s, jnp.uint8))"
                    if dtype is not None and jnp.issubdtype(dtype, jnp.floating)
                    else ""
                )
            )
    shape = tuple(q.elements.shape)
    block, axis = q.block, q.axis
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"{name}: Quantized.block={block!r}; expected a positive int")
    if (
        isinstance(axis, bool)
        or not isinstance(axis, (int, np.integer))
        or not -len(shape) <= axis < 0
    ):
        raise ValueError(
            f"{name}: Quantized.axis={axis!r}; expected a negative int in "
            f"[{-len(shape)}, -1] for elements of shape {shape}"
        )
    if shape[axis] % block:
        raise ValueError(
            f"{name}: Quantized.elements of shape {shape}: axis {axis} ({shape[axis]}) is "
            f"not a multiple of block={block}"
        )
    want = shape[:axis] + (shape[axis] // block,) + (shape[axis + 1 :] if axis != -1 else ())
    if tuple(q.scales.shape) != want:
        raise ValueError(
            f"{name}: Quantized.scales has shape {tuple(q.scales.shape)}; expected {want} "
            f"(elements {shape}, one scale per {block} along axis {axis})"
        )
    g = q.global_scale
    if g is not None:
        dtype = getattr(g, "dtype", None)
        if dtype is None or not hasattr(g, "shape") or np.dtype(dtype) != np.float32:
            raise TypeError(
                f"{name}: Quantized.global_scale must be None or a float32 array, got "
                f"{dtype if dtype is not None else type(g).__name__}"
            )
        lead = len(shape) + axis if not matrix else min(len(shape) + axis, len(shape) - 2)
        gs = tuple(g.shape)
        if len(gs) > lead or gs != shape[: len(gs)]:
            raise ValueError(
                f"{name}: Quantized.global_scale has shape {gs}; expected a scalar (or, "
                f"after vmap, the leading batch axes {shape[: max(lead, 0)]} of the "
                f"elements {shape})"
            )
    return q


def raw_bits(q: Quantized) -> tuple[jax.Array, jax.Array]:
    """The element and scale bits of ``q`` as uint32 (the one conversion every consumer
    calls: :func:`dequantize`, :func:`jaxmma._scaling.as_operands` and ``ins.mma``).

    An element byte with a bit set above its format's width (e2m1: 4 bits, e3m2 and
    e2m3: 6; possible only in an edited container) is no code of the format: it is not
    read as another code, its block's scale becomes NaN (ue8m0 ``0xFF``, ue4m3 ``0x7F``),
    so that everything computed from the block is NaN, eagerly and under ``jit`` alike.

    Raises:
      TypeError, ValueError: ``q`` is not a valid :class:`Quantized` (:func:`check_quantized`).
    """
    check_quantized(q, "q")
    elements = jnp.asarray(q.elements).astype(U32)
    scales = jnp.asarray(q.scales).astype(U32)
    width = FORMATS[q.fmt].bits
    if width >= 8:
        return elements, scales
    beyond = jnp.moveaxis((elements >> U32(width)) != 0, q.axis, -1)
    beyond = beyond.reshape(beyond.shape[:-1] + (-1, q.block)).any(axis=-1)
    nan = U32(0xFF if q.scale_fmt == "ue8m0" else 0x7F)
    return elements, jnp.where(jnp.moveaxis(beyond, -1, q.axis), nan, scales)


def _byte(bits) -> jax.Array:
    """Raw bits (uint32, at most 8 significant) -> the uint8 that :class:`Quantized` keeps."""
    return bits.astype(jnp.uint8)


# ---------------------------------------------------------------------------------------
# Argument checks
def _check_choice(name: str, value, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")
    return value


def _flag(value, name: str) -> bool:
    """A bool option: True or False (NumPy's too), never a string or a number."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name}: expected True or False, got {value!r}"[:300])
    return bool(value)


def _as_f32(x, name: str = "x") -> jax.Array:
    check_array_like(x, name)  # strings and objects: a TypeError naming the argument
    x = exact_float32(x, name)  # doubles: exact in float32, or refused
    check_numeric(x, name)
    x = jnp.asarray(x)
    if x.dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
        raise TypeError(
            f"{name}: expected float32, float16 or bfloat16 (converted exactly to float32), "
            f"got {x.dtype}"
        )
    return util.ingest(x.astype(jnp.float32))


def _axis_and_blocks(x, axis, block: int) -> int:
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block: expected a positive int, got {block!r}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"axis: expected an int, got {axis!r}")
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis: {axis} is out of range for an array of shape {x.shape}")
    axis = int(axis) % x.ndim - x.ndim
    if x.shape[axis] % block:
        raise ValueError(
            f"x: the length of axis {axis} ({x.shape[axis]}) is not a multiple of block={block}"
        )
    return axis


def _random_bits(rounding: str, key, shape):
    if rounding == "stochastic":
        if key is None:
            raise ValueError("key: rounding='stochastic' needs a PRNG key")
        return jax.random.bits(_one_key(key), shape, jnp.uint32)
    if key is not None:
        raise ValueError(f"key: only used with rounding='stochastic', got rounding={rounding!r}")
    return None


def _one_key(key):
    """``key`` as one jax.random key (a typed key, or raw uint32 key data), else a
    ``TypeError`` / ``ValueError`` naming it."""
    try:
        k = jnp.asarray(key)
    except (TypeError, ValueError):
        raise TypeError(f"key: expected a jax.random key, got {key!r}"[:300]) from None
    if not (jnp.issubdtype(k.dtype, jax.dtypes.prng_key) or k.dtype == jnp.uint32):
        raise TypeError(f"key: expected a jax.random key, got dtype {k.dtype}")
    if k.dtype == jnp.uint32:
        try:
            k = jax.random.wrap_key_data(k)
        except (TypeError, ValueError):
            raise ValueError(f"key: expected one key's uint32 data, got shape {k.shape}") from None
    if k.shape != ():
        raise ValueError(f"key: expected one key (shape ()), got shape {k.shape}")
    return k


def _blocked(x, axis: int, block: int):
    """``x`` with ``axis`` moved last and split: ``[..., nblocks, block]``."""
    y = jnp.moveaxis(x, axis, -1)
    return y.reshape(y.shape[:-1] + (y.shape[-1] // block, block))


def _unblocked(y, axis: int):
    y = y.reshape(y.shape[:-2] + (y.shape[-2] * y.shape[-1],))  # no -1: may be empty
    return jnp.moveaxis(y, -1, axis)


def _f32_fields(x):
    return fields("f32", lax.bitcast_convert_type(x, U32))


def _block_amax(xb):
    """Largest magnitude along the last axis, on the bits (no float compare, so no
    platform flushes subnormals): float32, NaN if any element is NaN."""
    mag = lax.bitcast_convert_type(xb, U32) & U32(0x7FFFFFFF)
    return lax.bitcast_convert_type(jnp.max(mag, axis=-1), jnp.float32)


def _is_finite(x):
    return (lax.bitcast_convert_type(x, U32) & U32(0x7FFFFFFF)) < U32(0x7F800000)


def _msb(v):
    return 31 - util.clz(v).astype(jnp.int32)


def _f32_from_exact(n, u):
    """float32 of the exact value ``n * 2**u`` (uint32 ``n < 2**25``; Inf above range)."""
    p = _msb(jnp.maximum(n, U32(1)))
    e = u + p
    mant = jnp.where(
        p <= 23, n << (23 - p).clip(0, 31).astype(U32), n >> (p - 23).clip(0).astype(U32)
    )
    normal = ((e + 127).clip(1, 254).astype(U32) << U32(23)) | (mant & U32(0x7FFFFF))
    sub = jnp.where(u + 149 >= 0, n << (u + 149).clip(0, 31).astype(U32), U32(0))
    bits = jnp.where(e >= -126, normal, sub)
    bits = jnp.where(e > 127, U32(0x7F800000), bits)
    bits = jnp.where(n == 0, U32(0), bits)
    return lax.bitcast_convert_type(bits, jnp.float32)


# ---------------------------------------------------------------------------------------
# Exact division and rounding
#: bits of quotient produced per step of :func:`_long_quotient` (see its proof)
_CHUNK = 20


def _long_quotient(xn, dn, e, steps: int):
    """``floor(xn * 2**e / dn)`` and whether it is inexact, in ``steps`` steps of up to
    20 quotient bits (int32 ``e <= 20 * steps``, any sign).

    ``xn``, ``dn``: uint32 with ``0 < xn < dn < 2**28``. Returns ``(hi, lo, sticky)``:
    the quotient is ``hi * 2**32 + lo`` (``hi`` is nonzero only for ``e > 32``) and
    ``sticky`` says that the remainder is nonzero.

    Each step is one digit of a long division in radix ``2**k`` (``k <= 20``): with the
    remainder ``r < dn``, the digit is ``v = floor(r * 2**k / dn) < 2**k``. A float32
    estimate ``floor(f32(r) * (1 / f32(dn)) * 2**k)`` carries four roundings to nearest
    (``r`` and ``dn`` to float32, the reciprocal, the product; the power of two is exact),
    each of relative error at most 2**-24, so it is off from ``r * 2**k / dn < 2**20`` by
    less than ``2**20 * 4.01 * 2**-24 < 0.26``: the estimated digit is ``v - 1``, ``v``
    or ``v + 1``. The new remainder ``r * 2**k - digit * dn`` then lies in
    ``[-dn, 2 * dn)``, inside (-2**29, 2**29): computed in uint32 arithmetic (which wraps
    modulo 2**32) and read as int32 it is exact, and one correction (a negative remainder
    takes ``dn`` back and lowers the digit, one ``>= dn`` gives ``dn`` and raises it)
    makes the digit exact and ``0 <= r < dn`` again. The margin (0.26 of the 1 the
    correction absorbs) also covers a division or conversion a few ulps from correctly
    rounded.
    """
    inv = jnp.float32(1.0) / dn.astype(jnp.float32)
    r = xn
    hi = jnp.zeros_like(xn)
    lo = jnp.zeros_like(xn)
    for j in range(steps):
        k = jnp.clip(e - _CHUNK * (steps - 1 - j), 0, _CHUNK)  # this step's digit width
        ku = k.astype(U32)
        pow2k = lax.bitcast_convert_type((k + 127) << 23, jnp.float32)  # 2**k, exact
        est = jnp.floor(r.astype(jnp.float32) * inv * pow2k)
        q = est.astype(jnp.int32).astype(U32)
        rem = lax.bitcast_convert_type((r << ku) - q * dn, jnp.int32)
        neg = rem < 0
        rem = jnp.where(neg, rem + lax.bitcast_convert_type(dn, jnp.int32), rem)
        q = jnp.where(neg, q - U32(1), q)
        big = rem >= lax.bitcast_convert_type(dn, jnp.int32)
        rem = jnp.where(big, rem - lax.bitcast_convert_type(dn, jnp.int32), rem)
        q = jnp.where(big, q + U32(1), q)
        r = lax.bitcast_convert_type(rem, U32)
        # (hi, lo) <- (hi, lo) * 2**k + q, with q < 2**k (the quotient is below 2**64)
        hi = (hi << ku) | jnp.where(k > 0, lo >> (32 - k).clip(0, 31).astype(U32), U32(0))
        lo = (lo << ku) | q
    return hi, lo, r != 0


def _divide(fmt: str, xsig, xexp, dsig, dexp, mode: str, rbits=None):
    """``(xsig * 2**xexp) / (dsig * 2**dexp)`` rounded onto ``fmt``'s grid (exponent
    unbounded above), exactly.

    ``xsig``, ``dsig``: nonzero uint32, ``xsig < 2**27``, ``dsig < 2**28``. ``mode``:
    ``"rn"``, ``"rz"``, ``"rp"`` (up in magnitude) or ``"stochastic"`` (with uint32
    ``rbits``).

    Returns ``(value, away)``: the rounded magnitude as float32 (exact; Inf far above any
    format's range) and whether the rounding direction points away from zero (what
    decides between Inf/NaN and max finite on overflow, as in :func:`_formats.encode`).

    The quotient ``Q`` in units of the result's last kept bit ``2**u`` is below
    ``2**(m + 1)``; the rounding needs ``floor(Q)`` and the first ``g`` bits of its
    fraction, whether anything nonzero follows them (``g = 1`` for rn / rz / rp: the half
    bit; ``g = 32`` for stochastic: the 32 bits the random bits are added to), so
    ``floor(Q * 2**g)`` and its exactness, which :func:`_long_quotient` gives in one or
    two steps.
    """
    f = FORMATS[fmt]
    m = f.mant_bits
    emin = f.min_exp + m  # exponent of the smallest normal (or of 1 ulp's binade)
    lx, ld = _msb(xsig), _msb(dsig)
    xn = xsig << (31 - lx).astype(U32)
    dn = dsig << (31 - ld).astype(U32)
    lead = (lx + xexp) - (ld + dexp) - (xn < dn).astype(jnp.int32)
    u = jnp.maximum(lead, emin) - m  # the unit of the result's last kept bit
    t = xexp - dexp - u  # Q = xsig * 2**t / dsig < 2**(m + 1)
    # normalized: xsig = xa * 2**(lx - 26) with xa in [2**26, 2**27), dsig = da *
    # 2**(ld - 27) with da in [2**27, 2**28), so xa < da and Q = xa * 2**T / da with
    # T = t + lx - 26 - ld + 27; xa / da > 1/4 gives 2**(T - 2) < Q < 2**(m + 1): T <= m + 2
    xa = xn >> U32(5)
    da = dn >> U32(4)
    T = t + lx - ld + 1
    g = 32 if mode == "stochastic" else 1
    bits = m + 2 + g  # the largest e below
    steps = -(-bits // _CHUNK)
    hi, lo, sticky = _long_quotient(xa, da, T + g, steps)  # floor(Q * 2**g)
    if mode == "stochastic":
        n, frac = hi, lo  # Q * 2**32 < 2**(m + 33) <= 2**36
        inc = away = (frac | sticky.astype(U32)) > ~rbits
    else:
        n = lo >> U32(1)
        half = (lo & U32(1)) != 0
        if mode == "rn":
            inc = half & (sticky | ((n & U32(1)) != 0))
            away = jnp.ones(n.shape, bool)
        elif mode == "rz":
            inc = away = jnp.zeros(n.shape, bool)
        else:
            inc = away = half | sticky
    return _f32_from_exact(n + inc.astype(U32), u), away


def _quotient_bits(fmt: str, x, dsig, dexp, mode: str, rbits, saturate: bool):
    """Bits of ``x / (dsig * 2**dexp)`` in ``fmt`` (x float32; zero, NaN and Inf are
    encoded as they are)."""
    fl = _f32_fields(x)
    nz = fl.sig != 0
    dsig = jnp.broadcast_to(dsig, x.shape)
    dexp = jnp.broadcast_to(dexp, x.shape)
    v, away = _divide(fmt, jnp.where(nz, fl.sig, U32(1)), fl.exp, dsig, dexp, mode, rbits)
    signed = lax.bitcast_convert_type(
        lax.bitcast_convert_type(v, U32) | (fl.sign << U32(31)), jnp.float32
    )
    # v is on fmt's grid, so rounding it toward zero gives its bits; only above the
    # largest value does the direction matter: away from zero, every such v (and Inf)
    # encodes as the format's overflow result of its sign (Inf, NaN or max)
    down = encode(fmt, signed, rounding="rz", saturate=saturate)
    over = [U32(special_bits(fmt, inf, saturate=saturate)) for inf in (np.inf, -np.inf)]
    up = jnp.where(v > FORMATS[fmt].max, jnp.where(fl.sign != 0, over[1], over[0]), down)
    plain = encode(fmt, x, rounding="rn", saturate=saturate)
    return jnp.where(nz, jnp.where(away, up, down), plain)


def _scaled_bits(fmt: str, x, e, rounding: str, rbits, saturate: bool):
    """Bits of ``x * 2**-e`` in ``fmt`` (exact, any int32 ``e``), as ``encode`` rounds."""
    raw = lax.bitcast_convert_type(x, U32)
    fl = _f32_fields(x)
    fl = fl._replace(exp=fl.exp - e)
    f = FORMATS[fmt]
    payload = raw & U32(0x7FFFFF)
    out = round_float(f, fl, payload, 23, rounding, saturate, rbits, False)
    return out.astype(U32)


# ---------------------------------------------------------------------------------------
# MX
def shared_exponent(
    amax: ArrayLike, fmt: str, scale_rounding: ScaleRounding = "floor"
) -> jax.Array:
    """The ue8m0 scale exponent of blocks with largest magnitude ``amax`` (float32).

    ``floor``: the OCP MX rule ``floor(log2(amax)) - emax_elem`` (emax_elem: the exponent
    of ``fmt``'s largest normal: e4m3 8, e5m2 15, e3m2 4, e2m3 2, e2m1 2); elements above
    max finite after scaling saturate. ``ceil``: ``amax / max_elem`` rounded up to a power
    of two (NVIDIA's recipes; nothing saturates). ``nearest``: ``amax / max_elem`` rounded
    to the nearest power of two (ties up). Clamped to [-127, 127]; ``amax = 0`` gives -127.

    Returns int32 exponents (meaningless where ``amax`` is NaN or Inf).
    """
    _check_choice("fmt", fmt, MX_FORMATS)
    _check_choice("scale_rounding", scale_rounding, SCALE_ROUNDINGS)
    return _shared_exponent(_as_f32(amax, "amax"), fmt, scale_rounding)


@functools.partial(util.jit, static_argnums=(1, 2))
def _shared_exponent(amax, fmt: str, scale_rounding: str):
    f = FORMATS[fmt]
    fl = _f32_fields(amax)
    nz = fl.sig != 0
    sig = jnp.where(nz, fl.sig, U32(1))
    if scale_rounding == "floor":
        emax = int(np.floor(np.log2(f.max)))
        e = fl.exp + _msb(sig) - emax
    else:
        mx = _f32_fields(jnp.float32(f.max))
        mode = "rp" if scale_rounding == "ceil" else "rn"
        v, _ = _divide("ue8m0", sig, fl.exp, mx.sig, mx.exp, mode)
        vf = _f32_fields(v)
        e = jnp.where(vf.sig != 0, vf.exp + _msb(jnp.maximum(vf.sig, U32(1))), -127)
    return jnp.where(nz, jnp.clip(e, -127, 127), -127)


def quantize_mx(
    x: ArrayLike,
    fmt: str,
    *,
    axis: int = -1,
    block: int = 32,
    scale_rounding: ScaleRounding = "floor",
    rounding: ElementRounding = "rn",
    key: jax.Array | None = None,
    saturate: bool = True,
) -> Quantized:
    """Quantize to an MX format: ``ue8m0`` power-of-two scales, one per ``block``.

    OCP Microscaling Formats (MX) v1.0, section 6.3: the scale of a block is
    ``2**shared_exponent`` (:func:`shared_exponent`), each element ``x / scale`` rounded
    to ``fmt``.

    Args:
      x: float32/float16/bfloat16 array, any shape.
      fmt: ``"e4m3"``, ``"e5m2"`` (MXFP8), ``"e3m2"``, ``"e2m3"`` (MXFP6), ``"e2m1"``
        (MXFP4).
      axis: the blocked axis (the K axis of a matrix product: -1 for A, -2 for B).
      block: elements per scale (32 in the MX spec; K / SFA_N for an ``mma`` form).
      scale_rounding: ``"floor"`` (OCP), ``"ceil"`` (NVIDIA) or ``"nearest"``.
      rounding: ``"rn"`` or ``"stochastic"`` (needs ``key``) for the elements.
      key: a ``jax.random`` key, for ``rounding="stochastic"``: element ``i`` uses
        ``jax.random.bits(key, x.shape, jnp.uint32)[i]``.
      saturate: clamp elements above max finite to +-max (the OCP rule); otherwise they
        become Inf (e5m2), NaN (e4m3) or max (the 6- and 4-bit formats, which have neither).

    Returns:
      :class:`Quantized` with ``scale_fmt="ue8m0"``.

    Example:
      >>> q = quantize_mx(jnp.array([[1.0, -0.3, 6.0, 0.0]], jnp.float32), "e2m1", block=4)
      >>> q.elements.tolist(), q.scales.tolist()
      ([[2, 9, 7, 0]], [[127]])
    """
    _check_choice("fmt", fmt, MX_FORMATS)
    _check_choice("scale_rounding", scale_rounding, SCALE_ROUNDINGS)
    _check_choice("rounding", rounding, ELEMENT_ROUNDINGS)
    x = util.no_derivative(_as_f32(x), _NO_DERIVATIVE.format(name="quantize_mx"))
    axis = _axis_and_blocks(x, axis, block)
    rbits = _random_bits(rounding, key, x.shape)
    return _quantize_mx(
        x,
        rbits,
        fmt=fmt,
        axis=axis,
        block=int(block),
        scale_rounding=scale_rounding,
        rounding=rounding,
        saturate=_flag(saturate, "saturate"),
    )


_STATIC = ("fmt", "axis", "block", "scale_rounding", "rounding", "saturate")


@functools.partial(util.jit, static_argnames=_STATIC)
def _quantize_mx(x, rbits, *, fmt, axis, block, scale_rounding, rounding, saturate):
    xb = _blocked(x, axis, block)
    amax = _block_amax(xb)
    finite = _is_finite(amax)
    e = _shared_exponent(amax, fmt, scale_rounding)
    scales = _once(jnp.where(finite, (e + 127).astype(U32), U32(0xFF)))  # e + 127 <= 254
    e_elem = jnp.where(scales == U32(0xFF), 0, scales.astype(jnp.int32) - 127)
    e_full = _unblocked(jnp.broadcast_to(e_elem[..., None], xb.shape), axis)
    elements = _scaled_bits(fmt, x, e_full, rounding, rbits, saturate)
    scales = jnp.moveaxis(scales, -1, axis)
    return Quantized(_byte(elements), _byte(scales), None, fmt, "ue8m0", block, axis)


# ---------------------------------------------------------------------------------------
# NVFP4
def nvfp4_global_scale(x: ArrayLike) -> jax.Array:
    """NVIDIA's per-tensor NVFP4 scale: ``amax / (6 * 448)`` rounded to nearest float32.

    ``amax`` is the largest finite magnitude of ``x``; all-zero ``x`` gives 1.0, and a
    result that would round to 0 gives 2**-149. A rounding of ``x``'s largest
    magnitude, it refuses to be differentiated with respect to ``x`` (``TypeError``), as
    the quantizers do; pass the scale to them as a value to differentiate through it.
    """
    msg = "x: nvfp4_global_scale is a rounding of amax(x) and has no derivative with respect to x"
    return _global_scale(util.no_derivative(_as_f32(x), msg))


@util.jit
def _global_scale(x):
    flat = jnp.where(_is_finite(x), x, 0.0).reshape(-1)
    amax = _block_amax(flat) if flat.size else jnp.float32(0)  # empty: as all-zero
    fl = _f32_fields(amax)
    nz = fl.sig != 0
    g = _by_global_divisor(jnp.where(nz, fl.sig, U32(1)), fl.exp)
    g = jnp.where(_f32_fields(g).sig == 0, jnp.float32(_SMALLEST_F32), g)
    g = jnp.where(nz, g, jnp.float32(1.0))
    # positive: its bits are below 2**31, one remainder keeps XLA from computing the
    # division's rounding again in each reader (see computed_once)
    b = lax.bitcast_convert_type(g, U32)
    return lax.bitcast_convert_type(b % (b | U32(0x80000000)), jnp.float32)


def _by_global_divisor(sig, exp):
    """``sig * 2**exp / 2688`` rounded to nearest even float32 (subnormals kept, +0 below
    them), exactly: the value of ``_divide("f32", sig, exp, 21 * 2**7, ...)`` in a few
    integer operations (uint32 ``0 < sig < 2**24``).

    ``2688 = 21 * 2**7``. With ``n = sig * 2**(30 - msb)`` in ``[2**30, 2**31)``, the
    quotient ``n / 21 = q + r / 21`` (one uint32 division); ``2q + (r != 0)`` in units of
    half of ``q``'s last bit rounds as the exact quotient does: ``q`` has 26 or 27 bits,
    of which float32 keeps at most 24, so the half-way point of a rounding lies on a bit
    of ``q`` and a nonzero remainder only has to be seen below it (a sticky bit).
    """
    p = _msb(sig)
    n = sig << (30 - p).astype(U32)
    q = lax.div(n, U32(NVFP4_GLOBAL_DIVISOR >> 7))
    sticky = (n - q * U32(NVFP4_GLOBAL_DIVISOR >> 7)) != 0
    u = exp + p - 30 - 7 - 1
    return lax.bitcast_convert_type(
        _f32_rounded((q << U32(1)) | sticky.astype(U32), u), jnp.float32
    )


def quantize_nvfp4(
    x: ArrayLike,
    *,
    axis: int = -1,
    block: int = NVFP4_BLOCK,
    global_scale: ArrayLike | None = None,
    scale_rounding: ScaleRounding = "nearest",
    rounding: ElementRounding = "rn",
    key: jax.Array | None = None,
    saturate: bool = True,
) -> Quantized:
    """Quantize to NVFP4: e2m1 elements, a ue4m3 scale per 16, one float32 global scale.

    NVIDIA's recipe (NVIDIA, "Pretraining Large Language Models with NVFP4",
    arXiv:2509.25149; Transformer Engine): the global (decode) scale is
    ``g = amax(x) / (6 * 448)``; the scale of a block is ``s = amax_b / (6 * g)`` rounded
    to ue4m3 (to nearest, saturating at 448); element ``i`` is ``x_i / (s * g)`` rounded to
    e2m1. The value is ``e2m1 * s * g``. Here every quotient is exact (NVIDIA's kernels
    divide in float32 and may differ in rare ties; see ``docs/block_scaling.md``).

    Args:
      x: float32/float16/bfloat16 array, any shape.
      axis: the blocked axis (-1 for A, -2 for B of a matrix product).
      block: elements per scale: 16 (``scale_vec::4X`` of ``m16n8k64``; 32 for the sparse
        ``m16n8k128``).
      global_scale: None (the recipe above, :func:`nvfp4_global_scale`) or a positive
        finite float32 scalar. A concrete value that is not (0, -0, negative, NaN, Inf)
        raises a ValueError; a traced one (under ``jit``) cannot be checked, and gives
        every block a NaN scale (``0x7F``) and +0 elements, so that everything computed
        from the result is NaN.
      scale_rounding: ``"nearest"`` (NVIDIA), ``"ceil"`` (no element saturates) or
        ``"floor"``: how ``amax_b / (6 * g)`` is rounded to ue4m3.
      rounding: ``"rn"`` or ``"stochastic"`` (needs ``key``) for the elements.
      key: a ``jax.random`` key, for ``rounding="stochastic"`` (random bits as for
        :func:`quantize_mx`).
      saturate: clamp element overflow to +-6 (e2m1 has no Inf/NaN, so it does either way).

    Returns:
      :class:`Quantized` with ``fmt="e2m1"``, ``scale_fmt="ue4m3"``, ``global_scale=g``.

    Example:
      >>> q = quantize_nvfp4(jnp.array([[1.0, -3.0] + [0.0] * 14], jnp.float32), global_scale=1.0)
      >>> q.elements[0, :2].tolist(), q.scales.tolist()
      ([4, 15], [[48]])
    """
    _check_choice("scale_rounding", scale_rounding, SCALE_ROUNDINGS)
    _check_choice("rounding", rounding, ELEMENT_ROUNDINGS)
    x = util.no_derivative(_as_f32(x), _NO_DERIVATIVE.format(name="quantize_nvfp4"))
    axis = _axis_and_blocks(x, axis, block)
    rbits = _random_bits(rounding, key, x.shape)
    g = None if global_scale is None else _global_scale_arg(global_scale)
    q = _quantize_nvfp4(
        x,
        rbits,
        g,
        fmt="e2m1",
        axis=axis,
        block=int(block),
        scale_rounding=scale_rounding,
        rounding=rounding,
        saturate=_flag(saturate, "saturate"),
    )
    if g is None:
        return q
    # the scale as given, with its tangent: dequantize differentiates through it
    return dataclasses.replace(q, global_scale=_with_tangent_of(q.global_scale, g))


def _global_scale_arg(global_scale):
    """A given NVFP4 global scale as a float32 scalar: a float (Python, NumPy or JAX;
    doubles rounded once to nearest float32, as the fp8 scales are, x64 on or off) or a
    Python int; bools, strings and integer arrays are a ``TypeError``, not a value
    cast."""
    bad = TypeError(
        f"global_scale: expected None or a float32 scalar (a float), got {global_scale!r}"[:300]
    )
    if isinstance(global_scale, (bool, np.bool_, str, bytes)):
        raise bad
    dtype = getattr(global_scale, "dtype", None)
    if dtype is not None and not jnp.issubdtype(dtype, jnp.floating):
        raise bad
    try:
        g = jnp.asarray(nearest_float32(global_scale), jnp.float32)
    except (TypeError, ValueError):
        raise bad from None
    if g.ndim:
        raise ValueError(f"global_scale: expected a scalar, got shape {g.shape}")
    if not isinstance(g, jax.core.Tracer) and not 0 < float(g) < np.inf:
        raise ValueError(
            "global_scale: expected a positive finite float32 scalar, got "
            f"{global_scale!r} ({float(g)!r} in float32)"[:300]
        )
    return g


@jax.custom_jvp
def _with_tangent_of(value, source):
    """``value`` (computed from ``source`` through bit operations, which drop tangents)
    with ``source``'s tangent."""
    return value


@_with_tangent_of.defjvp
def _with_tangent_of_jvp(primals, tangents):
    return primals[0], tangents[1]


@functools.partial(util.jit, static_argnames=_STATIC)
def _quantize_nvfp4(x, rbits, g, *, fmt, axis, block, scale_rounding, rounding, saturate):
    # XLA:CPU constant-folds this program differently when x is a jit constant (other
    # elements along axis=-2, tests/test_properties.py); the barrier keeps x a value
    x = lax.optimization_barrier(x)
    if g is None:
        g = _global_scale(x)
    g = _once_f32(g)  # scalars and per-block values: not recomputed per element
    gf = _f32_fields(g)
    xb = _blocked(x, axis, block)
    amax = _block_amax(xb)
    finite = _is_finite(amax)
    mode = {"nearest": "rn", "ceil": "rp", "floor": "rz"}[scale_rounding]
    six_g = (U32(3) * gf.sig, gf.exp + 1)
    sbits = _ue4m3_scale_bits(amax, *six_g, mode)
    sbits = _once(jnp.where(finite, sbits, U32(0x7F)))
    sf = fields("ue4m3", sbits)
    # elements: x / (s * g); a NaN-scale block divides by 1, a zero scale gives +0
    dsig = jnp.where(finite, sf.sig * gf.sig, U32(1))
    dexp = jnp.where(finite, sf.exp + gf.exp, 0)
    zero_scale = finite & (sf.sig == 0)
    dsig = jnp.where(zero_scale, U32(1), dsig)
    full = lambda v: _unblocked(jnp.broadcast_to(v[..., None], xb.shape), axis)  # noqa: E731
    if rounding == "rn":
        elements = _e2m1_nearest_bits(x, full(dsig), full(dexp), saturate)
    else:
        elements = _quotient_bits(fmt, x, full(dsig), full(dexp), "stochastic", rbits, saturate)
    elements = jnp.where(full(zero_scale), U32(0), elements)
    # a (traced) global scale that is not positive and finite: NaN scales, +0 elements
    g_bits = lax.bitcast_convert_type(g, U32)
    g_ok = (g_bits > U32(0)) & (g_bits < U32(0x7F800000))
    sbits = jnp.where(g_ok, sbits, U32(0x7F))
    elements = jnp.where(g_ok, elements, U32(0))
    sbits = jnp.moveaxis(sbits, -1, axis)
    return Quantized(_byte(elements), _byte(sbits), g, fmt, "ue4m3", block, axis)


def _ue4m3_scale_bits(amax, dsig, dexp, mode: str):
    """ue4m3 bits of ``amax / (dsig * 2**dexp)`` rounded (``mode``) and saturated at 448:
    ``_quotient_bits("ue4m3", amax, dsig, dexp, mode, None, True)`` for a finite
    ``amax >= +0``, with the exact grid value of :func:`_divide` turned into bits by its
    exponent and top three mantissa bits instead of two general encodings."""
    fl = _f32_fields(amax)
    nz = fl.sig != 0
    v, _ = _divide("ue4m3", jnp.where(nz, fl.sig, U32(1)), fl.exp, dsig, dexp, mode)
    vb = lax.bitcast_convert_type(v, U32)
    e = (vb >> U32(23)).astype(jnp.int32) - 127
    normal = ((e + 7).clip(0, 15).astype(U32) << U32(3)) | ((vb >> U32(20)) & U32(7))
    sub = (v * jnp.float32(512)).astype(U32)  # below 2**-6: a multiple of 2**-9, exact
    bits = jnp.where(e >= -6, normal, sub)
    bits = jnp.where(v > jnp.float32(448), U32(0x7E), bits)  # also Inf
    return jnp.where(nz, bits, U32(0))


def _e2m1_table() -> np.ndarray:
    """e2m1 codes (0 ... 7) rounded to nearest even, indexed by ``2 * F + s`` where
    ``F = floor(4 * q)`` (``0 <= F < 64``; 63 also stands for anything larger) and ``s``
    says whether ``4 * q`` exceeds ``F``. The rounding boundaries ``0.25, 0.75, ..., 5``
    times 4 are integers, so ``F + s / 2`` rounds as every ``q`` it stands for."""
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    out = np.zeros(128, np.uint32)
    for i in range(128):
        q = (i // 2 + (i % 2) / 2) / 4
        dist = [abs(q - v) for v in grid]
        best = min(dist)
        ties = [c for c, d in enumerate(dist) if d == best]
        out[i] = next((c for c in ties if c % 2 == 0), ties[0])  # even code on a tie
    return out


_E2M1_NEAREST = _e2m1_table()


def _e2m1_nearest_bits(x, dsig, dexp, saturate: bool):
    """e2m1 bits of ``x / (dsig * 2**dexp)`` rounded to nearest even: the bits of
    ``_quotient_bits("e2m1", x, dsig, dexp, "rn", None, saturate)`` (uint32 ``0 < dsig <
    2**28``).

    e2m1's rounding boundaries are multiples of 1/4, so ``floor(4 * |q|)`` and whether a
    remainder is left decide the code: one step of :func:`_long_quotient` and a table
    (:func:`_e2m1_table`). Quotients from 8 up saturate to 6 as the format does (it has
    no Inf); zeros, NaN and Inf take ``encode``'s bits.
    """
    fl = _f32_fields(x)
    nz = fl.sig != 0
    xsig = jnp.where(nz, fl.sig, U32(1))
    lx, ld = _msb(xsig), _msb(dsig)
    xa = xsig << (26 - lx).astype(U32)  # [2**26, 2**27)
    da = dsig << (27 - ld).astype(U32)  # [2**27, 2**28)
    t = fl.exp - dexp + lx - ld + 3  # 4|q| = xa * 2**t / da, in (2**(t - 2), 2**t)
    _, f, sticky = _long_quotient(xa, da, t.clip(0, 6), 1)
    f = jnp.where(t > 6, U32(63), f)
    code = jnp.asarray(_E2M1_NEAREST)[(f << U32(1)) | sticky.astype(U32)]
    special = [U32(special_bits("e2m1", v, saturate=saturate)) for v in (0.0, np.inf, np.nan)]
    sign = fl.sign << U32(3)
    other = jnp.where(fl.nan, special[2], sign | jnp.where(fl.inf, special[1], special[0]))
    return jnp.where(nz & ~fl.nan & ~fl.inf, sign | code, other)


# ---------------------------------------------------------------------------------------
def _once(v):
    """``v`` (uint32 below 2**16) as one remainder XLA will not recompute per reader:
    ``v % (v | 2**16) = v`` (see :func:`computed_once`)."""
    return v % (v | U32(0x10000))


def _once_u8(v):
    return _once(v.astype(U32)).astype(v.dtype)


def _once_f32(g):
    """Any float32 ``g`` through :func:`_once`, its bits in two halves."""
    b = lax.bitcast_convert_type(jnp.asarray(g, jnp.float32), U32)
    b = (_once(b >> U32(16)) << U32(16)) | _once(b & U32(0xFFFF))
    return lax.bitcast_convert_type(b, jnp.float32)


def computed_once(q: Quantized) -> Quantized:
    """``q`` with the same bits, in a form XLA computes once rather than in every reader.

    Under ``jit`` XLA:CPU fuses cheap elementwise producers (integer, compare and select
    ops: all of a quantizer) into each consumer, and the GEMM reads every element M or N
    times (broadcast products), so a quantizer traced into the same program as its GEMM
    was recomputed per reader (``lax.optimization_barrier`` does not stop it: XLA:CPU
    removes barriers before fusion). XLA rates an integer remainder by a non-constant
    divisor as expensive and does not fuse an expensive producer into a consumer that
    reuses its elements, so the elements, scales and global scale each end in one:
    ``v % (v | 2**16)`` is ``v`` for any ``v < 2**16`` (the divisor exceeds it), while
    XLA cannot prove it (the bytes as they are; the global scale's bits in two halves).
    One remainder per element, computed once. Only the speed depends on XLA's fusion
    choices; the bits never do.
    """

    g = None if q.global_scale is None else _once_f32(q.global_scale)
    return dataclasses.replace(
        q, elements=_once_u8(q.elements), scales=_once_u8(q.scales), global_scale=g
    )


# ---------------------------------------------------------------------------------------
def dequantize(q: Quantized) -> jax.Array:
    """The float32 values of a :class:`Quantized` tensor: ``element * scale * global``.

    Each value is the exact product rounded once to nearest even float32 (MX values are
    exact; overflow gives Inf). A NaN scale or element gives NaN.

    Example:
      >>> x = jnp.array([0.3, 5.0, -7.0, 1e-3], jnp.float32)
      >>> dequantize(quantize_mx(x, "e2m1", block=4)).tolist()
      [0.5, 4.0, -6.0, 0.0]
    """
    return _dequantize_jvp(check_quantized(q, "q"))


@jax.custom_jvp
def _dequantize_jvp(q: Quantized) -> jax.Array:
    return _dequantize(q)


@_dequantize_jvp.defjvp
def _dequantize_tangent(primals, tangents):
    """The only float input is the global scale: d(e * s * g) = (e * s) * dg."""
    (q,), (dq,) = primals, tangents
    out = _dequantize(q)
    if q.global_scale is None:
        return out, jnp.zeros_like(out)
    unit = _dequantize(dataclasses.replace(q, global_scale=jnp.ones_like(q.global_scale)))
    dg = dq.global_scale
    dg = dg.reshape(dg.shape + (1,) * (out.ndim - dg.ndim))
    return out, unit * jnp.broadcast_to(dg, out.shape)


def fake_quantize_mx(x: ArrayLike, fmt: str, **kwargs: Any) -> jax.Array:
    """``dequantize(quantize_mx(x, fmt, **kwargs))`` with a straight-through derivative.

    The value is exactly the round trip; the derivative with respect to ``x`` is the
    identity's (the straight-through estimator of quantization-aware training), where
    the round trip itself has zero derivative almost everywhere. ``quantize_mx`` alone
    (integer bits) refuses to be differentiated.

    Args:
      x: float32/float16/bfloat16 array; ``fmt`` and ``kwargs`` as for :func:`quantize_mx`.

    Returns:
      float32, the shape of ``x``.

    Example:
      >>> jax.grad(lambda v: fake_quantize_mx(v, "e2m1", block=4).sum())(
      ...     jnp.array([0.3, 5.0, -7.0, 1e-3], jnp.float32)).tolist()
      [1.0, 1.0, 1.0, 1.0]
    """
    _as_f32(x)  # the argument errors, before tracing
    return util.straight_through(lambda v: dequantize(quantize_mx(v, fmt, **kwargs)), x)


def fake_quantize_nvfp4(x: ArrayLike, **kwargs: Any) -> jax.Array:
    """``dequantize(quantize_nvfp4(x, **kwargs))`` with a straight-through derivative (as
    :func:`fake_quantize_mx`; ``kwargs`` as for :func:`quantize_nvfp4`). The global
    scale is computed from ``x`` (a constant of the derivative) or given; a given one is
    differentiated as :func:`dequantize` does: ``d(e * s * g) = (e * s) dg``."""
    _as_f32(x)
    g = kwargs.pop("global_scale", None)
    if g is None:
        return util.straight_through(lambda v: dequantize(quantize_nvfp4(v, **kwargs)), x)
    key = kwargs.pop("key", None)
    return _fake_nvfp4(x, _global_scale_arg(g), key, tuple(sorted(kwargs.items())))


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _fake_nvfp4(x, g, key, kwargs):
    return dequantize(quantize_nvfp4(x, global_scale=g, key=key, **dict(kwargs)))


@_fake_nvfp4.defjvp
def _fake_nvfp4_jvp(kwargs, primals, tangents):
    """Straight through in ``x``; ``(e * s) dg`` in the global scale."""
    x, g, key = primals
    dx, dg, _ = tangents
    # e and s are the derivative's constants (straight through), to any order
    q = quantize_nvfp4(
        lax.stop_gradient(x), global_scale=lax.stop_gradient(g), key=key, **dict(kwargs)
    )
    out = _fake_nvfp4(x, g, key, kwargs)  # itself: a derivative of this rule meets it again
    unit = dequantize(dataclasses.replace(q, global_scale=jnp.ones_like(q.global_scale)))
    return out, jnp.asarray(dx, out.dtype) + unit * dg


def _f32_rounded(n, u):
    """float32 bits of ``n * 2**u`` (uint32 ``n``) rounded once to nearest even:
    subnormals kept, Inf above the range, +0 for ``n = 0``."""
    p = _msb(jnp.maximum(n, U32(1)))
    e = u + p  # exponent of the leading bit
    lsb = jnp.maximum(e - 23, -149)  # exponent of the last bit float32 keeps
    shift = lsb - u  # bits to drop (<= 0: none)
    sh = shift.clip(0, 31).astype(U32)
    kept = jnp.where(shift <= 0, n << (-shift).clip(0, 31).astype(U32), n >> sh)
    kept = jnp.where(shift >= 32, U32(0), kept)
    rem = n - (kept << sh)  # the dropped bits (shift in 1..31)
    half = U32(1) << (sh - U32(1)).clip(0, 31)
    up = (shift >= 1) & (shift <= 31) & ((rem > half) | ((rem == half) & ((kept & 1) != 0)))
    up = up | ((shift == 32) & (n > U32(0x80000000)))  # half = 2**31, kept = 0 (even)
    kept = kept + up.astype(U32)  # may carry into the next binade: the addition below
    bits = jnp.where(e >= -126, ((e + 126).clip(0, 255).astype(U32) << U32(23)) + kept, kept)
    bits = jnp.where((e > 127) | (bits > U32(0x7F800000)), U32(0x7F800000), bits)
    return jnp.where(n == 0, U32(0), bits)


@util.jit
def _dequantize(q: Quantized) -> jax.Array:
    """``element * scale * global`` rounded once to nearest even float32.

    In integers: the significands' product has at most 4 + 4 + 24 bits (e2m1 x ue4m3 x
    float32, e4m3 x ue8m0), one rounding to float32 (:func:`_f32_rounded`) gives the
    magnitude (MX values are exact). The sign is the element's times the global scale's
    (signed zeros too), NaN (a NaN element, scale or global scale, or Inf times 0) is
    ``0x7FFFFFFF``, Inf times nonzero finite is Inf. No float arithmetic: XLA:CPU
    flushes subnormal products to zero.
    """
    elements, scales = raw_bits(q)
    e = fields(q.fmt, elements)
    s = fields(q.scale_fmt, jnp.repeat(scales, q.block, axis=q.axis))
    g = jnp.float32(1.0) if q.global_scale is None else q.global_scale
    g = g.reshape(g.shape + (1,) * (e.sig.ndim - g.ndim))  # batched by vmap: leading axes
    g = jax.tree.map(lambda v: jnp.broadcast_to(v, e.sig.shape), _f32_fields(g))

    def zero(f):
        return (f.sig == 0) & ~f.nan & ~f.inf

    nan = e.nan | s.nan | g.nan | (e.inf & (zero(s) | zero(g))) | (g.inf & (zero(e) | zero(s)))
    inf = (e.inf | g.inf) & ~nan
    mag = _f32_rounded(e.sig * s.sig * g.sig, e.exp + s.exp + g.exp)
    mag = jnp.where(inf, U32(0x7F800000), mag)
    bits = mag | ((e.sign ^ g.sign) << U32(31))
    bits = jnp.where(nan, U32(CANONICAL_NAN["f32"]), bits)
    return lax.bitcast_convert_type(bits, jnp.float32)
