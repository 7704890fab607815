"""Two operands of ``tcgen05.mma`` beyond ``D = A * B + D``: ``scale-input-d`` and
``disable-output-lane`` (PTX ISA 9.7.16.10.9.1; docs/tcgen05.md says where each fact
comes from).

``scale-input-d`` (an immediate, 0..15, ``.kind::f16`` and ``.kind::tf32`` only) makes
the instruction ``D = A * B + D * 2**-scale_input_d``. ``disable-output-lane`` is a mask
of 4 (``.cta_group::1``) or 8 (``.cta_group::2``) 32-bit words, one bit per lane of
Tensor Memory (bit ``j`` of word ``w``: lane ``32 w + j``); a set bit leaves that lane of
D unwritten. The matrix level has no Tensor Memory, so a lane is the rows of D it holds
in the data path layout of the form (9.7.16.10.5):

- M = 128, ``.cta_group::1`` (Layout D): row ``r`` in lane ``r``;
- M = 64, ``.cta_group::1`` (Layout F, half the data path): row ``r`` in lane
  ``32 (r // 16) + d_lane + r % 16``, ``d_lane`` the lane field of the D address (0 or
  16, the "datapath lane alignment" of the layout table).

``.cta_group::2`` is refused: the spec does not say which of the 8 words covers which CTA
of the pair, and its M = 128 layout (Layout B) puts half of a row's columns in one lane.
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np

#: kinds whose syntax has the scale-input-d immediate
SCALE_KINDS = ("f16", "tf32")
#: targets with a nonzero scale-input-d: sm_100a, and the sm_100f family (PTX ISA 8.8)
SCALE_ARCHS = (100, 103)
#: the largest scale-input-d the spec allows
MAX_SCALE = 15
#: the block-scaled kinds, whose syntax has no disable-output-lane vector
_BLOCK_SCALED = ("mxf8f6f4", "mxf4", "mxf4nvf4")


def scale_input_d(ins, value) -> int:
    """The checked ``scale-input-d`` immediate as an int (0 where the form takes none).

    A ``ValueError`` naming ``scale_input_d`` for a value outside 0..15 or a nonzero value
    on a kind other than f16/tf32; a ``TypeError`` for a traced or array value (PTX takes
    an immediate, known when the kernel is compiled).
    """
    if isinstance(value, jax.Array):
        raise TypeError(
            f"scale_input_d: expected a Python int 0..{MAX_SCALE} (an immediate of the "
            f"instruction, fixed at compile time), got an array or traced value {value!r}; "
            "under jax.jit make it static (static_argnames or functools.partial)"
        )
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"scale_input_d: expected an int 0..{MAX_SCALE}, got {value!r}")
    try:
        s = operator.index(value)
    except TypeError:
        raise ValueError(f"scale_input_d: expected an int 0..{MAX_SCALE}, got {value!r}") from None
    if not 0 <= s <= MAX_SCALE:
        raise ValueError(f"scale_input_d: expected an int 0..{MAX_SCALE}, got {s}")
    if s and ins.kind not in SCALE_KINDS:
        raise ValueError(
            f"scale_input_d: {s} is not allowed for .kind::{ins.kind} ({ins.text}): only "
            ".kind::f16 and .kind::tf32 take scale-input-d (0..15); other kinds take 0"
        )
    if s and ins.arch_number not in SCALE_ARCHS:
        raise ValueError(
            f"scale_input_d: {s} needs sm_100a or the sm_100f family (sm_100, sm_103), "
            f"not {ins.arch}; other targets take 0"
        )
    return s


def num_words(ins) -> int:
    """Words of the ``disable-output-lane`` vector: 4 (``.cta_group::1``), 8 (``::2``)."""
    return 4 if ins.cta_group == 1 else 8


def mask_words(ins, mask):
    """``disable_output_lane`` -> uint32 words ``[..., 4]``, checked.

    Accepted: Python ints 0..2**32-1 (a list or tuple), or an integer array whose last
    axis holds the words: integer dtypes of at most 32 bits are taken as 32-bit patterns
    (as the ``.b32`` registers hold them), wider NumPy ones must hold 0..2**32-1. Floats
    and bools are a ``TypeError``; a wrong last axis, a form without the operand or one
    whose lanes are not mapped to rows here a ``ValueError``. Traced words work (under
    ``jit`` and ``vmap``: the mask is a register operand, known only at run time).
    """
    _check_form(ins)
    n = num_words(ins)
    if isinstance(mask, (list, tuple)):
        mask = _python_words(mask)
    dtype = getattr(mask, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.integer) or dtype == jnp.bool_:
        got = type(mask).__name__ if dtype is None else f"dtype {dtype}"
        raise TypeError(
            f"disable_output_lane: expected {n} uint32 words (an int array [..., {n}] or a "
            f"list of ints), got {got}"
        )
    if mask.ndim < 1 or mask.shape[-1] != n:
        raise ValueError(
            f"disable_output_lane: expected {n} words for .cta_group::{ins.cta_group} "
            f"(shape [..., {n}]), got shape {tuple(mask.shape)}"
        )
    if isinstance(mask, jax.Array):  # JAX integers: at most 32 bits without x64
        return mask.astype(jnp.uint32)
    values = np.asarray(mask)
    if values.dtype.itemsize > 4 and values.size and (values.min() < 0 or values.max() >> 32):
        raise ValueError(
            "disable_output_lane: words are 32-bit, expected values 0..2**32-1, got "
            f"{values.min()}..{values.max()}"
        )
    return jnp.asarray(values.astype(np.uint32))


def _python_words(words) -> np.ndarray:
    """A list of Python ints -> uint32, each checked to be a 32-bit word."""
    for w in words:
        if isinstance(w, (bool, np.bool_)) or not isinstance(w, (int, np.integer)):
            raise TypeError(f"disable_output_lane: expected ints (32-bit words), got {w!r}")
        if not 0 <= int(w) <= 0xFFFFFFFF:
            raise ValueError(f"disable_output_lane: words are 32-bit, 0..2**32-1; got {w}")
    return np.asarray([int(w) for w in words], dtype=np.uint32)


def _check_form(ins) -> None:
    """ValueError for the forms without the operand or without a known lane -> row map."""
    if ins.kind in _BLOCK_SCALED:
        raise ValueError(
            f"disable_output_lane: not an operand of .kind::{ins.kind} ({ins.text}); the "
            "block-scaled kinds have no disable-output-lane vector"
        )
    if ins.cta_group != 1:
        raise ValueError(
            f"disable_output_lane: .cta_group::2 ({ins.text}) is not emulated: the PTX ISA "
            "does not say which of the 8 mask words covers which CTA of the pair, and its "
            "M = 128 layout (Layout B) holds half of a row's columns in each of two lanes"
        )


def lane_of_row(ins, d_lane: int) -> np.ndarray:
    """The Tensor Memory lane holding each row of D (``.cta_group::1``), int ``[M]``.

    ``d_lane``: the lane field of the D address; 0, or for M = 64 (Layout F) 16.
    """
    rows = np.arange(ins.m)
    if ins.m == 128:  # Layout D: the full data path, row r in lane r
        if d_lane != 0:
            raise ValueError(f"d_lane: expected 0 for M = 128 (Layout D), got {d_lane!r}")
        return rows
    if isinstance(d_lane, bool) or d_lane not in (0, 16):
        raise ValueError(f"d_lane: expected 0 or 16 for M = 64 (Layout F), got {d_lane!r}")
    return 32 * (rows // 16) + d_lane + rows % 16  # Layout F: 16 rows per 32-lane slab


def disabled_rows(ins, words, d_lane: int):
    """bool ``[..., M, 1]``: the rows of D whose lane the mask words disable."""
    lanes = lane_of_row(ins, d_lane)
    w = words[..., lanes // 32]  # [..., M]
    bits = (w >> jnp.asarray(lanes % 32, jnp.uint32)) & jnp.uint32(1)
    return (bits != 0)[..., None]
