"""Which linearization of ``tanh`` the jax that compiled a module wrote, read off the
module.

The gradient of ``t = tanh(x)`` is ``g * (1 - t**2)``, and jax versions write it with
different roundings:

- jax 0.10 (``ad.defjvp2`` of ``tanh_p`` in ``jax/_src/lax/lax.py``) writes the tangent
  ``(g + g * t) * (1 - t)``, which its transpose turns into ``e + e * t`` with
  ``e = g * (1 - t)``;
- jax 0.11 writes ``g * one_minus_square(t)``, a primitive of its own that it lowers to
  ``(1 + t) * (1 - t)`` (its docstring and its own HLO before any XLA pass, dumped on an
  H200 for the captured block step).

A replay traces the function with the jax it runs under, so where the capture's jax was
another the jaxpr is not what the GPU computed. The module shows which form it holds:
in each fusion that computes ``tanh``, the ``1 - t`` of the gradient is multiplied by
``t + 1`` (``"product"``: jax 0.11) or by something else (``"other"``). A module with
both, or with neither, decides nothing.
"""

from __future__ import annotations

from ._hlo_text import Computation, _const_value

__all__ = ["tanh_gradient"]


def _is_one(comp: Computation, name: str) -> bool:
    """``name`` is the constant 1 or a broadcast of it."""
    return _const_value(comp, comp.instrs.get(name)) == 1.0


def _plus_one(comp: Computation, name: str, t: str) -> bool:
    """``name`` is ``t + 1`` (either order)."""
    ins = comp.instrs.get(name)
    if ins is None or ins.opcode != "add" or len(ins.operands) != 2:
        return False
    a, b = ins.operands
    return (a == t and _is_one(comp, b)) or (b == t and _is_one(comp, a))


def tanh_gradient(comps: dict) -> str:
    """``"product"`` where every ``1 - t`` of an f32 ``t = tanh(x)`` in the module is
    only ever multiplied by ``t + 1`` (jax 0.11's ``one_minus_square``), ``"other"``
    where some ``1 - t`` is used otherwise, ``""`` where the module computes none."""
    forms = set()
    for comp in comps.values():
        tanhs = {i.name for i in comp.order if i.opcode == "tanh" and i.dtype == "f32"}
        for s in comp.order:
            if s.opcode != "subtract" or len(s.operands) != 2:
                continue
            one, t = s.operands
            if t not in tanhs or not _is_one(comp, one):
                continue
            for u in comp.users(s.name):
                other = [o for o in u.operands if o != s.name]
                product = u.opcode == "multiply" and len(other) == 1
                forms.add("product" if product and _plus_one(comp, other[0], t) else "other")
    if forms == {"product"}:
        return "product"
    return "other" if forms else ""
