"""``gpu_replay``: a JAX function run with each dot computed as a compiled GPU module does.

The function is traced to a jaxpr and evaluated op by op on the default backend (a
CPU): every ``dot_general`` runs as :func:`jaxmma.matmul` with the options that
:func:`._hlo.dots` read from the GPU module's text (split-K, reduce order, chain, tf32
rounding, fp8 path, one conversion); every other operation is bound as it is, each
rounded to its own output type, once :mod:`._replay_ops` has found that XLA:GPU computes
it with the same bits (an operation that an output depends on and whose GPU bits are not
established is refused at trace time, or computed with a warning if asked). Dots are
matched to the module's GEMM fusions by their operand types, batch sizes, ``{M, N}`` and
K, where that pairing cannot be wrong: the module is ``fn``'s (its entry parameters and
results), the counts agree, and where the fusions' plans differ, data flow (never the
text's order) tells which computes which; a GEMM fusion that merges several dots (an
operand concatenated along its free dimension) computes each as its rows or columns,
paired by data flow; a GEMM fusion the reader refuses refuses the dots it may compute,
and only the outputs that depend on them. Where the module's stack frames agree with the
function, they tell dots of one signature apart by their source lines (:mod:`._hlo_frames`),
and a dot whose split-K partials two fusions reduce in two orders is computed once per
fusion, each reader taking its fusion's value (:mod:`._versions`). docs/xla_gpu.md says
what this covers.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.extend import core as jcore

from .. import arith, gemm, util
from . import (
    _hlo,
    _hlo_flow,
    _hlo_frames,
    _hlo_text,
    _replay_ieee,
    _replay_ops,
    _replay_scatter,
    _versions,
    _xla_sum,
)

#: numpy dtype names -> jaxmma format names
FORMATS = {"bfloat16": "bf16", "float16": "f16", "float32": "f32",
           "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}  # fmt: skip
_CALLS = util.CALLS


def _has_dot(jaxpr) -> bool:
    return util.contains(jaxpr, ("dot_general",))


def _replayed(jaxpr) -> bool:
    """Whether ``jaxpr`` holds an equation computed here rather than bound as it is."""
    names = ("dot_general", "reduce_sum", "scatter-add", *_replay_ops.MINMAX_REDUCE,
             *_replay_ops.LIBDEVICE)  # fmt: skip
    return util.contains(jaxpr, names + tuple(_replay_ieee.NAMES))


def ieee_minmax(eqn, x):
    """A float ``reduce_max`` / ``reduce_min`` by IEEE 754-2019 maximum / minimum (the
    canonical NaN if any element is NaN, -0 < +0): the one result of every reduction
    order, which is what XLA:GPU's MLIR emitters and its Triton normalization fusions
    give; on the bits' order (:func:`._replay_ieee.maximum`), so that no subnormal is
    read as a zero."""
    if _replay_ieee.float_format(x) is None:
        return util.bind(eqn, [x])[0]
    is_max, axes = eqn.primitive.name == "reduce_max", tuple(eqn.params["axes"])
    fn = lambda v: _replay_ieee.maximum(v, axes, is_max)  # noqa: E731
    return _replay_ieee.with_derivative(eqn, fn, [x])


def gpu_function(eqn, *xs):
    """An f32 function as XLA:GPU computes it on an H100
    (:data:`jaxmma.arith.GPU_FUNCTIONS`): its value from the raw bits, its derivative
    that of the primitive itself (the bits carry none)."""
    fn = arith.GPU_FUNCTIONS[eqn.primitive.name][1]

    @jax.custom_jvp
    def value(*vals):
        bits = [jax.lax.bitcast_convert_type(v, jnp.uint32) for v in vals]
        return jax.lax.bitcast_convert_type(fn(*bits), jnp.float32)

    @value.defjvp
    def _(primals, tangents):
        _, t = jax.jvp(lambda *v: util.bind(eqn, list(v))[0], primals, tangents)
        return value(*primals), t

    return value(*(jnp.asarray(x, jnp.float32) for x in xs))


def gpu_reciprocal_power(eqn, x):
    """f32 ``x**y`` for ``y < 0`` as jax lowers it and XLA:GPU computes it: the
    products of ``x**-y`` (:func:`._replay_ieee.evaluate`'s, subnormals kept), then
    ``1 / acc``. LLVM's NVPTX backend emits ``rcp.approx.f32`` for a full-precision
    division of 1 ("the same result as div.full(1.0f, a)"); the division model of
    :data:`jaxmma.arith.GPU_FUNCTIONS` is that reciprocal wherever the result is normal,
    and XLA's ``logistic`` (``1 / (1 + exp(-x))``, the same pattern) agrees with it on
    denominators of ``2**126`` and more (docs/xla_gpu.md). The derivative is the
    primitive's own."""
    div = arith.GPU_FUNCTIONS["div"][1]
    n = -int(eqn.params["y"])

    def value(v):
        acc = jax.lax.bitcast_convert_type(
            _replay_ieee.integer_power(jnp.asarray(v, jnp.float32), n), jnp.uint32
        )
        one = jnp.full(acc.shape, 0x3F800000, jnp.uint32)
        return jax.lax.bitcast_convert_type(div(one, acc), jnp.float32)

    return _replay_ieee.with_derivative(eqn, value, [x])


def _dot_eqns(jaxpr, out: list) -> list:
    """The dot equations in evaluation order; ValueError for a dot this cannot reach."""
    for e in jaxpr.eqns:
        name = e.primitive.name
        if name == "dot_general":
            out.append(e)
        elif name in _CALLS and _CALLS[name] in e.params:
            _dot_eqns(util.closed(e.params[_CALLS[name]])[0], out)
        elif any(_has_dot(j) for j in util.sub_jaxprs(e)):
            raise ValueError(
                f"fn: a dot inside {name!r} is not covered (loops and conditionals are not "
                "replayed; only calls)"
            )
    return out


def flows(jaxpr, deps: list, out: dict) -> list:
    """Per dot equation (by ``id``) of ``jaxpr`` and the jaxprs it calls, the function's
    arguments (by flattened number) each operand depends on; ``deps``: those of
    ``jaxpr``'s inputs. Returns those of its outputs."""
    env: dict = dict(zip(jaxpr.invars, deps, strict=True))

    def of(v):
        return frozenset() if isinstance(v, jcore.Literal) else env.get(v, frozenset())

    for e in jaxpr.eqns:
        ins = [of(v) for v in e.invars]
        name = e.primitive.name
        if name == "dot_general":
            out[id(e)] = (ins[0], ins[1])
        if name in _CALLS and _CALLS[name] in e.params:
            inner = util.closed(e.params[_CALLS[name]])[0]
            res = flows(inner, ins[len(ins) - len(inner.invars) :], out)
        else:
            res = [frozenset().union(*ins)] * len(e.outvars)
        for v, d in zip(e.outvars, res, strict=True):
            env[v] = d
    return [of(v) for v in jaxpr.outvars]


def module_mismatch(closed, text: str) -> str | None:
    """Why the module ``text`` is not ``fn``'s compiled at these arguments: its entry
    parameters and results (element types, shapes) against the jaxpr's flattened inputs
    and outputs; None where they agree."""
    params, results = _hlo_text.entry_types(text)

    def types(vs):
        return [(_hlo_text.HLO_TYPES.get(v.aval.dtype.name, v.aval.dtype.name), tuple(v.aval.shape))
                for v in vs]  # fmt: skip

    args, outs = types(closed.jaxpr.invars), types(closed.jaxpr.outvars)
    if (params, results) == (args, outs):
        return None

    def show(ts):
        return ", ".join(f"{t}[{','.join(map(str, s))}]" for t, s in ts)

    return (
        f"the module's entry computation takes ({show(params)}) and returns ({show(results)}); "
        f"fn at these arguments takes ({show(args)}) and returns ({show(outs)}): the module "
        "was not compiled from fn at these shapes (or jax dropped unused arguments), so "
        "none of its fusions is known to compute fn's dots and its emitters are not fn's"
    )


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
    """For each dot equation, its plan as :func:`pair` pairs them without data flow
    (every plan read; a ValueError where a dot is left without one)."""
    paired = pair(eqns, plans)
    for i, p in enumerate(paired):
        if isinstance(p, str):
            raise ValueError(f"compiled_text: dot {i} of fn: {p}")
    return paired


def pair(eqns: list, entries: list, deps: dict | None = None) -> list:
    """Per dot equation, the :class:`._hlo.DotPlan` that computes it, or the reason (a
    str) why none is paired.

    ``entries`` is :func:`._hlo.read`'s list. Dots are paired with GEMM fusions of the
    same signature (formats, batch sizes, ``{M, N}``, K) in the order both list them,
    and only where that pairing cannot be wrong: the module holds as many read fusions
    of the signature as ``fn`` holds dots of it, and no refused fusion that could have
    it. Otherwise every dot of that signature is refused: which fusion computes which
    is not known (a refused fusion may be one of them; XLA may have merged or removed
    dots).

    Where those fusions' plans give the same bits (:meth:`._hlo.DotPlan.bits`), which
    computes which does not matter. Where they differ, the order is not evidence: a dot
    is paired by data flow (``deps``: per dot equation, the function's arguments each
    operand depends on; the plans' ``sources``: the module's entry parameters), only
    where the dots and the fusions show the same multiset of operand dependencies and
    every fusion that shows a dot's own has one plan; otherwise that dot is refused.

    A merged GEMM (:class:`._hlo_flow.Merge`) counts as one fusion per dot it computes
    (:func:`_split_merged`), each part with its piece's data flow; a signature with
    such a part is always paired by data flow, never by count alone."""
    sigs = [signature(e) for e in eqns]
    entries = _split_merged(entries, set(sigs))
    plans = [p for p in entries if isinstance(p, _hlo.DotPlan)]
    refused = [r for r in entries if isinstance(r, _hlo.Refusal)]
    out: list = [None] * len(eqns)
    for sig in dict.fromkeys(sigs):
        idx = [i for i, s in enumerate(sigs) if s == sig]
        cand = [p for p in plans if p.signature() == sig]
        maybe = [r for r in refused if r.could_be(sig)]
        for g_idx, g_cand, g_maybe in _by_frames(idx, eqns, cand, maybe):
            _pair_group(sig, g_idx, g_cand, g_maybe, eqns, entries, deps, out)
    return out


def _by_frames(idx: list, eqns: list, cand: list, maybe: list) -> list:
    """``[(dots, plans, refusals)]``: the dots of one signature split by the stack frames
    of their source lines (:mod:`._hlo_frames`), each group with the fusions whose dots'
    frames fit its dots best, where the groups share no fusion (a fusion whose dot shows
    frames that fit none of them best is left out; one that shows none stays in every
    group: it may be any); else one group with every fusion."""
    items = cand + maybe
    frames = lambda x: x.frames  # noqa: E731
    prim = lambda x: _hlo_frames.primitive_of(x.op_name)  # noqa: E731
    near = {i: _hlo_frames.nearest(eqns[i], items, frames, prim) for i in idx}
    keys = {i: frozenset(id(x) for x in near[i]) for i in idx}
    groups = list(dict.fromkeys(keys.values()))
    if any(a & b for a in groups for b in groups if a is not b):
        return [(idx, cand, maybe)]
    if len(groups) == 1 and len(groups[0]) == len(items):  # the frames narrowed nothing
        return [(idx, cand, maybe)]
    blind = {id(x) for x in items if not x.frames}
    return [
        (
            [i for i in idx if keys[i] == g],
            [p for p in cand if id(p) in g or id(p) in blind],
            [r for r in maybe if id(r) in g or id(r) in blind],
        )
        for g in groups
    ]


def _pair_group(sig, idx, cand, maybe, eqns, entries, deps, out) -> None:
    """:func:`pair` for the dots ``idx`` of one signature and the fusions that may
    compute them: fills ``out``."""
    shown = f"(formats {sig[0]}, batch {sig[1]}, M x N {sig[2]}, K = {sig[3]})"
    if maybe:
        why = "; ".join(dict.fromkeys(r.reason for r in maybe))
        if not cand and len(maybe) == len(idx) and all(r.signature == sig for r in maybe):
            reason = f"its GEMM fusion is refused: {why}"
        else:
            reason = (
                f"a dot {shown} that the GEMM fusions {[p.label() for p in cand]} or the "
                f"refused {[_refused_label(r) for r in maybe]} may compute; which is not "
                f"known, and the refused are not read: {why}"
            )
    elif len(cand) != len(idx):
        reason = (
            f"{len(idx)} dot(s) of fn {shown} and {len(cand)} GEMM fusion(s) of the "
            f"module with that signature {[p.label() for p in cand]}: not paired (the "
            "module was not compiled from this function and these shapes, or XLA "
            "merged or removed dots)"
        )
        notes = [e.merge for e in entries if isinstance(e.merge, str)]
        if notes:
            reason += "; not read as merged dots: " + "; ".join(dict.fromkeys(notes))
    elif len({p.bits() for p in cand}) == 1 and all(p.piece is None for p in cand):
        for i, p in zip(idx, cand, strict=True):  # any pairing: the same bits
            out[i] = p
        return
    else:
        for i, p in _by_flow(idx, eqns, cand, deps, shown).items():
            out[i] = p
        return
    for i in idx:
        out[i] = reason


def _refused_label(r) -> str:
    return (
        f"{r.fusion} (part of a merged GEMM)" if isinstance(r.merge, _hlo_flow.Merge) else r.fusion
    )


def _split_merged(entries: list, sigs: set) -> list:
    """``entries`` with each merged GEMM (:class:`._hlo_flow.Merge`) in its parts, one per
    dot it computes (:meth:`._hlo.DotPlan.pieces`), where every part's signature is one
    of ``fn``'s dots' (``sigs``); else the GEMM as one dot (``fn`` may have written the
    concatenation itself)."""
    out: list = []
    for e in entries:
        parts = e.pieces()
        sig = [p.signature() if isinstance(p, _hlo.DotPlan) else p.signature for p in parts]
        out += parts if len(parts) > 1 and all(g in sigs for g in sig) else [e]
    return out


def _by_flow(idx: list, eqns: list, cand: list, deps: dict | None, shown: str) -> dict:
    """Per dot (by index), the plan data flow pairs it with, or the reason it cannot."""
    plans = ", ".join(p.label() for p in cand)
    if len({p.bits() for p in cand}) == 1:  # parts of merged GEMMs: paired by data flow only
        head = (
            f"the GEMM fusions {plans} of the module compute dots {shown}, merged dots among "
            "them (a merged GEMM's part is paired only where data flow ties it to the dot), and "
        )
    else:
        head = (
            f"the GEMM fusions {plans} of the module compute dots {shown} with different "
            "plans, and "
        )

    def key(pair) -> tuple:  # unordered: XLA may swap a dot's operands
        return tuple(sorted(tuple(sorted(x)) for x in pair))

    if (
        not deps
        or any(p.sources is None for p in cand)
        or any(id(eqns[i]) not in deps for i in idx)
    ):
        return dict.fromkeys(idx, head + "the module's data flow was not read")
    dk = {i: key(deps[id(eqns[i])]) for i in idx}
    fk = [key(p.sources) for p in cand]
    if sorted(dk.values()) != sorted(fk):
        return dict.fromkeys(
            idx,
            head + "the operands of fn's dots and of those fusions do not depend on the same "
            "arguments (the module's entry parameters, by number): which computes which is "
            "not shown",
        )
    out: dict = {}
    for i in idx:
        same = [p for p, k in zip(cand, fk, strict=True) if k == dk[i]]
        if len({p.bits() for p in same}) == 1:
            out[i] = same[0]
        else:
            out[i] = head + (
                f"{len(same)} of them ({', '.join(p.label() for p in same)}) read "
                "operands that depend on the same arguments as this dot's: which computes "
                "it is not shown"
            )
    return out


def problem(eqn, plan) -> str | None:
    """Why ``plan`` cannot compute ``eqn`` (checked before anything runs), or None."""
    (lc, _), _ = eqn.params["dimension_numbers"]
    if len(lc) != 1:
        return f"{plan.fusion}: a dot contracting {len(lc)} dimensions is not covered"
    out_aval = eqn.outvars[0].aval
    out = FORMATS.get(out_aval.dtype.name)
    if out not in ("f32", "bf16", "f16"):
        return f"{plan.fusion}: a dot with {out_aval.dtype} output is not covered"
    if out != plan.out:
        return f"{plan.fusion}: fn's dot gives {out}, the module converts its result to {plan.out}"
    return None


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
    D = gemm.matmul(L, R, **opts)
    shape = batch + tuple(lhs.shape[d] for d in lf) + tuple(rhs.shape[d] for d in rf)
    return D.reshape(shape).astype(out_aval.dtype)


def _eval(jaxpr, consts, args, plans: dict, facts=None, decisions=None):
    """Evaluate ``jaxpr``; ``plans`` maps each dot equation (by id) to its plan, or to
    None where it is refused (then computed as JAX computes it: ``"compute"`` mode, or
    ``"omit"`` mode where no returned output reads it); ``decisions``: where a dot has
    one value per fusion, how each equation reads them (:func:`._versions.resolve`)."""
    env: dict = {}
    decisions = decisions or {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, args, strict=True):
        env[v] = x
    for e in jaxpr.eqns:
        ins = [read(v) for v in e.invars]
        how = decisions.get(id(e))
        fold = plans.get(("fold", id(e)))
        if isinstance(fold, _replay_ops.TanhGrad):
            g, t, inner = read(fold.g), read(fold.t), decisions.get(fold.inner)
            outs = _per_key(
                how, lambda k, g=g, t=t, i=inner: _tanh_grad(_through(g, k, i), _through(t, k, i))
            )
        elif isinstance(fold, _replay_ops.Rebroadcast):
            outs = _rebroadcasts(e, fold, how, decisions, ins, read(fold.a), read(fold.src))
        elif fold is not None and (how is None or how[0] == "pick"):
            a = read(fold[0])
            key = (
                how[1]
                if how is not None
                else (min(a.by) if isinstance(a, _versions.Values) else None)
            )
            outs = [_folded(e, [_versions.pick(x, key) if key else x for x in ins],
                            _versions.pick(a, key) if key else a, fold[1])]  # fmt: skip
        elif how is None:  # (a refused equation may read one value of several: any)
            ins = [_first(x) for x in ins]
            outs = _eval_one(e, ins, plans, facts)
        elif how[0] == "dot":
            by = {k: replay_dot(e, plans[id(e)].variant(k), *ins) for k in sorted(how[1])}
            outs = [_versions.Values(by)]
        elif how[0] == "pick":
            outs = _eval_one(e, [_versions.pick(x, how[1]) for x in ins], plans, facts)
        else:  # one value per fusion
            each = {k: _eval_one(e, [_versions.pick(x, src) for x in ins], plans, facts)
                    for k, src in sorted(how[1].items())}  # fmt: skip
            outs = [_versions.Values({k: o[i] for k, o in each.items()})
                    for i in range(len(e.outvars))]  # fmt: skip
        for v, x in zip(e.outvars, outs, strict=True):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _per_key(how, fn) -> list:
    """``[fn(key)]`` for an equation evaluated as ``how`` says (:mod:`._versions`): once
    (key None, or the one value it picks), or once per fusion, as several values."""
    if how is None:
        return [fn(None)]
    if how[0] == "pick":
        return [fn(how[1])]
    return [_versions.Values({k: fn(src) for k, src in sorted(how[1].items())})]


def _through(x, key, inner):
    """The value of ``x`` that the equation deciding ``inner`` (:mod:`._versions`) reads
    where its own value ``key`` is read: the one it picks, or the one its fusion ``key``
    reads; ``x`` itself where it has one value. Where the equation has no decision it
    is refused (its value is never returned): the first."""
    if not isinstance(x, _versions.Values):
        return x
    if inner is not None and inner[0] == "pick":
        key = inner[1]
    elif inner is not None and inner[0] == "each":
        key = inner[1].get(key)
    return x.by[key] if key in x.by else _first(x)


def _tanh_grad(g, t):
    """``g * ((1 + t) * (1 - t))``, each operation rounded (subnormals kept), as jax 0.11
    writes tanh's gradient (:class:`._replay_ops.TanhGrad`), with its derivative."""

    @jax.custom_jvp
    def value(g, t):
        one = jnp.ones_like(t)
        oms = _replay_ieee.fmul(_replay_ieee.fadd(t, one), _replay_ieee.fadd(one, -t))
        return _replay_ieee.fmul(g, oms)

    @value.defjvp
    def _(primals, tangents):
        f = lambda g, t: g * ((1 + t) * (1 - t))  # noqa: E731
        return value(*primals), jax.jvp(f, primals, tangents)[1]

    g, t = jnp.broadcast_arrays(jnp.asarray(g, jnp.float32), jnp.asarray(t, jnp.float32))
    return value(g, t)


def _rebroadcasts(e, plan, how, decisions: dict, ins: list, a, src) -> list:
    """:func:`_rebroadcast` with the values of dots of several values (:mod:`._versions`)
    read as the equations read them: ``e``'s operands as ``how`` says, ``a`` as the
    product ``a * c`` read it, ``src`` with the key of ``e``'s operand it feeds."""

    def one(key):
        x, y = (_through(v, key, None) for v in ins)
        av = _through(a, key, decisions.get(plan.inner))
        if isinstance(src, _versions.Values) and key not in src.by:
            raise ValueError(
                f"gpu_replay: {e.primitive.name} at {_replay_ops._where(e)}: XLA's a * "
                "broadcast(b * c) reads a value of several that no one fusion shows"
            )
        return _rebroadcast(e, plan, x, y, av, _through(src, key, None))

    return _per_key(how, one)


def _first(x):
    return x.by[min(x.by)] if isinstance(x, _versions.Values) else x


def _rebroadcast(e, plan, x, y, a, src):
    """``a * broadcast(src * k)`` (:class:`._replay_ops.Rebroadcast`; ``src`` reshaped to
    the broadcast's operand), each product rounded, with the derivative of ``e``, the
    product ``x * y`` jax wrote."""
    bcast = plan.bcast

    @jax.custom_jvp
    def value(x, y, a, src):
        scaled = _replay_ieee.fmul(jnp.asarray(src, jnp.float32), jnp.float32(plan.k))
        b = jnp.reshape(scaled, bcast.invars[0].aval.shape)
        return _replay_ieee.fmul(jnp.asarray(a, jnp.float32), util.bind(bcast, [b])[0])

    @value.defjvp
    def _(primals, tangents):
        x, y, a, src = primals
        _, t = jax.jvp(lambda x, y: util.bind(e, [x, y])[0], (x, y), tangents[:2])
        return value(x, y, a, src), t

    return value(*(jnp.asarray(v, jnp.float32) for v in (x, y, a, src)))


def _folded(e, ins: list, a, c):
    """``a * c`` rounded once (XLA's ``(a * c1) * c2`` with ``c = fl(c1 * c2)``), with the
    derivative of ``e``, the product jax wrote."""

    @jax.custom_jvp
    def value(x, k, a):
        return _replay_ieee.fmul(jnp.asarray(a, jnp.float32), jnp.float32(c))

    @value.defjvp
    def _(primals, tangents):
        x, k, a = primals
        _, t = jax.jvp(lambda x, k: util.bind(e, [x, k])[0], (x, k), tangents[:2])
        return value(x, k, a), t

    x, k = (jnp.asarray(v, jnp.float32) for v in ins)
    return value(x, k, jnp.asarray(a, jnp.float32))


def _eval_one(e, ins: list, plans: dict, facts) -> list:
    """The outputs of one equation, computed as XLA:GPU does where that is established."""
    name = e.primitive.name
    if name == "dot_general" and plans.get(id(e)) is not None:
        outs = [replay_dot(e, plans[id(e)], *ins)]
    elif name in _replay_ops.MINMAX_REDUCE:
        outs = [ieee_minmax(e, *ins)]
    elif name == "reduce_sum" and _replay_ops.trivial_sum(e):  # a reshape on the GPU
        outs = [jax.lax.reshape(jnp.asarray(ins[0]), tuple(e.outvars[0].aval.shape))]
    elif (
        name == "reduce_sum"
        and _replay_ops.is_f32(e)
        and isinstance(plan := _replay_ops.sum_plan(e, facts), _xla_sum.SumPlan)
    ):
        x, axes = ins[0], tuple(e.params["axes"])
        summed = lambda v, a=axes, p=plan: _xla_sum.reduce_sum(v, v.shape, a, p)  # noqa: E731
        outs = [_replay_ieee.with_derivative(e, summed, [x])]
    elif (
        name == "div"
        and _replay_ops.is_f32(e)
        and isinstance(e.invars[1], jcore.Literal)
        and (r := _replay_ops.reciprocal(e, e.invars[1].val, facts)) is not None
    ):
        scaled = lambda x, _, r=r: _replay_ieee.fmul(jnp.asarray(x, jnp.float32), r)  # noqa: E731
        outs = [_replay_ieee.with_derivative(e, scaled, ins)]
    elif name in _replay_ops.LIBDEVICE and _replay_ops.is_f32(e):
        outs = [gpu_function(e, *ins)]
    elif name == "integer_pow" and e.params["y"] < 0 and _replay_ops.is_f32(e):
        outs = [gpu_reciprocal_power(e, *ins)]
    elif name == "scatter-add" and _replay_scatter.refusal(e, facts) is None:
        outs = _replay_scatter.evaluate(e, ins)
    elif _replay_ieee.covers(e):
        outs = _replay_ieee.evaluate(e, ins)
    elif (
        name in _CALLS
        and _CALLS[name] in e.params
        and _replayed(util.closed(e.params[_CALLS[name]])[0])
    ):
        inner, c = util.closed(e.params[_CALLS[name]])
        outs = _eval(inner, c, ins[len(ins) - len(inner.invars) :], plans, facts)
    else:
        outs = util.bind(e, ins)
    return outs


class Analysis(NamedTuple):
    """What :func:`analyse` finds of a function's jaxpr and a module: per dot equation
    (by ``id``) its plan or None, and the pairing's result (a plan or why not); the
    module's facts as used (None: not ``fn``'s module); how equations read a dot's
    several values (:func:`._versions.resolve`); the refused equations and, per output,
    those it depends on."""

    plans: dict
    paired: list
    facts: Any
    decisions: dict
    findings: list
    per_output: list


def analyse(closed, text: str, entries: list, facts) -> Analysis:
    """Pair ``closed``'s dots with the module's GEMM fusions (``entries``:
    :func:`._hlo.read`; ``facts``: :func:`._hlo.emitters` of ``text``), follow dots of
    several values, and check every other operation (:func:`._replay_ops.check`)."""
    eqns = _dot_eqns(closed.jaxpr, [])
    other = module_mismatch(closed, text)
    if other is None:
        deps: dict = {}
        flows(closed.jaxpr, [frozenset({i}) for i in range(len(closed.jaxpr.invars))], deps)
        read, known = entries, facts
        if not _hlo_frames.agree(closed.jaxpr, text):  # not fn's source lines
            read, known = _hlo_frames.strip(entries), _hlo_frames.strip(facts)
        paired = pair(eqns, read, deps)
    else:  # not fn's module: no dot is paired, and its emitters say nothing of fn
        paired, known = [other] * len(eqns), None
    plans: dict = {}
    refused: dict = {}
    for e, p in zip(eqns, paired, strict=True):
        why = p if isinstance(p, str) else problem(e, p)
        plans[id(e)] = None if why else p
        if why:
            refused[id(e)] = why
    decisions, extra, top = _versions.resolve(closed.jaxpr, plans, known)
    for e in eqns:
        p = plans[id(e)]
        if p is not None and p.variants and id(e) not in top:
            refused[id(e)] = (
                f"{p.fusion}: its split-K partials are reduced in several "
                "fusions in different orders (one value in each), and the dot is inside "
                "a call: not covered"
            )
            plans[id(e)] = None
    folds: dict = {}
    findings, per_output = _replay_ops.check(closed, known, refused, extra, folds)
    # products XLA computes with folded constants (read by _eval, as plans are)
    plans.update({("fold", k): v for k, v in folds.items()})
    return Analysis(plans, paired, known, decisions, findings, per_output)


class Unverified:
    """An output of ``gpu_replay(fn, text, unverified="omit")`` whose XLA:GPU bits are
    not established, in the place of its value: ``index`` (its position among ``fn``'s
    flattened outputs) and ``reasons`` (each operation it depends on that was refused:
    what, where, why). It holds no value: converting it to an array (``jnp.asarray``,
    ``np.asarray``, arithmetic through JAX) raises a ``ValueError`` with the reasons.
    A pytree node without leaves, so the returned function jits."""

    __slots__ = ("index", "reasons")

    def __init__(self, index: int, reasons: tuple) -> None:
        self.index = index
        self.reasons = tuple(reasons)

    def message(self) -> str:
        lines = [f"output {self.index} of fn is not reproduced (gpu_replay refused it):"]
        return "\n".join(lines + [f"  - {r}" for r in self.reasons])

    def __repr__(self) -> str:
        return f"Unverified(index={self.index}, reasons={list(self.reasons)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unverified) and (self.index, self.reasons) == (
            other.index,
            other.reasons,
        )

    def __hash__(self) -> int:
        return hash((self.index, self.reasons))

    def __array__(self, *args, **kwargs):
        raise ValueError(self.message())

    def __jax_array__(self):
        raise ValueError(self.message())


