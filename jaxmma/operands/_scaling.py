"""Block-scaled ``mma``: scale selection and operands (the sums: :mod:`jaxmma.models._scaled`).

PTX ISA 9.7.14.3 (block scaling) and 9.7.14.5.14 (``mma ... .block_scale``):
``D = (A * scale_A) * (B * scale_B) + C`` for ``.kind::mxf8f6f4`` (k32; sparse k64),
``.kind::mxf4`` and ``.kind::mxf4nvf4`` (k64; sparse k128). ``scale_A`` is ``M x SFA_N``
and ``scale_B`` ``SFB_M x N`` with ``SFA_N = SFB_M`` = 1, 2, 4 for ``.scale_vec::1X, 2X,
4X``; column ``j`` of ``scale_A`` scales the ``j``-th of ``SFA_N`` equal chunks of a row
of A (likewise for B's columns). Scales are raw ``.ue8m0`` or ``.ue4m3`` bytes.

Arithmetic (``docs/block_scaling.md``; the published model of MMA-Sim, Xie et al.,
arXiv:2511.10909, ``arithmetic/fdpa.py``; not checked on hardware here):

* ``kind::mxf8f6f4``: every term is ``a * b * sa * sb`` with the scale exponents added to
  the exponent of the exact product before alignment; the terms and C form one fused
  block (F = 25, e_zero = -133, f32 truncation), as :mod:`_numerics` computes it.
* ``kind::mxf4`` / ``kind::mxf4nvf4``: the products of each group of 16 consecutive k are
  summed exactly; a group sum is multiplied by the significands of its two scales and
  counts, for alignment, with the scales' exponents only (the group sum itself is not
  normalized; a group whose products are all zero, or whose scale is zero, counts with
  e_zero, but a group whose nonzero products cancel does not). The 4 groups and C are
  fused with F = 35, e_zero = -139, f32 truncation.
* The sign bit of a ``.ue4m3`` scale is ignored; a NaN scale makes its products NaN.
* ``model="exact"``: the exact sum of every scaled product and C, rounded once to the
  nearest even f32.

Sparse forms (no published model; our assumption): the dense model runs on the K/2
stored products, as measured for sparse f16 on sm_90; stored product ``i`` takes the
scale of its dense k block, which is block ``i // (K / 2 / SFA_N)`` for every metadata.
"""

from __future__ import annotations

import operator
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from ..bits import SCALE_DTYPES, registers, to_container
from ..models import check_scaled_ins as _check_ins
from ..spec import InstructionView
from . import _layouts
from ._quant import Quantized, check_quantized, raw_bits

U32 = jnp.uint32
SCALE_VECS = {"1X": 1, "2X": 2, "4X": 4}

#: Table 37: valid byte-id per scale_vec, thread-id per operand.
BYTE_IDS = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}
THREAD_IDS = {"a": (0, 1), "b": (0, 1, 2, 3)}


def num_blocks(ins: InstructionView) -> int:
    """``SFA_N = SFB_M``: scale blocks along k (1, 2 or 4 for ``scale_vec::1X/2X/4X``)."""
    _check_ins(ins)
    return SCALE_VECS[cast(str, ins.form.scale_vec)]  # a str once check_ins passes


def scale_shapes(ins: InstructionView) -> tuple[tuple[int, int], tuple[int, int]]:
    """Trailing shapes of ``scale_A`` (``M x SFA_N``) and ``scale_B`` (``SFB_M x N``)."""
    nblk = num_blocks(ins)
    return (ins.m, nblk), (nblk, ins.n)


def block_size(ins: InstructionView) -> int:
    """Dense k columns of A (rows of B) that one scale covers: ``K / SFA_N``."""
    return cast(int, ins.k) // num_blocks(ins)  # block-scaled forms have a k


# ---------------------------------------------------------------------------------------
# Register level: the selectors of 9.7.14.3
def _static_id(name: str, value, allowed, ins) -> int:
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} must be a static Python int (an immediate of {ins.text}), got a traced "
            f"value; allowed: {', '.join(map(str, allowed))}"
        )
    index = None
    if not isinstance(value, (bool, np.bool_)):
        try:
            index = operator.index(value)
        except TypeError:
            index = None
    if index is None or index not in allowed:
        raise ValueError(
            f"{name}={value!r} is not valid for {ins.text} (Table 37, "
            f"scale_vec::{ins.form.scale_vec}); allowed: {', '.join(map(str, allowed))}"
        )
    return index


