"""The block chain along k: one entry to either arithmetic engine.

:func:`chain` computes a chain of fused blocks (C first) on the fixed-width engine
(:mod:`jaxmma.arith._fixed`) where it covers the model, and on the general multi-limb
engine (:mod:`jaxmma.arith._numerics`) otherwise; both give the same bits.
"""

from __future__ import annotations

from ..arith import _fixed, _numerics


def sig_bits(ins) -> int:
    """Significand bits of the wider input element type (hidden bit included)."""
    return max(_numerics.man_bits(ins.atype), _numerics.man_bits(ins.btype)) + 1


def chain(ins, fa, fb, C, ctype, bm, b_rows, order_fmt=None, ks=None, c_shift=0):
    """The block chain over the products of k in ``ks`` (all by default), C first
    (times ``2**-c_shift`` exactly, ``tcgen05.mma``'s scale-input-d).

    The fixed-width engine (:mod:`jaxmma.arith._fixed`) computes it where it covers the model; the
    general multi-limb engine otherwise. Both give the same bits.
    """
    if not b_rows and _fixed.supports(bm, ins.dtype, sig_bits(ins)):
        a = _fixed.operand(fa, ins.atype, order_fmt)
        b = _fixed.operand(fb, ins.btype, order_fmt)
        if ks is not None:
            a, b = _fixed.cols(a, ks), _fixed.rows(b, ks)
        return _fixed.chain(a, b, C, ctype, ins.dtype, bm, c_shift)
    prod = _numerics.product_terms(fa, fb, ins.atype, ins.btype, order_fmt=order_fmt, b_rows=b_rows)
    if ks is not None:
        prod = _numerics.take(prod, ks)
    return _numerics.block_chain(prod, C, ctype, ins.dtype, bm, c_shift=c_shift)
