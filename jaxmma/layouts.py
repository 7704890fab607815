"""Per-lane layouts: which lane and register holds which element (PTX ISA 9.7.14.4-5).

:func:`operand_map` answers, for every register operand of an :class:`jaxmma.Instruction`,
where each element of a lane's registers sits in the operand's matrix (for ``mma``,
``wmma``, ``movmatrix``) or in the shared-memory rows (``ldmatrix``/``stmatrix``). The
maps are the ones the emulator itself gathers and scatters with; ``docs/layouts.md`` draws
them. The block-scale geometry helpers (:func:`scale_shapes`, :func:`block_size`,
:func:`num_blocks`) are here too.

Example:
  >>> ins = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
  >>> m = operand_map(ins, "a")
  >>> m.row.shape, m.shape                     # [lane, register, element of the register]
  ((32, 4, 2), (16, 16))
  >>> int(m.row[5, 0, 1]), int(m.col[5, 0, 1])  # lane 5, register 0, upper half
  (1, 3)
"""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np

from . import instructions, operands
from .instructions import Instruction
from .operands import block_size as block_size
from .operands import num_blocks as num_blocks
from .operands import scale_shapes as scale_shapes

__all__ = ["OperandMap", "block_size", "num_blocks", "operand_map", "scale_shapes"]


class OperandMap(NamedTuple):
    """Where the elements of one register operand live.

    Attributes:
      mat, row, col: int32 ``[32, nregs, elems_per_reg]``: element ``j`` (from the low
        bits) of register ``r`` of lane ``l`` is ``M_mat[row][col]``. ``mat`` is 0 except
        for the four matrices of ``m8n8k4 .f16`` and the ``.x2``/``.x4`` matrices of
        ``ldmatrix``/``stmatrix`` (whose ``row`` is the memory row, addressed by lane
        ``addr_lane[mat, row]``). Registers of ``wmma`` ``.f16`` A/B fragments repeat
        elements (the hardware's layout).
      shape: the matrix shape ``(rows, cols)``, or ``(num, rows, cols)``.
      elem_bits: bits of one element in the register (the container width).
      addr_lane: for ``ldmatrix``/``stmatrix``, int32 ``[num, rows]``: the lane whose
        address gives each memory row; None otherwise.
    """

    mat: np.ndarray
    row: np.ndarray
    col: np.ndarray
    shape: tuple[int, ...]
    elem_bits: int
    addr_lane: np.ndarray | None = None


def _frozen(*arrays):
    out = []
    for a in arrays:
        a = np.array(a, np.int32)
        a.setflags(write=False)
        out.append(a)
    return out


def _split(nregs: int, *arrays):
    """``[32, nelem]`` -> ``[32, nregs, nelem // nregs]``."""
    return [a.reshape(32, nregs, -1) for a in arrays]


def operand_map(ins: Instruction, operand: str) -> OperandMap:
    """The lane/register -> matrix element map of one register operand of ``ins``.

    Args:
      ins: any :class:`jaxmma.Instruction`.
      operand: one of ``ins.nregs`` (``"a"``, ``"b"``, ``"c"``, ``"d"`` for ``mma`` and
        ``wmma.mma``; ``"d"``/``"r"`` for the memory instructions, ``"a"``/``"d"`` for
        ``movmatrix``). Metadata ``"e"`` and the scale operands have their own tables
        (:mod:`jaxmma.sparse`, :func:`scale_shapes`).

    Returns:
      An :class:`OperandMap` (read-only NumPy arrays).

    Raises:
      TypeError: ``ins`` is not an Instruction. ValueError: an operand ``ins`` lacks.
    """
    if not isinstance(ins, Instruction):
        raise TypeError(f"ins: expected a jaxmma.Instruction, got {type(ins).__name__}")
    allowed = tuple(n for n in ins.nregs if n not in ("e", "scale_a", "scale_b"))
    if operand not in allowed:
        raise ValueError(
            f"operand={operand!r} is not a register operand of {ins.text} with a matrix "
            f"map; allowed: {', '.join(map(repr, allowed))}"
        )
    nregs = ins.nregs[operand]
    if ins.opcode == "mma":
        lay = operands.fragment_layout(ins, operand)
        mat, row, col = _frozen(*_split(nregs, lay.mat, lay.row, lay.col))
        return OperandMap(mat, row, col, operands.matrix_shape(ins, operand), lay.elem_bits)
    if ins.opcode.startswith("wmma"):
        frag = operand if ins.opcode == "wmma.mma" else cast(str, ins.form.frag)
        wlay = instructions.wmma_operand_layout(ins, frag)
        row, col = _split(nregs, wlay.row, wlay.col)
        mat, row, col = _frozen(np.zeros_like(row), row, col)
        return OperandMap(mat, row, col, (wlay.rows, wlay.cols), wlay.elem_bits)
    if ins.opcode == "movmatrix":
        mv = operands.movmatrix_layout()
        lay = mv.src if operand == "a" else mv.dst
        mat, row, col = _frozen(*_split(nregs, lay.mat, lay.row, lay.col))
        if operand == "d":  # d holds M^T: its element (r, c) of M sits at (c, r) of d
            row, col = col, row
        return OperandMap(mat, row, col, (8, 8), lay.elem_bits)
    lay = instructions.movement_layout(ins)
    mat, row, col = _frozen(*_split(nregs, lay.mat, lay.row, lay.col))
    (addr,) = _frozen(lay.addr_lane)
    num = int(lay.addr_lane.shape[0])
    return OperandMap(mat, row, col, (num, lay.rows, lay.cols), lay.elem_bits, addr)
