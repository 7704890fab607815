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

from .. import models, operands, util
from ..bits import registers
from ._mma import matrix_mma as mm

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
    return operands.mma_layout(op, shape=shape, atype=elem, btype=elem, ctype=acc)


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


def operand_layout(ins, frag: str) -> WmmaLayout:
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
def _line(lay: WmmaLayout, mem_layout: str) -> int:
    """Elements of one memory row (``.row``) or column (``.col``): the default stride."""
    return lay.cols if mem_layout == "row" else lay.rows


def _int_arg(name: str, x):
    """A Python int or an integer array (``addr``/``stride``); TypeError otherwise."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an int or an integer array, got {x!r}")
    if isinstance(x, (int, np.integer)):
        if not -(2**62) < int(x) < 2**62:
            raise ValueError(f"{name}: {int(x)} lies outside any memory image")
        return int(x)
    if not isinstance(x, jax.core.Tracer):
        x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{name}: expected an int or an integer array, got {x.dtype}")
    return x


def _offsets(lay: WmmaLayout, mem_layout: str, addr, stride, nbytes: int):
    """Bit offset of every fragment element in the image, uint32 ``[..., 32, nelem]``,
    saturated at the end of the image (:mod:`jaxmma._memory`: nothing wraps)."""
    line = _line(lay, mem_layout)
    stride = line if stride is None else stride
    r, c = (lay.row, lay.col) if mem_layout == "row" else (lay.col, lay.row)
    ints = []
    for x in (addr, stride):
        if isinstance(x, int):  # checked in range by _check_mem
            x = np.int32(x)
        ints.append(jnp.asarray(x)[..., None, None])
    addr, stride = ints
    bits = lay.elem_bits
    rows = operands.memory_scale(
        operands.memory_clamp(stride, nbytes, bits), r.astype(np.int64) * bits, nbytes
    )
    cols = operands.memory_add(rows, c.astype(np.int64) * bits, nbytes)
    base = operands.memory_scale(operands.memory_clamp(addr, nbytes, 8), 8, nbytes)
    return operands.memory_add(cols, base, nbytes)


def _check_mem(ins, mem, addr, stride, lay, mem_layout):
    """Check the image and, when concrete, ``addr``/``stride`` (ValueError/TypeError)."""
    mem = operands.check_image(mem, "mem")
    addr = _int_arg("addr", addr)
    stride = None if stride is None else _int_arg("stride", stride)
    if any(isinstance(v, jax.core.Tracer) for v in (addr, stride)):
        return mem, addr, stride  # traced under jit: the rule of _memory
    line = _line(lay, mem_layout)
    s = np.asarray(line if stride is None else stride, dtype=object).astype(np.int64)
    a = np.asarray(addr, dtype=object).astype(np.int64)
    if np.any(a < 0):
        raise ValueError(
            f"addr: {int(np.min(a))} is negative; byte offsets into the "
            f"{mem.shape[-1]}-byte image run from 0 to {mem.shape[-1] - 1}"
        )
    if np.any(s < line):
        raise ValueError(
            f"stride: {int(np.min(s))} elements is below the default {line} for "
            f"{ins.text} (smaller strides are undefined behaviour)"
        )
    # 9.7.14.4.2 asks for row starts aligned to the fragment size, which some default
    # strides break (m8n32k16 .col A: 8 x .f16 = 16 bytes < 32; m32n8k16 .row B of
    # .u8/.s8: 8 bytes) and the GPU runs anyway. addr must be 16-byte aligned, row starts
    # aligned to 16 bytes or to the default row length if that is shorter.
    line_bytes = line * lay.elem_bits // 8
    row_align = min(ALIGN, line_bytes)
    if np.any(a % ALIGN) or np.any((s * lay.elem_bits) % (8 * row_align)):
        raise ValueError(
            f"addr/stride: addr must be {ALIGN}-byte aligned and the stride a multiple of "
            f"{row_align} bytes ({row_align * 8 // lay.elem_bits} elements) for {ins.text}; "
            f"got addr {a.tolist()}, stride {s.tolist()} elements (9.7.14.4.2)"
        )
    other = lay.rows if mem_layout == "row" else lay.cols
    end = a + ((other - 1) * s + line) * lay.elem_bits // 8
    if np.any(end > mem.shape[-1]):
        raise ValueError(
            f"addr/stride: the matrix occupies bytes up to {int(np.max(end))}, outside "
            f"the {mem.shape[-1]}-byte image (addr {a.tolist()}, stride {s.tolist()})"
        )
    return mem, addr, stride


def _check_flag(check) -> bool:
    if not isinstance(check, (bool, np.bool_)):
        raise TypeError(f"check: expected True or False, got {check!r}")
    return bool(check)


def _check_traced(ins, lay, addr, stride, off, nbytes: int) -> None:
    """Checked mode: traced ``addr``/``stride`` that leave the image, misalign ``addr`` or
    go below the default stride raise when the program runs (:func:`_errors.raise_if`)."""
    if not any(isinstance(v, jax.core.Tracer) for v in (addr, stride, off)):
        return
    ok = jnp.all(operands.memory_inside(off, lay.elem_bits, nbytes))
    if not isinstance(addr, int):
        ok = ok & jnp.all(jnp.asarray(addr) % ALIGN == 0)
    if stride is not None and not isinstance(stride, int):
        ok = ok & jnp.all(jnp.asarray(stride) >= _line(lay, ins.layout))
    operands.memory_check_traced(ok, "addr/stride", ins.opcode)


def load(ins, mem, addr=0, stride=None, *, check=False):
    """``wmma.load``: ``mem`` uint8 ``[..., nbytes]`` -> registers ``[..., 32, nregs]``."""
    check = _check_flag(check)
    lay = operand_layout(ins, ins.form.frag)
    mem, addr, stride = _check_mem(ins, mem, addr, stride, lay, ins.layout)
    nbytes = mem.shape[-1]
    off = _offsets(lay, ins.layout, addr, stride, nbytes)
    if check:
        _check_traced(ins, lay, addr, stride, off, nbytes)
    mem, off = util.broadcast((("mem", mem, 1), ("addr/stride", off, 2)), ins.text)
    if lay.elem_bits == 64:
        ok = operands.memory_inside(off, 64, nbytes)
        lo = operands.memory_read(mem, off, 32).astype(jnp.uint64)
        hi = operands.memory_read(mem, operands.memory_add(off, np.asarray(32), nbytes), 32).astype(
            jnp.uint64
        )
        return jnp.where(ok, lo | (hi << jnp.uint64(32)), jnp.uint64(0))
    elems = operands.memory_read(mem, off, lay.elem_bits)
    return operands.fragment_pack(elems, lay.elem_bits)


def store(ins, mem, regs, addr=0, stride=None, *, check=False):
    """``wmma.store``: writes the fragment ``regs`` into the image; returns the new image."""
    check = _check_flag(check)
    lay = operand_layout(ins, "d")
    mem, addr, stride = _check_mem(ins, mem, addr, stride, lay, ins.layout)
    regs = _check_regs(lay, regs, "regs", ins)
    nbytes = mem.shape[-1]
    off = _offsets(lay, ins.layout, addr, stride, nbytes)
    if check:
        _check_traced(ins, lay, addr, stride, off, nbytes)
    mem, regs, off = util.broadcast(
        (("mem", mem, 1), ("regs", regs, 2), ("addr/stride", off, 2)), ins.text
    )
    elems = operands.fragment_unpack(regs, lay.elem_bits)
    return operands.memory_write(mem, off, elems, lay.elem_bits)


# ------------------------------------------------------------------------------ mma
def _check_regs(lay: WmmaLayout, regs, name, ins):
    """The fragment's registers, checked: ``[..., 32, nregs]`` of the register width."""
    regs = registers(regs, name, lay.reg_bits)
    want = jnp.uint64 if lay.reg_bits == 64 else jnp.uint32
    if regs.dtype != want:
        raise TypeError(
            f"{name}: expected {jnp.dtype(want).name} registers [..., 32, {lay.nregs}] for "
            f"{ins.text}, got {regs.dtype}{util.x64_hint() if lay.reg_bits == 64 else ''}"
        )
    if regs.ndim < 2 or regs.shape[-2:] != (32, lay.nregs):
        raise ValueError(
            f"{name}: expected registers of shape [..., 32, {lay.nregs}] for "
            f"{ins.text}, got {tuple(regs.shape)}"
        )
    return regs


