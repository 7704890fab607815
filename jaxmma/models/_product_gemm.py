"""The product model of ``kind::mxf8f6f4`` with ``.ue8m0`` scales for a whole GEMM, fast.

:func:`jaxmma.models._scaled.mma_bits` computes one k-step (32 products) on the
fixed-width engine (:func:`jaxmma.arith._fixed.block`) with each element's scale folded
into its exponent; a GEMM chains it over K. This module computes the same chain with
the same bits in fewer operations per product:

* A ue8m0 scale is a power of two and 1X gives one scale per row of A and per column of
  B in a k-step, so ``es = e_sa[m] + e_sb[n]`` shifts all 32 products of an output
  element equally. Every product is formed once as the float32 product of the two
  element values ``a * b`` (significands of at most 4 bits: exact), and its truncation
  to the block's grid ``2**unit`` is ``int32(a * b * 2**(es - unit))``, one power of two
  per output element and step: the same real number as the engine's
  ``sig_a * sig_b * 2**(lsb_a + lsb_b + es - unit)`` (both exact where the term is at
  least one grid unit; below, both truncate to 0).
* ``e_max`` takes the largest ``order_a + order_b`` of the nonzero products plus
  ``es``, read off one float32 matrix product per step of ``2**(6 * order)`` weights
  (:func:`_largest_orders`; e5m2, whose weights leave float32's range, takes weights
  relative to each row's and column's largest order, and the maximum of the exact
  products ``2**order_a * 2**order_b`` only on a step whose plane they cannot decide).
  Zero products would count with ``e_zero``, but so does a zero C, and a nonzero C is
  above it: they never matter.
* The fusion of a step runs on ``[M, tile]`` planes of output columns that stay in the
  cache while a ``lax.scan`` walks the k-steps: a tile's accumulator never leaves it.
* A NaN scale makes its step NaN and NaN stays NaN, so rows of A and columns of B with
  any NaN scale (and a NaN C) become the canonical NaN once at the end. NaN and Inf
  elements (e4m3 NaN, e5m2 Inf/NaN) enter each step as the engine's product of codes,
  computed only when an operand holds one.

The tests check the whole GEMM bit for bit against the per-step chain.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith
from ..bits import FORMATS, fields, from_container
from ._table import PRODUCT_MODEL

F32 = jnp.float32
I32 = jnp.int32
U32 = jnp.uint32
HIGHEST = jax.lax.Precision.HIGHEST
#: output elements per tile (a step's planes stay in the cache), and the bounds on a
#: tile's columns (measured on a 2-core x86 CPU: 256 x 1024 rows fastest at 1024^3)
TILE = 1 << 18
TILE_N = (64, 256)


def supports(ins) -> bool:
    """Whether :func:`gemm_bits` computes ``ins`` (dense ``mma`` or ``tcgen05.mma``
    ``kind::mxf8f6f4``, ue8m0, f32: the same model, :mod:`jaxmma.models._scaled`)."""
    return (
        getattr(ins, "opcode", None) in ("mma", "tcgen05.mma")
        and ins.kind == "mxf8f6f4"
        and not ins.sparse
        and ins.k == PRODUCT_MODEL.L
        and ins.stype == "ue8m0"
        and ins.dtype == "f32"
        and ins.ctype == "f32"
    )


def _pow2(e):
    return arith.fixed_pow2(e)


def _operand(fmt: str, bits):
    """Element value (exact float32, 0 for zero/NaN/Inf), ``2**order`` (0 likewise) and
    the engine's code (+-1, 0, +-Inf, NaN)."""
    f = fields(fmt, from_container(bits, fmt))
    op = arith.fixed_operand(f, fmt)
    value = op.sig * _pow2(op.lsb)
    return value, _pow2(op.order), op.code


def _largest_orders(ap, bp, apw, bpw):
    """Per output element of a step: the largest ``order_a + order_b`` of a nonzero
    product, and whether there is one.

    With ``apw``/``bpw`` (``2**(6 * order)``, see :func:`_weights`) it is read off one
    float32 matrix product: ``sum_k 2**(6 * (oa_k + ob_k))`` lies in
    ``[2**(6 m), 32 * 2**(6 m) * (1 + 2**-18)]`` for the largest ``m`` whatever the order
    of addition (all terms and sums are normal numbers), so its exponent ``E`` has
    ``floor(E / 6) = m``. Otherwise (e5m2, whose weights leave float32's range) the same
    product of weights relative to the step's largest order in the row and the column
    (:func:`_relative_orders`), and where that cannot decide, the maximum of the exact
    products ``2**oa * 2**ob``, unrolled along the step.
    """
    if apw is not None:
        return _weighted_max(jnp.matmul(apw, bpw, precision=HIGHEST))

    def products():
        pmax = ap[:, 0, None] * bp[None, 0, :]
        for i in range(1, ap.shape[-1]):
            pmax = jnp.maximum(pmax, ap[:, i, None] * bp[None, i, :])
        return (jax.lax.bitcast_convert_type(pmax, I32) >> 23) - 127, pmax > 0

    wa, ra = _relative_weights(ap, 1, RELATIVE[0])
    wb, rb = _relative_weights(bp, 0, RELATIVE[1])
    m, found = _weighted_max(jnp.matmul(wa, wb, precision=HIGHEST))
    # decided where the largest relative order is at least -RELATIVE[0]: every product
    # left out of the weights is below it. A row or column without a nonzero element has
    # no nonzero product.
    open_ = ~(found & (m >= -RELATIVE[0])) & (ra > arith.FIXED_ABSENT) & (rb > arith.FIXED_ABSENT)
    return jax.lax.cond(jnp.any(open_), products, lambda: (m + ra + rb, found))