jax.tree_util.register_pytree_node(
    Unverified, lambda u: ((), (u.index, u.reasons)), lambda aux, _: Unverified(*aux)
)


UNVERIFIED = ("raise", "compute", "omit")


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
      unverified: what happens to an output that depends on an operation whose XLA:GPU
        bits are not established (a dot whose GEMM fusion the reader refuses or cannot
        pair, a transcendental function, a float reduction, a division, a multiply that
        may be contracted into an FMA, a bf16 result that may be kept in f32, ...):
        ``"raise"`` (the default): a ``ValueError`` at trace time naming each such
        operation, where it is and why, and which outputs it reaches (outputs that do
        not depend on one do not make it raise); ``"omit"``: every other output is
        computed and each refused output is replaced by a :class:`jaxmma.Unverified`
        (its index and reasons; it cannot be used as an array: converting it raises
        the ``ValueError``); ``"compute"``: compute them as JAX does on the default
        backend and warn (``UserWarning``) which they are.

    Returns:
      A function of the same arguments as ``fn`` returning ``fn``'s outputs, computed
      on the default backend: the dots with the GPU module's bits, every other
      operation as JAX computes it there (the same bits as the GPU's where it was not
      refused), one operation at a time; with ``unverified="omit"``, refused outputs
      are :class:`jaxmma.Unverified` instead.

    Raises:
      ValueError: malformed module text (at once); at trace time an output that
        depends on a refused operation (``unverified="raise"``), a dot inside a loop or
        conditional, an unknown ``unverified``.

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
    entries = _hlo.read(compiled_text)
    facts = _hlo.emitters(compiled_text)

    def run(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        a = analyse(closed, compiled_text, entries, facts)
        plans, known, decisions = a.plans, a.facts, a.decisions
        findings, per_output = a.findings, a.per_output
        if any(per_output):
            text = _replay_ops.message(findings, per_output)
            if unverified == "raise":
                raise ValueError(text)
            if unverified == "compute":
                text = text[: text.rindex("Pass unverified=")]
                warnings.warn(
                    text + "Computed them as JAX does on this backend (docs/xla_gpu.md).",
                    stacklevel=2,
                )
        flat = jax.tree.leaves(args)
        outs = _eval(closed.jaxpr, closed.consts, flat, plans, known, decisions)
        # an output with one value per fusion is refused (its value is not shown); in
        # "compute" mode the first is returned, with the warning above
        outs = [x.by[min(x.by)] if isinstance(x, _versions.Values) else x for x in outs]
        if unverified == "omit":
            outs = [
                Unverified(i, tuple(str(f) for f in findings if f in t)) if t else o
                for i, (o, t) in enumerate(zip(outs, per_output, strict=True))
            ]
        return jax.tree.unflatten(jax.tree.structure(shape), outs)

    return run
