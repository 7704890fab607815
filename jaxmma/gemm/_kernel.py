"""A GEMM with library kernel options: input rounding, split-K, fp8 scaling recipes and
the epilogue, around the instruction chain of the executor :mod:`._executors` chooses.

The forward pass works on raw bits: operands -> bits (``input_rounding``), the chain per
slice or per 128-wide group, the f32 reduction, the scales, the epilogue, the output
type. Derivatives are straight-through: the tangent of the exact value
``alpha * (A_s @ B_s) + beta * C``, with ``A_s``, ``B_s`` the values the instruction
reads times their scales (differentiable in the scales too).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp

from .. import util
from ..bits import from_bits, nearest_float32
from ..models import zero_bits
from ..operands import operand_bits, operand_values
from . import _config, _epilogue, _executors, _prepare, _recipes, _split
from ._options import KernelOptions

F32 = jnp.float32
DEFAULT = KernelOptions()


def _bits_forward(cfg, opts, kind, A, B, C, SA, SB, key):
    """The stages on raw bits: operands, the chain on the chosen executor (per split-K
    slice, or per 128-wide group of the block recipe), the reduction, the epilogue."""
    ins = cfg.ins
    Ab, Bb = _prepare.rounded_bits(ins, opts, A, B, key)
    lead = jnp.broadcast_shapes(Ab.shape[:-2], Bb.shape[:-2])
    shape = lead + (Ab.shape[-2], Bb.shape[-1])
    Ab = jnp.broadcast_to(Ab, lead + Ab.shape[-2:])
    Bb = jnp.broadcast_to(Bb, lead + Bb.shape[-2:])
    if opts.lead_first:  # the partial k-tile first, then +0s to a whole tile, then the rest
        Ab, Bb = _split.lead_first(Ab, Bb, opts.k_tile)
    zero = zero_bits(shape)
    run = lambda a, b, c: _executors.gemm_bits(cfg, a, b, c)  # noqa: E731
    in_chain = opts.epilogue is None and C is not None
    C0 = jnp.broadcast_to(operand_bits(ins, ins.ctype, C, "C"), shape) if in_chain else None
    scale = _recipes.scale_bits(kind, SA, SB) if kind in ("tensor", "row") else None
    ex = _executors.choose(cfg, (Ab.shape, Bb.shape))
    if kind == "block" and ex.fuses("block"):
        acc, acc_type = ex.block(cfg, Ab, Bb, SA, SB), "f32"  # one kernel
    elif scale is not None and not opts.splits and ex.fuses(kind):
        acc, acc_type, scale = ex.scaled(cfg, Ab, Bb, C0, scale), "f32", None
    elif kind == "block":
        acc, acc_type = _recipes.block_bits(run, Ab, Bb, zero, SA, SB), "f32"
    elif opts.splits:
        T = opts.k_tile or ins.k
        plan = _split.slices(opts.split_rule, Ab.shape[-1], opts.split_k, T)
        parts = _split.partials(run, Ab, Bb, zero if C0 is None else C0, zero, plan, T)
        acc, acc_type = _split.reduce(parts, opts.split_reduce), "f32"
    else:  # C0 None: +0 (a kernel that reads no C is given none)
        acc, acc_type = run(Ab, Bb, C0), ins.dtype
    out = opts.out_dtype or acc_type
    C32 = None
    if C is not None and opts.epilogue is not None:
        C32 = _epilogue.c_bits(C, out)
    bits, fmt = _epilogue.finish(opts, acc, acc_type, C32, scale)
    return from_bits(fmt, bits)


_forward_jit = util.jit(_bits_forward, static_argnums=(0, 1, 2))


def _gemm(cfg, opts, kind, A, B, C, SA, SB, key):
    """Values in, values out, with the straight-through tangent of
    ``alpha * (A_q * SA) @ (B_q * SB) + beta * C`` (:func:`jaxmma.util.gemm_straight_through`)."""
    ins = cfg.ins
    K, N = jnp.shape(A)[-1], jnp.shape(B)[-1]
    epilogue = opts.epilogue is not None
    exact = util.GemmExact(
        scale_a=None if kind is None else functools.partial(_recipes.factor_a, kind, K=K),
        scale_b=None if kind is None else functools.partial(_recipes.factor_b, kind, K=K, N=N),
        alpha=opts.alpha if epilogue else None,
        beta=opts.beta if epilogue and opts.beta is not None else 1.0,
        by_jvp=True,
    )

    def forward(A, B, C, SA, SB, key):
        return _forward_jit(cfg, opts, kind, A, B, C, SA, SB, key)

    def values(A, B, SA, SB, key):
        Ab, Bb = _prepare.rounded_bits(ins, opts, A, B, key)
        va, vb = operand_values(ins, ins.atype, Ab), operand_values(ins, ins.btype, Bb)
        return va, vb, *(None if s is None else jnp.asarray(s, F32) for s in (SA, SB))

    return util.gemm_straight_through(forward, values, A, B, C, SA, SB, key, exact=exact)


def matmul(cfg, opts, A, B, C, scale_a, scale_b, *, key=None):
    """:func:`jaxmma.matmul` with kernel options (``opts``) or fp8 scales."""
    ins = cfg.ins
    _config.refuse_combinations(cfg, opts, scaled=scale_a is not None or scale_b is not None)
    opts = DEFAULT if opts is None else opts
    _prepare.check_convert_inputs(opts, A, B)
    # fp8 scales are float32 factors: doubles rounded to nearest once, x64 on or off
    scale_a, scale_b = nearest_float32(scale_a), nearest_float32(scale_b)
    A, B = jnp.asarray(A), jnp.asarray(B)
    _prepare.check_shapes(ins, A, B, None if C is None else jnp.asarray(C))
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    lead = tuple(jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2]))
    kind = _recipes.recipe(scale_a, scale_b, M, K, N, lead)
    _config.refuse_for_arrays(cfg, opts, kind, C, K)
    C = _prepare.epilogue_c(ins, opts, kind, C)
    return _gemm(cfg, opts, kind, A, B, C, scale_a, scale_b, _prepare.check_key(opts, key))
