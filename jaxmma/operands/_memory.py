"""Byte images of memory and overflow-free addressing (``ldmatrix``/``stmatrix``/``wmma``).

An image is a ``uint8 [..., nbytes]`` array. Element positions are *bit offsets* into it,
computed in ``uint32`` with saturation: every offset is clamped to ``limit = 8 * nbytes``
(one past the last bit), and a value at or beyond it stays there through every sum and
product, so no address can wrap around to the start of the image, whatever its size.
Images hold at most :data:`MAX_BYTES` bytes, so that two clamped offsets add without
overflow.

The rule for addresses outside the image (the same for every instruction):

* concrete addresses (eager calls, Python ints) are checked in Python: an element that
  does not lie entirely inside the image raises ``ValueError``;
* traced addresses (under ``jit``/``vmap``) cannot be checked when the program is built:
  an element that does not lie entirely inside the image reads as zero and its store is
  dropped; nothing is ever redirected to another address. With ``check=True`` the
  compiled program raises instead when it runs (:func:`jaxmma._errors.raise_if`: a
  ``jax.errors.JaxRuntimeError`` carrying our ``ValueError`` message).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import util

U32 = jnp.uint32
#: The largest image (bytes): bit offsets up to ``8 * MAX_BYTES`` and the sum of two of
#: them fit in uint32.
MAX_BYTES = 2**28


def check_image(image, name: str):
    """``image`` as a ``uint8 [..., nbytes]`` array (TypeError/ValueError otherwise)."""
    image = jnp.asarray(image)
    if image.dtype != jnp.uint8:
        raise TypeError(f"{name}: expected a uint8 memory image [..., nbytes], got {image.dtype}")
    if image.ndim < 1 or image.shape[-1] == 0:
        raise ValueError(f"{name}: expected shape [..., nbytes], got {tuple(image.shape)}")
    if image.shape[-1] > MAX_BYTES:
        raise ValueError(
            f"{name}: images of at most {MAX_BYTES} bytes (2**28) are supported, "
            f"got {image.shape[-1]}"
        )
    return image


def limit(nbytes: int) -> int:
    """The saturation value of bit offsets into an ``nbytes`` image (one past its end)."""
    return 8 * nbytes


def clamp(x, nbytes: int, unit_bits: int):
    """Non-negative integer counts of ``unit_bits`` -> uint32, saturated at ``limit``.

    ``x`` is any integer array (negative values count as beyond the end). Returns
    ``min(x, limit)`` in units (not bits): multiply by :func:`scale` afterwards.
    """
    top = limit(nbytes) // unit_bits + 1
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
        big = jnp.iinfo(x.dtype).max
        x = jnp.where(x < 0, jnp.asarray(big, x.dtype), x)
    if jnp.iinfo(x.dtype).max > top:
        x = jnp.minimum(x, jnp.asarray(top, x.dtype))
    return x.astype(U32)


def scale(x, k, nbytes: int):
    """``min(x * k, limit)`` without overflow: ``x`` uint32 (at most ``limit``), ``k`` a
    static non-negative integer array broadcastable to ``x``."""
    top = limit(nbytes)
    k = np.asarray(k, np.int64)
    shape = jnp.broadcast_shapes(x.shape, k.shape)
    x = jnp.broadcast_to(x, shape)
    big = jnp.broadcast_to(jnp.asarray((top // np.maximum(k, 1)).astype(np.uint32)), shape)
    kk = jnp.broadcast_to(jnp.asarray(k.astype(np.uint32)), shape)
    return jnp.where(x > big, U32(top), jnp.minimum(x * kk, U32(top)))


def add(a, b, nbytes: int):
    """``min(a + b, limit)`` of two uint32 offsets each at most ``limit`` (< 2**31);
    ``b`` may be a static non-negative integer array."""
    if isinstance(b, np.ndarray):
        b = jnp.asarray(np.minimum(b, limit(nbytes)).astype(np.uint32))
    shape = jnp.broadcast_shapes(a.shape, b.shape)
    a, b = jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)
    return jnp.minimum(a + b, U32(limit(nbytes)))


def inside(bitoff, nbits: int, nbytes: int):
    """bool: the ``nbits``-bit element at ``bitoff`` lies entirely inside the image."""
    return bitoff <= U32(limit(nbytes) - nbits)


def read(image, bitoff, nbits: int):
    """Little-endian ``nbits``-bit fields at bit offsets ``bitoff`` (uint32 ``[..., 32,
    nelem]``, the image's batch in front) -> uint32; zero where not :func:`inside`."""
    nbytes = image.shape[-1]
    ok = inside(bitoff, nbits, nbytes)
    bitoff = jnp.where(ok, bitoff, U32(0))
    byte = (bitoff >> U32(3)).astype(jnp.int32)
    shift = bitoff & U32(7)
    batch = image.shape[:-1]
    flat = byte.reshape(batch + (-1,))
    value = jnp.zeros(flat.shape, U32)
    for j in range(-(-(nbits + 7) // 8)):
        idx = jnp.minimum(flat + j, nbytes - 1)
        b = jnp.take_along_axis(image, idx, axis=-1).astype(U32)
        b = jnp.where(flat + j < nbytes, b, U32(0))
        value = value | (b << U32(8 * j))
    value = value.reshape(byte.shape)
    mask = U32((1 << nbits) - 1) if nbits < 32 else U32(0xFFFFFFFF)
    return jnp.where(ok, (value >> shift) & mask, U32(0))


def write(image, bitoff, values, nbits: int):
    """Store ``values`` (little-endian, ``nbits`` a multiple of 8) at byte-aligned bit
    offsets ``bitoff`` (uint32 ``[..., 32, nelem]`` with the image's batch); stores of
    elements not :func:`inside` the image are dropped. Returns the new image."""
    nbytes = image.shape[-1]
    ok = inside(bitoff, nbits, nbytes)
    byte = jnp.where(ok, (bitoff >> U32(3)).astype(jnp.int32), nbytes)  # nbytes: dropped
    flat = image.reshape((-1, nbytes))
    idx = byte.reshape((flat.shape[0], -1))
    val = values.reshape((flat.shape[0], -1))
    rows = jnp.arange(flat.shape[0])[:, None]
    for j in range(nbits // 8):
        part = ((val >> (8 * j)) & 0xFF).astype(jnp.uint8)
        flat = flat.at[rows, idx + j].set(part, mode="drop")
    return flat.reshape(image.shape)


def check_traced(ok, name: str, what: str) -> None:
    """Checked mode for traced addresses: a run-time error (:func:`jaxmma._errors.raise_if`)
    unless all of ``ok`` (bool, one per element) holds; the error names the argument."""
    message = f"{name}: an address lies outside the memory image or is misaligned ({what})"
    util.raise_if(~jnp.all(ok), lambda pos: message)
