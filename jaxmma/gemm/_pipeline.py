"""The GEMM pipeline: one forward and one derivative for every ``matmul``.

``matmul`` and ``dot_general`` (:mod:`._gemm`) validate the configuration
(:mod:`._config`) and take the arrays in (:func:`._prepare.inputs`); everything after
that is here, the same for every configuration:

1. plan (on the host, :func:`matmul`): the combinations refused (the one rule,
   :func:`._config.refuse_combinations` and :func:`._config.refuse_for_arrays`), the
   operands checked (and quantized for block-scaled forms: :func:`._prepare.checked_operands`),
   the fp8 scale recipe their shapes name (:mod:`._recipes`);
2. the forward on raw bits (:func:`forward`, compiled once per configuration and shapes):
   *prepare* the bits the instruction reads (:func:`._prepare.operands`: input rounding,
   quantized elements and block scales), *execute* the chain on the executor
   :func:`._executors.choose` picks (once, or per batch of split-K slices or 128-wide
   block groups: :func:`_execute`), *finish* on raw bits (:func:`_finish`: the
   reduction's output, fp8 scales, alpha / beta, C, NVFP4's per-tensor scales, the
   output type) and decode;
3. the derivative around it (:func:`_differentiable`): the one straight-through rule,
   :func:`jaxmma.util.gemm_straight_through`, with the exact value of the configuration
   (:func:`_exact`), or the emulated gradient GEMMs of ``grad_instruction``
   (:func:`jaxmma.util.with_gemm_gradients`).

Kernel options and fp8 scales are optional stages of the one forward, decided by their
values alone: every GEMM has its operands' bits broadcast over the batch, C's bits start
the chain unless an epilogue (or NVFP4's per-tensor scales) takes C after it, and the
accumulator goes through the epilogue, which is empty for the default options. ``opts``
None (no option given) and the defaults compute the same forward; they differ only in
the derivative, whose two exact values keep the bits each has always had (the sign of a
zero tangent, the order of an eager ``jax.jvp``'s sums: :class:`jaxmma.util.GemmExact`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from .. import util
from ..bits import from_bits, nearest_float32
from ..models import zero_bits
from ..operands import dequantize
from . import _config, _epilogue, _executors, _prepare, _recipes, _split
from ._executor import Executor
from ._options import KernelOptions

F32 = jnp.float32
DEFAULT = KernelOptions()
#: the exact value of the GEMM without kernel options or scales: ``A @ B + C`` from +0
PLAIN = util.GemmExact(from_zero=True)


def forward(cfg, opts, kind, A, B, C, SA, SB, key, q):
    """Values in, values out, on raw bits in between: prepare, execute, finish.

    ``opts``: the kernel options (None: their defaults); ``kind``: the fp8 scale
    recipe (None: none) of ``SA`` / ``SB``; ``key``: stochastic rounding's key; ``q``:
    the quantized A and B of a block-scaled form (None otherwise)."""
    ins = cfg.ins
    opts = DEFAULT if opts is None else opts
    # A and B from here on: the raw bits the instruction reads
    A, B, scales = _prepare.operands(cfg, opts, A, B, q, key)
    alpha = _prepare.global_scale(q)  # NVFP4: the per-tensor scales multiply the result
    # the batch broadcast (the slices and groups cut the operands; the executors broadcast
    # the same way); the partial k-tile first for CUTLASS's one slice, then +0s, the rest
    lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    shape = lead + (A.shape[-2], B.shape[-1])
    A = jnp.broadcast_to(A, lead + A.shape[-2:])
    B = jnp.broadcast_to(B, lead + B.shape[-2:])
    if opts.lead_first:
        A, B = _split.lead_first(A, B, opts.k_tile)
    zero = zero_bits(shape)
    # C starts the chain, unless an epilogue or NVFP4's per-tensor scales take it after
    in_chain = C is not None and opts.epilogue is None and alpha is None
    C0 = jnp.broadcast_to(_prepare.c_bits(ins, C), shape) if in_chain else None
    acc, acc_type, scale = _execute(cfg, opts, kind, A, B, C0, SA, SB, scales, zero)
    return _finish(ins, opts, acc, acc_type, C, scale, alpha)


def _execute(cfg, opts, kind, A, B, C0, SA, SB, scales, zero):
    """The chain on the executor :func:`._executors.choose` picks: ``(acc, acc_type,
    scale)``, the accumulator's bits and format, and the fp8 scale factors still to
    multiply it (None where none are, or the executor fused them). Split-K and the block
    recipe cut K into batches of chains (:func:`_runs`), which the executor runs, and
    combine their D."""
    ins = cfg.ins
    scale = _recipes.scale_bits(kind, SA, SB) if kind in ("tensor", "row") else None
    ex: Executor | None = None if kind is None else _executors.choose(cfg, (A.shape, B.shape))
    if kind == "block" and ex.fuses("block"):
        return ex.block(cfg, A, B, SA, SB), "f32", None  # one kernel
    if scale is not None and not opts.splits and ex.fuses(kind):
        return ex.scaled(cfg, A, B, C0, scale), "f32", None
    runs = _runs(cfg, opts, kind, A, B, C0, zero)  # each run's A, B and C, as bits
    D = [_executors.gemm_bits(cfg, A, B, C, scales=scales) for A, B, C in runs]
    if kind == "block":  # the groups' chains, scaled and summed
        return _recipes.block_total(D[0], SA, SB), "f32", None
    if opts.splits:  # the slices' f32 partials, in order, reduced
        parts = [d[s] for d in D for s in range(d.shape[0])]
        return _split.reduce(parts, opts.split_reduce), "f32", scale
    return D[0], ins.dtype, scale  # fp8 scales not fused: multiplied by the epilogue


def _runs(cfg, opts, kind, A, B, C0, zero) -> list:
    """The chains :func:`_execute` runs, ``[(a, b, c), ...]``: per 128-wide K group of
    the block recipe a chain from +0, all in one batch (:func:`._recipes.block_groups`);
    per split-K slice a chain, slice 0 from C (:func:`._split.batches`); otherwise the
    one chain from C (None: +0)."""
    if kind == "block":
        return [_recipes.block_groups(A, B, zero)]
    if opts.splits:
        T = opts.k_tile or cfg.ins.k
        plan = _split.slices(opts.split_rule, A.shape[-1], opts.split_k, T)
        return list(_split.batches(A, B, zero if C0 is None else C0, zero, plan, T))
    return [(A, B, C0)]


def _finish(ins, opts, acc, acc_type, C, scale, alpha):
    """The accumulator's bits to the output values: NVFP4's per-tensor scales (``alpha``)
    and C after them, or the epilogue (:func:`._epilogue.finish`: scales, alpha / beta,
    C, the output type; nothing at all without options)."""
    if alpha is not None:  # block-scaled forms take no kernel options (the one rule)
        return _epilogue.global_scaled(acc, alpha, None if C is None else _prepare.c_bits(ins, C))
    out = opts.out_dtype or acc_type
    C32 = None
    if C is not None and opts.epilogue is not None:
        C32 = _epilogue.c_bits(C, out)
    bits, fmt = _epilogue.finish(opts, acc, acc_type, C32, scale)
    return from_bits(fmt, bits)


@functools.partial(util.jit, static_argnums=(0, 1, 2))
def _forward_jit(cfg, opts, kind, A, B, C, SA, SB, key, q):
    """:func:`forward`, compiled once per configuration and shapes; called eagerly (and
    by the derivative rules under an eager ``jax.grad``) it reuses that compilation."""
    return forward(cfg, opts, kind, A, B, C, SA, SB, key, q)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _straight_through(cfg, opts, kind, A, B, C, SA, SB, aux):
    """:func:`forward` with the one straight-through tangent (:func:`_tangent`);
    ``aux``: the quantized operands and the key, which take no tangent."""
    return _forward_jit(cfg, opts, kind, A, B, C, SA, SB, aux[1], aux[0])


# symbolic zeros: an operand without a tangent adds no term (as in
# :func:`jaxmma.util.gemm_straight_through`)
@functools.partial(_straight_through.defjvp, symbolic_zeros=True)
def _tangent(cfg, opts, kind, primals, tangents):
    """The tangent of the exact value (:func:`_exact`) at the values the instruction
    reads (:func:`_values`): :func:`jaxmma.util.gemm_tangent`, the rule of every GEMM."""
    out = _straight_through(cfg, opts, kind, *primals)
    A, B = primals[:2]

    def values(A, B, SA, SB, aux):
        return _values(cfg, opts, A, B, SA, SB, aux)

    exact = _exact(cfg, opts, kind, A, B)
    t = util.gemm_tangent(values, exact, out, primals, tangents)
    g = _global_scale_tangent(cfg, opts, exact, primals, tangents)
    return out, t if g is None else t + g.astype(t.dtype)


def _global_scale_tangent(cfg, opts, exact, primals, tangents):
    """The tangent of the per-tensor (NVFP4) global scales of operands given as
    ``Quantized``, which :func:`jaxmma.util.gemm_tangent` does not see (they ride in
    ``aux``): ``(dequantized A with g = 1) * dg_a @ B + A @ ...``, as :func:`dequantize`
    differentiates them; None where none has a tangent."""
    A, B, aux = primals[0], primals[1], primals[5]
    q, dq = aux[0], tangents[5]
    if q is None or isinstance(dq, jax.custom_derivatives.SymbolicZero):
        return None
    dq = dq[0]
    if isinstance(dq, jax.custom_derivatives.SymbolicZero):
        return None
    va, vb = _prepare.operand_values(cfg, opts, A, B, q, aux[1])
    out = None
    for i, (qi, di, given) in enumerate(zip(q, dq, (A, B), strict=True)):
        dg = getattr(di, "global_scale", None)
        if given is not None or qi.global_scale is None or not util.has_tangent(dg):
            continue  # a float operand: its tangent is the straight-through one
        unit = dequantize(dataclasses.replace(qi, global_scale=jnp.ones_like(qi.global_scale)))
        dg = jnp.asarray(dg, F32)
        dv = unit * dg.reshape(dg.shape + (1,) * (unit.ndim - dg.ndim))  # vmap: per batch
        term = exact.product(dv, vb) if i == 0 else exact.product(va, dv)
        out = term if out is None else out + term
    return out


def _values(cfg, opts, A, B, SA, SB, aux):
    """What the instruction reads, float32: A's and B's values and the scales."""
    va, vb = _prepare.operand_values(cfg, opts, A, B, *aux)
    return va, vb, *(None if s is None else jnp.asarray(s, F32) for s in (SA, SB))


def _exact(cfg, opts, kind, A, B):
    """The exact value whose tangent is the derivative: ``A @ B + C`` (:data:`PLAIN`)
    without options; with them ``alpha * (A * SA) @ (B * SB) + beta * C``, the recipe's
    scales expanded to A's and B's shapes."""
    if opts is None:
        return PLAIN
    K, N = jnp.shape(A)[-1], jnp.shape(B)[-1]
    epilogue = opts.epilogue is not None
    return util.GemmExact(
        scale_a=None if kind is None else functools.partial(_recipes.factor_a, kind, K=K),
        scale_b=None if kind is None else functools.partial(_recipes.factor_b, kind, K=K, N=N),
        alpha=opts.alpha if epilogue else None,
        beta=opts.beta if epilogue and opts.beta is not None else 1.0,
        by_jvp=True,
    )


def _differentiable(cfg, opts, kind, A, B, C, SA, SB, key, q, grad_matmul):
    """:func:`forward` with its derivative: the gradient GEMMs of ``grad_instruction``
    (:func:`_with_gradients`), or straight-through (:func:`_straight_through`)."""
    aux = (q, key)
    if cfg.grad_ins is not None:
        return _with_gradients(cfg, opts, kind, A, B, C, aux, grad_matmul)
    return _straight_through(cfg, opts, kind, A, B, C, SA, SB, aux)


def _with_gradients(cfg, opts, kind, A, B, C, aux, grad_matmul):
    """:func:`forward` whose reverse pass runs the gradient GEMMs of ``grad_instruction``
    (``grad_matmul(x, y, instruction=...)``: the public ``matmul``); kernel options and
    scales are refused with them (the one rule)."""

    def grad(ins):
        return None if ins is None else functools.partial(grad_matmul, instruction=ins)

    named = (("dgrad_instruction", cfg.dgrad_ins), ("wgrad_instruction", cfg.wgrad_ins))
    option = "/".join(n for n, i in named if i is not None) + " (or grad_instruction)"
    return util.with_gemm_gradients(
        functools.partial(_unscaled_forward, cfg, opts, kind),
        functools.partial(_unscaled_values, cfg, opts),
        grad(cfg.dgrad_ins), grad(cfg.wgrad_ins), A, B, C, aux, option=option,
    )  # fmt: skip


def _unscaled_forward(cfg, opts, kind, A, B, C, aux):
    return _forward_jit(cfg, opts, kind, A, B, C, None, None, aux[1], aux[0])


def _unscaled_values(cfg, opts, A, B, aux):
    return _values(cfg, opts, A, B, None, None, aux)[:2]


def matmul(
    cfg, opts, A, B, C, scale_a=None, scale_b=None, *, key=None, quantize=None, check=None,
    grad_matmul=None,
):  # fmt: skip
    """:func:`jaxmma.matmul` after its configuration was validated (``cfg``, ``opts``:
    the kernel options, None where all are at their defaults) and its arrays taken in
    (:func:`._prepare.inputs`; ``key`` checked): the plan on the host, then the forward
    with its derivative."""
    ins = cfg.ins
    scaled = scale_a is not None or scale_b is not None
    _config.refuse_combinations(cfg, opts, scaled=scaled)
    if opts is None and scaled:
        opts = DEFAULT  # the scales' stages, with every option at its default
    _prepare.check_convert_inputs(opts, A, B)
    # fp8 scales are float32 factors: doubles rounded to nearest once, x64 on or off
    scale_a, scale_b = nearest_float32(scale_a), nearest_float32(scale_b)
    A, B, q = _prepare.checked_operands(ins, A, B, C, quantize=quantize, check=check)
    kind = None
    if scaled:
        M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
        lead = tuple(jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2]))
        kind = _recipes.recipe(scale_a, scale_b, M, K, N, lead)
    if opts is not None:
        _config.refuse_for_arrays(cfg, opts, kind, C, A.shape[-1])
        C = _prepare.epilogue_c(ins, opts, kind, C)
    return _differentiable(cfg, opts, kind, A, B, C, scale_a, scale_b, key, q, grad_matmul)
