"""``wmma.load``, ``wmma.store`` and ``wmma.mma`` (9.7.14.4).

The spec leaves the fragment layout unspecified. On sm_90 it was read off an H100 by
loading matrices whose elements hold their own index (``tests/golden/sm_90/wmma_load-*``):
every ``wmma`` fragment is a sequence of ``mma`` fragments ("atoms"), one per tile of the
matrix, repeated until the fragment's registers are full:

* the atom of A/B/C is the ``mma`` layout of the same element type with the wmma's k:
  ``m16n8k16`` for ``.f16``/``.bf16``/``.s8``/``.u8``, ``m16n8k8`` for ``.tf32``, and the
  ``m8n8k32``/``m8n8k128``/``m8n8k4`` layouts for ``.s4``/``.u4``, ``.b1`` and ``.f64``;
* tiles follow each other along the dimension that is larger than the atom (rows of A and
  C for m32n8k16, columns of B and C for m16n16k16); an 8-column B (m32n8k16) keeps the
  atom as it is, repeated;
* m8n32k16 is laid out as its transpose m32n8k16 (``D^T = B^T A^T``): its A fragment is
  the m32n8k16 B fragment transposed, its B the m32n8k16 A transposed, C likewise;
* the memory layout (``.row``/``.col``) does not change the fragment;
* A/B fragments of ``.f16`` are eight registers for every shape: the tiles repeat
  (m16n16k16 A holds the m16n8k16 A fragment twice, m8n32k16 A four times).

``wmma.mma`` computes on the logical matrices with the numerics of the matching ``mma``
(every wmma k equals its atom's k, so the tiles do not change the arithmetic).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _fragments, _layouts, _models

ALIGN = 16
ATOM_K = {
    "f16": 16,
    "bf16": 16,
    "s8": 16,
    "u8": 16,
    "tf32": 8,
    "s4": 32,
    "u4": 32,
    "b1": 128,
    "f64": 4,
}
_ACC = {
    "f16": "f16",
    "bf16": "f32",
    "tf32": "f32",
    "s8": "s32",
    "u8": "s32",
    "s4": "s32",
    "u4": "s32",
    "b1": "s32",
    "f64": "f64",
}


class WmmaLayout(NamedTuple):
    """Fragment map of one wmma operand: ``row``/``col`` ``int32 [32, nelem]``."""

    row: np.ndarray
    col: np.ndarray
    rows: int
    cols: int
    nregs: int
    elem_bits: int
    reg_bits: int


def _atom(frag: str, elem: str, acc: str):
    """The mma layout that one tile of a wmma fragment uses."""
    if elem in ("s4", "u4", "b1", "f64"):
        shape = {"s4": "m8n8k32", "u4": "m8n8k32", "b1": "m8n8k128", "f64": "m8n8k4"}[elem]
    else:
        shape = f"m16n8k{ATOM_K[elem]}"
    op = "c" if frag in ("c", "d") else frag
    return _layouts.mma_layout(op, shape=shape, atype=elem, btype=elem, ctype=acc)


@functools.cache
def layout(shape: str, frag: str, elem: str, nregs: int) -> WmmaLayout:
    """The sm_90 fragment layout of a ``wmma`` operand (see the module docstring).

    Args:
      shape: ``'m16n16k16'``, ``'m8n32k16'``, ``'m32n8k16'``, ``'m16n16k8'``,
        ``'m8n8k32'``, ``'m8n8k128'`` or ``'m8n8k4'``.
      frag: ``'a'``, ``'b'``, ``'c'`` or ``'d'``.
      elem: the element type of that operand (A/B: ``.f16``...; C/D: the accumulator).
      nregs: registers of the fragment (from the instruction table).
    """
    if shape == "m8n32k16":  # computed as its transpose, m32n8k16: D^T = B^T A^T
        other = {"a": "b", "b": "a"}.get(frag, frag)
        t = layout("m32n8k16", other, elem, nregs)
        return t._replace(row=t.col, col=t.row, rows=t.cols, cols=t.rows)
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    rows, cols = {"a": (m, k), "b": (k, n)}.get(frag, (m, n))
    if frag in ("c", "d"):
        # the multiplicand type only picks the atom's shape; accumulators share it
        mult = {"f16": "f16", "f32": "f16", "s32": "s8", "f64": "f64"}[elem]
        if shape in ("m16n16k8",):
            mult = "tf32"
        if shape == "m8n8k32":
            mult = "s4"
        if shape == "m8n8k128":
            mult = "b1"
        at = _atom("c", mult, elem)
    else:
        at = _atom(frag, elem, _ACC[elem])
    arow, acol = at.row.max() + 1, at.col.max() + 1
    keep = np.ones(at.row.shape[1], bool)
    if rows < arow:  # an 8-row matrix keeps the atom's rows 0-7
        keep = (at.row < rows).all(axis=0)
        assert ((at.row < rows) == keep[None, :]).all()
    r0, c0 = at.row[:, keep], at.col[:, keep]
    tile_r, tile_c = min(rows, arow), acol
    tr, tc = rows // tile_r, cols // tile_c
    rr, cc = [], []
    for i in range(tr):
        for j in range(tc):
            rr.append(r0 + i * tile_r)
            cc.append(c0 + j * tile_c)
    row, col = np.concatenate(rr, axis=1), np.concatenate(cc, axis=1)
    per = at.elems_per_reg
    need = nregs * per
    reps = -(-need // row.shape[1])
    row, col = np.tile(row, (1, reps))[:, :need], np.tile(col, (1, reps))[:, :need]
    for a in (row, col):
        a.setflags(write=False)
    return WmmaLayout(
        row.astype(np.int32),
        col.astype(np.int32),
        rows,
        cols,
        nregs,
        at.elem_bits,
        64 if at.elem_bits == 64 else 32,
    )


def _operand_layout(ins, frag: str) -> WmmaLayout:
    f = ins.form
    if ins.opcode == "wmma.mma":
        elem = {"a": f.atype, "b": f.btype, "c": f.ctype, "d": f.dtype}[frag]
        nregs = ins.nregs[frag]
    else:
        elem = f.atype or f.btype or f.ctype or f.dtype
        (op,) = ins.operands
        nregs = op.nregs
    return layout(f.shape, frag, elem, nregs)


# ------------------------------------------------------------------------------ memory
def _offsets(lay: WmmaLayout, mem_layout: str, addr, stride):
    """Bit offset of every fragment element in the image ``[..., 32, nelem]``."""
    line = lay.cols if mem_layout == "row" else lay.rows
    stride = line if stride is None else stride
    r = jnp.asarray(lay.row, jnp.int32)
    c = jnp.asarray(lay.col, jnp.int32)
    stride = jnp.asarray(stride, jnp.int32)[..., None, None]
    addr = jnp.asarray(addr, jnp.int32)[..., None, None]
    batch = jnp.broadcast_shapes(stride.shape, addr.shape)
    stride, addr = jnp.broadcast_to(stride, batch), jnp.broadcast_to(addr, batch)
    r = jnp.broadcast_to(r, batch[:-2] + r.shape)
    c = jnp.broadcast_to(c, batch[:-2] + c.shape)
    idx = r * stride + c if mem_layout == "row" else c * stride + r
    return addr * 8 + idx * lay.elem_bits


def _check_mem(ins, mem, addr, stride, lay, mem_layout):
    mem = jnp.asarray(mem)
    if mem.dtype != jnp.uint8:
        raise TypeError(f"mem: expected a uint8 memory image, got {mem.dtype}")
    if mem.ndim < 1:
        raise ValueError(f"mem: expected shape [..., nbytes], got {tuple(mem.shape)}")
    line = lay.cols if mem_layout == "row" else lay.rows
    frag_bytes = lay.nregs * lay.reg_bits // 8
    if any(isinstance(v, jax.core.Tracer) for v in (addr, stride)):
        return mem  # traced under jit: checked when concrete only
    s = line if stride is None else np.asarray(stride)
    a = np.asarray(addr)
    if np.any(s < line):
        raise ValueError(
            f"stride: {int(np.min(s))} elements is below the default {line} for "
            f"{ins.text} (smaller strides are undefined behaviour)"
        )
    # 9.7.14.4.2 asks for row starts aligned to the fragment size, which some default
    # strides break (m8n32k16 .col A: 8 x .f16 = 16 bytes < 32) and the GPU runs anyway;
    # 16 bytes is the alignment every shape's default stride keeps.
    del frag_bytes
    if np.any(a % ALIGN) or np.any((s * lay.elem_bits // 8) % ALIGN):
        raise ValueError(
            f"addr/stride: row starts must be {ALIGN}-byte aligned for {ins.text}; got "
            f"addr {a.tolist()}, stride {np.asarray(s).tolist()} elements (9.7.14.4.2)"
        )
    other = lay.rows if mem_layout == "row" else lay.cols
    end = a + ((other - 1) * s + line) * lay.elem_bits // 8
    if np.any(end > mem.shape[-1]):
        raise ValueError(
            f"addr/stride: the matrix ends at byte {int(np.max(end))}, outside "
            f"the {mem.shape[-1]}-byte image"
        )
    return mem


def load(ins, mem, addr=0, stride=None):
    """``wmma.load``: ``mem`` uint8 ``[..., nbytes]`` -> registers ``[..., 32, nregs]``."""
    from ._movement import _read_bits

    lay = _operand_layout(ins, ins.form.frag)
    mem = _check_mem(ins, mem, addr, stride, lay, ins.layout)
    off = _offsets(lay, ins.layout, addr, stride)
    batch = jnp.broadcast_shapes(mem.shape[:-1], off.shape[:-2])
    mem = jnp.broadcast_to(mem, batch + mem.shape[-1:])
    off = jnp.broadcast_to(off, batch + off.shape[-2:])
    if lay.elem_bits == 64:
        lo = _read_bits(mem, off, 32).astype(jnp.uint64)
        hi = _read_bits(mem, off + 32, 32).astype(jnp.uint64)
        return lo | (hi << jnp.uint64(32))
    elems = _read_bits(mem, off, lay.elem_bits)
    return _fragments.pack(elems, lay.elem_bits)


def store(ins, mem, regs, addr=0, stride=None):
    """``wmma.store``: writes the fragment ``regs`` into the image; returns the new image."""
    lay = _operand_layout(ins, "d")
    mem = _check_mem(ins, mem, addr, stride, lay, ins.layout)
    regs = _check_regs(lay, regs, "regs", ins)
    off = _offsets(lay, ins.layout, addr, stride)
    batch = jnp.broadcast_shapes(mem.shape[:-1], regs.shape[:-2], off.shape[:-2])
    mem = jnp.broadcast_to(mem, batch + mem.shape[-1:])
    regs = jnp.broadcast_to(regs, batch + regs.shape[-2:])
    off = jnp.broadcast_to(off, batch + off.shape[-2:])
    elems = _fragments.unpack(regs, lay.elem_bits)
    from ._movement import write_bytes

    return write_bytes(mem, off // 8, elems, lay.elem_bits // 8)


# ------------------------------------------------------------------------------ mma
def _check_regs(lay: WmmaLayout, regs, name, ins):
    """The fragment's registers, checked: ``[..., 32, nregs]`` of the register width."""
    regs = jnp.asarray(regs)
    want = jnp.uint64 if lay.reg_bits == 64 else jnp.uint32
    if regs.dtype != want or regs.shape[-2:] != (32, lay.nregs):
        raise ValueError(
            f"{name}: expected {jnp.dtype(want).name} [..., 32, {lay.nregs}] for "
            f"{ins.text}, got {regs.dtype} {tuple(regs.shape)}"
        )
    return regs


