"""Gather matrices into per-lane registers and scatter them back (fragments).

The maps come from :mod:`jaxmma._layouts` (one per-lane function per layout family); the
sub-word packing from :mod:`jaxmma._packing`. Matrices here are *raw element bits*
(uint32 with the element in the low bits, uint64 for ``.f64``); :mod:`jaxmma._values`
converts from and to element dtypes.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np

from .. import util
from ..bits import pack as _pack
from ..bits import registers, to_bits
from ..bits import unpack as _unpack
from . import _layouts

MMA_OPERANDS = ("a", "b", "c", "d")


def _check_operand(ins, operand: str) -> None:
    if ins.opcode not in ("mma",):
        raise ValueError(
            f"fragment/unfragment apply to mma forms; {ins.text!r} is "
            f"{ins.opcode} (use the instruction itself for data movement)"
        )
    if operand not in MMA_OPERANDS:
        raise ValueError(f"operand must be one of {MMA_OPERANDS}, got {operand!r}")


@functools.cache
def layout(ins, operand: str) -> _layouts.Layout:
    """The per-lane layout of one operand of an ``mma`` instruction."""
    _check_operand(ins, operand)
    op = "c" if operand == "d" else operand
    ctype = ins.dtype if operand == "d" else ins.ctype
    return _layouts.mma_layout(
        op,
        shape=ins.shape,
        atype=ins.atype,
        btype=ins.btype,
        ctype=ctype,
        alayout=ins.alayout,
        blayout=ins.blayout,
        sparse=ins.sparse is not None,
        kind=ins.kind,
    )


def matrix_shape(ins, operand: str) -> tuple[int, ...]:
    """Trailing shape of the logical matrix of an operand.

    ``(rows, cols)``; ``(4, rows, cols)`` for ``m8n8k4 .f16`` (its four MMAs per warp).
    Sparse A is the compressed ``M x K/2`` matrix.
    """
    lay = layout(ins, operand)
    rows, cols = int(lay.row.max()) + 1, int(lay.col.max()) + 1
    mats = int(lay.mat.max()) + 1
    return (mats, rows, cols) if mats > 1 else (rows, cols)


def _flat_index(ins, operand):
    lay = layout(ins, operand)
    shape = matrix_shape(ins, operand)
    rows, cols = shape[-2:]
    return (lay.mat * rows + lay.row) * cols + lay.col, shape, lay


def reg_dtype(lay) -> jnp.dtype:
    return jnp.uint64 if lay.elem_bits == 64 else jnp.uint32


def unpack(regs, elem_bits: int):
    """Registers ``[..., nregs]`` -> elements ``[..., nregs * 32 // elem_bits]``, low first.

    64-bit (``.f64``) registers hold one element each and pass through.
    """
    return regs if elem_bits == 64 else _unpack(regs, elem_bits)


def pack(elems, elem_bits: int):
    """Inverse of :func:`unpack`; element bits above ``elem_bits`` are dropped."""
    return elems if elem_bits == 64 else _pack(elems, elem_bits)


def unfragment(ins, operand: str, regs):
    """Registers ``[..., 32, nregs]`` -> raw-bit matrix ``[..., rows, cols]``."""
    idx, shape, lay = _flat_index(ins, operand)
    regs = registers(regs, operand, lay.elem_bits if lay.elem_bits == 64 else 32)
    _check_regs(ins, operand, regs, lay)
    elems = unpack(regs, lay.elem_bits)  # [..., 32, nelem]
    # sizes written out: a zero-size batch leaves no -1 to infer
    flat = elems.reshape(elems.shape[:-2] + (elems.shape[-2] * elems.shape[-1],))
    order = np.argsort(idx.reshape(-1), kind="stable")
    return flat[..., order].reshape(regs.shape[:-2] + shape)


def fragment(ins, operand: str, matrix):
    """Raw-bit matrix ``[..., rows, cols]`` -> registers ``[..., 32, nregs]``."""
    idx, shape, lay = _flat_index(ins, operand)
    matrix = jnp.asarray(matrix)
    if tuple(matrix.shape[-len(shape) :]) != shape:
        raise ValueError(
            f"{operand}: expected a matrix of trailing shape {shape} for "
            f"{ins.text}, got shape {tuple(matrix.shape)}"
        )
    batch = matrix.shape[: matrix.ndim - len(shape)]
    flat = matrix.reshape(batch + (math.prod(shape),))  # no -1: batches may be empty
    elems = flat[..., idx.reshape(-1)].reshape(batch + (32, idx.size // 32))
    return pack(elems.astype(reg_dtype(lay)), lay.elem_bits)


def operand_format(ins, operand: str) -> str:
    """The element format of an ``mma`` operand (``'bf16'``, ``'e4m3'``, ``'f32'``, ...)."""
    _check_operand(ins, operand)
    return {"a": ins.atype, "b": ins.btype, "c": ins.ctype, "d": ins.dtype}[operand]


def fragment_matrix(ins, operand: str, matrix):
    """:meth:`jaxmma.Instruction.fragment`: a matrix of element values or raw bits ->
    registers. Accepts the operand's element dtype (bit-cast) or unsigned raw bits as
    wide as the element in the register; anything else is a TypeError."""
    fmt = operand_format(ins, operand)
    width = layout(ins, operand).elem_bits
    _check_width(ins, operand, matrix, width)
    bits = to_bits(fmt, matrix, operand, ins.kind, width=width)
    return fragment(ins, operand, bits)


def _check_width(ins, operand, matrix, width: int) -> None:
    """ValueError for concrete unsigned raw bits above the element's ``width`` (they would
    be dropped silently); traced values cannot be inspected: their high bits are dropped."""
    dtype = getattr(matrix, "dtype", None)
    if dtype is None or util.is_traced(matrix) or np.dtype(dtype).kind != "u":
        return
    if np.dtype(dtype).itemsize * 8 <= width or np.size(matrix) == 0:
        return
    hi = int(np.max(np.asarray(matrix)))
    if hi >> width:
        raise ValueError(
            f"{operand}: raw bits of {ins.text} hold {width}-bit elements, from 0 to "
            f"2**{width} - 1; got {hi:#x}"
        )


def _check_regs(ins, operand, regs, lay):
    want = reg_dtype(lay)
    if regs.dtype != want:
        hint = util.x64_hint() if lay.elem_bits == 64 else ""
        raise TypeError(
            f"{operand}: expected {jnp.dtype(want).name} registers [..., 32, {lay.nregs}] "
            f"for {ins.text}, got {regs.dtype}{hint}"
        )
    if regs.ndim < 2 or regs.shape[-2:] != (32, lay.nregs):
        raise ValueError(
            f"{operand}: expected registers of shape [..., 32, {lay.nregs}] for "
            f"{ins.text}, got {tuple(regs.shape)}"
        )
