"""``tcgen05.mma`` (PTX ISA 9.7.16.10): Blackwell's 5th-generation MMA, matrix level.

``D = A * B + D`` with D in Tensor Memory, issued by one thread, for ``.kind::f16``,
``.kind::tf32``, ``.kind::f8f6f4``, ``.kind::i8`` and the block-scaled ``.kind::mxf8f6f4``,
``.kind::mxf4``, ``.kind::mxf4nvf4``, with ``.cta_group::1`` and ``::2`` shapes. The
Tensor Memory and shared-memory descriptor level is not emulated: :func:`matrix_mma`
computes on the logical matrices ``A [..., M, K]``, ``B [..., K, N]`` and the accumulator
``C [..., M, N]`` (D's old value). The transposes of the instruction descriptor change
how memory is read, not the product; its negate bits flip the sign of every element
of A or B (``negate_a``/``negate_b`` of the instruction).

Numerics (docs/tcgen05.md): MMA-Sim's Blackwell models, :mod:`jaxmma.models._tcgen05`.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp

from .. import bits, models, operands, util
from . import _mma
from . import _tcgen05_options as _options

#: the sign bit of each element in its operand encoding (f8f6f4 / mxf8f6f4: the byte
#: container holds fp6 in bits 5:0 and fp4 in bits 5:2; mxf4*: an e2m1 nibble)
_SIGN = {"f16": 15, "bf16": 15, "tf32": 31, "e4m3": 7, "e5m2": 7, "e3m2": 5, "e2m3": 5}


def sign_bit(ins, fmt: str) -> int:
    if fmt == "e2m1":
        return 3 if ins.kind in ("mxf4", "mxf4nvf4") else 5
    return _SIGN[fmt]


def _check(ins, model, enable_input_d) -> None:
    if ins.opcode != "tcgen05.mma":
        raise ValueError(f"ins: expected a tcgen05.mma instruction, got {ins.text}")
    if model not in (None, "exact"):
        raise ValueError(f"model: expected None (Blackwell's) or 'exact', got {model!r}")
    if not isinstance(enable_input_d, (bool, int)) or enable_input_d not in (0, 1):
        raise ValueError(f"enable_input_d: expected True or False, got {enable_input_d!r}")


def _lane_mask(ins, mask, d_lane, M):
    """The rows of D that ``disable_output_lane`` leaves unwritten: bool ``[..., M, 1]``,
    or None without a mask (:mod:`._tcgen05_options`)."""
    if mask is None:
        if d_lane != 0:
            raise ValueError(
                f"d_lane: the lane of D for disable_output_lane, given {d_lane!r} "
                "without disable_output_lane"
            )
        return None
    words = _options.mask_words(ins, mask)
    if M != ins.m:
        raise ValueError(
            f"disable_output_lane: maps Tensor Memory lanes to the {ins.m} rows of D of "
            f"{ins.text}; got M = {M} rows"
        )
    return _options.disabled_rows(ins, words, d_lane)


def _keep_rows(ins, D, C, Cb, rows):
    """D with the ``rows`` (bool ``[..., M, 1]``) holding C, D's old contents, bit for bit
    (a float C keeps its derivative there)."""
    old = C if getattr(C, "dtype", None) == D.dtype else bits.from_bits(ins.dtype, Cb)
    return jnp.where(rows, old, D)


def matrix_mma(
    ins,
    A,
    B,
    C,
    *,
    enable_input_d=True,
    scale_input_d=0,
    disable_output_lane=None,
    d_lane=0,
    scale_a=None,
    scale_b=None,
    metadata=None,
    check=None,
    model=None,
):
    """Matrix-level ``tcgen05.mma``: ``D = A @ B + C`` (``enable_input_d=False``: ``A @ B``).

    ``tcgen05.mma.sp`` (sparse A, PTX ISA 9.7.16.10.8) takes A as ``mma.sp``'s matrix
    level does: the dense ``[..., M, K]`` A that follows the kind's pattern (1:2 tf32;
    2:4 f16, f8f6f4, mxf8f6f4, i8; pair-wise 4:8 mxf4*), compressed here, or the
    compressed ``[..., M, K/2]`` A with ``metadata`` (the dense column of each stored
    element, :func:`jaxmma.sparse.metadata_indices` of the metadata matrix).

    Args:
      ins: a ``tcgen05.mma`` :class:`jaxmma.Instruction`.
      A: ``[..., M, K]``, B: ``[..., K, N]`` in the element dtypes (``jnp.bfloat16``,
        ``jnp.float8_e4m3fn``, ``jnp.float32`` for ``.tf32``, ``jnp.int8``, ...) or
        unsigned raw bits (``kind::f8f6f4``/``mxf8f6f4``: the byte containers; ``mxf4*``:
        one e2m1 nibble per element), or :class:`jaxmma.quant.Quantized` operands for the
        block-scaled kinds. K is the instruction's; M and N may be any (the model is
        elementwise over the output).
      C: ``[..., M, N]`` in the accumulator dtype (float32, float16, int32) or raw bits.
      enable_input_d: the ``enable-input-d`` predicate; False gives ``D = A * B``.
      scale_input_d: the ``scale-input-d`` immediate, a Python int: 0 (the default), or
        1..15 for ``.kind::f16``/``.kind::tf32``: ``D = A * B + C * 2**-scale_input_d``,
        C scaled exactly (its exponent lowered) before the same fused sum.
      disable_output_lane: None, or the mask words of ``disable-output-lane`` (int
        ``[..., 4]`` for ``.cta_group::1``; not the block-scaled kinds): a row of D whose
        Tensor Memory lane has its bit set keeps C, bit for bit (M = 128: row r is lane r;
        M = 64: lane ``32 (r // 16) + d_lane + r % 16``). C's M must be the instruction's.
        ``.cta_group::2`` is refused (docs/tcgen05.md says why).
      d_lane: M = 64 only: the lane field of the D address, 0 or 16.
      scale_a, scale_b: block-scaled kinds: ``scale_A [..., M, K / block]`` and
        ``scale_B [..., K / block, N]`` as raw bits (uint8/uint32),
        ``jnp.float8_e8m0fnu`` (``.ue8m0``) or ``jnp.float8_e4m3fn`` (``.ue4m3``).
      metadata: ``tcgen05.mma.sp`` only: None (A dense), or int32 ``[..., M, K/2]``.
      check: ``tcgen05.mma.sp`` only: as for ``mma.sp`` (:mod:`jaxmma.sparse`); traced
        inputs that were not checked give the canonical NaN (``.s32``: ``-2**31``) in the
        rows of D whose A is invalid.
      model: None (Blackwell's numerics) or ``"exact"``.
    Returns:
      D ``[..., M, N]`` in the accumulator dtype. Leading dimensions broadcast;
      differentiable in float A, B, C (straight-through, as ``mma``).

    Example:
      >>> import jaxmma, jax.numpy as jnp
      >>> ins = jaxmma.instruction("tcgen05.mma.cta_group::1.kind::f8f6f4.m128n8k32.f32"
      ...                          ".e4m3.e4m3")
      >>> A = jnp.zeros((128, 32), jnp.float8_e4m3fn).at[:, 0].set(1).at[:, 1].set(2.0**-6)
      >>> B = jnp.zeros((32, 8), jnp.float8_e4m3fn).at[0].set(1).at[1].set(2.0**-8)
      >>> D = ins.mma(A, B, jnp.zeros((128, 8), jnp.float32))
      >>> float(D[0, 0]) == 1 + 2.0**-14  # F = 25 keeps it (Hopper's wgmma drops it)
      True
    """
    _check(ins, model, enable_input_d)
    shift = _options.scale_input_d(ins, scale_input_d)
    kwargs = {"scale_a": scale_a, "scale_b": scale_b}
    if ins.stype:
        A, B, kwargs = operands.scaled_matrix_operands(ins, A, B, kwargs)
    elif scale_a is not None or scale_b is not None:
        raise ValueError(f"scale_a/scale_b: operands of the block-scaled kinds, not of {ins.text}")
    if not ins.sparse and (metadata is not None or check is not None):
        given = [n for n, v in (("metadata", metadata), ("check", check)) if v is not None]
        raise ValueError(f"{'/'.join(given)}: operands of tcgen05.mma.sp only, not of {ins.text}")
    Ab = bits.to_bits(ins.atype, A, "A", ins.kind)
    Bb = bits.to_bits(ins.btype, B, "B", ins.kind)
    Cb = bits.to_bits(ins.ctype, C, "C")
    idx = bad = None
    if ins.sparse:
        _sparse_shapes(ins, Ab, Bb, Cb, metadata)
        Ab, idx, bad = operands.sparse_matrix_operands(ins, Ab, metadata, check=check, rows=True)
    M, K, N = util.matrix_dims(Ab, Bb, Cb)
    K = 2 * K if ins.sparse else K
    if K != ins.k or Bb.shape[-2] != K or Cb.shape[-2:] != (M, N):
        raise ValueError(
            f"A, B, C: expected A [..., M, {ins.k}], B [..., {ins.k}, N], C [..., M, N] for "
            f"{ins.text}; got A {Ab.shape}, B {Bb.shape}, C {Cb.shape}"
        )
    scales = None
    if ins.stype:
        nblk = operands.num_blocks(ins)
        sa = (
            util.no_derivative(kwargs["scale_a"], _mma._SCALE_NO_DERIVATIVE.format(name="scale_a"))
            if _mma._float_or_none(kwargs["scale_a"]) is not None
            else (kwargs["scale_a"])
        )
        sb = (
            util.no_derivative(kwargs["scale_b"], _mma._SCALE_NO_DERIVATIVE.format(name="scale_b"))
            if _mma._float_or_none(kwargs["scale_b"]) is not None
            else (kwargs["scale_b"])
        )
        scales = (
            operands.scale_matrix(ins, "scale_a", sa, (M, nblk)),
            operands.scale_matrix(ins, "scale_b", sb, (nblk, N)),
        )
    if ins.negate_a:
        Ab = Ab ^ jnp.uint32(1 << sign_bit(ins, ins.atype))
    if ins.negate_b:
        Bb = Bb ^ jnp.uint32(1 << sign_bit(ins, ins.btype))
    keep = _lane_mask(ins, disable_output_lane, d_lane, M)
    C_old = Cb
    if not enable_input_d:
        Cb = jnp.zeros_like(Cb)
    aux = {"bits": (Ab, Bb, Cb), "idx": idx, "scales": scales, "bad": bad}

    def forward(A, B, C, aux):
        Ab, Bb, Cb = aux["bits"]
        lead = jnp.broadcast_shapes(Ab.shape[:-2], Bb.shape[:-2], Cb.shape[:-2])
        if scales is not None:
            lead = jnp.broadcast_shapes(lead, *(s.shape[:-2] for s in aux["scales"]))
        idx = aux["idx"]
        if idx is not None:
            lead = jnp.broadcast_shapes(lead, idx.shape[:-2])
            idx = jnp.broadcast_to(idx, lead + idx.shape[-2:])
        Ab, Bb, Cb = (jnp.broadcast_to(x, lead + x.shape[-2:]) for x in (Ab, Bb, Cb))
        if idx is None:
            D = models.mma_bits(ins, Ab, Bb, Cb, scales=aux["scales"], model=model, c_shift=shift)
        else:  # sparse calls run eagerly (their structure is checked): compile the sum once
            D = _sparse_bits(ins, model, shift, Ab, Bb, Cb, aux["scales"], idx)
        if aux["bad"] is not None:
            D = operands.poison_rows(ins, D, aux["bad"])
        return bits.from_bits(ins.dtype, D)

    # tangents of A/B arrays are tangents of their elements: a block-scaled element counts
    # times its scale, a compressed (metadata-given) A element at its dense column
    compressed = metadata is not None

    def lift(op, negate, dx, aux):
        if aux["scales"] is not None or (op == "a" and compressed):
            dx = _mma._lift(ins, op, op == "a" and compressed, dx, aux)
        return -dx if negate else dx

    Cf = None if not enable_input_d else _mma._float_or_none(C)
    if Cf is not None and shift:  # the tangent of C * 2**-s (the forward reads the bits)
        Cf = Cf * jnp.asarray(2.0**-shift, Cf.dtype)
    D = util.product_straight_through(
        forward,
        functools.partial(_mma._operand_values, ins),
        _mma._float_or_none(A),
        _mma._float_or_none(B),
        Cf,
        aux,
        lift_a=functools.partial(lift, "a", ins.negate_a),
        lift_b=functools.partial(lift, "b", ins.negate_b),
    )
    return D if keep is None else _keep_rows(ins, D, C, C_old, keep)


@functools.partial(util.jit, static_argnums=(0, 1, 2))
def _sparse_bits(ins, model, shift, A, B, C, scales, idx):
    return models.mma_bits(ins, A, B, C, scales=scales, model=model, sparse_idx=idx, c_shift=shift)


def _sparse_shapes(ins, A, B, C, metadata) -> None:
    """ValueError naming the operand for a wrong trailing shape of ``tcgen05.mma.sp``."""
    cols = ins.k if metadata is None else ins.k // 2  # of A
    for name, x in (("B", B), ("C", C)):
        if x.ndim < 2:
            raise ValueError(f"{name}: expected a matrix (at least 2 dimensions), got {x.shape}")
    if A.ndim < 2 or A.shape[-1] != cols or B.shape[-2] != ins.k:
        what = "dense" if metadata is None else "compressed (metadata given)"
        raise ValueError(
            f"A, B: expected the {what} A [..., M, {cols}] and B [..., {ins.k}, N] for "
            f"{ins.text}; got A {tuple(A.shape)}, B {tuple(B.shape)}"
        )
    if C.shape[-2:] != (A.shape[-2], B.shape[-1]):
        raise ValueError(
            f"C: expected trailing shape [{A.shape[-2]}, {B.shape[-1]}] (M of A, N of B) for "
            f"{ins.text}, got {tuple(C.shape)}"
        )


def execute(ins, *args, **kwargs):
    """Tensor Memory / descriptor level: not emulated."""
    raise NotImplementedError(
        f"{ins.text}: the Tensor Memory and matrix-descriptor level of tcgen05.mma is not "
        "emulated; use the matrix level ins.mma(A, B, C, enable_input_d=True)"
    )