def _unfragment(lay: WmmaLayout, regs, name, ins):
    elems = _fragments.unpack(_check_regs(lay, regs, name, ins), lay.elem_bits)
    flat_idx = (lay.row * lay.cols + lay.col).reshape(-1)
    first = np.unique(flat_idx, return_index=True)[1]  # the first copy of every element
    order = first[np.argsort(flat_idx[first])]
    flat = elems.reshape(elems.shape[:-2] + (-1,))
    return flat[..., order].reshape(regs.shape[:-2] + (lay.rows, lay.cols))


def _fragment(lay: WmmaLayout, M):
    idx = (lay.row * lay.cols + lay.col).reshape(-1)
    flat = M.reshape(M.shape[:-2] + (-1,))
    elems = flat[..., idx].reshape(M.shape[:-2] + (32, -1))
    return _fragments.pack(elems, lay.elem_bits)


def mma(ins, a, b, c, *, model=None):
    """``wmma.mma``: register level."""
    A = _unfragment(_operand_layout(ins, "a"), a, "a", ins)
    B = _unfragment(_operand_layout(ins, "b"), b, "b", ins)
    C = _unfragment(_operand_layout(ins, "c"), c, "c", ins)
    D = _models.mma_bits(ins, A, B, C, model=model)
    return _fragment(_operand_layout(ins, "d"), D)


def execute(ins, *args, **kwargs):
    fn = {"wmma.load": load, "wmma.store": store, "wmma.mma": mma}[ins.opcode]
    return fn(ins, *args, **kwargs)


def matrix_mma(ins, A, B, C, *, model=None):
    if ins.opcode != "wmma.mma":
        raise ValueError(f"{ins.opcode} moves data; it has no matrix product")
    from ._mma import matrix_mma as mm

    return mm(ins, A, B, C, model=model)
