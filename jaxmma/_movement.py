"""``ldmatrix``, ``stmatrix`` and ``movmatrix`` on shared-memory images (9.7.14.5.15-17).

Conventions (DESIGN.md): ``smem`` is a ``uint8 [..., nbytes]`` image of shared memory,
``addrs`` ``uint32 [..., 32]`` holds each lane's byte offset into it (only the lanes the
spec assigns row addresses to are read), registers are ``uint32 [..., 32, nregs]``.

Row addresses must be 16-byte aligned and the rows must lie inside the image. With
concrete addresses a violation raises ``ValueError``; under ``jax.jit`` the addresses are
not known when the program is built, and out-of-range bytes read as zero and stores
outside the image are dropped (never wrapped).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import _fragments, _layouts

ALIGN = 16


def _layout(ins):
    fn = _layouts.ldmatrix_layout if ins.opcode == "ldmatrix" else _layouts.stmatrix_layout
    return fn(shape=ins.shape, num=ins.form.num, trans=ins.trans, elem=ins.form.elem)


def _check_image(smem, name="smem"):
    smem = jnp.asarray(smem)
    if smem.dtype != jnp.uint8:
        raise TypeError(f"{name}: expected a uint8 shared-memory image, got {smem.dtype}")
    if smem.ndim < 1:
        raise ValueError(f"{name}: expected shape [..., nbytes], got {tuple(smem.shape)}")
    return smem


def _check_addrs(addrs, lay, nbytes: int):
    addrs = jnp.asarray(addrs)
    if addrs.dtype != jnp.uint32:
        raise TypeError(f"addrs: expected uint32 byte offsets, got {addrs.dtype}")
    if addrs.ndim < 1 or addrs.shape[-1] != 32:
        raise ValueError(f"addrs: expected shape [..., 32], got {tuple(addrs.shape)}")
    if isinstance(addrs, jax.core.Tracer):
        return addrs
    used = np.unique(np.asarray(lay.addr_lane).reshape(-1))
    a = np.asarray(addrs)[..., used].astype(np.int64)
    row_bytes = lay.cols * lay.mem_bits // 8 if lay.mem_bits >= 8 else ALIGN
    row_bytes = max(row_bytes, ALIGN if lay.mem_bits < 8 else row_bytes)
    bad = np.nonzero(a % ALIGN)
    if bad[0].size:
        lane = used[bad[-1][0]]
        raise ValueError(
            f"addrs: lane {lane} row address {a[bad][0]} is not a multiple of "
            f"{ALIGN} bytes (ldmatrix/stmatrix rows must be 16-byte aligned)"
        )
    over = np.nonzero(a + row_bytes > nbytes)
    if over[0].size:
        lane = used[over[-1][0]]
        raise ValueError(
            f"addrs: lane {lane} row [{a[over][0]}, {a[over][0] + row_bytes}) "
            f"lies outside the {nbytes}-byte shared-memory image"
        )
    return addrs


def _element_offsets(lay, addrs):
    """Bit offset of every register element in the image: ``[..., 32, nelem]`` int32."""
    src = jnp.asarray(lay.addr_lane)[lay.mat, lay.row]  # [32, nelem]: lane giving the row
    base = jnp.take(addrs, jnp.asarray(src).reshape(-1), axis=-1).reshape(
        addrs.shape[:-1] + src.shape
    )
    col = jnp.broadcast_to(jnp.asarray(lay.col * lay.mem_bits, jnp.int32), base.shape)
    return base.astype(jnp.int32) * 8 + col


def _read_bits(smem, bitoff, nbits: int):
    """Little-endian ``nbits``-bit fields at bit offsets ``[..., 32, nelem]``."""
    nbytes = smem.shape[-1]
    byte = bitoff // 8
    shift = (bitoff % 8).astype(jnp.uint32)
    batch = smem.shape[:-1]
    flat_idx = byte.reshape(batch + (-1,))
    value = jnp.zeros(flat_idx.shape, jnp.uint32)
    for j in range(-(-(nbits + 7) // 8)):
        idx = flat_idx + j
        b = jnp.take_along_axis(smem, jnp.clip(idx, 0, nbytes - 1), axis=-1)
        b = jnp.where((idx >= 0) & (idx < nbytes), b, 0).astype(jnp.uint32)
        value = value | (b << jnp.uint32(8 * j))
    value = value.reshape(byte.shape)
    return (value >> shift) & jnp.uint32((1 << nbits) - 1)


def ldmatrix(ins, smem, addrs):
    lay = _layout(ins)
    smem = _check_image(smem)
    addrs = _check_addrs(addrs, lay, smem.shape[-1])
    smem, addrs = _broadcast(smem, addrs)
    elems = _read_bits(smem, _element_offsets(lay, addrs), lay.mem_bits)
    return _fragments.pack(elems, lay.elem_bits)


def stmatrix(ins, smem, addrs, regs):
    lay = _layout(ins)
    smem = _check_image(smem)
    addrs = _check_addrs(addrs, lay, smem.shape[-1])
    regs = jnp.asarray(regs)
    if regs.dtype != jnp.uint32 or regs.shape[-2:] != (32, lay.nregs):
        raise ValueError(
            f"regs: expected uint32 [..., 32, {lay.nregs}], got {regs.dtype} {tuple(regs.shape)}"
        )
    batch = jnp.broadcast_shapes(smem.shape[:-1], addrs.shape[:-1], regs.shape[:-2])
    smem = jnp.broadcast_to(smem, batch + smem.shape[-1:])
    addrs = jnp.broadcast_to(addrs, batch + (32,))
    regs = jnp.broadcast_to(regs, batch + regs.shape[-2:])
    elems = _fragments.unpack(regs, lay.elem_bits)  # [..., 32, nelem]
    return write_bytes(smem, _element_offsets(lay, addrs) // 8, elems, lay.mem_bits // 8)


def write_bytes(image, byte_offsets, values, nbytes: int):
    """Store ``values`` (little-endian, ``nbytes`` each) at ``byte_offsets`` of the image.

    ``image`` ``uint8 [..., size]``; offsets and values ``[..., 32, nelem]`` with the same
    batch. Stores outside the image are dropped (never wrapped).
    """
    flat = image.reshape((-1, image.shape[-1]))
    idx = byte_offsets.reshape((flat.shape[0], -1))
    val = values.reshape((flat.shape[0], -1))
    rows = jnp.arange(flat.shape[0])[:, None]
    for j in range(nbytes):
        part = ((val >> (8 * j)) & 0xFF).astype(jnp.uint8)
        flat = flat.at[rows, idx + j].set(part, mode="drop")
    return flat.reshape(image.shape)


def _broadcast(smem, addrs):
    batch = jnp.broadcast_shapes(smem.shape[:-1], addrs.shape[:-1])
    return (jnp.broadcast_to(smem, batch + smem.shape[-1:]), jnp.broadcast_to(addrs, batch + (32,)))


def movmatrix(ins, a):
    a = jnp.asarray(a)
    if a.dtype != jnp.uint32:
        raise TypeError(f"a: expected uint32 registers, got {a.dtype}")
    if a.ndim < 1 or a.shape[-1] != 32:
        raise ValueError(f"a: expected shape [..., 32], got {tuple(a.shape)}")
    mv = _layouts.movmatrix_layout()
    halves = _fragments.unpack(a[..., None], 16).reshape(a.shape[:-1] + (64,))
    pos = (mv.src.row * 8 + mv.src.col).reshape(-1)  # where each source half sits in M
    m = halves[..., np.argsort(pos, kind="stable")]  # M, row-major [..., 64]
    want = (mv.dst.row * 8 + mv.dst.col).reshape(-1)
    d = m[..., want].reshape(a.shape[:-1] + (32, 2))
    return _fragments.pack(d, 16)[..., 0]


def execute(ins, *args, **kwargs):
    fn = {"ldmatrix": ldmatrix, "stmatrix": stmatrix, "movmatrix": movmatrix}[ins.opcode]
    try:
        return fn(ins, *args, **kwargs)
    except TypeError as err:
        if "positional argument" in str(err) or "unexpected keyword" in str(err):
            sig = {
                "ldmatrix": "ins(smem, addrs)",
                "stmatrix": "ins(smem, addrs, regs)",
                "movmatrix": "ins(a)",
            }[ins.opcode]
            raise TypeError(f"{ins.opcode} is called as {sig}: {err}") from None
        raise


def matrix_mma(ins, *args, **kwargs):
    raise ValueError(f"{ins.opcode} moves data; it has no matrix product (use ins(...))")
