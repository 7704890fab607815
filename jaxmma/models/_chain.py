"""The block chain along k: one entry to either arithmetic engine.

:func:`chain` computes a chain of fused blocks (C first) on the fixed-width engine
(:mod:`jaxmma.arith._fixed`) where it covers the model, and on the general multi-limb
engine (:mod:`jaxmma.arith._numerics`) otherwise; both give the same bits.
"""

from __future__ import annotations

from .. import arith


def sig_bits(ins) -> int:
    """Significand bits of the wider input element type (hidden bit included)."""
    return max(arith.man_bits(ins.atype), arith.man_bits(ins.btype)) + 1


def chain(ins, fa, fb, C, ctype, bm, b_rows, order_fmt=None, ks=None, c_shift=0):
    """The block chain over the products of k in ``ks`` (all by default), C first
    (times ``2**-c_shift`` exactly, ``tcgen05.mma``'s scale-input-d).

    The fixed-width engine (:mod:`jaxmma.arith._fixed`) computes it where it covers the model; the
    general multi-limb engine otherwise. Both give the same bits.
    """
    if not b_rows and arith.fixed_supports(bm, ins.dtype, sig_bits(ins)):
        a = arith.fixed_operand(fa, ins.atype, order_fmt)
        b = arith.fixed_operand(fb, ins.btype, order_fmt)
        if ks is not None:
            a, b = arith.fixed_cols(a, ks), arith.fixed_rows(b, ks)
        return arith.fixed_chain(a, b, C, ctype, ins.dtype, bm, c_shift)
    prod = arith.product_terms(fa, fb, ins.atype, ins.btype, order_fmt=order_fmt, b_rows=b_rows)
    if ks is not None:
        prod = arith.take(prod, ks)
    return arith.block_chain(prod, C, ctype, ins.dtype, bm, c_shift=c_shift)
