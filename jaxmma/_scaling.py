"""Block-scaled ``mma``: scale selection and the sm_120 arithmetic models.

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

import jax
import jax.numpy as jnp
import numpy as np

from . import _formats, _layouts, _numerics, _packing, _values, _wide
from ._numerics import BlockModel, Terms

U32 = jnp.uint32
KINDS = ("mxf8f6f4", "mxf4", "mxf4nvf4")
SCALE_VECS = {"1X": 1, "2X": 2, "4X": 4}

#: Table 37: valid byte-id per scale_vec, thread-id per operand.
BYTE_IDS = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}
THREAD_IDS = {"a": (0, 1), "b": (0, 1, 2, 3)}

#: kind::mxf8f6f4 (MMA-Sim ``MMA_ST_FDPA``, sm_120): one fused block of 32 scaled products.
PRODUCT_MODEL = BlockModel(F=25, L=32, e_zero_f32=-133, e_zero_f16=-21)
#: kind::mxf4 / mxf4nvf4 (MMA-Sim ``MMA_GST_FDPA``, sm_120): groups of 16, F = 35.
GROUP, GROUP_F, GROUP_E_ZERO = 16, 35, -139


def _check_ins(ins) -> None:
    if getattr(ins, "opcode", None) != "mma" or getattr(ins, "kind", None) not in KINDS:
        text = getattr(ins, "text", ins)
        raise ValueError(f"ins: expected a .block_scale mma instruction, got {text!r}")


def num_blocks(ins) -> int:
    """``SFA_N = SFB_M``: scale blocks along k (1, 2 or 4 for ``scale_vec::1X/2X/4X``)."""
    _check_ins(ins)
    return SCALE_VECS[ins.form.scale_vec]


def scale_shapes(ins) -> tuple[tuple[int, int], tuple[int, int]]:
    """Trailing shapes of ``scale_A`` (``M x SFA_N``) and ``scale_B`` (``SFB_M x N``)."""
    nblk = num_blocks(ins)
    return (ins.m, nblk), (nblk, ins.n)


def block_size(ins) -> int:
    """Dense k columns of A (rows of B) that one scale covers: ``K / SFA_N``."""
    return ins.k // num_blocks(ins)


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
    if index not in allowed:
        raise ValueError(
            f"{name}={value!r} is not valid for {ins.text} (Table 37, "
            f"scale_vec::{ins.form.scale_vec}); allowed: {', '.join(map(str, allowed))}"
        )
    return index


def _scale_data(ins, name: str, x):
    if x is None:
        raise ValueError(f"{name}: required by {ins.text} (uint32 [..., 32] scale data)")
    x = _values.registers(x, name)
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
    from ._quant import Quantized

    return Quantized


def _quant_raw_bits(q):
    from ._quant import raw_bits

    return raw_bits(q)


def _check_quantized(q, name: str):
    """``q`` validated (:func:`jaxmma._quant.check_quantized`), errors naming ``name``."""
    from ._quant import check_quantized

    return check_quantized(q, name, matrix=True)


def _scale_matrix(ins, name: str, S, want):
    if isinstance(S, _quantized_type()):
        S = _quantized_scales(ins, name[-1], S, name)
    if S is None:
        raise ValueError(
            f"{name}: required by {ins.text} (raw .{ins.stype} bits of trailing shape {want})"
        )
    S = jnp.asarray(S)
    fmt = {"ue8m0": jnp.float8_e8m0fnu, "ue4m3": jnp.float8_e4m3fn}[ins.stype]
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
        _scale_matrix(ins, "scale_a", SA, want_a),
        _scale_matrix(ins, "scale_b", SB, want_b),
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


def as_operands(ins, qa, qb):
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
        bits = _packing.to_container(bits, q.fmt)
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


# ---------------------------------------------------------------------------------------
# Arithmetic
def _element_fields(ins, fmt: str, bits):
    if ins.kind == "mxf8f6f4":
        bits = _packing.from_container(bits, fmt)
    return _formats.fields(fmt, bits)


def _per_term(sa, sb, nterms: int, nblk: int):
    """Scale fields per term: SA ``[..., M, nblk]`` -> ``[..., M, 1, T]``, SB -> ``[..., 1,
    N, T]`` (term t belongs to block ``t // (nterms / nblk)``)."""
    idx = np.arange(nterms) // (nterms // nblk)
    a = jax.tree.map(lambda x: x[..., idx][..., :, None, :], sa)
    b = jax.tree.map(lambda x: jnp.swapaxes(x, -1, -2)[..., idx][..., None, :, :], sb)
    return a, b  # (with b_rows too: B's scale depends on the column and the block only)


def _scaled_products(ins, fa, fb, SA, SB, b_rows: bool) -> Terms:
    """Every exact product times its two scales, as terms ``[..., M, N, K]``."""
    prod = _numerics.product_terms(fa, fb, ins.atype, ins.btype, b_rows=b_rows)
    sa, sb = (_formats.fields(ins.stype, S) for S in (SA, SB))
    sa, sb = _per_term(sa, sb, prod.sig.shape[-1], SA.shape[-1])
    man = _formats.FORMATS[ins.stype].mant_bits
    nan = prod.nan | sa.nan | sb.nan
    return Terms(
        prod.sign,
        prod.sig * sa.sig * sb.sig,
        prod.lsb + sa.exp + sb.exp,
        prod.order + sa.exp + sb.exp + 2 * man,
        nan,
        prod.inf & ~nan,
    )


def _span(fmt: str) -> tuple[int, int]:
    """(exponent just above the largest finite value, exponent of the lowest unit)."""
    f = _formats.FORMATS[fmt]
    return int(np.floor(np.log2(f.max))) + 1, f.min_exp


def exact_width(ins, nterms: int) -> int:
    """Bits that hold any exact sum of ``nterms`` scaled products and an f32 C."""
    (ta, la), (tb, lb), (ts, ls) = _span(ins.atype), _span(ins.btype), _span(ins.stype)
    tc, lc = _span("f32")
    top = max(ta + tb + 2 * ts, tc) + (nterms + 1).bit_length() + 1
    return top - min(la + lb + 2 * ls, lc)


def _group_terms(fa, fb, SA, SB, stype: str, b_rows: bool) -> tuple[Terms, jnp.ndarray]:
    """kind::mxf4*: one term per group of 16 products, ``[..., M, N, K/16]``, and the
    exponent each term counts with for ``e_max``."""

    def bt(x):  # B [..., K, N] (or [..., M, K, N]) -> [..., 1 or M, N, K]
        x = jnp.swapaxes(x, -1, -2)
        return x if b_rows else x[..., None, :, :]

    lo = _formats.FORMATS["e2m1"].min_exp  # products are integers in units of 2**(2 * lo)
    ia = fa.sig << (fa.exp - lo).astype(U32)
    ib = fb.sig << (fb.exp - lo).astype(U32)
    mag = ia[..., :, None, :] * bt(ib)
    neg = (fa.sign[..., :, None, :] ^ bt(fb.sign)) != 0
    prod = jnp.where(neg, -mag.astype(jnp.int32), mag.astype(jnp.int32))
    K = prod.shape[-1]
    grouped = prod.reshape(prod.shape[:-1] + (K // GROUP, GROUP))
    total = jnp.sum(grouped, axis=-1, dtype=jnp.int32)
    all_zero = jnp.all(mag.reshape(grouped.shape) == 0, axis=-1)
    sa, sb = (_formats.fields(stype, S) for S in (SA, SB))
    sa, sb = _per_term(sa, sb, K // GROUP, SA.shape[-1])
    man = _formats.FORMATS[stype].mant_bits
    ssig = sa.sig * sb.sig
    order = jnp.where(all_zero | (ssig == 0), GROUP_E_ZERO, sa.exp + sb.exp + 2 * man)
    nan = sa.nan | sb.nan
    terms = Terms(
        (total < 0).astype(U32),
        jnp.abs(total).astype(U32) * ssig,
        2 * lo + sa.exp + sb.exp,
        order,
        nan,
        jnp.zeros(nan.shape, bool),
    )
    return terms, order


def _group_sum(terms: Terms, order, F: int):
    """Fused sum where ``order`` (not the significand) decides ``e_max``: truncate every
    term to F fractional bits below ``2**e_max``, sum exactly, truncate to f32."""
    e_max = jnp.max(order, axis=-1)
    unit = e_max - F
    shift = terms.lsb - unit[..., None]
    # group terms are below 2**(order + 12), C below 2**(order + 1); five of them
    limbs, _ = _wide.align(terms.sig, shift, _wide.limbs_needed(F + 16))
    neg, mag = _wide.signed_sum(terms.sign, limbs)
    bits = _wide.round_to_float(neg, mag, unit, _wide.F32, "rz")
    return _numerics.apply_specials(bits, terms, "f32")


def _batch(A, B, C, SA, SB, b_rows: bool):
    lead = jnp.broadcast_shapes(
        A.shape[:-2], B.shape[: -3 if b_rows else -2], C.shape[:-2], SA.shape[:-2], SB.shape[:-2]
    )
    bcast = lambda x, nd: jnp.broadcast_to(x, lead + x.shape[x.ndim - nd :])  # noqa: E731
    return (
        bcast(A, 2),
        bcast(B, 3 if b_rows else 2),
        bcast(C, 2),
        bcast(SA, 2),
        bcast(SB, 2),
    )


def mma_bits(ins, A, B, C, scales, *, model=None, b_rows=False):
    """Raw-bit ``D = (A * scale_A) @ (B * scale_B) + C`` of a ``.block_scale`` form.

    Args:
      ins: a ``.block_scale`` :class:`jaxmma.Instruction`.
      A: uint32 ``[..., M, K]`` (``kind::mxf8f6f4``: 8-bit containers; ``mxf4*``: e2m1
        nibbles), or the compressed ``[..., M, K/2]`` of a sparse form.
      B: uint32 ``[..., K, N]``; with ``b_rows`` ``[..., M, K/2, N]``, the rows of B that
        each stored element of row m of A meets (:func:`jaxmma._models.gather_rows`).
      C: uint32 f32 bits ``[..., M, N]``.
      scales: ``(SA [..., M, SFA_N], SB [..., SFB_M, N])`` uint32 scale bytes.
      model: ``None`` (sm_120, MMA-Sim) or ``"exact"``.

    Returns:
      uint32 f32 bits ``[..., M, N]``.
    """
    _check_ins(ins)
    SA, SB = scales
    A, B, C, SA, SB = _batch(A, B, C, SA, SB, b_rows)
    fa = _element_fields(ins, ins.atype, A)
    fb = _element_fields(ins, ins.btype, B)
    if model == "exact":
        prod = _scaled_products(ins, fa, fb, SA, SB, b_rows)
        terms = _numerics.concat(prod, _numerics.c_terms(C, "f32"))
        width = exact_width(ins, prod.sig.shape[-1])
        return _numerics.fused_sum(terms, "f32", _numerics.EXACT, width)
    if ins.kind == "mxf8f6f4":
        prod = _scaled_products(ins, fa, fb, SA, SB, b_rows)
        return _numerics.block_chain(prod, C, "f32", "f32", PRODUCT_MODEL)
    groups, order = _group_terms(fa, fb, SA, SB, ins.stype, b_rows)
    c = _numerics.c_terms(C, "f32")
    c_zero = (c.sig == 0) & ~c.nan & ~c.inf
    c_order = jnp.where(c_zero, GROUP_E_ZERO, c.order)
    terms = _numerics.concat(groups, c)
    return _group_sum(terms, jnp.concatenate([order, c_order], axis=-1), GROUP_F)
