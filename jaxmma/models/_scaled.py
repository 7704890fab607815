"""The arithmetic of the block-scaled ``mma`` forms (docs/block_scaling.md).

``kind::mxf8f6f4``: every product times its two scales, one fused block with C
(:data:`jaxmma.models._table.PRODUCT_MODEL`); ``kind::mxf4``/``kind::mxf4nvf4``: exact
sums of groups of 16 products, fused with C by the scales' exponents (the group model).
Scale selection and operand preparation live in :mod:`jaxmma.operands._scaling`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith, util
from ..arith import Terms
from ..bits import (
    F32_FORMAT,
    FORMATS,
    align,
    fields,
    from_container,
    limbs_needed,
    round_to_float,
    signed_sum,
)
from ._table import GROUP, GROUP_E_ZERO, GROUP_F, KINDS, PRODUCT_MODEL

U32 = jnp.uint32
F32 = jnp.float32
I32 = jnp.int32
HIGHEST = jax.lax.Precision.HIGHEST


def check_ins(ins) -> None:
    """A ``ValueError`` unless ``ins`` is a ``.block_scale`` ``mma`` or ``tcgen05.mma``
    instruction."""
    opcode = getattr(ins, "opcode", None)
    if opcode not in ("mma", "tcgen05.mma") or getattr(ins, "kind", None) not in KINDS:
        text = getattr(ins, "text", ins)
        raise ValueError(
            f"ins: expected a .block_scale mma or tcgen05.mma instruction, got {text!r}"
        )


def _element_fields(ins, fmt: str, bits):
    if ins.kind == "mxf8f6f4":
        bits = from_container(bits, fmt)
    return fields(fmt, bits)


def _per_term(sa, sb, nterms: int, nblk: int):
    """Scale fields per term: SA ``[..., M, nblk]`` -> ``[..., M, 1, T]``, SB -> ``[..., 1,
    N, T]`` (term t belongs to block ``t // (nterms / nblk)``)."""
    idx = np.arange(nterms) // (nterms // nblk)
    a = jax.tree.map(lambda x: x[..., idx][..., :, None, :], sa)
    b = jax.tree.map(lambda x: jnp.swapaxes(x, -1, -2)[..., idx][..., None, :, :], sb)
    return a, b  # (with b_rows too: B's scale depends on the column and the block only)


def _scaled_products(ins, fa, fb, SA, SB, b_rows: bool) -> Terms:
    """Every exact product times its two scales, as terms ``[..., M, N, K]``."""
    prod = arith.product_terms(fa, fb, ins.atype, ins.btype, b_rows=b_rows)
    sa, sb = (fields(ins.stype, S) for S in (SA, SB))
    sa, sb = _per_term(sa, sb, prod.sig.shape[-1], SA.shape[-1])
    man = FORMATS[ins.stype].mant_bits
    nan = prod.nan | sa.nan | sb.nan
    return Terms(
        prod.sign,
        prod.sig * sa.sig * sb.sig,
        prod.lsb + sa.exp + sb.exp,
        prod.order + sa.exp + sb.exp + 2 * man,
        nan,
        prod.inf & ~nan,
    )


def _with_scale(op: arith.FixedOperand, s) -> arith.FixedOperand:
    """A fixed-engine operand times power-of-two scales (``.ue8m0`` fields, one per
    element): the scale's exponent joins the element's; a NaN scale makes the element's
    products NaN."""
    finite = op.lsb != arith.FIXED_ABSENT
    lsb = jnp.where(finite & ~s.nan, op.lsb + s.exp, I32(arith.FIXED_ABSENT))
    order = jnp.where(finite & ~s.nan, op.order + s.exp, I32(arith.FIXED_ABSENT))
    return arith.FixedOperand(
        jnp.where(s.nan, F32(0), op.sig),
        lsb,
        order,
        jnp.where(s.nan, F32(jnp.nan), op.code),
        jnp.where(s.nan, F32(0), op.nonzero),
    )


def _fixed_products(ins, fa, fb, C, SA, SB):
    """``kind::mxf8f6f4`` with ``.ue8m0`` scales on the fixed-width engine.

    A ue8m0 scale is a power of two (or NaN), so a scaled product is the element product
    with the two scale exponents added to its exponent and order: the terms of
    :func:`_scaled_products` exactly, which :func:`jaxmma.arith._fixed.chain` sums with
    the same bits as the general engine (every significand has at most 4 bits).
    """
    K = fa.sig.shape[-1]
    idx = np.arange(K) // (K // SA.shape[-1])
    sa = fields("ue8m0", SA[..., idx])  # [..., M, K]
    sb = fields("ue8m0", SB[..., idx, :])  # [..., K, N]
    a = _with_scale(arith.fixed_operand(fa, ins.atype), sa)
    b = _with_scale(arith.fixed_operand(fb, ins.btype), sb)
    return arith.fixed_chain(a, b, C, "f32", "f32", PRODUCT_MODEL)


def _span(fmt: str) -> tuple[int, int]:
    """(exponent just above the largest finite value, exponent of the lowest unit)."""
    f = FORMATS[fmt]
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

    lo = FORMATS["e2m1"].min_exp  # products are integers in units of 2**(2 * lo)
    ia = fa.sig << (fa.exp - lo).astype(U32)
    ib = fb.sig << (fb.exp - lo).astype(U32)
    if b_rows:  # sparse: every row of A meets its own rows of B
        mag = ia[..., :, None, :] * bt(ib)
        neg = (fa.sign[..., :, None, :] ^ bt(fb.sign)) != 0
        prod = jnp.where(neg, -mag.astype(jnp.int32), mag.astype(jnp.int32))
        K = prod.shape[-1]
        grouped = prod.reshape(prod.shape[:-1] + (K // GROUP, GROUP))
        total = jnp.sum(grouped, axis=-1, dtype=jnp.int32)
        all_zero = jnp.all(mag.reshape(grouped.shape) == 0, axis=-1)
    else:
        total, count = _group_matmul(ia, fa.sign, ib, fb.sign)
        K = ia.shape[-1]
        all_zero = count == 0
    sa, sb = (fields(stype, S) for S in (SA, SB))
    sa, sb = _per_term(sa, sb, K // GROUP, SA.shape[-1])
    man = FORMATS[stype].mant_bits
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


def _group_matmul(ia, sign_a, ib, sign_b):
    """Exact group sums of integer products as float32 matrix products.

    ``ia [..., M, K]`` and ``ib [..., K, N]`` are e2m1 magnitudes in units of their lowest
    bit (integers 0 ... 12), so a product is at most 144 and a group of 16 sums to at most
    2,304 in magnitude: every partial sum is an integer below ``2**24``, exact in float32
    in any order of addition. Returns the int32 sums ``[..., M, N, K/16]`` and the number
    of nonzero products per group (likewise exact).
    """
    K = ia.shape[-1]
    N = ib.shape[-1]
    groups = K // GROUP

    def a3(x):  # [..., M, K] -> [..., M, G, 16]
        return x.reshape(x.shape[:-1] + (groups, GROUP))

    def b3(x):  # [..., K, N] -> [..., G, 16, N]
        return x.reshape(x.shape[:-2] + (groups, GROUP, N))

    def gsum(x, y):
        return jnp.einsum(
            "...mgk,...gkn->...mng", a3(x), b3(y), precision=HIGHEST, preferred_element_type=F32
        )

    va = jnp.where(sign_a != 0, -ia.astype(F32), ia.astype(F32))
    vb = jnp.where(sign_b != 0, -ib.astype(F32), ib.astype(F32))
    total = gsum(va, vb).astype(jnp.int32)
    count = gsum((ia != 0).astype(F32), (ib != 0).astype(F32))
    return total, count


def _group_sum(terms: Terms, order, F: int):
    """Fused sum where ``order`` (not the significand) decides ``e_max``: truncate every
    term to F fractional bits below ``2**e_max``, sum exactly, truncate to f32.

    In 32-bit integers: every truncated term is an integer below ``2**48`` units of the
    grid ``2**(e_max - F)`` (a group term is at most ``2,304 * 225 < 2**19`` times
    ``2**(lsb - unit) <= 2**(2 * lo - 2 * man + F) <= 2**33`` and below ``2**(F + 12)``;
    C below ``2**(F + 1)``), carried as two 24-bit limbs whose signed sums over the five
    terms fit int32. The top 32 bits of the total are rounded toward zero: the f32 result
    keeps 24 bits or fewer, so the bits dropped below them change nothing.
    :func:`_group_sum_wide` is the same sum on multi-limb integers (tested equal).
    """
    e_max = jnp.max(order, axis=-1)
    unit = e_max - F
    k = terms.lsb - unit[..., None]  # the term is sig * 2**k grid units, truncated
    m = terms.sig
    mask = U32(0xFFFFFF)
    up = jnp.clip(k, 0, 24).astype(U32)
    low = jnp.where(k >= 0, (m & (mask >> up)) << up, m >> jnp.clip(-k, 0, 31).astype(U32))
    low = jnp.where(k <= -32, U32(0), low)
    high = jnp.where(k >= 24, m << jnp.clip(k - 24, 0, 31).astype(U32), m >> (U32(24) - up))
    high = jnp.where(k >= 0, high, U32(0))
    neg_t = terms.sign != 0
    lo = jnp.sum(jnp.where(neg_t, -low.astype(I32), low.astype(I32)), axis=-1, dtype=I32)
    hi = jnp.sum(jnp.where(neg_t, -high.astype(I32), high.astype(I32)), axis=-1, dtype=I32)
    hi = hi + (lo >> 24)  # arithmetic shift: lo = (lo >> 24) * 2**24 + (lo & mask)
    lo = lo & 0xFFFFFF
    neg = hi < 0
    mlo = jnp.where(neg & (lo != 0), 0x1000000 - lo, lo).astype(U32)
    mhi = jnp.where(neg, -hi - (lo != 0).astype(I32), hi).astype(U32)  # < 2**26
    drop = jnp.maximum(31 - util.clz(mhi).astype(I32) - 7, 0).astype(U32)
    mag = jnp.where(mhi != 0, (mhi << (U32(24) - drop)) | (mlo >> drop), mlo)
    bits = arith.fixed_round_f32_rz(neg, mag, unit + drop.astype(I32))
    return arith.apply_specials(bits, terms, "f32")


def _group_sum_wide(terms: Terms, order, F: int):
    """:func:`_group_sum` on multi-limb integers (the general engine's arithmetic)."""
    e_max = jnp.max(order, axis=-1)
    unit = e_max - F
    shift = terms.lsb - unit[..., None]
    # group terms are below 2**(order + 12), C below 2**(order + 1); five of them
    limbs, _ = align(terms.sig, shift, limbs_needed(F + 16))
    neg, mag = signed_sum(terms.sign, limbs)
    bits = round_to_float(neg, mag, unit, F32_FORMAT, "rz")
    return arith.apply_specials(bits, terms, "f32")


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
    check_ins(ins)
    SA, SB = scales
    A, B, C, SA, SB = _batch(A, B, C, SA, SB, b_rows)
    fa = _element_fields(ins, ins.atype, A)
    fb = _element_fields(ins, ins.btype, B)
    if model == "exact":
        prod = _scaled_products(ins, fa, fb, SA, SB, b_rows)
        terms = arith.concat(prod, arith.c_terms(C, "f32"))
        width = exact_width(ins, prod.sig.shape[-1])
        return arith.fused_sum(terms, "f32", arith.EXACT, width)
    if ins.kind == "mxf8f6f4" and not b_rows and ins.stype == "ue8m0":
        return _fixed_products(ins, fa, fb, C, SA, SB)
    if ins.kind == "mxf8f6f4":
        prod = _scaled_products(ins, fa, fb, SA, SB, b_rows)
        return arith.block_chain(prod, C, "f32", "f32", PRODUCT_MODEL)
    groups, order = _group_terms(fa, fb, SA, SB, ins.stype, b_rows)
    c = arith.c_terms(C, "f32")
    c_zero = (c.sig == 0) & ~c.nan & ~c.inf
    c_order = jnp.where(c_zero, GROUP_E_ZERO, c.order)
    terms = arith.concat(groups, c)
    return _group_sum(terms, jnp.concatenate([order, c_order], axis=-1), GROUP_F)
