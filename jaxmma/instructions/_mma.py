"""``mma`` / ``mma.sp`` / block-scaled ``mma``: register level and matrix level.

Register operands are gathered into raw-bit matrices (:mod:`_fragments`), the matrix
product is computed by the model of the instruction's element family and architecture,
and the result is scattered back into the destination registers. The matrix-level entry
point :func:`matrix_mma` runs exactly the same function, so both give the same bits.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from .. import bits, models, operands, util

_SCALE_NO_DERIVATIVE = (
    "{name}: block scales enter the instruction as exponent bits and have no derivative; "
    "differentiate with respect to A, B or C (or quantize with jaxmma.quant.fake_quantize_*)"
)


def _check_model(model):
    if model not in (None, "exact"):
        raise ValueError(f"model must be None (the architecture's) or 'exact', got {model!r}")


def execute(
    ins,
    a,
    b,
    c,
    e=None,
    *,
    selector=None,
    scale_a=None,
    scale_b=None,
    byte_id_a=0,
    thread_id_a=0,
    byte_id_b=0,
    thread_id_b=0,
    model=None,
    check=None,
):
    """Register-level ``mma``: ``d = ins(a, b, c[, e], selector=..., scale_a=...)``.

    ``check`` (``mma.sp`` only): raise on undefined-behaviour metadata (see
    :mod:`jaxmma.sparse`)."""
    _check_model(model)
    A = operands.unfragment(ins, "a", a)
    B = operands.unfragment(ins, "b", b)
    C = operands.unfragment(ins, "c", c)
    idx = None
    if ins.sparse:
        idx = operands.metadata_indices(ins, e, selector, check=check)
    elif e is not None or selector is not None or check is not None:
        raise ValueError(f"e/selector/check are operands of mma.sp only, not of {ins.text}")
    scales = None
    if ins.stype:
        scales = operands.select_registers(
            ins, scale_a, scale_b, byte_id_a, thread_id_a, byte_id_b, thread_id_b
        )
    elif scale_a is not None or scale_b is not None:
        raise ValueError(f"scale_a/scale_b are operands of .block_scale forms, not of {ins.text}")
    nd = len(operands.matrix_shape(ins, "c"))  # 3 for m8n8k4 .f16 (four matrices)
    SA, SB = scales or (None, None)
    A, B, C, idx, SA, SB = util.broadcast(
        (
            ("a", A, nd),
            ("b", B, nd),
            ("c", C, nd),
            ("e", idx, 2),
            ("scale_a", SA, 2),
            ("scale_b", SB, 2),
        ),
        ins.text,
    )
    scales = None if scales is None else (SA, SB)
    D = models.mma_bits(ins, A, B, C, scales=scales, model=model, sparse_idx=idx)
    return operands.fragment(ins, "d", D)


def check_matrix_shapes(ins, A, B, C) -> None:
    """ValueError naming the operand when a matrix of ``ins.mma`` has the wrong trailing
    shape, or when the leading (batch) dimensions do not broadcast.

    A sparse A is checked by :mod:`_sparse` (dense ``[M, K]`` or compressed with
    ``metadata``); a ``Quantized`` operand by its ``shape``.
    """
    if ins.opcode == "mma":
        want = {op: operands.matrix_shape(ins, op) for op in ("b", "c")}
        want["a"] = None if ins.sparse else operands.matrix_shape(ins, "a")
    else:  # wmma.mma
        want = {"a": (ins.m, ins.k), "b": (ins.k, ins.n), "c": (ins.m, ins.n)}
    named = []
    for op, x in (("a", A), ("b", B), ("c", C)):
        shape = tuple(x.shape) if hasattr(x, "shape") else tuple(jnp.shape(x))
        w = want[op]
        if w is None:
            continue
        if len(shape) < len(w) or shape[len(shape) - len(w) :] != w:
            raise ValueError(
                f"{op.upper()}: expected a matrix of trailing shape {list(w)} for "
                f"{ins.text} (A [..., M, K], B [..., K, N], C [..., M, N]), got {shape}"
            )
        named.append((op.upper(), shape[: len(shape) - len(w)]))
    util.batch_shape(named, ins.text)


def matrix_mma(ins, A, B, C, *, model=None, **kwargs):
    """Matrix-level ``D = A @ B + C`` (see :meth:`jaxmma.Instruction.mma`).

    Differentiable in its float operands with the straight-through estimator of
    :mod:`jaxmma._ste` (the tangent of the exact product of the values read).
    """
    _check_model(model)
    check_matrix_shapes(ins, A, B, C)
    if ins.stype:
        A, B, kwargs = operands.scaled_matrix_operands(ins, A, B, kwargs)
    metadata = kwargs.pop("metadata", None)
    check = kwargs.pop("check", None)
    scale_a, scale_b = kwargs.pop("scale_a", None), kwargs.pop("scale_b", None)
    if kwargs:
        raise TypeError(f"unexpected keyword argument(s) {sorted(kwargs)} for {ins.text}")
    # arguments that do not apply are refused, as the register level refuses them
    if not ins.sparse and (metadata is not None or check is not None):
        given = [n for n, v in (("metadata", metadata), ("check", check)) if v is not None]
        raise ValueError(f"{'/'.join(given)}: operands of mma.sp only, not of {ins.text}")
    if not ins.stype and (scale_a is not None or scale_b is not None):
        given = [n for n, v in (("scale_a", scale_a), ("scale_b", scale_b)) if v is not None]
        raise ValueError(f"{'/'.join(given)}: operands of .block_scale forms, not of {ins.text}")
    # scales given as float8 values are read as exponent bits: no derivative, said clearly
    scale_a, scale_b = (
        util.no_derivative(s, _SCALE_NO_DERIVATIVE.format(name=name))
        if _float_or_none(s) is not None
        else s
        for name, s in (("scale_a", scale_a), ("scale_b", scale_b))
    )
    # raw bits, checked here (dtype errors at trace time); the arithmetic sees these bits
    Ab = bits.to_bits(ins.atype, A, "A", ins.kind)
    Bb = bits.to_bits(ins.btype, B, "B", ins.kind)
    Cb = bits.to_bits(ins.ctype, C, "C", ins.kind)
    idx = scales = bad = None
    if ins.sparse:
        # bad: rows of A that are invalid (traced and unchecked): their rows of D are poison
        Ab, idx, bad = operands.sparse_matrix_operands(ins, Ab, metadata, check=check, rows=True)
    if ins.stype:
        scales = operands.scales_from_matrices(ins, scale_a, scale_b)
    aux = {"bits": (Ab, Bb, Cb), "idx": idx, "scales": scales, "bad": bad}
    # tangents of A/B arrays are tangents of their elements: a block-scaled element counts
    # times its scale, a compressed (metadata-given) A element at its dense column
    lift_a = functools.partial(_lift, ins, "a", metadata is not None)
    lift_b = functools.partial(_lift, ins, "b", False)

    def forward(A, B, C, aux):
        Ab, Bb, Cb = _batch(*aux["bits"])
        idx = aux["idx"]
        if idx is not None:
            idx = jnp.broadcast_to(idx, Ab.shape[:-2] + idx.shape[-2:])
        D = models.mma_bits(ins, Ab, Bb, Cb, scales=aux["scales"], model=model, sparse_idx=idx)
        if aux["bad"] is not None:
            D = operands.poison_rows(ins, D, aux["bad"])
        return bits.from_bits(ins.dtype, D)

    return util.product_straight_through(
        forward,
        functools.partial(_operand_values, ins),
        _float_or_none(A),
        _float_or_none(B),
        _float_or_none(C),
        aux,
        lift_a=lift_a if ins.stype or (ins.sparse and metadata is not None) else None,
        lift_b=lift_b if ins.stype else None,
    )


def _float_or_none(x):
    """The operand where it can carry a tangent (a float array), else None (raw bits)."""
    dtype = getattr(x, "dtype", None)
    return x if dtype is not None and jnp.issubdtype(dtype, jnp.floating) else None


def _lift_sparse(dA, aux):
    """A compressed-A tangent ``[..., M, K/2]`` -> the dense ``[..., M, K]`` one."""
    idx = aux["idx"]
    K = 2 * idx.shape[-1]
    lead = jnp.broadcast_shapes(dA.shape[:-2], idx.shape[:-2])
    dA = jnp.broadcast_to(dA, lead + dA.shape[-2:])
    cols = jnp.arange(K).reshape((1,) * (len(lead) + 2) + (K,))
    onehot = jnp.broadcast_to(idx, lead + idx.shape[-2:])[..., None] == cols
    return jnp.sum(jnp.where(onehot, dA[..., None].astype(jnp.float32), 0.0), axis=-2)


def _scale(ins, op, x, aux):
    """Element values (or tangents) of A ``[..., M, K]`` / B ``[..., K, N]`` times their
    block scales (K the stored columns: K/2 for a compressed sparse A)."""
    S = aux["scales"][0 if op == "a" else 1]
    s = bits.decode(ins.stype, S).astype(jnp.float32)
    K, nblk = x.shape[-1 if op == "a" else -2], operands.num_blocks(ins)
    blk = np.arange(K) // (K // nblk)
    return x * s[..., blk] if op == "a" else x * s[..., blk, :]


def _lift(ins, op, compressed, dx, aux):
    dx = dx.astype(jnp.float32)
    if aux["scales"] is not None:
        dx = _scale(ins, op, dx, aux)
    return _lift_sparse(dx, aux) if compressed else dx


def _operand_values(ins, A, B, aux):
    """Float32 values of the A and B the instruction multiplies (scales applied; the
    compressed A of ``mma.sp`` spread to its dense columns)."""
    Ab, Bb, _ = aux["bits"]
    va = operands.operand_values(ins, ins.atype, Ab).astype(jnp.float32)
    vb = operands.operand_values(ins, ins.btype, Bb).astype(jnp.float32)
    if aux["scales"] is not None:
        va, vb = _scale(ins, "a", va, aux), _scale(ins, "b", vb, aux)
    if aux["idx"] is not None:
        va = _lift_sparse(va, aux)
    return va, vb


def _batch(A, B, C):
    """Broadcast the leading batch dimensions of the three matrices."""
    lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2], C.shape[:-2])
    return (
        jnp.broadcast_to(A, lead + A.shape[-2:]),
        jnp.broadcast_to(B, lead + B.shape[-2:]),
        jnp.broadcast_to(C, lead + C.shape[-2:]),
    )
