"""Walking and re-evaluating jaxprs: the helpers that ``gpu_replay`` and policies share.

A function is traced to a jaxpr and evaluated one equation at a time, some equations
replaced; these name the equations that hold further jaxprs, find the primitives inside
them and bind an equation as it is.
"""

from __future__ import annotations

#: primitives that call one jaxpr with their own inputs (the parameter that holds it);
#: evaluating that jaxpr in their place gives the same values
CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr",
         "core_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr",
         "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr"}  # fmt: skip


def closed(j) -> tuple:
    """``(jaxpr, consts)`` of a closed or an open jaxpr."""
    return (j.jaxpr, j.consts) if hasattr(j, "consts") else (j, ())


def sub_jaxprs(eqn):
    """The jaxprs held in ``eqn``'s parameters (open), in parameter order."""
    for v in eqn.params.values():
        for x in v if isinstance(v, (tuple, list)) else (v,):
            if hasattr(x, "eqns") or hasattr(x, "jaxpr"):
                yield closed(x)[0]


def contains(jaxpr, names) -> bool:
    """Whether a primitive named in ``names`` occurs in ``jaxpr`` or a jaxpr inside it."""
    return any(
        e.primitive.name in names or any(contains(j, names) for j in sub_jaxprs(e))
        for e in jaxpr.eqns
    )


def bind(eqn, ins) -> list:
    """``eqn``'s primitive applied to ``ins`` with its own parameters: the outputs, a list."""
    bound = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(bound, tuple):  # primitives that take functions: (subfuns, params)
        subfuns, params = bound
        outs = eqn.primitive.bind(*subfuns, *ins, **params)
    else:
        outs = eqn.primitive.bind(*ins, **bound)
    return list(outs) if eqn.primitive.multiple_results else [outs]
