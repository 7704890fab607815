"""Integer and single-bit ``mma``: exact sums with 32-bit wrap or ``.satfinite`` clamp.

PTX ISA 9.7.14.5.14 (``mma``, "Integer operations" and the single-bit paragraph),
9.7.14.6 (``mma.sp``) and 9.7.14.4.5 (``wmma.mma``).

* ``.s8``/``.u8``/``.s4``/``.u4`` (any signedness mix): ``D = sum_k A[m,k] * B[k,n] + C``
  computed exactly, then wrapped to 32 bits, or with ``.satfinite`` clamped once, at the
  end, to ``[INT32_MIN, INT32_MAX]``. docs/numerics.md: this model reproduced every register
  of the m16n8 integer forms measured on an sm_90 GPU; the spec's wording ("on overflow,
  the accumulated value is limited to the range MIN_INT32..MAX_INT32") says the same.
* ``.b1``: ``D = popc(A_row AND B_col)`` or ``popc(A_row XOR B_col)`` over the K bits, plus
  C, wrapped to 32 bits (the spec allows no ``.satfinite`` for ``.b1``).

Checked here on an H100 (sm_90a build) at register level, 256 warps of random and extreme
inputs per form, every output register equal: ``m16n8k32`` s8.u8 ``.satfinite`` and s8.s8,
``m8n8k16`` u8.u8 ``.satfinite``, ``m16n8k16`` s8.s8 ``.satfinite``, ``m16n8k64`` s4.u4
``.satfinite``, ``m16n8k32`` s4.s4 ``.satfinite``, ``m8n8k32`` u4.s4, and ``.b1`` ``.and`` /
``.xor`` on ``m8n8k128`` and ``m16n8k256``, ``.xor`` on ``m16n8k128`` (C included INT32_MIN/MAX and
sums that cross them by a few units).

Exactness without ``jax_enable_x64``: every product of two elements is at most
``255 * 255 = 65025`` in magnitude (``u8 x u8``; ``s8 x s8`` reaches ``128 * 128``), and
the largest K of an 8-bit form is 32 (dense ``m16n8k32``, and the compressed K of sparse
``m16n8k64``); 4-bit forms reach K = 64 with products of at most 225. So the sum of
products stays below ``32 * 65025 < 2**21`` and is exact in int32 (:func:`mma_bits` checks
``K * max|product| < 2**31`` statically). Only ``sum + C`` can leave 32 bits; it is
formed with a 32-bit add whose signed overflow is detected from the operand signs, so
the clamp of ``.satfinite`` is exact.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

#: bits and signedness of each element type
TYPES = {"s8": (8, True), "u8": (8, False), "s4": (4, True), "u4": (4, False)}
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


def _check(ins) -> None:
    a, b = ins.atype, ins.btype
    if a == "b1" or b == "b1":
        if a != b:
            raise ValueError(f"atype/btype: .b1 needs .b1 on both sides, got .{a} and .{b}")
        if ins.bitop not in ("and", "xor"):
            raise ValueError(f"bitop: expected 'and' or 'xor' for .b1, got {ins.bitop!r}")
    elif a not in TYPES or b not in TYPES:
        raise ValueError(f"atype/btype: expected one of {sorted(TYPES)} or b1, got .{a} and .{b}")
    if ins.ctype != "s32" or ins.dtype != "s32":
        raise ValueError(f"ctype/dtype: expected s32, got .{ins.ctype} and .{ins.dtype}")


def _operands(A, B, C, b_rows: bool):
    A, B, C = (jnp.asarray(x) for x in (A, B, C))
    for name, x in (("A", A), ("B", B), ("C", C)):
        if x.dtype != jnp.uint32:
            raise TypeError(f"{name}: expected uint32 raw bits, got {x.dtype}")
    if A.ndim < 2 or C.ndim < 2 or B.ndim < (3 if b_rows else 2):
        raise ValueError(
            f"expected A [..., M, K], B [..., {'M, ' if b_rows else ''}K, N], "
            f"C [..., M, N]; got shapes {A.shape}, {B.shape}, {C.shape}"
        )
    M, K = A.shape[-2:]
    N = B.shape[-1]
    want_b = (M, K, N) if b_rows else (K, N)
    if tuple(B.shape[-len(want_b) :]) != want_b or tuple(C.shape[-2:]) != (M, N):
        raise ValueError(
            f"B: expected trailing shape {want_b} and C (M, N) = {(M, N)} for "
            f"A of shape {A.shape}; got B {B.shape}, C {C.shape}"
        )
    return A, B, C


def to_int32(bits, fmt: str):
    """Raw element bits (uint32, element in the low bits) -> int32 values of ``fmt``."""
    width, signed = TYPES[fmt]
    v = bits & jnp.uint32(2**width - 1)
    if signed:  # sign-extend: (v ^ 2**(w-1)) - 2**(w-1)
        half = jnp.uint32(2 ** (width - 1))
        return lax.bitcast_convert_type((v ^ half) - half, jnp.int32)
    return v.astype(jnp.int32)


def _max_product(a: str, b: str) -> int:
    def extremes(fmt):
        width, signed = TYPES[fmt]
        return (-(2 ** (width - 1)), 2 ** (width - 1) - 1) if signed else (0, 2**width - 1)

    return max(abs(x * y) for x in extremes(a) for y in extremes(b))


def accumulate(total, C, *, satfinite: bool):
    """``total + C`` as s32 bits: 32-bit wrap, or one clamp of the exact sum.

    Args:
      total: int32 ``[...]``, an exact partial result (here the sum of products).
      C: uint32 ``[...]``, s32 bits of the accumulator.
      satfinite: clamp the exact ``total + C`` to ``[INT32_MIN, INT32_MAX]`` instead of
        wrapping it.
    Returns:
      uint32 ``[...]``: s32 bits of D.
    """
    t = lax.bitcast_convert_type(total.astype(jnp.int32), jnp.uint32)
    d = t + C  # the exact sum modulo 2**32
    if not satfinite:
        return d
    # signed overflow: both operands of one sign and the wrapped sum of the other
    sign = jnp.uint32(0x80000000)
    overflow = ((t ^ d) & (C ^ d) & sign) != 0
    clamp = jnp.where((t & sign) != 0, jnp.uint32(0x80000000), jnp.uint32(0x7FFFFFFF))
    return jnp.where(overflow, clamp, d)


def _products_sum(A, B, b_rows):
    """int32 ``sum_k A[..., m, k] * B[..., (m,) k, n]`` (exact: see the module bound)."""
    if b_rows:
        return jnp.einsum("...mk,...mkn->...mn", A, B, preferred_element_type=jnp.int32)
    return jnp.einsum("...mk,...kn->...mn", A, B, preferred_element_type=jnp.int32)


def _pack_bits(x, axis: int):
    """0/1 uint32 along ``axis`` -> uint32 words of 32 bits (zero-padded), last axis."""
    x = jnp.moveaxis(x & jnp.uint32(1), axis, -1)
    K = x.shape[-1]
    pad = -K % 32
    if pad:
        x = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (pad,), jnp.uint32)], axis=-1)
    x = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    shifts = jnp.arange(32, dtype=jnp.uint32)
    return jnp.sum(x << jnp.broadcast_to(shifts, x.shape), axis=-1, dtype=jnp.uint32)  # OR


def _popc(A, B, bitop: str, b_rows: bool):
    """int32 ``popc(A_row op B_col)`` per (m, n) over the K bits."""
    a = _pack_bits(A, -1)[..., :, None, :]  # [..., M, 1, W]
    if b_rows:
        b = _pack_bits(B, -2)  # [..., M, N, W]
    else:
        b = _pack_bits(B, -2)[..., None, :, :]  # [..., 1, N, W]
    words = (a & b) if bitop == "and" else (a ^ b)  # zero padding adds no bit to either
    return jnp.sum(lax.population_count(words).astype(jnp.int32), axis=-1, dtype=jnp.int32)


def mma_bits(ins, A, B, C, *, b_rows: bool = False):
    """Raw-bit ``D = A @ B + C`` for the integer (``.s8/.u8/.s4/.u4``) and ``.b1`` forms.

    PTX: ``mma.sync.aligned.shape.row.col{.satfinite}.s32.atype.btype.s32``,
    ``mma.sync.aligned.shape.row.col.s32.b1.b1.s32.{and,xor}.popc``, their ``mma.sp``
    forms (through ``b_rows``) and ``wmma.mma`` (PTX ISA 9.7.14.5.14, 9.7.14.4.5).

    Args:
      ins: the :class:`jaxmma.Instruction`; reads ``atype``, ``btype``, ``ctype``,
        ``dtype``, ``satfinite`` and ``bitop``.
      A: uint32 ``[..., M, K]`` raw element bits, the element in the low 8, 4 or 1 bits
        (higher bits are ignored).
      B: uint32 ``[..., K, N]``; with ``b_rows`` ``[..., M, K, N]``, a K x N matrix for each
        row of A (the sparse forms pass the rows of B that each stored element of A meets,
        K then being the compressed K/2).
      C: uint32 ``[..., M, N]``, s32 bits.
      b_rows: see ``B``.
    Returns:
      uint32 ``[..., M, N]``: s32 bits of D. Leading dimensions broadcast.
    Raises:
      ValueError: a form that is not integer or ``.b1``, mismatched shapes, or a K so large
        that the sum of products could leave int32 (no form of the spec comes close).
      TypeError: operands that are not uint32.

    Example:
      >>> import jaxmma, jax.numpy as jnp
      >>> ins = jaxmma.instruction(
      ...     "mma.sync.aligned.m8n8k16.row.col.satfinite.s32.s8.s8.s32", arch="sm_90")
      >>> A = jnp.full((8, 16), 0x80, jnp.uint32)  # -128
      >>> C = jnp.full((8, 8), 0x7FFFFFFF, jnp.uint32)
      >>> hex(int(mma_bits(ins, A, A.T, C)[0, 0]))  # 2**31 - 1 + 16 * 2**14: clamped
      '0x7fffffff'
    """
    _check(ins)
    A, B, C = _operands(A, B, C, b_rows)
    K = A.shape[-1]
    if ins.atype == "b1":
        total = _popc(A, B, ins.bitop, b_rows)  # at most K
    else:
        if K * _max_product(ins.atype, ins.btype) >= 2**31:
            raise ValueError(
                f"K={K} is too large for an exact int32 sum of .{ins.atype} x .{ins.btype} products"
            )
        total = _products_sum(to_int32(A, ins.atype), to_int32(B, ins.btype), b_rows)
    lead = jnp.broadcast_shapes(total.shape, C.shape)
    total, C = jnp.broadcast_to(total, lead), jnp.broadcast_to(C, lead)
    return accumulate(total, C, satfinite=bool(ins.satfinite))