def _scale_data(ins, name: str, x):
    if x is None:
        raise ValueError(f"{name}: required by {ins.text} (uint32 [..., 32] scale data)")
    x = registers(x, name)
    if not jnp.issubdtype(x.dtype, jnp.unsignedinteger):
        raise TypeError(f"{name}: expected uint32 scale-data registers, got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] != 32:
        raise ValueError(f"{name}: expected shape [..., 32] (one register per lane), got {x.shape}")
    return x.astype(U32)


def select_registers(ins, scale_a, scale_b, byte_id_a, thread_id_a, byte_id_b, thread_id_b):
    """The scale matrices that the selectors pick from the scale-data registers.

    PTX: ``mma.sync.aligned.m16n8k{32,64}.row.col.kind::mx*.block_scale.scale_vec::{1,2,4}X
    ... scale-a-data, {byte-id-a, thread-id-a}, scale-b-data, {byte-id-b, thread-id-b}``
    (and ``mma.sp::ordered_metadata``). PTX ISA 9.7.14.3; the lane/byte map is
    :func:`jaxmma._layouts.scale_layout` (``docs/layouts.md``).

    Args:
      ins: a ``.block_scale`` :class:`jaxmma.Instruction`.
      scale_a, scale_b: uint32 ``[..., 32]``, the ``scale-a-data``/``scale-b-data``
        register of each lane.
      byte_id_a, thread_id_a, byte_id_b, thread_id_b: static Python ints, valid per
        Table 37: ``thread_id_a`` 0..1, ``thread_id_b`` 0..3, ``byte_id`` 0..3 (1X), 0 or 2
        (2X), 0 (4X).

    Returns:
      ``(SA, SB)``: uint32 ``[..., M, SFA_N]`` and ``[..., SFB_M, N]``, one scale byte each.

    Raises:
      ValueError: an invalid selector (naming the argument, its value and the allowed
        values), missing scale data or a wrong shape. TypeError: a traced selector or
        non-unsigned scale data.
    """
    nblk = num_blocks(ins)
    ids = {}
    for name, value, allowed in (
        ("byte_id_a", byte_id_a, BYTE_IDS[nblk]),
        ("thread_id_a", thread_id_a, THREAD_IDS["a"]),
        ("byte_id_b", byte_id_b, BYTE_IDS[nblk]),
        ("thread_id_b", thread_id_b, THREAD_IDS["b"]),
    ):
        ids[name] = _static_id(name, value, allowed, ins)
    out = []
    for op, data in (("a", scale_a), ("b", scale_b)):
        regs = _scale_data(ins, f"scale_{op}", data)
        lay = _layouts.scale_layout(
            op,
            scale_vec=nblk,
            thread_id=ids[f"thread_id_{op}"],
            byte_id=ids[f"byte_id_{op}"],
            m=ins.m,
            n=ins.n,
        )
        words = regs[..., np.asarray(lay.lane)]
        shift = jnp.broadcast_to(jnp.asarray(8 * lay.byte, U32), words.shape)
        out.append((words >> shift) & U32(0xFF))
    return tuple(out)


# ---------------------------------------------------------------------------------------
# Matrix level
def _quantized_type():
    return Quantized


def _quant_raw_bits(q):
    return raw_bits(q)


def _check_quantized(q, name: str):
    """``q`` validated (:func:`jaxmma.operands._quant.check_quantized`), errors naming
    ``name``."""
    return check_quantized(q, name, matrix=True)


def scale_matrix(ins, name: str, S, want):
    if isinstance(S, _quantized_type()):
        S = _quantized_scales(ins, name[-1], S, name)
    if S is None:
        raise ValueError(
            f"{name}: required by {ins.text} (raw .{ins.stype} bits of trailing shape {want})"
        )
    S = jnp.asarray(S)
    fmt = SCALE_DTYPES[ins.stype]
    if S.dtype == jnp.dtype(fmt):
        S = jax.lax.bitcast_convert_type(S, jnp.uint8)
    elif not jnp.issubdtype(S.dtype, jnp.unsignedinteger):
        raise TypeError(
            f"{name}: expected uint8 or uint32 raw .{ins.stype} bits (or {jnp.dtype(fmt).name}) "
            f"for {ins.text}, got {S.dtype}"
        )
    if S.ndim < 2 or tuple(S.shape[-2:]) != want:
        raise ValueError(
            f"{name}: expected trailing shape {list(want)} for {ins.text}, got {tuple(S.shape)}"
        )
    return S.astype(U32) & U32(0xFF)


def scales_from_matrices(ins, SA, SB):
    """Validate matrix-level scales and return their raw bits.

    Args:
      ins: a ``.block_scale`` :class:`jaxmma.Instruction`.
      SA: ``scale_A`` ``[..., M, SFA_N]``; SB: ``scale_B`` ``[..., SFB_M, N]``: raw bits
        (uint8/uint32; higher bits ignored), ``jnp.float8_e8m0fnu`` for ``.ue8m0`` (or
        ``jnp.float8_e4m3fn`` for ``.ue4m3``, sign ignored), or :class:`jaxmma._quant.Quantized`
        operands whose scales are taken.

    Returns:
      ``(SA, SB)`` uint32 raw bits.

    Raises:
      ValueError: a missing scale or a wrong shape. TypeError: a wrong dtype.
    """
    want_a, want_b = scale_shapes(ins)
    return (
        scale_matrix(ins, "scale_a", SA, want_a),
        scale_matrix(ins, "scale_b", SB, want_b),
    )


def _quantized_scales(ins, op: str, q, name: str):
    """The raw scale bits of a Quantized A (``op='a'``) or B, the argument ``name``:
    ValueError naming it where the format, block or axis do not fit ``ins``, then the
    container checked (:func:`jaxmma._quant.check_quantized`)."""
    fmt = ins.atype if op == "a" else ins.btype
    axis = -1 if op == "a" else -2
    problems = []
    for what, got, want in (
        ("element format", q.fmt, fmt),
        ("scale format", q.scale_fmt, ins.stype),
        ("block", q.block, block_size(ins)),
        ("axis", q.axis, axis),
    ):
        if got != want:
            problems.append(f"{what} {want!r}, got {got!r}")
    if problems:
        raise ValueError(
            f"{name}: the quantized operand does not fit {ins.text}: expected "
            + "; expected ".join(problems)
        )
    return _quant_raw_bits(_check_quantized(q, name))[1]


def as_operands(
    ins: InstructionView, qa: Quantized, qb: Quantized
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Quantized A and B -> ``(A_bits, B_bits, SA, SB)`` for ``ins.mma``.

    Args:
      ins: a ``.block_scale`` :class:`jaxmma.Instruction`.
      qa: :class:`jaxmma._quant.Quantized` A ``[..., M, K]`` (quantized along ``axis=-1``
        with ``block = K / SFA_N``, ``fmt = ins.atype``, ``scale_fmt = ins.stype``).
      qb: the same for B ``[..., K, N]`` along ``axis=-2``.

    Returns:
      uint32 raw bits: A and B in the form's operand encoding (``kind::mxf8f6f4``: 8-bit
      containers; ``mxf4*``: one e2m1 nibble per element), ``SA [..., M, SFA_N]``,
      ``SB [..., SFB_M, N]``. Global scales (NVFP4) are not part of the instruction:
      multiply ``D`` by ``qa.global_scale * qb.global_scale`` (with C scaled to match).
    """
    Quantized = _quantized_type()
    for name, q in (("qa", qa), ("qb", qb)):
        if not isinstance(q, Quantized):
            raise TypeError(f"{name}: expected a Quantized operand, got {type(q).__name__}")
    (A, SA), (B, SB) = _operand(ins, "a", qa, "qa"), _operand(ins, "b", qb, "qb")
    return A, B, SA, SB


def _operand(ins, op: str, q, arg: str):
    """(operand bits, scale bits) of a Quantized A (``op='a'``) or B, the argument ``arg``."""
    scales = _quantized_scales(ins, op, q, arg)
    bits = _quant_raw_bits(q)[0]
    if ins.kind == "mxf8f6f4":
        bits = to_container(bits, q.fmt)
    return bits, scales


def matrix_operands(ins, A, B, kwargs):
    """``matrix_mma``'s hook: Quantized A and/or B -> raw bits, their scales into kwargs.

    Returns ``(A, B, kwargs)``; plain arrays pass through unchanged.
    """
    Quantized = _quantized_type()
    kwargs = dict(kwargs)
    out = {"a": A, "b": B}
    for op, q in out.items():
        if not isinstance(q, Quantized):
            continue
        if kwargs.get(f"scale_{op}") is not None:
            raise ValueError(
                f"scale_{op}: given together with a Quantized {op.upper()}, which carries "
                "its own scales"
            )
        out[op], kwargs[f"scale_{op}"] = _operand(ins, op, q, op.upper())
    return out["a"], out["b"], kwargs