def _weighted_max(w):
    """``(floor(E / 6), w > 0)`` for the exponent ``E`` of a float32 sum of weights."""
    E = (jax.lax.bitcast_convert_type(w, I32) >> 23) - 127
    return (E + 6 * 64) // 6 - 64, w > 0


#: relative orders below which A's and B's weights are 0: the smallest weight product,
#: ``2**(6 * (-10 - 11))``, is a normal float32 number
RELATIVE = (10, 11)


def _relative_weights(p, axis: int, low: int):
    """``2**(6 * (order - R))`` for ``p = 2**order`` (0 for zero elements) along ``axis``,
    ``R`` the largest order there (:data:`jaxmma.arith._fixed.ABSENT` if none); 0 where
    ``order - R < -low``. Returns the weights and ``R`` (1 along ``axis``)."""
    order = (jax.lax.bitcast_convert_type(p, I32) >> 23) - 127
    order = jnp.where(p > 0, order, I32(arith.FIXED_ABSENT))
    top = jnp.max(order, axis=axis, keepdims=True)
    rel = order - top
    keep = (p > 0) & (rel >= -low)
    return jnp.where(keep, _pow2(6 * jnp.maximum(rel, -low)), F32(0)), top


def _step(c, a, ap, b, bp, es, code, apw=None, bpw=None):
    """One k-step on a plane: C bits ``[M, n]``, A's values and ``2**order`` ``[M, 32]``,
    B's ``[32, n]``, the scale exponents' sums ``[M, n]`` and the product of codes (or
    None) -> D bits (NaN scales not applied)."""
    model = PRODUCT_MODEL
    L = a.shape[-1]
    col = lambda x, i: x[:, i, None]  # noqa: E731
    row = lambda x, i: x[None, i, :]  # noqa: E731
    cf = fields("f32", c)
    c_finite = (cf.sig != 0) & ~cf.nan & ~cf.inf
    e_zero = model.e_zero("f32")
    e_max = jnp.where(c_finite, arith.element_order(cf, "f32"), I32(e_zero))
    e_prod, any_nonzero = _largest_orders(ap, bp, apw, bpw)
    # zero products count with e_zero, but so does a zero (or NaN, Inf) C, and a nonzero
    # C has order >= -126 (subnormals count at emin) > e_zero: e_max >= e_zero always,
    # and whether a product is zero never matters
    e_max = jnp.maximum(e_max, jnp.where(any_nonzero, e_prod + es, I32(e_zero)))
    unit = e_max - model.F
    s = _pow2(jnp.minimum(es - unit, 127))
    parts = []
    for start in range(0, L, arith.FIXED_GROUP):
        total = None
        for i in range(start, start + arith.FIXED_GROUP):
            t = (col(a, i) * row(b, i) * s).astype(I32)
            total = t if total is None else total + t
        parts.append(total)
    c_mag = jnp.where(c_finite, cf.sig, U32(0)).astype(F32)
    c_sig = jnp.where(cf.sign != 0, -c_mag, c_mag)
    parts.append((c_sig * _pow2(cf.exp - unit)).astype(I32))
    neg, mag, shift = arith.fixed_sum_three(*parts)
    bits = arith.fixed_round_sum(neg, mag, unit + shift, "f32", model)
    c_inf = jnp.where(cf.sign != 0, F32(-jnp.inf), F32(jnp.inf))
    special = jnp.where(cf.nan, F32(jnp.nan), jnp.where(cf.inf, c_inf, F32(0)))
    if code is not None:
        special = special + code
    return arith.special_bits(
        bits, jnp.isnan(special), special == jnp.inf, special == -jnp.inf, "f32"
    )


def _orders(fmt: str) -> tuple[int, int]:
    """The lowest and highest order of a finite nonzero element (subnormals: emin)."""
    f = FORMATS[fmt]
    return f.min_exp + f.mant_bits, int(np.floor(np.log2(f.max)))


