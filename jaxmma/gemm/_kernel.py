"""A GEMM with library kernel options: input rounding, split-K, fp8 scaling recipes and
the epilogue, around the instruction chain of :mod:`._gemm` (passed in as ``chain``).

The forward pass works on raw bits: operands -> bits (``input_rounding``), the chain per
slice or per 128-wide group, the f32 reduction, the scales, the epilogue, the output
type. Derivatives are straight-through: the tangent of the exact value
``alpha * (A_s @ B_s) + beta * C``, with ``A_s``, ``B_s`` the values the instruction
reads times their scales (differentiable in the scales too).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..bits import _doubles, _formats, _packing, _values
from ..models import _models
from ..operands import _operands
from ..util import _ste, _xla
from . import _epilogue, _native, _recipes, _split
from ._options import KernelOptions

F32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST
DEFAULT = KernelOptions()
FP8 = (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))


def random_bits(key, which: int, shape):
    """uint32 random bits of operand ``which`` (0: A, 1: B) for stochastic rounding:
    ``jax.random.bits(jax.random.split(key)[which], shape, uint32)``."""
    return jax.random.bits(jax.random.split(key)[which], shape, jnp.uint32)


def operand_bits(ins, fmt: str, x, name: str, rounding, rbits=None):
    """:func:`jaxmma.operands._operands.to_bits`, with float inputs rounded to ``fmt`` by
    ``rounding`` (``.tf32`` from float32 included; inputs already in an element dtype
    other than float32 are taken as they are)."""
    x = jnp.asarray(x)
    if rounding is None or not jnp.issubdtype(x.dtype, jnp.floating):
        return _operands.to_bits(ins, fmt, x, name)
    want = _operands.element_dtype(fmt)
    if fmt != "tf32" and want is not None and x.dtype == jnp.dtype(want):
        return _operands.to_bits(ins, fmt, x, name)
    if x.dtype.itemsize < 2:
        x = x.astype(F32)
    rb = None if rounding != "stochastic" else jnp.broadcast_to(rbits, x.shape)
    sat = fmt in _operands.SATURATE
    bits = _formats.encode(fmt, x, rounding=rounding, saturate=sat, random_bits=rb)
    return _packing.to_container(bits, fmt) if ins.kind == "f8f6f4" else bits


def _random(opts, key, A, B):
    if opts.input_rounding != "stochastic":
        return None, None
    return random_bits(key, 0, jnp.shape(A)), random_bits(key, 1, jnp.shape(B))


def _bits_forward(cfg, opts, kind, chain, A, B, C, SA, SB, key):
    ins = cfg.ins
    ra, rb = _random(opts, key, A, B)
    Ab = operand_bits(ins, ins.atype, A, "A", opts.input_rounding, ra)
    Bb = operand_bits(ins, ins.btype, B, "B", opts.input_rounding, rb)
    lead = jnp.broadcast_shapes(Ab.shape[:-2], Bb.shape[:-2])
    shape = lead + (Ab.shape[-2], Bb.shape[-1])
    Ab = jnp.broadcast_to(Ab, lead + Ab.shape[-2:])
    Bb = jnp.broadcast_to(Bb, lead + Bb.shape[-2:])
    if opts.lead_first:  # the partial k-tile first, then +0s to a whole tile, then the rest
        Ab, Bb = _split.lead_first(Ab, Bb, opts.k_tile)
    zero = _models._zeros(shape)
    run = lambda a, b, c: chain(cfg, a, b, c)  # noqa: E731
    in_chain = opts.epilogue is None and C is not None
    C0 = _operands.to_bits(ins, ins.ctype, C, "C") if in_chain else zero
    C0 = jnp.broadcast_to(C0, shape)
    scale = _recipes.scale_bits(kind, SA, SB) if kind in ("tensor", "row") else None
    native = cfg.native and 0 not in shape + Ab.shape[-1:]
    if kind == "block" and native:
        acc, acc_type = _native.block_bits(cfg, Ab, Bb, SA, SB), "f32"  # one kernel
    elif native and scale is not None and not opts.splits and _native.fuses_scales():
        c = C0 if in_chain else None  # +0: the kernel reads no C
        acc, acc_type, scale = _native.scaled_bits(cfg, Ab, Bb, c, scale), "f32", None
    elif native and not opts.splits and not in_chain:
        acc, acc_type = _native.gemm_bits(cfg, Ab, Bb, None), ins.dtype  # reads no C
    elif kind == "block":
        acc, acc_type = _recipes.block_bits(run, Ab, Bb, zero, SA, SB), "f32"
    elif opts.splits:
        T = opts.k_tile or ins.k
        plan = _split.slices(opts.split_rule, Ab.shape[-1], opts.split_k, T)
        parts = _split.partials(run, Ab, Bb, C0, zero, plan, T)
        acc, acc_type = _split.reduce(parts, opts.split_reduce), "f32"
    else:
        acc, acc_type = run(Ab, Bb, C0), ins.dtype
    out = opts.out_dtype or acc_type
    C32 = None
    if C is not None and opts.epilogue is not None:
        C32 = _epilogue.c_bits(C, out)
    bits, fmt = _epilogue.finish(opts, acc, acc_type, C32, scale)
    return _values.from_bits(fmt, bits)


_forward_jit = _xla.jit(_bits_forward, static_argnums=(0, 1, 2, 3))


def _is_float(x) -> bool:
    return x is not None and jnp.issubdtype(jnp.result_type(x), jnp.floating)


def _gemm(cfg, opts, kind, chain, A, B, C, SA, SB, key):
    """Values in, values out, with the straight-through tangent."""
    ins = cfg.ins
    K, N = jnp.shape(A)[-1], jnp.shape(B)[-1]

    def exact(va, vb, c, sa, sb):
        if kind is not None:
            ea, eb = _recipes.expand(kind, sa, sb, K, N)
            va, vb = va * ea, vb * eb
        lead = jnp.broadcast_shapes(va.shape[:-2], vb.shape[:-2])
        va = jnp.broadcast_to(va, lead + va.shape[-2:])
        vb = jnp.broadcast_to(vb, lead + vb.shape[-2:])
        d = jnp.matmul(va, vb, precision=HIGHEST)
        if opts.alpha is not None and opts.epilogue is not None:
            d = d * F32(opts.alpha)
        if c is not None:
            beta = opts.beta if (opts.beta is not None and opts.epilogue is not None) else 1.0
            d = d + jnp.broadcast_to(F32(beta) * c, d.shape)
        return d

    @jax.custom_jvp
    def f(A, B, C, SA, SB, key):
        return _forward_jit(cfg, opts, kind, chain, A, B, C, SA, SB, key)

    # symbolic zeros: an operand without a tangent adds no term (see util/_ste.py)
    @functools.partial(f.defjvp, symbolic_zeros=True)
    def f_jvp(primals, tangents):
        out = f(*primals)
        A, B, C, SA, SB, key = primals
        tangents = tangents[:5]
        primals = primals[:5]
        rnd = opts.input_rounding

        def vals(A, B, _):
            ra, rb = _random(opts, key, A, B)
            va = _operands.values(ins, ins.atype, operand_bits(ins, ins.atype, A, "A", rnd, ra))
            vb = _operands.values(ins, ins.btype, operand_bits(ins, ins.btype, B, "B", rnd, rb))
            return va, vb

        va, vb = _ste.straight_values(vals, A, B, None)
        prim = [va, vb, None if C is None else jnp.asarray(C, F32), SA, SB]
        prim = [None if p is None else jnp.asarray(p, F32) for p in prim]
        # the operands that carry a tangent are the variables; the others stay constants
        moving = [
            i
            for i, (x, p, t) in enumerate(zip(primals, prim, tangents, strict=True))
            if p is not None and _is_float(x) and _ste._has_tangent(t)
        ]
        if not moving:
            return out, jnp.zeros(out.shape, out.dtype)

        def g(*xs):
            full = list(prim)
            for i, x in zip(moving, xs, strict=True):
                full[i] = x
            return exact(*full)

        tans = tuple(jnp.broadcast_to(jnp.asarray(tangents[i], F32), prim[i].shape) for i in moving)
        _, t = jax.jvp(g, tuple(prim[i] for i in moving), tans)
        return out, jnp.broadcast_to(t, out.shape).astype(out.dtype)

    return f(A, B, C, SA, SB, key)


def check_key(opts, key):
    """``key`` for ``input_rounding='stochastic'`` (a jax.random key), None otherwise."""
    stochastic = opts is not None and opts.input_rounding == "stochastic"
    if stochastic and key is None:
        raise ValueError(
            "key: rounding='stochastic' needs a jax.random key (key=jax.random.key(0)); got None"
        )
    if not stochastic and key is not None:
        raise ValueError(
            "key: only used with rounding='stochastic' (a random key for the conversion "
            f"of float inputs), got rounding={None if opts is None else opts.input_rounding!r}"
        )
    if key is None:
        return None
    key = jnp.asarray(key)
    if not (jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or key.dtype == jnp.uint32):
        raise TypeError(f"key: expected a jax.random key, got dtype {key.dtype}")
    if key.dtype == jnp.uint32:
        key = jax.random.wrap_key_data(key)
    if key.shape != ():
        raise ValueError(f"key: expected one key (shape ()), got shape {key.shape}")
    return key


def matmul(cfg, opts, A, B, C, scale_a, scale_b, *, chain, check_shapes, key=None):
    """:func:`jaxmma.matmul` with kernel options (``opts``) or fp8 scales."""
    ins = cfg.ins
    opts = DEFAULT if opts is None else opts
    if ins.stype or ins.sparse:
        form = "block-scaled" if ins.stype else "sparse"
        given = [
            f"{f.name}={getattr(opts, f.name)!r}"
            for f in dataclasses.fields(opts)
            if getattr(opts, f.name) != getattr(DEFAULT, f.name)
        ]
        name = ", ".join(given) if given else "scale_a"
        raise ValueError(f"{name}: not modelled for {form} forms ({ins.text})")
    if cfg.grad_ins is not None:
        raise ValueError("grad_instruction: not combined with kernel options or fp8 scales")
    if opts.convert_inputs is not None:  # the dtypes given, before JAX converts doubles
        for name, x in (("A", A), ("B", B)):
            dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
            if dtype not in FP8:
                raise TypeError(
                    f"{name}: convert_inputs='f16' takes float8_e4m3fn or float8_e5m2 "
                    f"arrays, got {dtype}"
                )
    # fp8 scales are float32 factors: doubles rounded to nearest once, x64 on or off
    scale_a, scale_b = _doubles.nearest_float32(scale_a), _doubles.nearest_float32(scale_b)
    A, B = jnp.asarray(A), jnp.asarray(B)
    check_shapes(ins, A, B, None if C is None else jnp.asarray(C))
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    lead = tuple(jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2]))
    kind = _recipes.recipe(scale_a, scale_b, M, K, N, lead)
    if kind is not None:
        if ins.dtype != "f32":
            raise ValueError(
                f"scale_a: the scaling recipes scale an f32 accumulator; {ins.text} has "
                f".{ins.dtype}"
            )
        if C is not None and opts.epilogue is None:
            raise ValueError(
                "C: with scales, C enters the epilogue: give epilogue='f32' or 'rounded'"
            )
    if kind == "block":
        if cfg.promote_every is not None:
            raise ValueError(
                "promote_every: the block recipe promotes each 128-wide K group itself"
            )
        if opts.splits or opts.lead_first:
            raise ValueError("split_k: not modelled together with block scales")
        if _recipes.GROUP % ins.k:
            raise ValueError(
                f"scale_a: block scales need an instruction k dividing 128, got {ins.text}"
            )
    if opts.splits:
        _split.slices(opts.split_rule, K, opts.split_k, opts.k_tile or ins.k)  # errors now
    if C is not None and opts.epilogue is not None:
        acc = "f32" if kind == "block" or opts.splits else ins.dtype
        C = _epilogue.host_c(C, opts.out_dtype or acc)
    return _gemm(cfg, opts, kind, chain, A, B, C, scale_a, scale_b, check_key(opts, key))
