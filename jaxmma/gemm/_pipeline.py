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

import functools

import jax.numpy as jnp

from .. import util
from ..bits import from_bits, nearest_float32
from ..models import zero_bits
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
    Ab, Bb, scales = _prepare.operands(cfg, opts, A, B, q, key)
    alpha = _prepare.global_scale(q)  # NVFP4: the per-tensor scales multiply the result
    # the batch broadcast (the slices and groups cut the operands; the executors broadcast
    # the same way); the partial k-tile first for CUTLASS's one slice, then +0s, the rest
    lead = jnp.broadcast_shapes(Ab.shape[:-2], Bb.shape[:-2])
    shape = lead + (Ab.shape[-2], Bb.shape[-1])
    Ab = jnp.broadcast_to(Ab, lead + Ab.shape[-2:])
    Bb = jnp.broadcast_to(Bb, lead + Bb.shape[-2:])
    if opts.lead_first:
        Ab, Bb = _split.lead_first(Ab, Bb, opts.k_tile)
    zero = zero_bits(shape)
    # C starts the chain, unless an epilogue or NVFP4's per-tensor scales take it after
    in_chain = C is not None and opts.epilogue is None and alpha is None
    C0 = jnp.broadcast_to(_prepare.c_bits(ins, C), shape) if in_chain else None
    acc, acc_type, scale = _execute(cfg, opts, kind, Ab, Bb, C0, SA, SB, scales, zero)
    return _finish(ins, opts, acc, acc_type, C, scale, alpha)


def _execute(cfg, opts, kind, Ab, Bb, C0, SA, SB, scales, zero):
    """The chain on the executor :func:`._executors.choose` picks: ``(acc, acc_type,
    scale)``, the accumulator's bits and format, and the fp8 scale factors still to
    multiply it (None where none are, or the executor fused them). Split-K and the block
    recipe cut K into batches of chains, which the executor runs, and combine their D."""
    ins = cfg.ins
    scale = _recipes.scale_bits(kind, SA, SB) if kind in ("tensor", "row") else None
    if kind is None and not opts.splits:  # one chain (C0 None: +0)
        return _executors.gemm_bits(cfg, Ab, Bb, C0, scales=scales), ins.dtype, None
    ex: Executor = _executors.choose(cfg, (Ab.shape, Bb.shape))
    if kind == "block" and ex.fuses("block"):
        return ex.block(cfg, Ab, Bb, SA, SB), "f32", None  # one kernel
    if scale is not None and not opts.splits and ex.fuses(kind):
        return ex.scaled(cfg, Ab, Bb, C0, scale), "f32", None
    if kind == "block":  # per 128-wide K group a chain from +0, all in one batch
        a, b, c = _recipes.block_groups(Ab, Bb, zero)
        P = _executors.gemm_bits(cfg, a, b, c)
        return _recipes.block_total(P, SA, SB), "f32", None
    if opts.splits:  # per slice a chain (slice 0 from C), the f32 partials reduced
        T = opts.k_tile or ins.k
        plan = _split.slices(opts.split_rule, Ab.shape[-1], opts.split_k, T)
        parts = []
        for a, b, c in _split.batches(Ab, Bb, zero if C0 is None else C0, zero, plan, T):
            D = _executors.gemm_bits(cfg, a, b, c)
            parts += [D[s] for s in range(D.shape[0])]
        return _split.reduce(parts, opts.split_reduce), "f32", scale
    return _executors.gemm_bits(cfg, Ab, Bb, C0), ins.dtype, scale  # scales not fused


def _finish(ins, opts, acc, acc_type, C, scale, alpha):
    """The accumulator's bits to the output values: NVFP4's per-tensor scales (``alpha``)
    and C after them, or the epilogue (:func:`._epilogue.finish`: scales, alpha / beta,
    C, the output type; nothing at all without options)."""
    if alpha is not None:  # block-scaled forms take no kernel options (the one rule)
        if C is not None:
            return _epilogue.global_scaled(acc, alpha, _prepare.c_bits(ins, C))
        return from_bits(ins.dtype, acc) * alpha
    out = opts.out_dtype or acc_type
    C32 = None
    if C is not None and opts.epilogue is not None:
        C32 = _epilogue.c_bits(C, out)
    bits, fmt = _epilogue.finish(opts, acc, acc_type, C32, scale)
    return from_bits(fmt, bits)


#: the emulation itself, compiled once per configuration and shapes; called eagerly (and
#: by the derivative rules under an eager ``jax.grad``) it reuses that compilation
_forward_jit = util.jit(
    lambda cfg, opts, kind, *args: forward(cfg, opts, kind, *args), static_argnums=(0, 1, 2)
)


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
    """:func:`forward` with its derivative: straight-through, or the gradient GEMMs of
    ``grad_instruction`` (``grad_matmul(x, y, instruction=...)``: the public ``matmul``)."""

    def fwd(A, B, C, SA, SB, aux):
        return _forward_jit(cfg, opts, kind, A, B, C, SA, SB, aux[1], aux[0])

    def values(A, B, SA, SB, aux):
        va, vb = _prepare.operand_values(cfg, opts, A, B, *aux)
        return va, vb, *(None if s is None else jnp.asarray(s, F32) for s in (SA, SB))

    aux = (q, key)
    if cfg.grad_ins is None:
        exact = _exact(cfg, opts, kind, A, B)
        return util.gemm_straight_through(fwd, values, A, B, C, SA, SB, aux, exact=exact)

    # the gradient GEMMs (kernel options and scales are refused with them: the one rule)
    def grad(ins):
        return None if ins is None else functools.partial(grad_matmul, instruction=ins)

    named = (("dgrad_instruction", cfg.dgrad_ins), ("wgrad_instruction", cfg.wgrad_ins))
    option = "/".join(n for n, i in named if i is not None) + " (or grad_instruction)"
    return util.with_gemm_gradients(
        lambda A, B, C, aux: fwd(A, B, C, None, None, aux),
        lambda A, B, aux: values(A, B, None, None, aux)[:2],
        grad(cfg.dgrad_ins), grad(cfg.wgrad_ins), A, B, C, aux, option=option,
    )  # fmt: skip


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
