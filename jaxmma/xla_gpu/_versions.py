"""One dot, a value per fusion: where XLA:GPU reduces a dot's split-K partials in several
fusions, each in its own order (the block's output projection: once in the Triton
fusion of the next layer norm, once in the loop fusion of the residual add), the one
jaxpr variable has several GPU values, one in each of those fusions.

:func:`resolve` follows such values through the function (its top-level equations):

- data movement passes every value on (the same bits in another shape);
- a dot with a plan runs in its GEMM fusion; any other equation runs in the fusions
  that hold its instructions (their stack frames, :mod:`._hlo_frames`; an equation
  equal to another, the same primitive, parameters and operands, may have left its
  instructions to that one's, as XLA keeps one of equal operations): where it runs in
  one of the fusions that hold a value, it reads that value; where it runs in a fusion
  that reads the variable from memory, it reads the value of the one holding fusion
  whose output that fusion reads (the module's data flow, :func:`._hlo_flow.reads`:
  the buffer XLA stored is the output of the fusion that computed it). Run in one
  fusion, it has one value; in several, one value in each (XLA cloned it into each, as
  the residual add here);
- anything else is refused: an equation the frames do not place, one that runs in a
  fusion reading the variable from memory but from no one fusion that holds it (which
  value was stored is not shown), a call or loop the value enters, a function output
  that has several values.

The result is a plan per equation that ``gpu_replay`` evaluates, and the refusals.
"""

from __future__ import annotations

from jax.extend import core as jcore

from .. import util
from . import _hlo_frames, _replay_ops

#: primitives that move values without changing their bits
MOVE = _replay_ops.MOVE


class Values:
    """Several GPU values of one variable: ``{fusion name: value}``."""

    __slots__ = ("by",)

    def __init__(self, by: dict) -> None:
        self.by = dict(by)

    def __repr__(self) -> str:
        return f"Values({sorted(self.by)})"


def pick(x, key: str):
    """The value ``key`` of ``x`` (``x`` itself where it has one value)."""
    return x.by[key] if isinstance(x, Values) else x


def _key(e) -> tuple:
    """What makes two equations compute the same value: primitive, parameters, operands
    (variables by identity, literals by value)."""
    ins = tuple(("lit", repr(v.val)) if isinstance(v, jcore.Literal) else id(v) for v in e.invars)
    return (e.primitive.name, repr(sorted(e.params.items(), key=lambda kv: kv[0])), ins)


def resolve(jaxpr, plans: dict, facts) -> tuple:
    """``(decisions, refusals, top)`` for the top-level equations of ``jaxpr``: per
    equation (by ``id``) ``("dot", keys)`` (a dot computed once per fusion), ``("each",
    {key: source})`` (computed once per fusion ``key``, from the operands' values of
    ``source``: the same fusion, or the one whose output it reads), ``("pick", key)``
    (reads one value, has one); why
    an equation is refused; the ``id`` of every top-level equation (a dot of several
    values inside a call is not followed). ``plans``: per dot equation its
    :class:`._hlo.DotPlan` or None; ``facts``: the module's :class:`._hlo.Emitters`."""
    keys_of: dict = {}  # var -> frozenset of fusion names
    decisions: dict = {}
    refusals: dict = {}
    sites = list(facts.sites) if facts is not None else []
    reads = dict(facts.reads) if facts is not None else {}
    top = set()
    twins: dict = {}
    for e in jaxpr.eqns:
        twins.setdefault(_key(e), []).append(e)
    for e in jaxpr.eqns:
        top.add(id(e))
        plan = plans.get(id(e)) if e.primitive.name == "dot_general" else None
        if plan is not None and plan.variants:
            keys = frozenset(name for name, _, _ in plan.variants)
            decisions[id(e)] = ("dot", keys)
            keys_of[e.outvars[0]] = keys
            continue
        held = [keys_of[v] for v in e.invars if not isinstance(v, jcore.Literal) and v in keys_of]
        if not held:
            continue
        common = frozenset.intersection(*held)
        name = e.primitive.name
        shown = ", ".join(f"%{k}" for k in sorted(common))
        if name in MOVE:
            if not common:
                refusals[id(e)] = "it reads values of two dots that no one fusion holds"
                continue
            decisions[id(e)] = ("each", {k: k for k in common})
            for v in e.outvars:
                keys_of[v] = common
            continue
        if any(True for _ in util.sub_jaxprs(e)):
            refusals[id(e)] = (
                f"a value with one GPU value per fusion ({shown}) enters {name}: not covered"
            )
            continue
        if plan is not None:  # a dot runs in its GEMM fusion
            fus = frozenset({plan.fusion})
        else:
            fus = frozenset()
            others = [t for t in twins.get(_key(e), []) if t is not e]
            for twin in [e, *others]:  # its own first; XLA keeps one of equal operations
                fit = _hlo_frames.fitting(twin, sites, lambda s: s.frames, lambda s: s.prim)
                fus = frozenset(s.fusion for s in fit)
                if fus:
                    break
        if not fus:
            refusals[id(e)] = (
                f"it reads a dot's value that XLA computes once in each of {shown} (split-K "
                "partials reduced in each in its own order), and the module's stack frames "
                "do not show which fusion runs it"
            )
            continue
        # a fusion that does not compute the value reads it from memory: from the one
        # fusion holding it whose output it reads (the module's data flow)
        src = {}
        for f in sorted(fus):
            held_here = common & reads.get(f, frozenset()) if f not in common else {f}
            if len(held_here) == 1:
                src[f] = next(iter(held_here))
        if len(src) < len(fus):
            other = ", ".join(f"%{k}" for k in sorted(fus - set(src)))
            refusals[id(e)] = (
                f"it reads a dot's value that XLA computes once in each of {shown}, and "
                f"runs in {other}, which reads it from memory, and not from one fusion that "
                "holds it: which value was stored is not shown"
            )
        elif len(fus) == 1:
            decisions[id(e)] = ("pick", next(iter(src.values())))
        else:
            decisions[id(e)] = ("each", src)
            for v in e.outvars:
                keys_of[v] = fus
    for v in jaxpr.outvars:
        if not isinstance(v, jcore.Literal) and v in keys_of:
            src = next((e for e in jaxpr.eqns if v in e.outvars), None)
            if src is not None:
                refusals[id(src)] = (
                    "a function output with one GPU value per fusion "
                    f"({', '.join(sorted(keys_of[v]))}): which one the GPU returns is not shown"
                )
    return decisions, refusals, top