def _unfragment(lay: WmmaLayout, regs, name, ins):
    elems = operands.fragment_unpack(_check_regs(lay, regs, name, ins), lay.elem_bits)
    flat_idx = (lay.row * lay.cols + lay.col).reshape(-1)
    first = np.unique(flat_idx, return_index=True)[1]  # the first copy of every element
    order = first[np.argsort(flat_idx[first])]
    flat = elems.reshape(elems.shape[:-2] + (-1,))
    return flat[..., order].reshape(regs.shape[:-2] + (lay.rows, lay.cols))


def _fragment(lay: WmmaLayout, M):
    idx = (lay.row * lay.cols + lay.col).reshape(-1)
    flat = M.reshape(M.shape[:-2] + (-1,))
    elems = flat[..., idx].reshape(M.shape[:-2] + (32, -1))
    return operands.fragment_pack(elems, lay.elem_bits)


def mma(ins, a, b, c, *, model=None):
    """``wmma.mma``: register level."""
    A = _unfragment(operand_layout(ins, "a"), a, "a", ins)
    B = _unfragment(operand_layout(ins, "b"), b, "b", ins)
    C = _unfragment(operand_layout(ins, "c"), c, "c", ins)
    A, B, C = util.broadcast((("a", A, 2), ("b", B, 2), ("c", C, 2)), ins.text)
    D = models.mma_bits(ins, A, B, C, model=model)
    return _fragment(operand_layout(ins, "d"), D)


def execute(ins, *args, **kwargs):
    fn = {"wmma.load": load, "wmma.store": store, "wmma.mma": mma}[ins.opcode]
    return fn(ins, *args, **kwargs)


def matrix_mma(ins, A, B, C, *, model=None):
    if ins.opcode != "wmma.mma":
        raise ValueError(f"{ins.opcode} moves data; it has no matrix product")
    return mm(ins, A, B, C, model=model)