def weighted(atype: str, btype: str) -> bool:
    """Whether every ``2**(6 * (order_a + order_b))`` and a sum of 32 of them are normal
    float32 numbers (all element types of the kind but e5m2)."""
    (la, ha), (lb, hb) = _orders(atype), _orders(btype)
    return 6 * (la + lb) >= -126 and 6 * (ha + hb) + 6 <= 127


def _weights(fmt: str, bits):
    """``2**(6 * order)`` of the finite nonzero elements, 0 for the others."""
    op = arith.fixed_operand(fields(fmt, from_container(bits, fmt)), fmt)
    return _pow2(jnp.where(op.order == arith.FIXED_ABSENT, I32(-1000), 6 * op.order))


def _gemm2(ins, A, B, C, SA, SB, tile: int | None):
    """:func:`gemm_bits` for one matrix (no leading dimensions)."""
    M, K = A.shape
    N = B.shape[-1]
    S = K // ins.k
    k = ins.k
    av, ap, acode = _operand(ins.atype, A)
    bv, bp, bcode = _operand(ins.btype, B)
    sa = fields("ue8m0", SA)  # [M, S]
    sb = fields("ue8m0", SB)  # [S, N]
    special = ~jnp.all(jnp.isfinite(acode)) | ~jnp.all(jnp.isfinite(bcode))
    if weighted(ins.atype, ins.btype):
        aw, bw = _weights(ins.atype, A), _weights(ins.btype, B)
    else:
        aw, bw = jnp.zeros((M, 0), F32), jnp.zeros((0, N), F32)

    if tile is None:
        tile = max(TILE_N[0], min(TILE_N[1], TILE // M))
    tile = min(tile, N)
    T = -(-N // tile)
    pad = T * tile - N

    def padn(x):
        return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)]) if pad else x

    def a_steps(x):  # [M, S * k] -> [S, M, k]
        return jnp.moveaxis(x.reshape(M, S, k), 1, 0)

    def b_tiles(x):  # [S * k, N] -> [T, S, k, tile]
        return jnp.moveaxis(padn(x).reshape(S, k, T, tile), 2, 0)

    xs_a = (av, ap, acode, aw)
    xs_a = tuple(a_steps(x) if x.shape[-1] else jnp.zeros((S, M, 0), F32) for x in xs_a)
    xs_a += (jnp.moveaxis(sa.exp, 1, 0)[..., None],)
    eb = jnp.moveaxis(padn(sb.exp).reshape(S, T, tile), 1, 0)[:, :, None, :]  # [T, S, 1, t]
    Ct = jnp.moveaxis(padn(C).reshape(M, T, tile), 1, 0)  # [T, M, tile]

    def one_tile(x):
        c, bv, bp, bcode, bw, eb = x

        def step(c, y):
            (av, ap, acode, aw, ea), (bv, bp, bcode, bw, eb) = y
            code = jax.lax.cond(
                special,
                lambda: jnp.matmul(acode, bcode, precision=HIGHEST),
                lambda: jnp.zeros(c.shape, F32),
            )
            if aw.shape[-1] == 0:
                aw = bw = None
            return _step(c, av, ap, bv, bp, ea + eb, code, aw, bw), None

        return jax.lax.scan(step, c, (xs_a, (bv, bp, bcode, bw, eb)))[0]

    bw = b_tiles(bw) if bw.shape[0] else jnp.zeros((T, S, 0, tile), F32)
    D = jax.lax.map(one_tile, (Ct, b_tiles(bv), b_tiles(bp), b_tiles(bcode), bw, eb))
    D = jnp.moveaxis(D, 0, 1).reshape(M, T * tile)[:, :N]
    nan = jnp.any(sa.nan, axis=-1)[:, None] | jnp.any(sb.nan, axis=0)[None, :]
    nan = nan | ((jax.lax.bitcast_convert_type(C, I32) & 0x7FFFFFFF) > 0x7F800000)
    return jnp.where(nan, U32(0x7FFFFFFF), D)


def gemm_bits(ins, A, B, C, SA, SB, tile: int | None = None):
    """The chain of ``ins`` (dense ``kind::mxf8f6f4``, ue8m0) over K with the bits of
    :func:`jaxmma.models._scaled.mma_bits` chained step by step.

    Args:
      ins: a :func:`supports` instruction.
      A: uint32 8-bit element containers ``[..., M, K]``, K a multiple of ``ins.k``.
      B: uint32 ``[..., K, N]``.
      C: uint32 f32 bits ``[..., M, N]``.
      SA: uint32 ue8m0 bytes ``[..., M, K / 32]``; SB ``[..., K / 32, N]``.
      All with the same leading dimensions.

    Returns:
      uint32 f32 bits ``[..., M, N]``.
    """
    f = lambda A, B, C, SA, SB: _gemm2(ins, A, B, C, SA, SB, tile)  # noqa: E731
    for _ in range(A.ndim - 2):
        f = jax.vmap(f)
    return f(A, B, C, SA, SB)
