"""Per-lane fragment maps of every operand of the warp-level matrix instructions.

PTX ISA section 9.7.14 distributes the elements of each matrix operand over the 32 lanes of
a warp. This module writes each distribution once, per layout family, as a function of the
lane (``jnp`` integer ops, vmapped over ``np.arange(32)``), evaluates it once per
configuration and caches the result as read-only NumPy ``int32`` tables. It holds data
only: no bit packing (see ``_packing``) and no arithmetic.

Conventions shared by every table:

* ``lane`` is ``%laneid``; ``g = lane >> 2`` is the spec's ``groupID`` and
  ``t = lane & 3`` its ``threadID_in_group``.
* Element ``e`` of a lane is ``reg * elems_per_reg + j``, ``j`` the position inside the
  32-bit register counted from the low bits (``.f64``: one element per 64-bit register).
  ``e`` is the spec's subscript ``i`` of ``a_i``, ``b_i``, ``c_i`` ("low to high").
* ``mat`` is the matrix index where one warp holds several matrices (the 4 MMAs of
  ``mma.m8n8k4`` with ``.f16``; matrix ``i`` of ``ldmatrix``/``stmatrix`` ``.x2``/``.x4``),
  else 0.

Layout families (all shapes of one family share one per-lane function):

* ``_quad_a``/``_quad_b``/``_quad_c``: every ``mma`` shape other than ``m8n8k4`` ``.f16``
  (9.7.14.5.2-13) and every ``mma.sp`` shape (9.7.14.6.2). A register holds a
  ``[rows g (+8)] x [elems_per_reg * t + j]`` slice; the next k-block of ``4 *
  elems_per_reg`` columns (A) or rows (B) follows in the next registers.
* ``_quad_pair``: ``mma.m8n8k4`` ``.f16`` (9.7.14.5.1), 4 independent MMAs per warp.
* ``_meta_*``: the sparse metadata register ``e`` (9.7.14.6.2, figures only; see
  ``docs/layouts.md``).
* ``_scale_a``/``_scale_b``: block-scale selectors (9.7.14.3).
* ``_ld_*``/``_st_*``/``_mov_*``: ``ldmatrix``, ``stmatrix``, ``movmatrix``
  (9.7.14.5.15-17).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .. import spec
from ..bits import F8F6F4, FORMATS, container_bits

__all__ = [
    "Layout",
    "MetadataFormat",
    "MetadataLayout",
    "MovementLayout",
    "MovmatrixLayout",
    "ScaleLayout",
    "ldmatrix_layout",
    "metadata_format",
    "metadata_layout",
    "mma_layout",
    "movmatrix_layout",
    "scale_layout",
    "stmatrix_layout",
]


# ---------------------------------------------------------------------------------------
# Result types
class Layout(NamedTuple):
    """Where each element of one register operand lives in its matrix.

    Attributes:
      mat: ``int32 [32, nelem]``, the matrix index of element ``e`` of lane ``l``.
      row: ``int32 [32, nelem]``, its row in that matrix.
      col: ``int32 [32, nelem]``, its column in that matrix.
      nregs: registers per lane (32-bit, or 64-bit for ``.f64``).
      elems_per_reg: elements per register (``nelem = nregs * elems_per_reg``).
      elem_bits: bits of one element slot in the register (the container width: 8 for the
        ``kind::f8f6f4`` types, 4 for ``kind::mxf4*`` ``.e2m1``, 64 for ``.f64``).
    """

    mat: np.ndarray
    row: np.ndarray
    col: np.ndarray
    nregs: int
    elems_per_reg: int
    elem_bits: int


class MetadataLayout(NamedTuple):
    """Which (row, chunk) of the dense matrix A each metadata nibble describes.

    Attributes:
      lane_used: ``bool [32]``, the lanes whose ``e`` register the selector picks.
      row: ``int32 [32, 8]``, row of A described by nibble ``n`` (bits ``[4n+3:4n]``) of
        lane ``l``; -1 where ``lane_used[l]`` is false.
      chunk: ``int32 [32, 8]``, the chunk of that row (dense columns ``chunk * chunk_size``
        onwards, see :func:`metadata_format`); -1 where ``lane_used[l]`` is false.
    """

    lane_used: np.ndarray
    row: np.ndarray
    chunk: np.ndarray


class MetadataFormat(NamedTuple):
    """Sparsity granularity of one ``mma.sp`` form (see :func:`metadata_format`).

    Attributes:
      chunk_size: dense elements per chunk described by one nibble (4, 2 or 8).
      selectors: the valid values of the sparsity selector ``f``.
    """

    chunk_size: int
    selectors: tuple[int, ...]


class ScaleLayout(NamedTuple):
    """Where each block-scale factor lives in the ``scale-{a,b}-data`` registers.

    Attributes:
      lane: ``int32``, the lane whose register holds the factor; ``[m, nblk]`` for
        ``scale_A`` (row, k-block), ``[nblk, n]`` for ``scale_B`` (k-block, column).
      byte: ``int32``, same shape, the byte of that register (0 = bits ``[7:0]``).
    """

    lane: np.ndarray
    byte: np.ndarray


class MovementLayout(NamedTuple):
    """Register <-> shared-memory map of ``ldmatrix`` / ``stmatrix``.

    ``mat``, ``row``, ``col`` give the memory coordinates (matrix ``i``, row ``r`` whose
    start address comes from lane ``addr_lane[i, r]``, column ``c`` counted in elements)
    of element ``e`` of lane ``l``; the first six fields read like :class:`Layout`.

    The element lives at bit offset ``8 * addrs[addr_lane[i, r]] + c * mem_bits`` of the
    shared-memory image, little-endian: byte offset ``addr + c * mem_bits // 8`` for
    ``.b16``/``.b8``. For the packed sources ``.b6x16_p32``/``.b4x16_p64`` a row of 16
    elements fills one 16-byte unit: 16 x 6 bits + 32 bits of padding, or 16 x 4 bits + 64
    bits of padding; element ``c`` is taken to occupy bits ``[c*mem_bits + mem_bits - 1 :
    c*mem_bits]`` of the unit with the padding in the top bits (the spec defers the format
    to tcgen05 "Optional Decompression", not in our copy; not hardware-checked). In the
    register each such element takes a whole byte (``elem_bits`` 8), its value in the low
    ``mem_bits`` bits per ``docs/layouts.md``.

    Attributes:
      mat, row, col: ``int32 [32, nelem]``.
      nregs, elems_per_reg, elem_bits: register side, as in :class:`Layout`.
      addr_lane: ``int32 [num, rows]``.
      rows, cols: the shape of one matrix in memory (rows of ``cols`` elements).
      mem_bits: bits of one element in memory (16, 8, 6 or 4).
    """

    mat: np.ndarray
    row: np.ndarray
    col: np.ndarray
    nregs: int
    elems_per_reg: int
    elem_bits: int
    addr_lane: np.ndarray
    rows: int
    cols: int
    mem_bits: int


class MovmatrixLayout(NamedTuple):
    """Source and result maps of ``movmatrix.m8n8.trans.b16``.

    Both index the *source* matrix ``M`` (8x8, row-major): ``src`` says which ``M[r][c]``
    each lane/half of ``a`` holds, ``dst`` which ``M[r][c]`` each lane/half of ``d`` holds
    (``d`` holds ``M^T`` in the layout of ``src``).
    """

    src: Layout
    dst: Layout


# ---------------------------------------------------------------------------------------
# Validation helpers
def _allowed(values) -> str:
    return ", ".join(repr(v) for v in values)


def _bad(name: str, value, allowed, context: str = "") -> ValueError:
    where = f" for {context}" if context else ""
    return ValueError(f"{name}={value!r} is not valid{where}; allowed: {_allowed(allowed)}")


def _strip(value, prefix: str = ""):
    """Drop a leading '.' (and an optional qualifier prefix) from a string argument."""
    if isinstance(value, str):
        value = value.lower().removeprefix(".")
        if prefix:
            value = value.removeprefix(prefix)
    return value


def _choose(name: str, value, allowed, context: str = "", prefix: str = ""):
    norm = _strip(value, prefix)
    if norm not in allowed:
        raise _bad(name, value, allowed, context)
    return norm


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}={value!r} is not valid; allowed: True, False")
    return bool(value)


def _parse_shape(shape: str) -> tuple[int, int, int]:
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


# ---------------------------------------------------------------------------------------
# Tabulation: vmap a per-lane function over the 32 lanes, freeze as NumPy
_LANES = 32


def _frozen(x, dtype) -> np.ndarray:
    out = np.array(x, dtype=dtype)
    out.setflags(write=False)
    return out


def _tabulate(fn: Callable, count: int = _LANES, dtype=np.int32) -> tuple[np.ndarray, ...]:
    """``fn(index)`` for ``index = 0..count-1``, stacked (NumPy: nothing traced or compiled)."""
    outs = [fn(np.int32(index)) for index in range(count)]
    return tuple(_frozen(np.stack(o), dtype) for o in zip(*outs, strict=True))


def _split(lane, nelem: int, epr: int):
    """(g, t, element index i, register index, position j) for one lane."""
    i = np.arange(nelem, dtype=np.int32)
    return lane >> 2, lane & 3, i, i // epr, i % epr


# ---------------------------------------------------------------------------------------
# mma / mma.sp fragment families (9.7.14.5.1-13, 9.7.14.6.2)
def _quad_a(lane, *, nelem: int, epr: int, m: int):
    """Multiplicand A of every quad-based shape (9.7.14.5.2-13; 9.7.14.6.2 compressed).

    Register ``R`` holds rows ``g + 8 * (R % (m // 8))`` and the k-block ``R // (m // 8)``
    of ``4 * epr`` columns, lane ``t`` owning ``epr`` consecutive columns of it.
    """
    g, t, _, reg, j = _split(lane, nelem, epr)
    row_blocks = m // 8
    row = g + 8 * (reg % row_blocks)
    col = epr * t + j + 4 * epr * (reg // row_blocks)
    return np.zeros_like(row), row, col


def _quad_b(lane, *, nelem: int, epr: int):
    """Multiplicand B of every quad-based shape: column ``g``, ``epr`` rows per lane."""
    g, t, _, reg, j = _split(lane, nelem, epr)
    row = epr * t + j + 4 * epr * reg
    col = np.broadcast_to(g, row.shape)
    return np.zeros_like(row), row, col


def _quad_c(lane, *, nelem: int):
    """Accumulators C/D of every quad-based shape: ``c_i`` at ``(g + 8*(i>>1), 2t + (i&1))``.

    Independent of the register packing (2 ``.f16`` per ``.f16x2``, or 1 per register).
    """
    g, t, i, _, _ = _split(lane, nelem, 1)
    row = g + 8 * (i >> 1)
    col = 2 * t + (i & 1)
    return np.zeros_like(row), row, col


def _quad_pair(lane, *, operand: str, layout: str, ctype: str, nelem: int):
    """``mma.m8n8k4`` ``.f16`` (9.7.14.5.1): 4 MMAs, one per quad pair.

    MMA ``mat = (lane >> 2) & 3`` runs on lanes ``4*mat..4*mat+3`` (low group) and
    ``16+4*mat..`` (high group); ``hi = lane >> 4`` picks the group.
    """
    i = np.arange(nelem, dtype=np.int32)
    mat = np.broadcast_to((lane >> 2) & 3, i.shape)
    hi = lane >> 4
    low = lane & 3
    if operand == "a" and layout == "row":
        row, col = np.broadcast_to(low + 4 * hi, i.shape), i
    elif operand == "a":
        row, col = (i & 3) + 4 * hi, np.broadcast_to(low, i.shape)
    elif operand == "b" and layout == "row":
        row, col = np.broadcast_to(low, i.shape), i + 4 * hi
    elif operand == "b":
        row, col = i, np.broadcast_to(low + 4 * hi, i.shape)
    elif ctype == "f16":
        row, col = np.broadcast_to(low + 4 * hi, i.shape), i
    else:  # .f32 accumulators
        row = (lane & 1) + (i & 2) + 4 * hi
        col = (i & 4) + (lane & 2) + (i & 1)
    return mat, row, col


# ---------------------------------------------------------------------------------------
# The forms whose fragments this module knows: the spec's mma and mma.sp forms (9.7.14.1-2,
# 9.7.14.5.14, 9.7.14.6.3), read from its table
class _Group(NamedTuple):
    types: tuple[str, ...]  # atype and btype (any mix within the group)
    ctypes: tuple[str, ...]
    kinds: tuple[str | None, ...]


def _in_order(values, order: tuple) -> tuple:
    return tuple(sorted(values, key=order.index))


def _spec_groups() -> dict[tuple[bool, str], tuple[_Group, ...]]:
    """``(sparse, shape)`` -> the groups of the spec's ``mma`` forms of that shape: element
    types that A and B may mix under one kind, with their accumulator types; kinds with
    the same types and accumulators (``mxf4``, ``mxf4nvf4``) share a group.

    Types in the registry's order; in a shape, the groups of no kind first (16- to 64-bit
    floats, integers, fp8), then those of each kind; shapes by ``m``, ``n``, ``k``."""
    mma = [f for f in spec.FORMS if f.opcode == "mma"]
    kinds, names = _unique(f.kind for f in mma), tuple(FORMATS)
    parts: dict[tuple[bool, str, str | None], list[tuple[set, set]]] = {}
    for f in mma:  # the types an a/b pair joins, and their accumulators
        found = parts.setdefault((f.sparse is not None, f.shape, f.kind), [])
        pair = {f.atype, f.btype}
        joined = [p for p in found if p[0] & pair]
        types = pair.union(*(p[0] for p in joined))
        ctypes = {f.ctype}.union(*(p[1] for p in joined))
        found[:] = [p for p in found if not p[0] & pair] + [(types, ctypes)]
    merged: dict[tuple[bool, str], dict[tuple, list]] = {}
    for (sparse, shape, kind), found in parts.items():
        for types, ctypes in found:
            key = (_in_order(types, names), _in_order(ctypes, names))
            merged.setdefault((sparse, shape), {}).setdefault(key, []).append(kind)
    out = {}
    for sparse, shape in sorted(merged, key=lambda k: (k[0], _parse_shape(k[1]))):
        groups = [
            _Group(t, c, _in_order(ks, kinds)) for (t, c), ks in merged[(sparse, shape)].items()
        ]
        groups.sort(
            key=lambda g: (kinds.index(g.kinds[0]), g.types[0] in F8F6F4, names.index(g.types[0]))
        )
        out[(sparse, shape)] = tuple(groups)
    return out


def _unique(values) -> tuple:
    return tuple(dict.fromkeys(values))


_FORMS = _spec_groups()


def _elem_bits(dtype: str, kind: str | None) -> int:
    """Bits of one element slot in a register (e2m1 is 4 bits only under kind::mxf4*)."""
    return container_bits(dtype, kind)


def _kind_name(kind) -> str:
    return "none" if kind is None else f"kind::{kind}"


def _resolve_group(sparse, shape, atype, btype, ctype, kind, operand):
    """Validate one mma/mma.sp configuration; return the normalised fields."""
    name = "mma.sp" if sparse else "mma"
    shape = _choose("shape", shape, _unique(s for sp, s in _FORMS if sp == sparse), name)
    groups = _FORMS[(sparse, shape)]
    context = f"{name}.{shape}"
    atype = _choose("atype", atype, _unique(t for g in groups for t in g.types), context)
    kind = None if kind is None else _strip(kind, "kind::")
    groups_a = [g for g in groups if atype in g.types]
    kinds = _unique(k for g in groups_a for k in g.kinds)
    if kind not in kinds:
        shown = ["None" if k is None else f"kind::{k}" for k in kinds]
        raise ValueError(
            f"kind={kind!r} is not valid for {context} with atype={atype!r}; "
            f"allowed: {', '.join(shown)}"
        )
    (group,) = [g for g in groups_a if kind in g.kinds]
    context = f"{context} atype={atype!r} kind={_kind_name(kind)}"
    btype = atype if btype is None else _choose("btype", btype, group.types, context)
    if ctype is None and (operand == "a" or operand == "b" or len(group.ctypes) == 1):
        ctype = group.ctypes[0] if len(group.ctypes) == 1 else None
    elif ctype is None:
        raise ValueError(
            f"ctype=None is not valid for operand {operand!r} of {context}; "
            f"allowed: {_allowed(group.ctypes)}"
        )
    else:
        ctype = _choose("ctype", ctype, group.ctypes, context)
    return shape, atype, btype, ctype, kind


def mma_layout(
    operand: str,
    *,
    shape: str,
    atype: str,
    btype: str | None = None,
    ctype: str | None = None,
    alayout: str = "row",
    blayout: str = "col",
    sparse: bool = False,
    kind: str | None = None,
) -> Layout:
    """The fragment layout of one operand of ``mma`` / ``mma.sp``.

    PTX: ``mma.sync.aligned.{shape}.{alayout}.{blayout}[.kind].dtype.atype.btype.ctype`` and
    ``mma.sp{::ordered_metadata}...``; spec sections 9.7.14.5.1-13 (dense fragments) and
    9.7.14.6.2 (sparse fragments).

    For ``sparse=True``, operand A is the *compressed* ``M x K/2`` matrix (the non-zero
    elements of each row in register order): compressed column ``c`` belongs to the dense
    chunk ``c // (chunk_size // 2)`` of that row (``chunk_size`` from
    :func:`metadata_format`, 1 element per 2-wide chunk for ``.tf32``), and its place in
    the chunk is given by the metadata (``_sparse``). B, C and D of ``mma.sp`` are the
    dense operands of the same shape. ``mma.sp`` B layouts that the spec shows only as
    figures (k32 ``.f16``/``.bf16``, k64 8-bit, k128 4-bit) follow the dense family: the
    next ``4 * elems_per_reg`` rows of B in the next register, as in every dense shape.

    Args:
      operand: ``'a'``, ``'b'``, ``'c'`` or ``'d'`` (``'d'`` is ``'c'``; pass its type as
        ``ctype``).
      shape: e.g. ``'m16n8k16'`` (a leading ``'.'`` is accepted).
      atype, btype: element types of A and B (``btype`` defaults to ``atype``).
      ctype: accumulator type of the C (or D) operand: ``'f16'``, ``'f32'``, ``'s32'``,
        ``'f64'``. Optional where the form has only one accumulator type.
      alayout, blayout: ``'row'``/``'col'``; other than ``row.col`` only for
        ``m8n8k4`` ``.f16``.
      sparse: ``mma.sp`` / ``mma.sp::ordered_metadata``.
      kind: ``None``, ``'f8f6f4'``, ``'mxf8f6f4'``, ``'mxf4'``, ``'mxf4nvf4'`` (with or
        without ``'kind::'``); the ``kind::f8f6f4`` types travel in 8-bit containers,
        ``kind::mxf4*`` ``.e2m1`` packed 8 per register.

    Returns:
      A :class:`Layout`: ``mat``/``row``/``col`` ``int32 [32, nelem]`` (read-only, cached),
      ``row`` and ``col`` index the ``M x K`` (A; ``M x K/2`` when sparse), ``K x N`` (B) or
      ``M x N`` (C/D) matrix; ``mat`` is the MMA index of ``m8n8k4`` ``.f16`` (lanes
      ``4i..4i+3`` and ``16+4i..16+4i+3`` compute MMA ``i``), else 0.

    Raises:
      ValueError: a configuration the spec does not have, naming the argument.

    Example:
      >>> lay = mma_layout("a", shape="m16n8k16", atype="f16")
      >>> lay.nregs, lay.elems_per_reg, lay.elem_bits
      (4, 2, 16)
      >>> [(int(r), int(c)) for r, c in zip(lay.row[5], lay.col[5])]
      [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    """
    operand = _choose("operand", operand, ("a", "b", "c", "d"))
    operand = "c" if operand == "d" else operand
    sparse = _check_bool("sparse", sparse)
    shape, atype, btype, ctype, kind = _resolve_group(
        sparse, shape, atype, btype, ctype, kind, operand
    )
    quad_pair = shape == "m8n8k4" and atype == "f16"
    if quad_pair:
        alayout = _choose("alayout", alayout, ("row", "col"))
        blayout = _choose("blayout", blayout, ("row", "col"))
    else:
        context = f"mma{'.sp' if sparse else ''}.{shape} atype={atype!r}"
        alayout = _choose("alayout", alayout, ("row",), context)
        blayout = _choose("blayout", blayout, ("col",), context)
    if operand != "a":
        alayout = "row"
    if operand != "b":
        blayout = "col"
    if operand != "c":
        ctype = None  # the A/B tables do not depend on the accumulator type
    if operand != "b":
        btype = None
    return _mma_table(operand, shape, atype, btype, ctype, alayout, blayout, sparse, kind)


@functools.cache
def _mma_table(operand, shape, atype, btype, ctype, alayout, blayout, sparse, kind) -> Layout:
    m, n, k = _parse_shape(shape)
    if operand == "c":
        nelem, bits = m * n // 32, _elem_bits(ctype, None)
    elif operand == "a":
        nelem, bits = m * (k // 2 if sparse else k) // 32, _elem_bits(atype, kind)
    else:
        nelem, bits = k * n // 32, _elem_bits(btype, kind)
    epr = max(1, 32 // bits)
    if shape == "m8n8k4" and atype == "f16":
        # 4 MMAs per warp, each A 8x4, B 4x8, C 8x8 over its 8 lanes
        nelem *= 4
        layout = alayout if operand == "a" else blayout
        fn = functools.partial(_quad_pair, operand=operand, layout=layout, ctype=ctype, nelem=nelem)
    elif operand == "a":
        fn = functools.partial(_quad_a, nelem=nelem, epr=epr, m=m)
    elif operand == "b":
        fn = functools.partial(_quad_b, nelem=nelem, epr=epr)
    else:
        fn = functools.partial(_quad_c, nelem=nelem)
    mat, row, col = _tabulate(fn)
    return Layout(mat, row, col, nelem // epr, epr, bits)


# ---------------------------------------------------------------------------------------
# Sparse metadata (9.7.14.6.1-2; figures only: docs/layouts.md, hardware-checked on sm_90)
def _meta_quad(lane, *, sel: int):
    """One lane per quad (``t == sel``); nibble n: row ``g + 8*(n>>2)``, chunk ``n & 3``."""
    g, t, n, _, _ = _split(lane, 8, 1)
    return t == sel, g + 8 * (n >> 2), n & 3


def _meta_pair_cols(lane, *, sel: int):
    """Lane pair ``t >> 1 == sel``; row ``g + 8*(n>>2)``, chunk ``4*(t&1) + (n&3)``."""
    g, t, n, _, _ = _split(lane, 8, 1)
    return (t >> 1) == sel, g + 8 * (n >> 2), 4 * (t & 1) + (n & 3)


def _meta_pair_rows(lane, *, sel: int):
    """Lane pair ``t >> 1 == sel``; row ``g + 8*(t&1)``, chunk ``n``."""
    g, t, n, _, _ = _split(lane, 8, 1)
    return (t >> 1) == sel, np.broadcast_to(g + 8 * (t & 1), n.shape), n


def _meta_all(lane, *, sel: int):
    """All four lanes of a quad; row ``g + 8*(t&1)``, chunk ``8*(t>>1) + n``."""
    del sel  # must be 0
    g, t, n, _, _ = _split(lane, 8, 1)
    return t >= 0, np.broadcast_to(g + 8 * (t & 1), n.shape), 8 * (t >> 1) + n


# (shape, atype group) -> (per-lane function, chunk size, selectors)
_META = {
    "m16n8k8": ((("tf32",), _meta_quad, 2, (0, 1, 2, 3)),),
    "m16n8k16": (
        (("f16", "bf16"), _meta_quad, 4, (0, 1, 2, 3)),
        (("tf32",), _meta_pair_cols, 2, (0, 1)),
    ),
    "m16n8k32": (
        (("f16", "bf16"), _meta_pair_cols, 4, (0, 1)),
        (("s8", "u8"), _meta_pair_rows, 4, (0, 1)),
    ),
    "m16n8k64": (
        (("s8", "u8", *F8F6F4), _meta_all, 4, (0,)),
        (("s4", "u4"), _meta_pair_rows, 8, (0, 1)),
    ),
    "m16n8k128": ((("s4", "u4", "e2m1"), _meta_all, 8, (0,)),),
}


def _meta_entry(shape, atype):
    shape = _choose("shape", shape, tuple(_META), "mma.sp")
    entries = _META[shape]
    atype = _choose("atype", atype, _unique(t for e in entries for t in e[0]), f"mma.sp.{shape}")
    (entry,) = [e for e in entries if atype in e[0]]
    return shape, atype, entry


def metadata_format(*, shape: str, atype: str) -> MetadataFormat:
    """Chunk size and valid sparsity selectors of ``mma.sp`` (9.7.14.6.1).

    Each metadata nibble (bits ``[4n+3:4n]``) describes one chunk of ``chunk_size`` dense
    elements of a row of A; its low 2 bits ``i0`` place compressed element 0 of the chunk,
    its high 2 bits ``i1`` compressed element 1:

    * ``chunk_size`` 4 (``.f16``/``.bf16``, ``.s8``/``.u8``, ``.e4m3``/``.e5m2`` and the
      ``kind::f8f6f4`` types, 2:4): compressed columns ``2c, 2c+1`` are dense columns
      ``4c + i0`` and ``4c + i1``.
    * ``chunk_size`` 2 (``.tf32``, 1:2): only ``0b0100`` (keep element 0) and ``0b1110``
      (keep element 1) are meaningful; compressed column ``c`` is dense ``2c + i0 // 2``.
    * ``chunk_size`` 8 (``.s4``/``.u4`` and ``kind::mxf4*`` ``.e2m1``, pair-wise 4:8): the
      indices pick element pairs; compressed columns ``4c..4c+3`` are dense
      ``8c + 2*i0 + {0, 1}`` and ``8c + 2*i1 + {0, 1}``.

    The selector ``f`` picks the lanes that supply ``e`` (see :func:`metadata_layout`).

    Args:
      shape: the ``mma.sp`` shape, e.g. ``'m16n8k32'``.
      atype: element type of A (``'e2m1'`` means the 8-bit container at ``m16n8k64``,
        ``kind::mxf4*`` at ``m16n8k128``).

    Returns:
      :class:`MetadataFormat` ``(chunk_size, selectors)``.

    Example:
      >>> metadata_format(shape="m16n8k32", atype="f16")
      MetadataFormat(chunk_size=4, selectors=(0, 1))
    """
    _, _, (_, _, size, selectors) = _meta_entry(shape, atype)
    return MetadataFormat(size, selectors)


def metadata_layout(*, shape: str, atype: str, selector: int) -> MetadataLayout:
    """Which (row, chunk) of A each nibble of the metadata operand ``e`` describes.

    Spec 9.7.14.6.1-2 (Figures 119-147, not in our copy); the map follows
    ``docs/layouts.md`` (hardware-checked on sm_90 for ``.f16``, ``.bf16``, ``.tf32``,
    ``.s8``/``.u8``, ``.s4``/``.u4``). With ``g = lane >> 2``, ``t = lane & 3``:

    ========================================  ============  ===============  =================
    form                                      lanes used    row              chunk
    ========================================  ============  ===============  =================
    k16 f16/bf16, k8 tf32                     t == sel      g + 8*(n>>2)     n & 3
    k32 f16/bf16, k16 tf32                    t>>1 == sel   g + 8*(n>>2)     4*(t&1) + (n&3)
    k32 s8/u8, k64 s4/u4                      t>>1 == sel   g + 8*(t&1)      n
    k64 s8/u8/f8f6f4, k128 s4/u4/e2m1         all (sel 0)   g + 8*(t&1)      8*(t>>1) + n
    ========================================  ============  ===============  =================

    Args:
      shape: the ``mma.sp`` shape.
      atype: element type of A.
      selector: the sparsity selector ``f``; see :func:`metadata_format` for the values.

    Returns:
      :class:`MetadataLayout` ``(lane_used bool [32], row int32 [32, 8], chunk int32
      [32, 8])``, ``-1`` in ``row``/``chunk`` of the lanes not used.

    Example:
      >>> meta = metadata_layout(shape="m16n8k16", atype="f16", selector=1)
      >>> [int(x) for x in np.flatnonzero(meta.lane_used)][:3]
      [1, 5, 9]
      >>> meta.row[5].tolist(), meta.chunk[5].tolist()
      ([1, 1, 1, 1, 9, 9, 9, 9], [0, 1, 2, 3, 0, 1, 2, 3])
    """
    shape, atype, (_, _, _, selectors) = _meta_entry(shape, atype)
    if isinstance(selector, (bool, np.bool_)) or selector not in selectors:
        raise _bad("selector", selector, selectors, f"mma.sp.{shape} atype={atype!r}")
    return _metadata_table(shape, atype, int(selector))


@functools.cache
def _metadata_table(shape: str, atype: str, selector: int) -> MetadataLayout:
    _, _, (_, fn, _, _) = _meta_entry(shape, atype)
    used, row, chunk = _tabulate(functools.partial(fn, sel=selector), _LANES, np.int32)
    used = used.astype(bool)
    row = np.where(used[:, None], row, -1)
    chunk = np.where(used[:, None], chunk, -1)
    return MetadataLayout(_frozen(used, bool), _frozen(row, np.int32), _frozen(chunk, np.int32))


# ---------------------------------------------------------------------------------------
# Block scaling selectors (9.7.14.3; figures only: docs/layouts.md, not hardware-checked)
_SCALE_VECS = {"1x": 1, "2x": 2, "4x": 4}
_BYTE_IDS = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}  # Table 37
_THREAD_IDS = {"a": (0, 1), "b": (0, 1, 2, 3)}


def _scale_a(row, *, nblk: int, tid: int, bid: int):
    """SF_A of row m, k-block j: lane ``4*(m%8) + 2*tid + m//8``, byte ``bid + j``."""
    j = np.arange(nblk, dtype=np.int32)
    lane = np.broadcast_to(4 * (row % 8) + 2 * tid + row // 8, j.shape)
    return lane, bid + j


def _scale_b(col, *, nblk: int, tid: int, bid: int):
    """SF_B of column n, k-block j: lane ``4*n + tid``, byte ``bid + j``."""
    j = np.arange(nblk, dtype=np.int32)
    return np.broadcast_to(4 * col + tid, j.shape), bid + j


def scale_layout(
    operand: str, *, scale_vec, thread_id: int, byte_id: int, m: int = 16, n: int = 8
) -> ScaleLayout:
    """Where the block-scale factors of ``mma ... .block_scale`` live (9.7.14.3).

    PTX: ``mma.sync.aligned.m16n8k{32,64}.row.col.kind::mx*.block_scale.scale_vec::{1,2,4}X
    ... scale-a-data, {byte-id-a, thread-id-a}, scale-b-data, {byte-id-b, thread-id-b}``
    (and the ``mma.sp::ordered_metadata`` forms). ``thread-id-a`` picks the lane pair
    ``t in {0,1}`` or ``{2,3}`` of each quad, ``thread-id-b`` the lane ``t == thread-id-b``;
    ``byte-id`` the first byte of the ``nblk`` consecutive bytes used. With
    ``docs/layouts.md`` (cutlass SM120 SFALayout/SFBLayout; not hardware-checked):

    * ``SF_A[m, j]``: lane ``4*(m % 8) + 2*thread_id + m // 8``, byte ``byte_id + j``.
    * ``SF_B[j, n]``: lane ``4*n + thread_id``, byte ``byte_id + j``.

    Byte ``j`` scales k-block ``j`` (``K / nblk`` consecutive columns of A / rows of B;
    ``nblk`` = 1, 2, 4 for ``scale_vec::1X, 2X, 4X``).

    Args:
      operand: ``'a'`` or ``'b'``.
      scale_vec: ``'1X'``, ``'2X'``, ``'4X'`` (``'scale_vec::'`` prefix accepted) or
        ``1``, ``2``, ``4``.
      thread_id: ``thread-id-a`` (0, 1) or ``thread-id-b`` (0..3).
      byte_id: ``byte-id-a``/``byte-id-b``: 0..3 for 1X, 0 or 2 for 2X, 0 for 4X (Table 37).
      m, n: the MMA's M (16) and N (8).

    Returns:
      :class:`ScaleLayout` ``(lane, byte)``, ``int32 [m, nblk]`` for ``'a'``,
      ``int32 [nblk, n]`` for ``'b'``.

    Example:
      >>> sa = scale_layout("a", scale_vec="2X", thread_id=1, byte_id=2)
      >>> sa.lane[9].tolist(), sa.byte[9].tolist()
      ([7, 7], [2, 3])
    """
    operand = _choose("operand", operand, ("a", "b"))
    if isinstance(scale_vec, (int, np.integer)) and not isinstance(scale_vec, bool):
        nblk = int(scale_vec)
        if nblk not in _BYTE_IDS:
            raise _bad("scale_vec", scale_vec, ("1X", "2X", "4X"))
    else:
        nblk = _SCALE_VECS[_choose("scale_vec", scale_vec, tuple(_SCALE_VECS), "", "scale_vec::")]
    context = f"scale_vec::{nblk}X operand {operand!r}"
    for name, value, allowed in (
        ("thread_id", thread_id, _THREAD_IDS[operand]),
        ("byte_id", byte_id, _BYTE_IDS[nblk]),
        ("m", m, (16,)),
        ("n", n, (8,)),
    ):
        if isinstance(value, (bool, np.bool_)) or value not in allowed:
            raise _bad(name, value, allowed, context)
    return _scale_table(operand, nblk, int(thread_id), int(byte_id), int(m), int(n))


@functools.cache
def _scale_table(operand: str, nblk: int, tid: int, bid: int, m: int, n: int) -> ScaleLayout:
    if operand == "a":
        fn, count = _scale_a, m
    else:
        fn, count = _scale_b, n
    lane, byte = _tabulate(functools.partial(fn, nblk=nblk, tid=tid, bid=bid), count)
    if operand == "b":  # per column [n, nblk] -> [nblk, n]
        lane, byte = _frozen(lane.T, np.int32), _frozen(byte.T, np.int32)
    return ScaleLayout(lane, byte)


# ---------------------------------------------------------------------------------------
# ldmatrix / stmatrix / movmatrix (9.7.14.5.15-17)
def _ld_m8n8(lane, *, nelem: int, trans: bool):
    """m8n8 .b16: register i holds matrix i; half h of lane l is row ``g``, column
    ``2t + h`` (``.trans``: row ``2t + h``, column ``g``)."""
    g, t, _, reg, h = _split(lane, nelem, 2)
    a, b = np.broadcast_to(g, h.shape), 2 * t + h
    return (reg, b, a) if trans else (reg, a, b)


def _ld_m16n16(lane, *, nelem: int):
    """m16n16 .trans .b8: matrix ``R >> 1``; byte j of register R is row ``4t + j``,
    column ``g + 8 * (R & 1)`` (docs/layouts.md)."""
    g, t, _, reg, j = _split(lane, nelem, 4)
    return reg >> 1, 4 * t + j, g + 8 * (reg & 1)


def _ld_m8n16(lane, *, nelem: int):
    """m8n16 .b8x16: register i holds matrix i; byte j is row ``g``, column ``4t + j``."""
    g, t, _, reg, j = _split(lane, nelem, 4)
    return reg, np.broadcast_to(g, j.shape), 4 * t + j


def _st_m16n8(lane, *, nelem: int):
    """stmatrix m16n8 .trans .b8: register i holds matrix i; byte b goes to memory row
    ``2t + (b & 1)``, column ``g + 8 * (b >> 1)`` (docs/layouts.md)."""
    g, t, _, reg, b = _split(lane, nelem, 4)
    return reg, 2 * t + (b & 1), g + 8 * (b >> 1)


def _addr_lane(index, *, rows: int):
    """The lane whose address starts row r of matrix i: ``rows * i + r``."""
    r = np.arange(rows, dtype=np.int32)
    return (rows * index + r,)


_NUMS = {"x1": 1, "x2": 2, "x4": 4}
_MEM_BITS = {"b16": 16, "b8": 8, "b8x16.b6x16_p32": 6, "b8x16.b4x16_p64": 4}
_PACKED = ("b8x16.b6x16_p32", "b8x16.b4x16_p64")
# opcode -> shape -> (nums, trans values, elems)
_MOVES = {
    "ldmatrix": {
        "m8n8": (("x1", "x2", "x4"), (False, True), ("b16",)),
        "m16n16": (("x1", "x2"), (True,), ("b8", *_PACKED)),
        "m8n16": (("x1", "x2", "x4"), (False,), _PACKED),
    },
    "stmatrix": {
        "m8n8": (("x1", "x2", "x4"), (False, True), ("b16",)),
        "m16n8": (("x1", "x2", "x4"), (True,), ("b8",)),
    },
}


def _movement(opcode: str, shape, num, trans, elem) -> MovementLayout:
    shapes = _MOVES[opcode]
    shape = _choose("shape", shape, tuple(shapes), opcode)
    nums, transes, elems = shapes[shape]
    context = f"{opcode}.{shape}"
    if isinstance(num, (int, np.integer)) and not isinstance(num, bool):
        num = f"x{num}"
    num = _choose("num", num, nums, context)
    trans = _check_bool("trans", trans)
    if trans not in transes:
        raise _bad("trans", trans, transes, context)
    if isinstance(elem, str) and _strip(elem) in ("b6x16_p32", "b4x16_p64"):
        elem = "b8x16." + _strip(elem)
    elem = _choose("elem", elem, elems, context)
    return _movement_table(opcode, shape, _NUMS[num], trans, elem)


@functools.cache
def _movement_table(opcode, shape, num, trans, elem) -> MovementLayout:
    if shape == "m8n8":
        fn, epr, rows, cols, per_mat = functools.partial(_ld_m8n8, trans=trans), 2, 8, 8, 1
    elif shape == "m16n16":
        fn, epr, rows, cols, per_mat = _ld_m16n16, 4, 16, 16, 2
    elif shape == "m8n16":
        fn, epr, rows, cols, per_mat = _ld_m8n16, 4, 8, 16, 1
    else:  # stmatrix m16n8: a 16x8 register matrix stored transposed, 8 rows of 16 bytes
        fn, epr, rows, cols, per_mat = _st_m16n8, 4, 8, 16, 1
    nregs = num * per_mat
    mat, row, col = _tabulate(functools.partial(fn, nelem=nregs * epr))
    (addr,) = _tabulate(functools.partial(_addr_lane, rows=rows), num)
    return MovementLayout(mat, row, col, nregs, epr, 32 // epr, addr, rows, cols, _MEM_BITS[elem])


def ldmatrix_layout(*, shape: str, num, trans: bool, elem: str) -> MovementLayout:
    """Register <-> shared-memory map of ``ldmatrix`` (9.7.14.5.15).

    PTX: ``ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.b16``,
    ``ldmatrix.sync.aligned.m16n16.{x1,x2}.trans.{b8 | b8x16.b6x16_p32 | b8x16.b4x16_p64}``,
    ``ldmatrix.sync.aligned.m8n16.{x1,x2,x4}.b8x16.{b6x16_p32 | b4x16_p64}``.

    * ``m8n8``: row ``r`` of matrix ``i`` starts at the address of lane ``8i + r``; lane
      ``l`` register ``i`` half ``h`` receives ``M_i[g][2t + h]`` (``.trans``:
      ``M_i[2t + h][g]``) (spec table of addresses and Figure 104; docs/layouts.md).
    * ``m16n16`` (``.trans`` mandatory): lanes ``0-15`` give the 16 row addresses of
      matrix 0, lanes ``16-31`` those of matrix 1 (registers 2, 3); byte ``j`` of register
      ``R`` receives ``M_{R>>1}[4t + j][g + 8*(R&1)]`` (Figure 105, docs/layouts.md).
    * ``m8n16``: addresses as ``m8n8``; byte ``j`` of register ``i`` receives
      ``M_i[g][4t + j]`` (Figure 106, docs/layouts.md).

    ``mat``/``row``/``col`` are memory coordinates; see :class:`MovementLayout` for the
    byte/bit offset of each element and the packed ``.b6x16_p32``/``.b4x16_p64`` sources.

    Args:
      shape: ``'m8n8'``, ``'m16n16'`` or ``'m8n16'``.
      num: ``'x1'``, ``'x2'``, ``'x4'`` (or 1, 2, 4).
      trans: the ``.trans`` qualifier.
      elem: ``'b16'``, ``'b8'``, ``'b8x16.b6x16_p32'``, ``'b8x16.b4x16_p64'`` (the source
        format alone, ``'b6x16_p32'``, is accepted).

    Returns:
      :class:`MovementLayout`.

    Example:
      >>> ld = ldmatrix_layout(shape="m8n8", num="x2", trans=False, elem="b16")
      >>> ld.mat[6].tolist(), ld.row[6].tolist(), ld.col[6].tolist()
      ([0, 0, 1, 1], [1, 1, 1, 1], [4, 5, 4, 5])
      >>> ld.addr_lane.tolist()[1]
      [8, 9, 10, 11, 12, 13, 14, 15]
    """
    return _movement("ldmatrix", shape, num, trans, elem)


def stmatrix_layout(*, shape: str, num, trans: bool, elem: str) -> MovementLayout:
    """Register <-> shared-memory map of ``stmatrix`` (9.7.14.5.16).

    PTX: ``stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.b16`` and
    ``stmatrix.sync.aligned.m16n8.{x1,x2,x4}.trans.b8``.

    * ``m8n8``: the exact inverse of ``ldmatrix.m8n8`` (same map): register ``i`` half ``h``
      of lane ``l`` goes to ``M_i[g][2t + h]`` (``.trans``: ``M_i[2t + h][g]``), row ``r``
      of matrix ``i`` at the address of lane ``8i + r``.
    * ``m16n8`` (``.trans`` mandatory): the 16x8 register matrix is stored as 8 memory rows
      of 16 bytes, rows from lanes ``8i..8i+7``; byte ``b`` of register ``i`` goes to
      ``M_i[2t + (b & 1)][g + 8 * (b >> 1)]`` (Figure 108, docs/layouts.md).

    Args:
      shape: ``'m8n8'`` or ``'m16n8'``.
      num: ``'x1'``, ``'x2'``, ``'x4'`` (or 1, 2, 4).
      trans: the ``.trans`` qualifier.
      elem: ``'b16'`` (m8n8) or ``'b8'`` (m16n8).

    Returns:
      :class:`MovementLayout` (memory coordinates, as for :func:`ldmatrix_layout`).

    Example:
      >>> st = stmatrix_layout(shape="m16n8", num="x1", trans=True, elem="b8")
      >>> st.row[6].tolist(), st.col[6].tolist()
      ([4, 5, 4, 5], [1, 1, 9, 9])
    """
    return _movement("stmatrix", shape, num, trans, elem)


def _mov_src(lane):
    """movmatrix source: lane ``4r + c/2``, half ``c % 2`` holds ``M[r][c]``."""
    return _ld_m8n8(lane, nelem=2, trans=False)


def _mov_dst(lane):
    """movmatrix result: lane ``l`` half ``h`` holds ``M[2t + h][g]`` (= ``M^T[g][2t+h]``)."""
    return _ld_m8n8(lane, nelem=2, trans=True)


@functools.cache
def movmatrix_layout() -> MovmatrixLayout:
    """Source and result maps of ``movmatrix.sync.aligned.m8n8.trans.b16`` (9.7.14.5.17).

    Source (Figure 109): lane ``4r + c // 2``, half ``c % 2`` of ``a`` holds ``M[r][c]``.
    Result (Figure 110): half ``h`` of ``d`` in lane ``l`` holds ``M[2t + h][g]``, i.e.
    ``d`` holds ``M^T`` in the source layout. The spec's text says a quad holds "a column of
    the result matrix", which read literally (``M^T[2t + h][g] = M[g][2t + h]``) would move
    nothing; its figure labels elements by their source position, a column of ``M``. The
    map here is the one docs/layouts.md records as hardware-checked.

    Returns:
      :class:`MovmatrixLayout` ``(src, dst)``, both :class:`Layout` indexing ``M``.

    Example:
      >>> mv = movmatrix_layout()
      >>> mv.dst.row[5].tolist(), mv.dst.col[5].tolist()
      ([2, 3], [1, 1])
    """
    layouts = []
    for fn in (_mov_src, _mov_dst):
        mat, row, col = _tabulate(fn)
        layouts.append(Layout(mat, row, col, 1, 2, 16))
    return MovmatrixLayout(*layouts)
