"""GEMM epilogues: how the accumulator, C, alpha/beta and scales reach the output type.

Every step is one IEEE f32 operation on raw bits (:mod:`jaxmma.arith._ieee`,
:func:`jaxmma.arith._numerics.ieee_add`) and every conversion one round to nearest even,
so the bits do not depend on the host. With ``acc`` the chain (after the split-K
reduction), ``s`` the product of the fp8 scales, ``out`` the conversion to the output
type, and each ``*`` / ``+`` one f32 operation:

* ``epilogue=None``: C was the chain's start; ``D = out(acc)`` (scaled first, see
  :mod:`._recipes`). A hand-written ``mma.sync`` loop, ``torch.mm``.
* ``epilogue="f32"``: ``D = out(fma(alpha, acc, beta * C))`` (``acc + beta * C`` without
  alpha): cuBLAS ``addmm`` with an f32 C or with alpha/beta, any split-K reduce kernel, a
  linear layer's bias.
* ``epilogue="rounded"``: ``D = out(f32(out(alpha * acc)) + beta * C)``: cuBLAS ``addmm``
  with a bf16/f16 C and no split-K (the result rounded twice).

An absent alpha or beta is no operation (not a multiply by 1, which would be exact too).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith
from ..bits import FORMATS, encode, from_bits, prepare


def f32_bits(x: float):
    return jnp.uint32(np.float32(x).view(np.uint32))


def to_f32(bits, fmt: str):
    return bits if fmt == "f32" else arith.convert(bits, fmt, "f32")


def to_out(bits_f32, out: str):
    return bits_f32 if out == "f32" else arith.convert(bits_f32, "f32", out)


def host_c(C, out: str):
    """An epilogue's C of host doubles, before the program (docs/dtypes.md): what rounds
    once into the output type ``out`` in :func:`c_bits`, x64 on or off."""
    return prepare(C, FORMATS[out], "rn", False, "C")


def c_bits(C, out: str, name: str = "C"):
    """C as f32 bits, after rounding it to the output type as the library stores it (a
    C already in the output type, or unsigned raw bits of it, is taken as it is)."""
    C = jnp.asarray(C)
    if C.dtype.type in (np.uint16, np.uint32):
        return to_f32(C.astype(jnp.uint32), out)
    if not jnp.issubdtype(C.dtype, jnp.floating):
        raise TypeError(f"{name}: expected a float array (the epilogue's addend), got {C.dtype}")
    if out == "f32" and C.dtype == jnp.float32:
        return jax.lax.bitcast_convert_type(C, jnp.uint32)
    # one rounding into the output type, from the value itself (a double too, x64 on)
    x = C if C.dtype in (jnp.float32, jnp.float64) else C.astype(jnp.float32)
    return to_f32(encode(out, x, rounding="rn"), out)


def finish(opts, acc, acc_type: str, C32=None, scale=None):
    """Output bits and their format from the accumulator ``acc`` (``acc_type`` bits);
    ``scale``: f32 factors (bits) that multiply it first, one FMUL each, in order."""
    out = opts.out_dtype or acc_type
    if opts.epilogue is None and scale is None:
        return (acc, acc_type) if out == acc_type else (to_out(to_f32(acc, acc_type), out), out)
    t = to_f32(acc, acc_type)
    for factor in scale or ():
        t = arith.fmul_f32(t, factor)
    alpha = None if opts.alpha is None else f32_bits(opts.alpha)
    if opts.epilogue == "rounded":
        if alpha is not None:
            t = arith.fmul_f32(t, alpha)
        t, alpha = to_f32(to_out(t, out), out), None
    if C32 is not None and opts.epilogue is not None:
        c = C32 if opts.beta is None else arith.fmul_f32(C32, f32_bits(opts.beta))
        shape = jnp.broadcast_shapes(t.shape, c.shape)
        t, c = jnp.broadcast_to(t, shape), jnp.broadcast_to(c, shape)
        if alpha is None:
            t = arith.ieee_add(t, c, "f32")
        else:  # cuBLAS: beta * C first, then one fma with alpha
            t = arith.ffma_f32(alpha, t, c)
    elif alpha is not None:
        t = arith.fmul_f32(t, alpha)
    return to_out(t, out), out


def global_scaled(D, alpha, C=None):
    """NVFP4's epilogue: the chain's f32 bits ``D`` (from +0) times ``alpha`` (the bits
    of the per-tensor scales' float32 product) with one IEEE f32 multiply, then C's f32
    bits (or None) added with one IEEE f32 add; float32 values. Both in integer
    arithmetic: subnormals are kept (and a negative product that underflows is -0) on
    every backend, where XLA:CPU's own float multiply flushes them."""
    D = arith.fmul_f32(D, alpha)
    if C is not None:
        D = arith.ieee_add(D, jnp.broadcast_to(C, D.shape), "f32")
    return from_bits("f32", D)
