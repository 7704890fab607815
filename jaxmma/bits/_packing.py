"""Sub-word elements in 32-bit registers, and the ``kind::f8f6f4`` byte containers.

PTX ISA 9.7.14.5 (fragments hold elements packed low-first into ``.b32`` registers) and
9.7.14.5.14 (``mma`` with ``.kind::f8f6f4``: an ``.e2m1`` element sits in bits [5:2] of
an 8-bit container, an ``.e3m2``/``.e2m3`` element in bits [5:0], the other bits are
padding; ``.kind::mxf4``/``.kind::mxf4nvf4`` pack ``.e2m1`` without padding, which is
plain ``pack(elems, 4)``).

What the hardware does with nonzero padding bits is not known here: :func:`from_container`
ignores them and :func:`to_container` writes zeros. (The public faces in
:mod:`jaxmma.formats` take the format first: :func:`container_from_bits`,
:func:`bits_from_container`.)
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._formats import _dtype_of, get_format

ELEMENT_BITS = (1, 2, 4, 8, 16, 32)

#: Lowest bit of the element inside its 8-bit ``kind::f8f6f4`` container.
F8F6F4_OFFSET = {"e4m3": 0, "e5m2": 0, "e3m2": 0, "e2m3": 0, "e2m1": 2}


def _check_bits(bits_per_elem) -> int:
    if isinstance(bits_per_elem, bool) or bits_per_elem not in ELEMENT_BITS:
        raise ValueError(
            f"bits_per_elem: expected one of {list(ELEMENT_BITS)}, got {bits_per_elem!r}"
        )
    return int(bits_per_elem)


def _as_uint32(x, name: str) -> jax.Array:
    dtype = _dtype_of(x)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{name}: expected an unsigned integer dtype (uint32), got {dtype}")
    return jnp.asarray(x).astype(jnp.uint32)


def _shifts(bits: int, shape) -> jax.Array:
    """``j * bits`` along the last axis of ``shape`` (explicitly broadcast)."""
    per = shape[-1]
    return jnp.broadcast_to(jnp.arange(per, dtype=jnp.uint32) * jnp.uint32(bits), shape)


def pack(elems: ArrayLike, bits_per_elem: int) -> jax.Array:
    """Packs sub-word elements into 32-bit registers, lowest bits first.

    Args:
      elems: integer array ``[..., n]``, each element's value in its low
        ``bits_per_elem`` bits (higher bits are ignored).
      bits_per_elem: one of 1, 2, 4, 8, 16, 32; ``n * bits_per_elem`` must be a multiple
        of 32.

    Returns:
      uint32 ``[..., n * bits_per_elem // 32]``: element ``j`` of register ``i`` is
      ``elems[..., i * (32 // bits_per_elem) + j]`` in bits
      ``[j * bits_per_elem, (j + 1) * bits_per_elem)``.

    Example:
      >>> hex(int(pack(jnp.arange(1, 9, dtype=jnp.uint32), 4)[0]))
      '0x87654321'
    """
    bits = _check_bits(bits_per_elem)
    e = _as_uint32(elems, "elems")
    per = 32 // bits
    if e.ndim == 0 or e.shape[-1] % per:
        raise ValueError(
            f"elems: expected a last axis that is a multiple of {per} "
            f"(32 // bits_per_elem), got shape {e.shape}"
        )
    e = e.reshape(*e.shape[:-1], e.shape[-1] // per, per)
    if bits < 32:
        e = e & jnp.uint32(2**bits - 1)
    # Disjoint bit fields: the sum is their bitwise OR.
    return jnp.sum(e << _shifts(bits, e.shape), axis=-1, dtype=jnp.uint32)


def unpack(regs: ArrayLike, bits_per_elem: int) -> jax.Array:
    """Splits 32-bit registers into sub-word elements, lowest bits first (inverse of pack).

    Args:
      regs: integer array ``[..., r]`` of 32-bit registers.
      bits_per_elem: one of 1, 2, 4, 8, 16, 32.

    Returns:
      uint32 ``[..., r * (32 // bits_per_elem)]``, each element in the low bits.

    Example:
      >>> unpack(jnp.uint32([0x87654321]), 8).tolist()
      [33, 67, 101, 135]
    """
    bits = _check_bits(bits_per_elem)
    r = _as_uint32(regs, "regs")
    if r.ndim == 0:
        raise ValueError(f"regs: expected at least one axis, got shape {r.shape}")
    per = 32 // bits
    shape = (*r.shape, per)
    e = jnp.broadcast_to(r[..., None], shape) >> _shifts(bits, shape)
    if bits < 32:
        e = e & jnp.uint32(2**bits - 1)
    return e.reshape(*r.shape[:-1], r.shape[-1] * per)


def _container_format(fmt: str):
    f = get_format(fmt)
    if fmt not in F8F6F4_OFFSET:
        raise ValueError(
            f"fmt: expected one of {sorted(F8F6F4_OFFSET)} (kind::f8f6f4 "
            f"element types), got {fmt!r}"
        )
    return f.bits, F8F6F4_OFFSET[fmt]


def to_container(bits, fmt: str) -> jax.Array:
    """Places element bits in their ``kind::f8f6f4`` 8-bit container, padding zero.

    Args:
      bits: integer array ``[...]``, the element in the low bits (higher bits ignored).
      fmt: ``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"`` or ``"e2m1"``.

    Returns:
      uint32 ``[...]`` with the container byte in bits [7:0]: e2m1 in bits [5:2],
      e3m2/e2m3 in bits [5:0], e4m3/e5m2 in the whole byte.

    Example:
      >>> hex(int(to_container(jnp.uint32(0xF), "e2m1")))
      '0x3c'
    """
    width, offset = _container_format(fmt)
    b = _as_uint32(bits, "bits")
    return (b & jnp.uint32(2**width - 1)) << offset


def from_container(byte, fmt: str) -> jax.Array:
    """Extracts element bits from a ``kind::f8f6f4`` 8-bit container, ignoring padding.

    Args:
      byte: integer array ``[...]``, the container in bits [7:0] (higher bits ignored).
      fmt: ``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"`` or ``"e2m1"``.

    Returns:
      uint32 ``[...]``, the element bits in the low bits.

    Example:
      >>> hex(int(from_container(jnp.uint32(0xFF), "e2m1")))
      '0xf'
    """
    width, offset = _container_format(fmt)
    b = _as_uint32(byte, "byte")
    return (b >> offset) & jnp.uint32(2**width - 1)


# ---------------------------------------------------------------------------------------
# Public faces (``jaxmma.formats.to_container`` / ``from_container``): the format first,
# as in every other function of ``jaxmma.formats`` (``decode(fmt, bits)``, ...). The
# old order ``(bits, fmt)`` still works, with a DeprecationWarning.
def _format_first(name: str, fmt, bits):
    if isinstance(bits, str) and not isinstance(fmt, str):
        warnings.warn(
            f"jaxmma.formats.{name}(bits, fmt) is deprecated; pass the format first: "
            f"{name}(fmt, bits), as decode(fmt, bits) does",
            DeprecationWarning,
            stacklevel=3,
        )
        return bits, fmt
    return fmt, bits


def container_from_bits(fmt: str, bits: ArrayLike) -> jax.Array:
    """Places element bits in their ``kind::f8f6f4`` 8-bit container, padding zero.

    Args:
      fmt: ``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"`` or ``"e2m1"``.
      bits: integer array ``[...]``, the element in the low bits (higher bits ignored).

    Returns:
      uint32 ``[...]`` with the container byte in bits [7:0]: e2m1 in bits [5:2],
      e3m2/e2m3 in bits [5:0], e4m3/e5m2 in the whole byte.

    Example:
      >>> hex(int(container_from_bits("e2m1", jnp.uint32(0xF))))
      '0x3c'
    """
    fmt, bits = _format_first("to_container", fmt, bits)
    return to_container(bits, fmt)


def bits_from_container(fmt: str, byte: ArrayLike) -> jax.Array:
    """Extracts element bits from a ``kind::f8f6f4`` 8-bit container, ignoring padding.

    Args:
      fmt: ``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"`` or ``"e2m1"``.
      byte: integer array ``[...]``, the container in bits [7:0] (higher bits ignored).

    Returns:
      uint32 ``[...]``, the element bits in the low bits.

    Example:
      >>> hex(int(bits_from_container("e2m1", jnp.uint32(0xFF))))
      '0xf'
    """
    fmt, byte = _format_first("from_container", fmt, byte)
    return from_container(byte, fmt)
