"""``gpu_replay``: a JAX function run with each dot computed as a compiled GPU module does.

The function is traced to a jaxpr and evaluated op by op on the default backend (a
CPU): every ``dot_general`` runs as :func:`jaxmma.matmul` with the options that
:func:`._hlo.dots` read from the GPU module's text (split-K, reduce order, chain, tf32
rounding, fp8 path, one conversion); every other operation is bound as it is, each
rounded to its own output type, once :mod:`._replay_ops` has found that XLA:GPU computes
it with the same bits (an operation that an output depends on and whose GPU bits are not
established is refused at trace time, or computed with a warning if asked). Dots are
matched to the module's GEMM fusions by their operand types, batch sizes, ``{M, N}`` and
K, in the order the jaxpr lists them (docs/xla_gpu.md says what this covers).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax.extend import core as jcore

from ..util import _jaxpr
from . import _gemm, _hlo, _replay_ops

#: numpy dtype names -> jaxmma format names
FORMATS = {"bfloat16": "bf16", "float16": "f16", "float32": "f32",
           "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}  # fmt: skip
_CALLS = _jaxpr.CALLS


def _has_dot(jaxpr) -> bool:
    return _jaxpr.contains(jaxpr, ("dot_general",))


def _replayed(jaxpr) -> bool:
    """Whether ``jaxpr`` holds an equation computed here rather than bound as it is."""
    return _jaxpr.contains(jaxpr, ("dot_general", *_replay_ops.MINMAX_REDUCE))


def ieee_minmax(eqn, x):
    """A float ``reduce_max`` / ``reduce_min`` by IEEE 754-2019 maximum / minimum (NaN
    if any element is NaN, -0 < +0): the one result of every summation order, which is
    what XLA:GPU's MLIR emitters give; the backend's own reduction only supplies the
    value of a result that is neither NaN nor zero."""
    axes = tuple(eqn.params["axes"])
    m = _jaxpr.bind(eqn, [x])[0]
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return m
    is_max = eqn.primitive.name == "reduce_max"
    zeros = (x == 0) & (jnp.signbit(x) != is_max)  # +0 for max, -0 for min
    present = jnp.any(zeros, axis=axes)
    zero = jnp.where(present, 0.0, -0.0) if is_max else jnp.where(present, -0.0, 0.0)
    m = jnp.where(m == 0, zero.astype(m.dtype), m)
    return jnp.where(jnp.any(jnp.isnan(x), axis=axes), jnp.asarray(jnp.nan, m.dtype), m)


def _dot_eqns(jaxpr, out: list) -> list:
    """The dot equations in evaluation order; ValueError for a dot this cannot reach."""
    for e in jaxpr.eqns:
        name = e.primitive.name
        if name == "dot_general":
            out.append(e)
        elif name in _CALLS and _CALLS[name] in e.params:
            _dot_eqns(_jaxpr.closed(e.params[_CALLS[name]])[0], out)
        elif any(_has_dot(j) for j in _jaxpr.sub_jaxprs(e)):
            raise ValueError(
                f"fn: a dot inside {name!r} is not covered (loops and conditionals are not "
                "replayed; only calls)"
            )
    return out


def signature(eqn) -> tuple:
    """``(formats, batch, {M, N}, K)`` of a ``dot_general`` equation (see DotPlan)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    a, b = (v.aval for v in eqn.invars[:2])
    fa, fb = (FORMATS.get(x.dtype.name, x.dtype.name) for x in (a, b))
    lf = [d for d in range(a.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(b.ndim) if d not in rc and d not in rb]
    M = math.prod(a.shape[d] for d in lf)
    N = math.prod(b.shape[d] for d in rf)
    K = math.prod(a.shape[d] for d in lc)
    batch = tuple(a.shape[d] for d in lb)
    return (tuple(sorted((fa, fb))), batch, tuple(sorted((M, N))), K)


def match(eqns: list, plans: list) -> list:
    """For each dot equation, the first unused plan with its signature."""
    used = [False] * len(plans)
    out = []
    for i, e in enumerate(eqns):
        sig = signature(e)
        j = next((j for j, p in enumerate(plans) if not used[j] and p.signature() == sig), None)
        if j is None:
            raise ValueError(
                f"compiled_text: dot {i} of fn (formats {sig[0]}, batch {sig[1]}, M x N "
                f"{sig[2]}, K = {sig[3]}) has no GEMM fusion in the module (fusions: "
                f"{[(p.fusion, p.signature()) for p in plans if not used[plans.index(p)]]})"
            )
        used[j] = True
        out.append(plans[j])
    left = [p.fusion for p, u in zip(plans, used, strict=True) if not u]
    if left:
        raise ValueError(
            f"compiled_text: GEMM fusions {left} match no dot of fn: the module was not "
            "compiled from this function and these argument shapes"
        )
    return out


def replay_dot(eqn, plan, lhs, rhs):
    """One ``dot_general`` equation computed as ``plan`` says."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    if len(lc) != 1:
        raise ValueError(f"{plan.fusion}: a dot contracting {len(lc)} dimensions is not covered")
    out_aval = eqn.outvars[0].aval
    out = FORMATS.get(out_aval.dtype.name)
    if out not in ("f32", "bf16", "f16"):
        raise ValueError(f"{plan.fusion}: a dot with {out_aval.dtype} output is not covered")
    if out != plan.out:
        raise ValueError(
            f"{plan.fusion}: fn's dot gives {out}, the module converts its result to {plan.out}"
        )
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    batch = tuple(lhs.shape[d] for d in lb)
    L = jnp.transpose(lhs, tuple(lb) + tuple(lf) + tuple(lc))
    R = jnp.transpose(rhs, tuple(rb) + tuple(rc) + tuple(rf))
    L = L.reshape(batch + (math.prod(lhs.shape[d] for d in lf), lhs.shape[lc[0]]))
    R = R.reshape(batch + (rhs.shape[rc[0]], math.prod(rhs.shape[d] for d in rf)))
    opts = dict(plan.options)
    if opts["instruction"].startswith("wgmma"):  # the operands' own order (same products)
        fa, fb = FORMATS[lhs.dtype.name], FORMATS[rhs.dtype.name]
        opts["instruction"] = _hlo.WGMMA8.format(a=fa, b=fb)
    D = _gemm.matmul(L, R, **opts)
    shape = batch + tuple(lhs.shape[d] for d in lf) + tuple(rhs.shape[d] for d in rf)
    return D.reshape(shape).astype(out_aval.dtype)


def _eval(jaxpr, consts, args, plans):
    env = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, args, strict=True):
        env[v] = x
    for e in jaxpr.eqns:
        ins = [read(v) for v in e.invars]
        name = e.primitive.name
        if name == "dot_general":
            outs = [replay_dot(e, next(plans), *ins)]
        elif name in _replay_ops.MINMAX_REDUCE:
            outs = [ieee_minmax(e, *ins)]
        elif (
            name in _CALLS
            and _CALLS[name] in e.params
            and _replayed(_jaxpr.closed(e.params[_CALLS[name]])[0])
        ):
            inner, c = _jaxpr.closed(e.params[_CALLS[name]])
            outs = _eval(inner, c, ins[len(ins) - len(inner.invars) :], plans)
        else:
            outs = _jaxpr.bind(e, ins)
        for v, x in zip(e.outvars, outs, strict=True):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


UNVERIFIED = ("raise", "compute")


def gpu_replay(
    fn: Callable[..., Any],
    compiled_text: str,
    *,
    unverified: Literal["raise", "compute"] = "raise",
) -> Callable[..., Any]:
    """``fn`` with each dot computed as the GPU module ``compiled_text`` computes it.

    Args:
      fn: a JAX function (jittable); its dots are ``lax.dot_general`` / ``jnp.dot`` /
        ``@`` calls, also inside nested ``jit`` and custom derivatives (not inside
        ``scan``, ``while`` or ``cond``).
      compiled_text: ``jax.jit(fn).lower(*args).compile().as_text()`` from an sm_90 GPU
        (XLA:GPU's Triton GEMM fusions, docs/xla_gpu.md).
      unverified: ``"raise"`` (the default): a ``ValueError`` at trace time when an
        output of ``fn`` depends on an operation whose XLA:GPU bits are not established
        (a transcendental function, a float reduction, a division, a multiply that may
        be contracted into an FMA, a bf16 result that may be kept in f32, ...), naming
        each such operation, where it is and why; ``"compute"``: compute them as JAX
        does on the default backend and warn (``UserWarning``) which they are.

    Returns:
      A function of the same arguments as ``fn`` returning ``fn``'s outputs, computed
      on the default backend: the dots with the GPU module's bits, every other
      operation as JAX computes it there (the same bits as the GPU's where it was not
      refused), one operation at a time.

    Raises:
      ValueError: malformed module text, a dot or reduce the reader does not cover,
        dots of ``fn`` and GEMM fusions of the module that do not pair up, an output
        that depends on an operation whose GPU bits are not established (unless
        ``unverified="compute"``), an unknown ``unverified``.

    Example:
      >>> import jax.numpy as jnp, jaxmma
      >>> def f(x):
      ...     return jnp.exp(x) * 2.0
      >>> jaxmma.gpu_replay(f, TEXT)(jnp.ones(3))  # doctest: +SKIP
      Traceback (most recent call last):
      ValueError: fn: 1 operation whose XLA:GPU bits are not established reaches ...
    """
    if unverified not in UNVERIFIED:
        raise ValueError(f"unverified: expected one of {UNVERIFIED}, got {unverified!r}")
    plans = _hlo.dots(compiled_text)
    facts = _hlo.emitters(compiled_text)

    def run(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        findings, per_output = _replay_ops.check(closed, facts)
        if any(per_output):
            text = _replay_ops.message(findings, per_output)
            if unverified == "raise":
                raise ValueError(text)
            warnings.warn(
                text.replace("Pass unverified='compute' to compute", "Computed"),
                stacklevel=2,
            )
        eqns = _dot_eqns(closed.jaxpr, [])
        order = iter(match(eqns, plans))
        flat = jax.tree.leaves(args)
        outs = _eval(closed.jaxpr, closed.consts, flat, order)
        return jax.tree.unflatten(jax.tree.structure(shape), outs)

    return run
