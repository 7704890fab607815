"""The instruction chained over a GEMM's k-steps: one :func:`._models.mma_bits` per step.

A GEMM tile starts from C and runs the instruction once per k-step, in increasing k, each
step taking the D of the step before as its C. Each step is one model call on the whole
``[M, k] x [k, N]`` slab (the models are elementwise over the output); the steps run in
a ``lax.scan``, so the program and its compile time do not grow with K. Where the D and
C types differ (``wmma`` .f16/.f32 mixes, m8n8k4 .f32.f16.f16.f16), D becomes the next
step's C by a conversion rounded to nearest (``cvt.rn``).

This is the reference chain: the whole-GEMM models (``_group_gemm``, ``_product_gemm``)
and every GEMM executor give its bits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import arith
from . import _models


def chain_bits(ins, A, B, C, *, scales=None, sparse_idx=None, live=None, from_d=False):
    """Raw-bit D of ``ins`` chained over the k-steps on the leading axis of A and B.

    ``A [S, ..., M, k]`` (sparse forms: the compressed ``[S, ..., M, k/2]``, with
    ``sparse_idx`` of that shape), ``B [S, ..., k, N]``, ``scales`` ``(SA [S, ..., M,
    blocks], SB [S, ..., blocks, N])`` for block-scaled forms; ``C [..., M, N]`` the
    first step's C bits (the C type). ``from_d``: C is D bits (the D type), which the
    first step takes converted, as every later step does: a chain that starts again from
    +0 D. ``live`` (with ``from_d``): bool ``[S]``; a step where it is False leaves D as
    it was (the missing steps of a short group run in the same loop)."""
    if live is not None and not from_d:
        raise ValueError("live: a chain with masked steps starts from D bits (from_d=True)")
    xs = {"a": A, "b": B}
    if scales is not None:
        xs["sa"], xs["sb"] = scales
    if sparse_idx is not None:
        xs["idx"] = sparse_idx

    def step(c, x):
        sc = (x["sa"], x["sb"]) if "sa" in x else None
        d = _models.mma_bits(ins, x["a"], x["b"], c, scales=sc, sparse_idx=x.get("idx"))
        return d, None

    def converted(acc, x):  # acc: D bits; the step's C is acc in the C type
        return step(arith.convert(acc, ins.dtype, ins.ctype), x)

    after_d = step if ins.ctype == ins.dtype else converted  # a step whose C is a D
    if live is not None:

        def masked(acc, x):
            d, _ = after_d(acc, x[0])
            return jnp.where(x[1], d, acc), None

        return jax.lax.scan(masked, C, (xs, live))[0]
    if from_d or ins.ctype == ins.dtype:
        return jax.lax.scan(after_d, C, xs)[0]
    d, _ = step(C, jax.tree.map(lambda x: x[0], xs))  # the first step from C in the C type
    return jax.lax.scan(converted, d, jax.tree.map(lambda x: x[1:], xs))[0]
