"""Sparse ``mma.sp`` / ``mma.sp::ordered_metadata`` operands (PTX ISA 9.7.14.6), and those
of ``tcgen05.mma.sp`` (9.7.16.10.8; docs/tcgen05.md).

``tcgen05.mma.sp`` has the same chunk patterns (1:2 ``.kind::tf32``; 2:4 ``f16``,
``f8f6f4``, ``mxf8f6f4``, ``i8``; pair-wise 4:8 ``mxf4*``) and nibble decode; its
metadata is a logical matrix ``[..., M, K / chunk_size]`` of 4-bit values (no lanes,
no selector), M may be any, and its meaningful nibbles are :data:`NIBBLES_TCGEN05`.

Matrix A of an ``M x N x K`` sparse MMA is structured sparse: every row is cut into
*chunks* of ``chunk_size`` dense columns, and only half of each chunk is stored (spec
9.7.14.6.1). A chunk is made of *slots* of ``width`` dense elements, ``keep`` of which
are stored; the metadata names the stored slots:

* 2:4 (``.f16``/``.bf16``, ``.s8``/``.u8``, ``.e4m3``/``.e5m2``, ``kind::f8f6f4`` and
  ``kind::mxf8f6f4``): chunk_size 4, 4 slots of width 1, keep 2.
* 1:2 (``.tf32``): chunk_size 2, 2 slots of width 1, keep 1.
* pair-wise 4:8 (``.s4``/``.u4``, ``kind::mxf4*`` ``.e2m1``): chunk_size 8, 4 slots of
  width 2 (element pairs), keep 2.

Nibble ``n`` of a metadata register (bits ``[4n+3:4n]``) describes one chunk;
:func:`jaxmma._layouts.metadata_layout` says which lane and nibble describe which (row,
chunk) for each selector (``docs/layouts.md``, hardware-checked on sm_90). The low two
bits ``i0`` of the nibble place stored slot 0, its high two bits ``i1`` stored slot 1:

* 2:4: stored columns ``2c, 2c+1`` of the compressed row are dense ``4c + i0, 4c + i1``.
* 1:2 (``.tf32``): only ``0b0100`` (keep element 0) and ``0b1110`` (keep element 1) are
  meaningful; stored column ``c`` is dense ``2c + i0 // 2``.
* pair-wise 4:8: stored columns ``4c..4c+3`` are dense ``8c + 2*i0 + {0, 1}`` and
  ``8c + 2*i1 + {0, 1}``.

Inside the emulator the metadata travels as ``idx``: int32 ``[..., M, K/2]``, the dense
column of every stored element of the compressed A (row-major, compressed-column order);
only the ``K/2`` stored products enter the fused sum (``docs/numerics.md``).

Undefined behaviour (spec 9.7.14.6.1, 9.7.14.6.3) and what the emulator does by default:

* Nibbles with ``i0 == i1`` (``0b0000``, ``0b0101``, ``0b1010``, ``0b1111``): the index
  decode above is applied as is, so both stored elements meet the same row of B (both
  products enter the sum).
* ``::ordered_metadata`` with ``i0 > i1``: decoded like ``mma.sp`` (sm_90 behaves so).
* ``.tf32`` nibbles other than ``0b0100``/``0b1110``: the position is ``i0 // 2``
  (bit 1 of the nibble); the other bits are ignored.
* Lanes outside the selected set are never read.

**Checked mode** turns these into errors: ``check=True`` on a call (the recommended way;
also ``ins(a, b, c, e, selector=f, check=True)``, ``ins.mma(A, B, C, check=True)`` and
``jaxmma.matmul(..., check=True)``), or ``with checked():``, which sets the default for
eager calls only. Concrete (eager) inputs raise a ``ValueError`` at once, naming the
lane, nibble, row and chunk; traced inputs (under ``jit``/``vmap``) raise the same
message when the compiled program runs (:func:`jaxmma._errors.raise_if`: JAX reports it
as a ``jax.errors.JaxRuntimeError`` whose text ends with ``ValueError: ...``; no
``checkify`` wrapper is needed).

Matrix-level misuse (a dense A with too many non-zeros in a chunk, an ``idx`` that no
metadata nibble can express) always raises for concrete inputs, and for traced inputs in
checked mode. Traced inputs without the check never give a plausible number: every row
of D whose row of A is invalid holds :data:`POISON` (the canonical NaN of ``.f32`` and
``.f16`` outputs; ``-2**31`` for ``.s32``, which has no NaN); the other rows keep their
bits (``docs/gemm.md``). :func:`compress` of a traced A without the check keeps the
lowest-index non-zero slots.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import operator
import warnings
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .. import util
from ..bits import CANONICAL_NAN, FORMATS, FP8, to_bits
from ..bits import registers as _registers
from ..spec import Form, InstructionView
from . import _fragments, _layouts

__all__ = [
    "checked",
    "compress",
    "decompress",
    "is_checked",
    "matrix_operands",
    "metadata_indices",
    "prune",
    "validate",
]

# ---------------------------------------------------------------------------------------
# Checked mode
_DEFAULT_CHECK = contextvars.ContextVar("jaxmma_sparse_check", default=False)


class checked:
    """Set the default of ``check`` for *eager* calls (per thread; restored by ``with``).

    The recommended way is the explicit argument: ``check=True`` on
    :func:`metadata_indices`, :func:`compress`, :func:`decompress`,
    :func:`matrix_operands`, and on the instructions themselves (``ins(a, b, c, e,
    selector=f, check=True)``, ``ins.mma(A, B, C, check=True)``); it is part of the traced
    function, so a jitted function checks exactly when it says so.

    This context only sets the default for calls whose inputs are concrete (eager calls
    outside ``jit``/``vmap``); traced calls check only with an explicit ``check=True``, so
    nothing is baked into a compiled function by whatever mode was on when it was traced.
    The mode is a :class:`contextvars.ContextVar`: each thread (and asyncio task) has its
    own.

    Args:
      enabled: ``True`` (default) to check, ``False`` to stop checking.

    Example:
      >>> with checked():          # eager calls in the block check   # doctest: +SKIP
      ...     d = ins(a, b, c, e, selector=0)
    """

    def __init__(self, enabled: bool = True) -> None:
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"enabled: expected True or False, got {enabled!r}")
        self._token = _DEFAULT_CHECK.set(bool(enabled))

    def __repr__(self) -> str:
        return f"checked({_DEFAULT_CHECK.get()})"

    def __enter__(self) -> checked:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        _DEFAULT_CHECK.reset(self._token)
        return False


def is_checked() -> bool:
    """Whether eager calls check by default in this thread (see :class:`checked`)."""
    return _DEFAULT_CHECK.get()


def _want_check(check, *inputs) -> bool:
    """``check`` as given; ``None``: the :class:`checked` default for concrete ``inputs``,
    False for traced ones."""
    if check is None:
        return _DEFAULT_CHECK.get() and _concrete(*inputs)
    if not isinstance(check, (bool, np.bool_)):
        raise TypeError(f"check: expected None, True or False, got {check!r}")
    return bool(check)


#: set while an eager call with concrete operands is traced as one program
#: (:func:`as_concrete`): every check decides as it does for concrete inputs
_AS_CONCRETE = contextvars.ContextVar("jaxmma_sparse_as_concrete", default=False)


def _concrete(*xs) -> bool:
    return _AS_CONCRETE.get() or not any(isinstance(x, jax.core.Tracer) for x in xs)


@contextlib.contextmanager
def as_concrete(default_check: bool):
    """Trace an eager call whose operands are concrete as one program that decides every
    check as the op-by-op call would: ``check=None`` takes ``default_check`` (the
    :class:`checked` default at the call), and every check that raises for concrete inputs
    records its traced verdict (:func:`jaxmma.util._errors.recording`) in the list this
    yields: the caller returns them from its program and, where one is true, reruns the
    call op by op, which raises the ``ValueError``."""
    tokens = _AS_CONCRETE.set(True), _DEFAULT_CHECK.set(bool(default_check))
    try:
        with util.recording() as flags:
            yield flags
    finally:
        _DEFAULT_CHECK.reset(tokens[1])
        _AS_CONCRETE.reset(tokens[0])


# ---------------------------------------------------------------------------------------
# Geometry of one sparse form
#: Nibbles that ``mma.sp`` defines (all but i0 == i1) and ``::ordered_metadata`` (i0 < i1).
NIBBLES_SP = tuple(v for v in range(16) if (v & 3) != (v >> 2))
NIBBLES_ORDERED = tuple(v for v in range(16) if (v & 3) < (v >> 2))
NIBBLES_TF32 = (0b0100, 0b1110)
#: The meaningful nibbles of ``tcgen05.mma.sp`` 2:4 and pair-wise 4:8 (9.7.16.10.8.2-3):
#: the ascending pairs and ``0b0110`` (positions 2, 1).
NIBBLES_TCGEN05 = (0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b0110, 0b1110)

_SLOTS = {4: (4, 1, "2:4"), 2: (2, 1, "1:2"), 8: (4, 2, "pair-wise 4:8")}


class _Geometry(NamedTuple):
    text: str
    shape: str
    atype: str
    kind: str | None
    ordered: bool
    m: int
    k: int
    chunk_size: int
    slots: int  # slots per chunk
    width: int  # dense elements per slot
    keep: int  # stored slots per chunk
    pattern: str
    selectors: tuple[int, ...]
    valid: tuple[int, ...]  # meaningful nibble values
    opcode: str = "mma"  # or "tcgen05.mma" (metadata as a matrix, one nibble per chunk)

    @property
    def rows(self) -> str:
        """M as error messages show it (``tcgen05.mma.sp``: any M)."""
        return "M" if self.opcode == "tcgen05.mma" else str(self.m)

    def fits(self, x, cols: int) -> bool:
        """``x`` has trailing shape ``[M, cols]`` (any M for ``tcgen05.mma.sp``)."""
        if x.ndim < 2 or x.shape[-1] != cols:
            return False
        return self.opcode == "tcgen05.mma" or x.shape[-2] == self.m

    @property
    def section(self) -> str:
        return "9.7.16.10.8" if self.opcode == "tcgen05.mma" else "9.7.14.6.1"

    @property
    def nchunks(self) -> int:
        return self.k // self.chunk_size

    @property
    def stored(self) -> int:  # stored elements per chunk
        return self.keep * self.width


def _is_instruction(x) -> bool:
    """A parsed instruction (anything that carries a row of the spec table)."""
    return isinstance(getattr(x, "form", None), Form) and hasattr(x, "arch")


def _geometry(ins) -> _Geometry:
    if not _is_instruction(ins):
        raise TypeError(
            f"ins: expected an mma.sp / mma.sp::ordered_metadata jaxmma.Instruction, got "
            f"{type(ins).__name__}"
        )
    if ins.opcode not in ("mma", "tcgen05.mma") or not ins.sparse:
        raise ValueError(
            f"ins: expected an mma.sp / mma.sp::ordered_metadata / tcgen05.mma.sp "
            f"instruction, got {ins.text!r}"
        )
    return _geometry_of(ins)


#: tcgen05.mma.sp: dense elements per chunk of each kind (9.7.16.10.8)
TCGEN05_CHUNKS = {"tf32": 2, "mxf4": 8, "mxf4nvf4": 8}


def _tcgen05_geometry(ins) -> _Geometry:
    chunk = TCGEN05_CHUNKS.get(ins.kind, 4)
    slots, width, pattern = _SLOTS[chunk]
    valid = NIBBLES_TF32 if chunk == 2 else NIBBLES_TCGEN05
    return _Geometry(
        ins.text,
        ins.shape,
        ins.atype,
        ins.kind,
        False,
        ins.m,
        ins.k,
        chunk,
        slots,
        width,
        slots // 2,
        pattern,
        (),
        valid,
        "tcgen05.mma",
    )


@functools.cache
def _geometry_of(ins) -> _Geometry:
    if ins.opcode == "tcgen05.mma":
        return _tcgen05_geometry(ins)
    fmt = _layouts.metadata_format(shape=ins.shape, atype=ins.atype)
    slots, width, pattern = _SLOTS[fmt.chunk_size]
    ordered = ins.sparse == "sp::ordered_metadata"
    valid: tuple[int, ...]
    if fmt.chunk_size == 2:
        valid = NIBBLES_TF32
    else:
        valid = NIBBLES_ORDERED if ordered else NIBBLES_SP
    return _Geometry(
        ins.text,
        ins.shape,
        ins.atype,
        ins.kind,
        ordered,
        ins.m,
        ins.k,
        fmt.chunk_size,
        slots,
        width,
        slots // 2,
        pattern,
        tuple(fmt.selectors),
        valid,
    )


def _selector(geo: _Geometry, selector) -> int:
    allowed = ", ".join(str(s) for s in geo.selectors)
    if isinstance(selector, jax.core.Tracer):
        raise TypeError(
            f"selector must be a static Python int (the sparsity selector f of "
            f"{geo.text} is a constant); got a traced value; allowed: {allowed}"
        )
    value = None
    if not isinstance(selector, (bool, np.bool_)):
        try:
            value = operator.index(selector)
        except TypeError:
            value = None
    if value not in geo.selectors:
        raise ValueError(f"selector={selector!r} is not valid for {geo.text}; allowed: {allowed}")
    return value


class _Tables(NamedTuple):
    lane: np.ndarray  # int32 [M, nchunks]: the lane whose e describes (row, chunk)
    nibble: np.ndarray  # int32 [M, nchunks]: which nibble of it
    shift: np.ndarray  # uint32 [M, nchunks]: 4 * nibble
    row: np.ndarray  # int32 [32, 8]: row described by nibble n of lane l (0 if unused)
    chunk: np.ndarray  # int32 [32, 8]: its chunk (0 if unused)
    used: np.ndarray  # bool [32]: the lanes the selector picks
    valid: np.ndarray  # bool [16]: the meaningful nibble values


@functools.cache
def _tables(geo: _Geometry, selector: int) -> _Tables:
    """Static maps between metadata nibbles and the (row, chunk) of A they describe, from
    :func:`jaxmma._layouts.metadata_layout` (read-only NumPy arrays)."""
    lay = _layouts.metadata_layout(shape=geo.shape, atype=geo.atype, selector=selector)
    lane = np.full((geo.m, geo.nchunks), -1, np.int32)
    nib = np.full((geo.m, geo.nchunks), -1, np.int32)
    for l_ in np.flatnonzero(lay.lane_used):
        for n in range(8):
            r, c = int(lay.row[l_, n]), int(lay.chunk[l_, n])
            if lane[r, c] >= 0:  # pragma: no cover - a broken layout table
                raise AssertionError(f"row {r}, chunk {c} described twice")
            lane[r, c], nib[r, c] = l_, n
    if (lane < 0).any():  # pragma: no cover - a broken layout table
        raise AssertionError(f"metadata layout of {geo.text} misses chunks")
    used = np.asarray(lay.lane_used, bool)
    row = np.where(used[:, None], lay.row, 0).astype(np.int32)
    chunk = np.where(used[:, None], lay.chunk, 0).astype(np.int32)
    valid = np.zeros(16, bool)
    valid[list(geo.valid)] = True
    out = _Tables(lane, nib, (4 * nib).astype(np.uint32), row, chunk, used, valid)
    for a in out:
        a.setflags(write=False)
    return out


@functools.cache
def _choice_table(slots: int) -> np.ndarray:
    """Non-zero slot mask -> the kept slots, ascending: the non-zero slots (the lowest
    ``keep`` if there are more), completed with the lowest-index zero slots."""
    keep = slots // 2
    out = np.zeros((2**slots, keep), np.int32)
    for mask in range(2**slots):
        nz = [s for s in range(slots) if mask >> s & 1]
        z = [s for s in range(slots) if not mask >> s & 1]
        out[mask] = sorted((nz + z)[:keep])
    out.setflags(write=False)
    return out


# ---------------------------------------------------------------------------------------
# Errors: concrete inputs raise ValueError at once, traced ones when the program runs
def _fail(bad, message, values: dict, traced: bool) -> None:
    """Raise for the first true entry of ``bad`` (bool ``[..., M, nchunks]``).

    ``message(pos, **values)`` builds the text from the index tuple ``(*batch, row,
    chunk)`` and ``values`` as NumPy arrays. Concrete ``bad`` raises at once; a traced
    one only when ``traced``, through :func:`jaxmma._errors.raise_if` (a run-time error
    of the compiled program, with the same message).
    """
    if traced or _concrete(bad, *values.values()):
        util.raise_if(bad, message, **values)


def _where(pos) -> str:
    batch = pos[:-2]
    return f"[{', '.join(str(i) for i in batch)}]" if batch else ""


def _binary(values) -> str:
    return ", ".join(f"0b{v:04b}" for v in values)


# ---------------------------------------------------------------------------------------
# Jitted cores. Static arguments are the pattern only (``slots``, ``width``), the tables
# travel as arrays, so one compilation serves every form and selector of a pattern.
def _offsets(slots: int, width: int, nch: int) -> np.ndarray:
    """``chunk * chunk_size + w`` for every stored element: int32 ``[nch, keep, width]``."""
    base = np.arange(nch, dtype=np.int32)[:, None, None] * (slots * width)
    w = np.arange(width, dtype=np.int32)[None, None, :]
    return np.broadcast_to(base + w, (nch, slots // 2, width))


def _slot_columns(slots: int, width: int, kept):
    """Stored slots int32 ``[..., M, nch, keep]`` -> dense columns int32 ``[..., M, K/2]``."""
    shape = kept.shape + (width,)
    cols = jnp.broadcast_to(kept[..., None] * width, shape)
    cols = cols + jnp.broadcast_to(_offsets(slots, width, kept.shape[-2]), shape)
    return cols.reshape(kept.shape[:-2] + (-1,))


def _nibble_slots(slots: int, nib):
    """Nibbles uint32 ``[..., M, nch]`` -> stored slots int32 ``[..., M, nch, keep]``."""
    i0 = (nib & jnp.uint32(3)).astype(jnp.int32)
    if slots == 2:  # .tf32: position i0 // 2
        return (i0 >> 1)[..., None]
    return jnp.stack([i0, (nib >> jnp.uint32(2)).astype(jnp.int32)], axis=-1)


def _slot_nibbles(slots: int, kept):
    """Stored slots ``[..., M, nch, keep]`` -> nibbles uint32 ``[..., M, nch]``."""
    s = kept.astype(jnp.uint32)
    if slots == 2:  # slot 0 -> 0b0100, slot 1 -> 0b1110
        s0 = 2 * s[..., 0]
        return s0 | ((s0 + 1) << 2)
    return s[..., 0] | (s[..., 1] << 2)


@functools.partial(util.jit, static_argnums=(0, 1))
def _decode_core(slots: int, width: int, e, lane, shift, valid):
    """e uint32 ``[..., 32]`` -> (idx int32 ``[..., M, K/2]``, nibbles uint32 and bad bool
    ``[..., M, nch]``)."""
    words = e[..., lane]
    nib = (words >> jnp.broadcast_to(shift, words.shape)) & jnp.uint32(0xF)
    idx = _slot_columns(slots, width, _nibble_slots(slots, nib))
    return idx, nib, jnp.logical_not(valid[nib])


@util.jit
def _pack_core(nib, row, chunk, used):
    """Nibbles uint32 ``[..., M, nch]`` -> metadata registers uint32 ``[..., 32]``."""
    per = nib[..., row, chunk]  # [..., 32, 8]
    shift = jnp.broadcast_to(4 * jnp.arange(8, dtype=jnp.uint32), per.shape)
    mask = jnp.broadcast_to(used[:, None], per.shape)
    per = jnp.where(mask, per << shift, jnp.uint32(0))
    return jnp.sum(per, axis=-1, dtype=jnp.uint32)  # disjoint bit fields: sum == or


def _nonzero(x, mag_mask):
    """bool: the element is not zero (``+-0`` of a float format; NaN is non-zero)."""
    if jnp.issubdtype(x.dtype, jnp.unsignedinteger):  # raw bits: ignore sign and padding
        return (x & mag_mask.astype(x.dtype)) != 0
    return x != jnp.zeros((), x.dtype)


def _per_slot(slots: int, width: int, x):
    """``[..., M, K]`` -> ``[..., M, nch, slots, width]``."""
    return x.reshape(x.shape[:-1] + (-1, slots, width))


@functools.partial(util.jit, static_argnums=(0, 1))
def _compress_core(slots: int, width: int, x, mag_mask):
    """Dense ``[..., M, K]`` -> (values ``[..., M, K/2]``, idx, nibbles, non-zero count)."""
    nz = jnp.any(_per_slot(slots, width, _nonzero(x, mag_mask)), axis=-1)
    count = jnp.sum(nz.astype(jnp.int32), axis=-1)
    weights = jnp.broadcast_to(1 << jnp.arange(slots, dtype=jnp.int32), nz.shape)
    code = jnp.sum(jnp.where(nz, weights, 0), axis=-1)
    kept = jnp.asarray(_choice_table(slots))[code]  # [..., M, nch, keep]
    idx = _slot_columns(slots, width, kept)
    return jnp.take_along_axis(x, idx, axis=-1), idx, _slot_nibbles(slots, kept), count


_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def _magnitude(how: str, x, mag_mask):
    """float32 ``|x|`` (NaN -> inf) of element values, or of raw bits (``how``)."""
    if not jnp.issubdtype(x.dtype, jnp.unsignedinteger):
        m = jnp.abs(x.astype(jnp.float32))
    elif how == "tf32":
        m = lax.bitcast_convert_type(x.astype(jnp.uint32) & jnp.uint32(0x7FFFFFFF), jnp.float32)
    elif how.startswith("e2m1"):  # e2m1 (kind::mxf4*) or e2m1c (f8f6f4 container)
        mag = (x.astype(jnp.uint32) >> jnp.uint32(2 if how == "e2m1c" else 0)) & jnp.uint32(7)
        m = jnp.asarray(_E2M1)[mag.astype(jnp.int32)]
    elif how in ("s8", "s4"):
        bits = int(how[1])
        v = (x.astype(jnp.uint32) & jnp.uint32(2**bits - 1)).astype(jnp.int32)
        m = jnp.abs(jnp.where(v >= 2 ** (bits - 1), v - 2**bits, v)).astype(jnp.float32)
    else:  # unsigned integers; sign-magnitude floats, whose magnitude bits order as |x|
        m = (x.astype(jnp.uint32) & mag_mask).astype(jnp.float32)
    return jnp.where(jnp.isnan(m), jnp.float32(jnp.inf), m)


@functools.partial(util.jit, static_argnums=(0, 1, 2))
def _prune_core(slots: int, width: int, how: str, x, mag_mask):
    mag = jnp.sum(_per_slot(slots, width, _magnitude(how, x, mag_mask)), axis=-1)
    kept = jnp.argsort(-mag, axis=-1, stable=True)[..., : slots // 2].astype(jnp.int32)
    slot = lax.broadcasted_iota(jnp.int32, mag.shape + (slots // 2,), mag.ndim - 1)
    keep = jnp.any(jnp.broadcast_to(kept[..., None, :], slot.shape) == slot, axis=-1)
    keep = jnp.broadcast_to(keep[..., None], keep.shape + (width,)).reshape(x.shape)
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


@functools.partial(util.jit, static_argnums=2)
def _scatter(values, idx, k: int):
    """Stored values ``[..., M, J]`` at dense columns ``idx`` -> ``[..., M, K]``, zeros
    elsewhere; where two stored elements share a column the first one wins."""
    lead = jnp.broadcast_shapes(values.shape[:-2], idx.shape[:-2])
    values = jnp.broadcast_to(values, lead + values.shape[-2:])
    idx = jnp.broadcast_to(idx, lead + idx.shape[-2:])
    cols = lax.broadcasted_iota(jnp.int32, idx.shape + (k,), idx.ndim)
    hit = jnp.broadcast_to(idx[..., None], cols.shape) == cols  # [..., M, J, K]
    first = jnp.argmax(hit, axis=-2).astype(jnp.int32)  # [..., M, K]
    taken = jnp.take_along_axis(values, first, axis=-1)
    return jnp.where(jnp.any(hit, axis=-2), taken, jnp.zeros((), values.dtype))


@functools.partial(util.jit, static_argnums=(0, 1, 2))
def _idx_bad_core(slots: int, width: int, order: str | None, idx):
    """bool ``[..., M, nch]``: the stored columns of a chunk are not what a nibble decodes
    to; ``order`` ``"distinct"``/``"ascending"`` also flags the undefined-behaviour ones."""
    keep = slots // 2
    i = idx.reshape(idx.shape[:-1] + (-1, keep, width))
    rel = i - jnp.broadcast_to(_offsets(slots, width, i.shape[-3]), i.shape)
    slot = rel // width  # the offset w is taken off: a pair reads (2s, 2s) here
    ok = (rel >= 0) & (rel < slots * width) & (rel % width == 0)
    ok = ok & (slot == jnp.broadcast_to(slot[..., :1], slot.shape))
    ok = jnp.all(ok, axis=(-1, -2))
    if order is not None and keep == 2:
        s0, s1 = slot[..., 0, 0], slot[..., 1, 0]
        if order == "tcgen05":  # ascending, or 0b0110 (positions 2, 1)
            ok = ok & ((s0 < s1) | ((s0 == 2) & (s1 == 1)))
        else:
            ok = ok & ((s0 < s1) if order == "ascending" else (s0 != s1))
    return jnp.logical_not(ok)


# ---------------------------------------------------------------------------------------
# tcgen05.mma.sp: the metadata matrix, one 4-bit index pair per chunk of each row of A
def _tcgen05_selector(geo: _Geometry, selector) -> None:
    zero = isinstance(selector, (int, np.integer)) and not isinstance(selector, (bool, np.bool_))
    if selector is not None and not (zero and int(selector) == 0):
        raise ValueError(
            f"selector={selector!r}: not used for {geo.text}: e is the logical metadata "
            "matrix (the sparsity selector of the idesc only says which Tensor Memory "
            "columns hold it); allowed: None, 0"
        )


def _check_meta_matrix(geo: _Geometry, e):
    if e is None:
        raise ValueError(f"e: the metadata matrix is required for {geo.text}")
    e = jnp.asarray(e)
    if not jnp.issubdtype(e.dtype, jnp.integer):
        raise TypeError(
            f"e: expected an integer metadata matrix (one 4-bit value per chunk) for "
            f"{geo.text}, got {e.dtype}"
        )
    if not geo.fits(e, geo.nchunks):
        raise ValueError(
            f"e: expected the metadata matrix of trailing shape [M, {geo.nchunks}] "
            f"(M x K/{geo.chunk_size}: one 4-bit value per chunk of {geo.chunk_size} dense "
            f"columns) for {geo.text}, got {tuple(e.shape)}"
        )
    return e.astype(jnp.int32)


@functools.partial(util.jit, static_argnums=(0, 1))
def _decode_matrix_core(slots: int, width: int, e, valid):
    """e int32 ``[..., M, nch]`` -> (idx int32 ``[..., M, K/2]`` (-1 for the chunks whose
    value is not 4-bit), nibbles, not 4-bit, not meaningful: bool ``[..., M, nch]``)."""
    out = (e < 0) | (e > 15)
    nib = (e & 0xF).astype(jnp.uint32)
    idx = _slot_columns(slots, width, _nibble_slots(slots, nib))
    per = idx.shape[-1] // e.shape[-1]
    idx = jnp.where(jnp.repeat(out, per, axis=-1), -1, idx)
    return idx, nib, out, jnp.logical_not(valid[nib]) | out


def _tcgen05_indices(geo: _Geometry, e, check):
    e = _check_meta_matrix(geo, e)
    valid = np.zeros(16, bool)
    valid[list(geo.valid)] = True
    idx, nib, out, bad = _decode_matrix_core(geo.slots, geo.width, e, valid)
    allowed = _binary(geo.valid)

    def message(pos, e):
        r, c = pos[-2:]
        lo = c * geo.chunk_size
        return (
            f"invalid sparse metadata for {geo.text}: e{_where(pos)}[{r}, {c}] = "
            f"{int(e[pos])} describes row {r}, chunk {c} (dense columns {lo}.."
            f"{lo + geo.chunk_size - 1}) of A; the meaningful 4-bit values are {allowed} "
            f"(undefined behaviour otherwise, PTX ISA {geo.section})"
        )

    want = _want_check(check, e)
    _fail(out, message, {"e": e}, traced=want)  # not 4-bit: concrete always raises
    if want:
        _fail(bad, message, {"e": e}, traced=True)
    return idx


# ---------------------------------------------------------------------------------------
# Register level
def _check_e(geo: _Geometry, e):
    if e is None:
        raise ValueError(f"e: the metadata operand is required for {geo.text}")
    e = _registers(e, "e")
    if e.dtype != jnp.uint32:
        raise TypeError(f"e: expected uint32 metadata registers for {geo.text}, got {e.dtype}")
    if e.ndim < 1 or e.shape[-1] != 32:
        raise ValueError(
            f"e: expected metadata registers of shape [..., 32] (one per lane) "
            f"for {geo.text}, got {tuple(e.shape)}"
        )
    return e


def _check_nibbles(geo: _Geometry, tab: _Tables, nib, bad, selector: int) -> None:
    variant = "mma." + ("sp::ordered_metadata" if geo.ordered else "sp")
    allowed = f"the meaningful values for {variant} .{geo.atype} are {_binary(geo.valid)}"

    def message(pos, nib):
        r, c = pos[-2:]
        ln, n = int(tab.lane[r, c]), int(tab.nibble[r, c])
        v = int(nib[pos])
        lo = c * geo.chunk_size
        return (
            f"invalid sparse metadata for {geo.text}: e{_where(pos)}: lane {ln}, nibble "
            f"{n} (bits {4 * n + 3}:{4 * n}) = 0b{v:04b} describes row {r}, chunk {c} "
            f"(dense columns {lo}..{lo + geo.chunk_size - 1}) of A, selector "
            f"{selector}; {allowed} (undefined behaviour per PTX ISA 9.7.14.6.1)"
        )

    _fail(bad, message, {"nib": nib}, traced=True)


def metadata_indices(
    ins: InstructionView,
    e: ArrayLike,
    selector: int | None = None,
    *,
    check: bool | None = None,
) -> jax.Array:
    """Decode the metadata registers of ``mma.sp`` into the dense column of each stored
    element of A (PTX ISA 9.7.14.6.1-2, ``docs/layouts.md``).

    ``tcgen05.mma.sp`` (PTX ISA 9.7.16.10.8): ``e`` is the logical metadata matrix, int
    ``[..., M, K / chunk]``, one 4-bit value per chunk (``i0`` in bits 1:0, ``i1`` in bits
    3:2; chunks of 2 for ``.kind::tf32``, 4 for ``f16``/``f8f6f4``/``mxf8f6f4``/``i8``, 8
    (pairs) for ``mxf4``/``mxf4nvf4``); ``selector`` must be None or 0. A value outside
    0..15 raises for concrete input; traced and unchecked, its chunk decodes to -1 (the
    matrix level then poisons the row). docs/tcgen05.md.

    Every nibble of the lanes the selector picks describes one chunk of one row of A; its
    indices place the stored elements of that chunk (see the module docstring). Lanes
    outside the selected set are not read. jit/vmap friendly (``selector`` is static).

    Args:
      ins: an ``mma.sp`` / ``mma.sp::ordered_metadata`` :class:`jaxmma.Instruction`.
      e: uint32 ``[..., 32]``, the metadata register of each lane.
      selector: the sparsity selector ``f``, a static Python int in
        ``metadata_format(...).selectors`` (0..3, 0..1 or 0 depending on the form).
      check: ``True``, ``False`` or ``None`` (the :class:`checked` default for eager calls,
        no check when traced): raise on
        undefined-behaviour nibbles instead of decoding them.

    Returns:
      int32 ``[..., M, K/2]``: ``idx[..., r, j]`` is the dense column (0..K-1) of the
      ``j``-th stored element of row ``r`` of the compressed A.

    Raises:
      TypeError: ``e`` is not uint32, or ``selector`` is traced.
      ValueError: ``e`` is not ``[..., 32]``; ``selector`` not allowed for the form
        (naming the value and the allowed ones); in checked mode an invalid nibble (naming
        lane, nibble, row and chunk).

    Example:
      >>> ins = jaxmma.instruction("mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
      >>> e = jnp.full((32,), 0xE4E4E4E4, jnp.uint32)  # nibbles 0b0100 and 0b1110
      >>> metadata_indices(ins, e, 0)[0].tolist()
      [0, 1, 6, 7, 8, 9, 14, 15]
    """
    geo = _geometry(ins)
    if geo.opcode == "tcgen05.mma":
        _tcgen05_selector(geo, selector)
        return _tcgen05_indices(geo, e, check)
    sel = _selector(geo, selector)
    e = _check_e(geo, e)
    tab = _tables(geo, sel)
    idx, nib, bad = _decode_core(geo.slots, geo.width, e, tab.lane, tab.shift, tab.valid)
    if _want_check(check, e):
        _check_nibbles(geo, tab, nib, bad, sel)
    return idx


# ---------------------------------------------------------------------------------------
# Dense matrices
def _mag_mask(geo: _Geometry) -> np.ndarray:
    """uint32: the bits of a raw element (or its container) that are not sign or padding."""
    a = geo.atype
    if a in ("f16", "bf16"):
        m = 0x7FFF
    elif a == "tf32":
        m = 0x7FFFFFFF
    elif a in FP8:
        m = 0x7F
    elif FORMATS[a].bits == 6:  # kind::f8f6f4 container: element in bits [5:0]
        m = 0x1F
    elif a == "e2m1":  # bits [5:2] of the kind::f8f6f4 container, [3:0] under kind::mxf4*
        m = 0x7 if geo.kind in ("mxf4", "mxf4nvf4") else 0x1C
    else:
        m = {"s8": 0xFF, "u8": 0xFF, "s4": 0xF, "u4": 0xF}[a]
    return np.uint32(m)


def _how(geo: _Geometry) -> str:
    """How :func:`_magnitude` reads raw bits of ``geo.atype``."""
    if geo.atype == "e2m1":
        return "e2m1" if geo.kind in ("mxf4", "mxf4nvf4") else "e2m1c"
    return geo.atype if geo.atype in ("tf32", "s8", "s4") else "mask"


def _check_dense(geo: _Geometry, x, name: str):
    x = jnp.asarray(x)
    if not (jnp.issubdtype(x.dtype, jnp.integer) or jnp.issubdtype(x.dtype, jnp.floating)):
        raise TypeError(
            f"{name}: expected element values or unsigned raw bits for {geo.text}, got {x.dtype}"
        )
    if not geo.fits(x, geo.k):
        hint = ""
        if geo.fits(x, geo.k // 2):
            hint = " (the compressed shape: pass the dense matrix, or metadata=idx)"
        raise ValueError(
            f"{name}: expected a dense matrix of trailing shape "
            f"[{geo.rows}, {geo.k}] for {geo.text}, got {tuple(x.shape)}{hint}"
        )
    return x


def _check_pattern(geo: _Geometry, count, name: str, traced: bool):
    """Raise where a chunk has more than ``keep`` non-zero slots; returns that mask (bool
    ``[..., M, nch]``)."""
    bad = count > geo.keep
    unit = "pairs" if geo.width == 2 else "elements"
    rule = (
        f"{geo.text} stores {geo.keep} of every {geo.slots} {unit} of a row "
        f"({geo.pattern}, PTX ISA {geo.section})"
    )

    def message(pos, count):
        r, c = pos[-2:]
        lo = c * geo.chunk_size
        n = int(count[pos])
        return (
            f"{name}{_where(pos)}: row {r}, chunk {c} (dense columns {lo}.."
            f"{lo + geo.chunk_size - 1}) has {n} non-zero {unit}; {rule}; "
            f"jaxmma.sparse.prune keeps the largest"
        )

    _fail(bad, message, {"count": count}, traced)
    return bad


def _compress(geo: _Geometry, x, name: str, traced_check: bool):
    """Dense ``[..., M, K]`` -> (stored values ``[..., M, K/2]``, idx, nibbles, and bool
    ``[..., M, nch]``: the chunks with too many non-zeros)."""
    values, idx, nib, count = _compress_core(geo.slots, geo.width, x, _mag_mask(geo))
    bad = _check_pattern(geo, count, name, traced_check)
    return values, idx, nib, bad


# ---------------------------------------------------------------------------------------
# Matrix level
def _check_idx(geo: _Geometry, idx, traced: bool, strict: bool):
    """Raise where ``idx`` ``[..., M, K/2]`` is not what a metadata nibble decodes to
    (``strict``: also where it is what an undefined-behaviour nibble decodes to).

    Returns bool ``[..., M, nch]``: the chunks no nibble expresses (never the strict ones).
    """
    order = None
    if strict and geo.keep == 2:
        order = "ascending" if geo.ordered else "distinct"
        order = "tcgen05" if geo.opcode == "tcgen05.mma" else order
    loose = _idx_bad_core(geo.slots, geo.width, None, idx)
    bad = loose if order is None else _idx_bad_core(geo.slots, geo.width, order, idx)
    n = geo.stored
    rule = (
        f"the {n} stored element{'s' if n > 1 else ''} of chunk c must be dense "
        f"columns of that chunk (c*{geo.chunk_size}..c*{geo.chunk_size}"
        f"+{geo.chunk_size - 1})"
    )
    if geo.width == 2:
        rule += ", in pairs (2i, 2i+1)"
    if order == "tcgen05":
        rule += ", ascending or (2, 1) (undefined behaviour otherwise)"
    elif order is not None:
        rule += f", {order} (undefined behaviour otherwise)"

    def message(pos, idx):
        r, c = pos[-2:]
        got = idx[pos[:-1]][c * n : (c + 1) * n].tolist()
        return (
            f"metadata{_where(pos)}: row {r}, chunk {c} has dense columns {got}, not "
            f"valid for {geo.text}; {rule}"
        )

    _fail(bad, message, {"idx": idx}, traced)
    return loose


def matrix_operands(ins, A_bits, metadata, *, check=None, rows: bool = False):
    """The A operands of ``ins.mma`` for an ``mma.sp`` form: compressed A and its ``idx``.

    Args:
      ins: an ``mma.sp`` / ``mma.sp::ordered_metadata`` :class:`jaxmma.Instruction`.
      A_bits: uint32 raw element bits (``kind::f8f6f4``: container bytes). With
        ``metadata=None`` the *dense* ``[..., M, K]`` A, which must follow the form's
        pattern (at most 2 non-zeros in every 4; 1 in 2 for ``.tf32``; 2 non-zero pairs in
        every 8 for 4-bit types); it is compressed as :func:`compress` does. Otherwise the
        compressed ``[..., M, K/2]`` A.
      metadata: ``None``, or int ``[..., M, K/2]``: the dense column of every stored
        element (what :func:`metadata_indices` returns).
      check: ``True``, ``False`` or ``None`` (the :class:`checked` default for eager calls,
        no check when traced).
      rows: also return the rows that are invalid (see Returns).

    Returns:
      ``(A_compressed_bits [..., M, K/2], idx int32 [..., M, K/2])``; with ``rows``, a
      third entry, bool ``[..., M]``: the rows of A with a chunk of too many non-zeros,
      or whose ``idx`` no nibble expresses (traced inputs that were not checked: the
      caller poisons these rows of D, :func:`poison_rows`).

    Raises:
      ValueError: wrong shapes; a chunk with too many non-zeros, or an ``idx`` that no
        nibble expresses (naming the row and chunk): for concrete inputs always, for
        traced ones in checked mode when the program runs (:func:`jaxmma._errors.raise_if`).
        In checked mode also an ``idx`` with a repeated (or, under
        ``::ordered_metadata``, descending) position.
      TypeError: ``metadata`` is not an integer array.
    """
    geo = _geometry(ins)
    A = jnp.asarray(A_bits)
    want = _want_check(check, A, metadata)
    if metadata is None:
        values, idx, _, bad = _compress(geo, _check_dense(geo, A, "A"), "A", want)
        return (values, idx, jnp.any(bad, axis=-1)) if rows else (values, idx)
    if not geo.fits(A, geo.k // 2):
        raise ValueError(
            f"A: with metadata, expected the compressed matrix of trailing shape "
            f"[{geo.rows}, {geo.k // 2}] for {geo.text}, got {tuple(A.shape)}"
        )
    idx = jnp.asarray(metadata)
    if not jnp.issubdtype(idx.dtype, jnp.integer):
        raise TypeError(
            f"metadata: expected int32 dense column indices [..., {geo.rows}, "
            f"{geo.k // 2}] for {geo.text}, got {idx.dtype}"
        )
    if not geo.fits(idx, geo.k // 2) or idx.shape[-2] != A.shape[-2]:
        raise ValueError(
            f"metadata: expected int32 dense column indices of trailing shape "
            f"[{A.shape[-2]}, {geo.k // 2}] (the rows of A) for {geo.text}, got "
            f"{tuple(idx.shape)}"
        )
    idx = idx.astype(jnp.int32)
    bad = _check_idx(geo, idx, traced=want, strict=want)
    return (A, idx, jnp.any(bad, axis=-1)) if rows else (A, idx)


#: The bits of D in a row whose A is invalid (traced inputs, no check): the canonical NaN
#: of the output format; ``.s32`` has no NaN and gets -2**31.
POISON = {"f32": CANONICAL_NAN["f32"], "f16": CANONICAL_NAN["f16"], "s32": 0x80000000}


def poison_rows(ins, D, bad):
    """D bits ``[..., M, N]`` with the rows where ``bad`` (bool ``[..., M]``) is true
    replaced by :data:`POISON` of ``ins.dtype``; the others keep their bits."""
    bad = jnp.broadcast_to(bad[..., None], D.shape)
    return jnp.where(bad, jnp.asarray(POISON[ins.dtype], D.dtype), D)


# ---------------------------------------------------------------------------------------
# User tools: the instruction comes first, as in metadata_indices(ins, e, selector); the
# old order (A, ins) still works, with a DeprecationWarning.
def _deprecated_order(name: str, old: str) -> None:
    warnings.warn(
        f"jaxmma.sparse.{old} is deprecated: pass the instruction first, "
        f"{name}(ins, ...), as metadata_indices(ins, e, selector) does",
        DeprecationWarning,
        stacklevel=4,
    )


def _ins_first(name: str, old: str, ins, A):
    if _is_instruction(A) and not _is_instruction(ins):
        _deprecated_order(name, old)
        return A, ins
    return ins, A


def prune(ins: InstructionView, A: ArrayLike) -> jax.Array:
    """Make a dense matrix follow the sparsity pattern of ``ins``, keeping the largest.

    In every chunk of every row the ``keep`` slots of largest magnitude stay (2 of 4
    elements; 1 of 2 for ``.tf32``; 2 of 4 element pairs for 4-bit types, a pair measured
    by the sum of its two magnitudes); the others become zero. Ties keep the lower index;
    NaN counts as the largest magnitude. PTX ISA 9.7.14.6.1.

    Args:
      ins: an ``mma.sp`` / ``mma.sp::ordered_metadata`` :class:`jaxmma.Instruction`.
      A: ``[..., M, K]`` element values (any float or signed integer dtype), or unsigned
        raw bits of ``ins``'s A type (container bytes for ``kind::f8f6f4``).

    Returns:
      ``A`` with the pruned elements set to zero (``+0``), same shape and dtype.

    Example:
      >>> ins = jaxmma.instruction("mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
      >>> A = jnp.array([[1.0, -3.0, 2.0, 0.5] * 4] * 16, jnp.float16)
      >>> prune(ins, A)[0, :4].tolist()
      [0.0, -3.0, 2.0, 0.0]
    """
    ins, A = _ins_first("prune", "prune(A, ins)", ins, A)
    geo = _geometry(ins)
    A = _check_dense(geo, A, "A")
    return _prune_core(geo.slots, geo.width, _how(geo), A, _mag_mask(geo))


def validate(ins: InstructionView, A: ArrayLike) -> None:
    """Check that a dense matrix follows the sparsity pattern of ``ins``.

    Zero means ``+0``/``-0`` of the element format (NaN is non-zero; raw bits ignore the
    sign and container padding); for 4-bit types a pair is non-zero when either element
    is. Chunks with fewer non-zeros than stored slots are fine. PTX ISA 9.7.14.6.1.

    Args:
      ins: an ``mma.sp`` / ``mma.sp::ordered_metadata`` :class:`jaxmma.Instruction`.
      A: ``[..., M, K]`` element values or unsigned raw bits (see :func:`prune`).

    Raises:
      ValueError: naming the (batch index,) row and chunk with too many non-zeros. Traced
        inputs raise it when the compiled program runs (:func:`jaxmma._errors.raise_if`).

    Example:
      >>> validate(ins, prune(ins, A))  # passes                   # doctest: +SKIP
    """
    ins, A = _ins_first("validate", "validate(A, ins)", ins, A)
    geo = _geometry(ins)
    A = _check_dense(geo, A, "A")
    _compress(geo, A, "A", traced_check=True)


def compress(
    ins: InstructionView,
    A: ArrayLike,
    selector: int | None = 0,
    *,
    registers: bool = True,
    check: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Compress a dense sparse matrix into its stored values and metadata registers.

    The stored slots of a chunk are its non-zero slots, completed (where a chunk has fewer)
    by the lowest-index zero slots, in ascending order, so the metadata is valid for both
    ``mma.sp`` and ``mma.sp::ordered_metadata`` (an all-zero 2:4 chunk gives ``0b0100``,
    a lone non-zero at 2 gives ``0b1000``; ``.tf32`` ``0b0100``/``0b1110``). PTX ISA
    9.7.14.6.1-2; :func:`decompress` is the inverse.

    Args:
      ins: an ``mma.sp`` / ``mma.sp::ordered_metadata`` :class:`jaxmma.Instruction`.
      A: dense ``[..., M, K]`` following the pattern (see :func:`validate`): element
        values in A's dtype (``jnp.float16``, ...; ``jnp.float32`` for ``.tf32``) or
        unsigned raw bits (container bytes for ``kind::f8f6f4``).
      selector: the sparsity selector ``f`` the registers are made for (static).
      registers: ``True``: return A's fragment registers; ``False``: the compressed
        ``[..., M, K/2]`` matrix in ``A``'s dtype.
      check: ``True``, ``False`` or ``None`` (the :class:`checked` default for eager calls,
        no check when traced): whether a
        traced ``A`` is checked (concrete inputs always are).

    Returns:
      ``(a, e)``: ``a`` uint32 ``[..., 32, nregs_a]`` registers (or the compressed
      matrix), ``e`` uint32 ``[..., 32]`` metadata (0 in the lanes the selector skips).
      ``tcgen05.mma.sp``: always the compressed ``[..., M, K/2]`` matrix and the
      metadata matrix uint32 ``[..., M, K / chunk]`` (see :func:`metadata_indices`);
      ``registers`` does not apply and ``selector`` must be 0 or None.

    Raises:
      ValueError: a chunk with too many non-zeros (naming row and chunk), a bad selector.

    Example:
      >>> ins = jaxmma.instruction("mma.sp::ordered_metadata.sync.aligned.m16n8k32"
      ...                          ".row.col.f32.f16.f16.f32")          # doctest: +SKIP
      >>> a, e = compress(ins, prune(ins, A), selector=1)               # doctest: +SKIP
      >>> d = ins(a, b, c, e, selector=1)                               # doctest: +SKIP
    """
    ins, A = _ins_first("compress", "compress(A, ins, ...)", ins, A)
    if not isinstance(registers, bool | np.bool_):
        raise TypeError(f"registers: expected True or False, got {registers!r}"[:300])
    geo = _geometry(ins)
    if geo.opcode == "tcgen05.mma":  # the compressed matrix and the metadata matrix
        _tcgen05_selector(geo, selector)
        A = _check_dense(geo, A, "A")
        values, _, nib, _ = _compress(geo, A, "A", _want_check(check, A))
        return values, nib
    sel = _selector(geo, selector)
    A = _check_dense(geo, A, "A")
    values, _, nib, _ = _compress(geo, A, "A", _want_check(check, A))
    tab = _tables(geo, sel)
    e = _pack_core(nib, tab.row, tab.chunk, tab.used)
    if registers:
        bits = to_bits(geo.atype, values, "A", geo.kind)
        return _fragments.fragment(ins, "a", bits), e
    return values, e


def decompress(
    ins: InstructionView,
    values: ArrayLike,
    e: ArrayLike | None = None,
    selector: int | None = 0,
    *,
    check: bool | None = None,
) -> jax.Array:
    """Expand stored values and metadata registers into the dense matrix.

    Args:
      ins: an ``mma.sp`` / ``mma.sp::ordered_metadata`` :class:`jaxmma.Instruction`.
      values: A's fragment registers uint32 ``[..., 32, nregs_a]``, or the compressed
        matrix ``[..., M, K/2]`` (values or raw bits; ``tcgen05.mma.sp``: the matrix).
      e: uint32 ``[..., 32]`` metadata registers (``tcgen05.mma.sp``: the metadata
        matrix, see :func:`metadata_indices`).
      selector: the sparsity selector ``f`` (static).
      check: as for :func:`metadata_indices`.

    Returns:
      The dense ``[..., M, K]`` matrix: uint32 raw bits when ``values`` are registers,
      else ``values``' dtype. Where undefined-behaviour metadata puts two stored elements
      on one column, the first one is shown.

    Example:
      >>> dense = decompress(ins, *compress(ins, A, selector=1), selector=1)  # doctest: +SKIP
    """
    if _is_instruction(e) and not _is_instruction(ins):
        _deprecated_order("decompress", "decompress(values, e, ins, ...)")
        ins, values, e = e, ins, values  # type: ignore[assignment]  # the old order
    geo = _geometry(ins)
    values = jnp.asarray(values)
    if geo.opcode == "tcgen05.mma":
        if not geo.fits(values, geo.k // 2):
            raise ValueError(
                f"values: expected the compressed matrix [..., M, {geo.k // 2}] for "
                f"{geo.text}, got {tuple(values.shape)}"
            )
        idx = metadata_indices(ins, e, selector, check=check)  # type: ignore[arg-type]
        return _scatter(values, idx, geo.k)
    nregs = ins.nregs["a"]
    if values.ndim >= 2 and values.shape[-2:] == (32, nregs):
        values = _fragments.unfragment(ins, "a", values)
    elif values.ndim < 2 or values.shape[-2:] != (geo.m, geo.k // 2):
        raise ValueError(
            f"values: expected registers [..., 32, {nregs}] or the compressed "
            f"matrix [..., {geo.m}, {geo.k // 2}] for {geo.text}, "
            f"got {tuple(values.shape)}"
        )
    # e=None: metadata_indices raises the ValueError that names e
    idx = metadata_indices(ins, e, selector, check=check)  # type: ignore[arg-type]
    return _scatter(values, idx, geo.k)
