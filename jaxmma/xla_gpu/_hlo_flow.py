"""The module's data flow: per GEMM fusion, the entry parameters each operand of its dot
depends on (:func:`sources`), and the GEMMs that compute several dots of the function at
once, one operand a concatenate of theirs (:func:`merges`, :class:`Merge`)."""

from __future__ import annotations

import dataclasses
import math
import re

from ._hlo_text import (
    GEMM_KINDS,
    Computation,
    Instr,
    _back,
    _bitcast_dim,
    _called,
    _fusion_config,
    _index,
    _parameter,
    _physical,
    parse,
)


def _topo(comp: Computation) -> list:
    """``comp``'s instructions with each after its operands (the text's own order is not
    relied on); a ValueError for an operand that is not in ``comp`` or a cycle."""
    done: dict = {}
    out = []
    for first in comp.order:
        stack = [(first, 0)]
        while stack:
            ins, k = stack.pop()
            if done.get(ins.name) == 2:
                continue
            if k < len(ins.operands):
                stack.append((ins, k + 1))
                nxt = comp.instrs.get(ins.operands[k])
                if nxt is None:
                    raise ValueError(
                        f"compiled_text: %{ins.name} reads %{ins.operands[k]}, which is not "
                        f"in {comp.name}: malformed HLO"
                    )
                if done.get(nxt.name) == 1:
                    raise ValueError(f"compiled_text: a cycle through %{nxt.name}: malformed HLO")
                if done.get(nxt.name) is None:
                    done[nxt.name] = 1
                    stack.append((nxt, 0))
            else:
                done[ins.name] = 2
                out.append(ins)
            if k == 0 and done.get(ins.name) is None:
                done[ins.name] = 1
    return out


@dataclasses.dataclass(frozen=True)
class Ranged:
    """What a merged GEMM's output depends on, by its pieces: the entry parameters of
    every element (``rest``: the shared operand's) and, along dimension ``dim``, those
    of each piece's span (``spans``: ``((start, stop), parameters)``)."""

    dim: int
    spans: tuple
    rest: frozenset

    def all(self) -> frozenset:
        return self.rest.union(*(d for _, d in self.spans))


def _sliced(inner: Computation, i: int, r: Ranged) -> frozenset | None:
    """What parameter ``i`` of the fused computation ``inner`` brings in where every use
    of it is a ``slice`` within the spans of ``r`` along ``r.dim`` (full along the
    others): ``r.rest`` and those spans' parameters; None where it is used otherwise."""
    p = _parameter(inner, i)
    users = inner.users(p.name) if p is not None else []
    if not users:
        return None
    out = r.rest
    for u in users:
        m = re.search(r"slice=\{([^}]*)\}", u.attrs) if u.opcode == "slice" else None
        ranges = re.findall(r"\[(\d+):(\d+)(?::(\d+))?\]", m.group(1)) if m else []
        if len(ranges) != len(p.shape) or not 0 <= r.dim < len(ranges):
            return None
        for d, (a, b, step) in enumerate(ranges):
            if step not in ("", "1") or (d != r.dim and (int(a), int(b)) != (0, p.shape[d])):
                return None
        a, b = int(ranges[r.dim][0]), int(ranges[r.dim][1])
        hit = [deps for (lo, hi), deps in r.spans if lo < b and a < hi]
        if not hit:
            return None
        out = out.union(*hit)
    return out


def _flow(
    comps: dict, comp: Computation, params: list, memo: dict, ranged: dict | None = None
) -> dict:
    """Per instruction of ``comp``, the entry parameters its value depends on (a
    frozenset; a list of them for a tuple), given those of its parameters. Fusions are
    followed inside (a multi-output fusion's outputs each depend on what they read);
    anything else depends on all its operands. ``ranged``: per merged GEMM fusion (by
    name), a function of its operands' parameters giving its :class:`Ranged` output; a
    fusion that only slices one of them within some pieces depends on those pieces."""
    env: dict = {}

    def of(name):
        v = env.get(name, frozenset())
        if isinstance(v, Ranged):
            return v.all()
        return frozenset().union(*v) if isinstance(v, list) else v

    for ins in _topo(comp):
        if ins.opcode == "parameter":
            i = _index(ins)
            env[ins.name] = params[i] if 0 <= i < len(params) else frozenset()
        elif ranged and ins.name in ranged:
            env[ins.name] = ranged[ins.name]([of(o) for o in ins.operands])
        elif ins.opcode == "fusion" and (ins.attr("calls") or "").lstrip("%") in comps:
            inner = comps[(ins.attr("calls") or "").lstrip("%")]
            ops = []
            for k, o in enumerate(ins.operands):
                v = env.get(o)
                cut = _sliced(inner, k, v) if isinstance(v, Ranged) else None
                ops.append(cut if cut is not None else of(o))
            key = (inner.name, tuple(ops))
            if key not in memo:
                sub = _flow(comps, inner, list(key[1]), memo)
                memo[key] = sub.get(inner.root or (inner.order[-1].name if inner.order else ""))
            env[ins.name] = memo[key] if memo[key] is not None else frozenset()
        elif ins.opcode == "tuple":
            env[ins.name] = [of(o) for o in ins.operands]
        elif ins.opcode == "get-tuple-element":
            v = env.get(ins.operands[0]) if ins.operands else None
            m = re.search(r"index=(\d+)", ins.attrs)
            k = int(m.group(1)) if m else -1
            env[ins.name] = v[k] if isinstance(v, list) and 0 <= k < len(v) else of(ins.operands[0])
        else:
            env[ins.name] = frozenset().union(*(of(o) for o in ins.operands))
    return env


def sources(text: str) -> dict:
    """Per GEMM fusion of the entry computation (by name), per operand of its dot (lhs,
    rhs), the entry parameters (by number) its values depend on."""
    comps, entry = parse(text)
    comp = comps[entry]
    n = sum(1 for i in comp.order if i.opcode == "parameter")
    memo: dict = {}
    env = _flow(comps, comp, [frozenset({i}) for i in range(n)], memo, _ranged(text, comps, comp))
    out = {}
    for ins in comp.order:
        if ins.opcode != "fusion" or _fusion_config(ins).get("kind") not in GEMM_KINDS:
            continue
        inner = comps.get((ins.attr("calls") or "").lstrip("%"))
        ds = [i for i in inner.order if i.opcode == "dot"] if inner else []
        if len(ds) != 1:
            continue
        ops = []
        for o in ins.operands:
            v = env.get(o, frozenset())
            if isinstance(v, Ranged):
                v = v.all()
            ops.append(frozenset().union(*v) if isinstance(v, list) else v)
        sub = _flow(comps, inner, ops, {})
        out[ins.name] = tuple(sub.get(o, frozenset()) for o in ds[0].operands[:2])
    return out


@dataclasses.dataclass(frozen=True)
class Merge:
    """Several dots of the function computed by one GEMM fusion: one operand of its dot
    is a ``concatenate`` of pieces (seen through bitcasts, copies, transposes, a pad of
    the other dimensions and fusion boundaries) joined along that operand's one free
    dimension, the other operand shared. ``side``: 0 where the lhs is concatenated
    (pieces of rows, M), 1 the rhs (columns, N); ``concat``: the concatenate; ``sizes``:
    each piece's extent along the merged dimension, in order; ``total``: their sum, the
    dot's M or N; ``other``: the shared operand's free size; ``sources``: per piece, the
    entry parameters (by number) its values depend on (None where not read)."""

    side: int
    concat: str
    sizes: tuple
    total: int
    other: int
    sources: tuple | None

    def spans(self) -> list:
        """``(start, stop)`` of each piece along the merged dimension."""
        out, at = [], 0
        for n in self.sizes:
            out.append((at, at + n))
            at += n
        return out


#: data movement a concatenated operand may pass through between its ``concatenate``
#: and the GEMM fusion's dot (each keeps every element's value), and the elementwise
#: prologue inside the GEMM fusion (per element; :func:`._hlo_known._known` checks which)
_MERGE_MOVES = ("bitcast", "copy", "transpose")
_PROLOGUE_ELEMENTWISE = ("convert", "maximum", "multiply")


def _merged_operand(comps, entry: Computation, fusion: Instr, gcomp: Computation, dot, side):
    """The :class:`Merge` one operand of a GEMM fusion's dot shows, or why not (a str),
    or None where it is no concatenate. The value is followed back, tracking the dot
    operand's one free dimension, through the GEMM computation's data movement and
    elementwise prologue to its parameter, the entry's bitcasts, copies and transposes,
    fusions (their root; one output of a multi-output fusion) and pads of the other
    dimensions, until a ``concatenate`` (or anything else: None). A concatenate that does
    not join its pieces along that free dimension (one along K merges a sum of products,
    not dots; a bitcast that mixes the pieces' rows) is a str."""
    key = ("lhs", "rhs")[side]
    op = gcomp.instrs.get(dot.operands[side])
    if op is None:
        return None
    bd, cd = dot.dims(f"{key}_batch_dims"), dot.dims(f"{key}_contracting_dims")
    free = [i for i in range(len(op.shape)) if i not in bd and i not in cd]
    d = free[0] if len(free) == 1 else None
    size = op.shape[free[0]] if len(free) == 1 else None
    stack = [(entry, None), (gcomp, fusion)]  # computations entered, with their callers
    ins, lost = op, None if d is not None else f"%{op.name} has {len(free)} free dimensions"
    for _ in range(10_000):
        comp, caller = stack[-1]
        if ins.opcode == "concatenate":
            break
        nxt, e = None, None
        if ins.opcode == "parameter" and caller is not None:
            i = _index(ins)
            parent = stack[-2][0]
            nxt = parent.instrs.get(caller.operands[i]) if 0 <= i < len(caller.operands) else None
            if nxt is not None and d is not None:
                e = d if (nxt.shape, _physical(nxt)) == (ins.shape, _physical(ins)) else None
                e = e if e is not None else _bitcast_dim(ins, nxt, d)
            stack.pop()
        elif ins.opcode == "fusion" and caller is None and ins is not fusion:
            inner = _called(ins, comps)
            nxt = inner.instrs.get(inner.root)
            if nxt is None or nxt.opcode == "tuple":
                return None
            if d is not None:
                e = d if nxt.shape == ins.shape else _bitcast_dim(ins, nxt, d)
            stack.append((inner, ins))
        elif ins.opcode == "get-tuple-element" and caller is None:
            src = comp.instrs.get(ins.operands[0]) if ins.operands else None
            m = re.search(r"index=(\d+)", ins.attrs)
            if src is None or src.opcode != "fusion" or m is None:
                return None
            inner = _called(src, comps)
            root = inner.instrs.get(inner.root)
            k = int(m.group(1))
            if root is None or root.opcode != "tuple" or k >= len(root.operands):
                return None
            nxt = inner.instrs.get(root.operands[k])
            if nxt is not None and d is not None:
                e = d if nxt.shape == ins.shape else _bitcast_dim(ins, nxt, d)
            stack.append((inner, src))
        elif ins.opcode == "pad":
            pads = (ins.attr("padding") or "").split("x")
            cfg = [tuple(int(x) for x in c.split("_")) for c in pads]
            if d is not None and (d >= len(cfg) or any(cfg[d])):
                lost = f"%{ins.name} pads dimension {d}, the merged one"
            nxt = comp.instrs.get(ins.operands[0]) if ins.operands else None
            e = d if lost is None else None
        elif ins.opcode in _MERGE_MOVES or (comp is gcomp and ins.opcode in _PROLOGUE_ELEMENTWISE):
            step = _back(comp, ins, d) if d is not None else None
            if step is not None:
                nxt, e = step
            elif ins.opcode in _MERGE_MOVES and ins.operands:
                nxt = comp.instrs.get(ins.operands[0])
            else:
                return None
        else:
            return None
        if nxt is None:
            return None
        if d is not None and e is None and lost is None:
            lost = f"%{ins.name} ({ins.opcode}) does not keep the dot's free dimension whole"
        ins, d = nxt, e
    else:
        return None
    where = f"%{fusion.name}: its {key} is the concatenate %{ins.name}"
    cat = ins.dims("dimensions")
    if lost is not None:
        return f"{where}, but {lost}: its pieces are not shown to be whole rows or columns"
    if cat != (d,):
        return (
            f"{where} along dimension {list(cat)}, which the dot reads as another dimension "
            f"than its free one (dimension {d} there): not merged dots (a concatenate along "
            "K sums products of several operands), not covered"
        )
    parts = [comp.instrs[o] for o in ins.operands if o in comp.instrs]
    if d is None:  # lost is then set
        return None
    rest = ins.shape[:d] + ins.shape[d + 1 :]
    if (
        len(parts) != len(ins.operands)
        or any(p.shape[:d] + p.shape[d + 1 :] != rest for p in parts)
        or sum(p.shape[d] for p in parts) != ins.shape[d]
    ):
        return f"{where}, whose operands' shapes do not make its own: inconsistent text"
    if ins.shape[d] != size:
        return f"{where} of {ins.shape[d]} along the dot's {size}: not understood"
    # the data flow of each piece: the entry's, then each computation entered's in turn
    n = sum(1 for i in entry.order if i.opcode == "parameter")
    params = [frozenset({i}) for i in range(n)]
    env = _flow(comps, entry, params, {})
    for inner, call in stack[1:]:
        ops = []
        for o in call.operands if call is not None else ():
            v = env.get(o, frozenset())
            ops.append(frozenset().union(*v) if isinstance(v, list) else v)
        env = _flow(comps, inner, ops, {})
    srcs = []
    for o in ins.operands:
        v = env.get(o, frozenset())
        srcs.append(frozenset().union(*v) if isinstance(v, list) else v)
    other = gcomp.instrs.get(dot.operands[1 - side])
    okey = ("lhs", "rhs")[1 - side]
    ob, oc = dot.dims(f"{okey}_batch_dims"), dot.dims(f"{okey}_contracting_dims")
    ofree = [n for i, n in enumerate(other.shape if other else ()) if i not in ob and i not in oc]
    osize = math.prod(ofree)
    return Merge(side, ins.name, tuple(p.shape[d] for p in parts), size, osize, tuple(srcs))


def _ranged(text: str, comps: dict, comp: Computation) -> dict:
    """Per merged GEMM fusion of rank-2 output whose pieces' parameters are read (by
    name): its output's :class:`Ranged`, as a function of its operands' parameters
    (the shared operand's are the operands' not in any piece: every element's)."""
    out: dict = {}
    for name, m in merges(text).items():
        ins = comp.instrs.get(name)
        if not isinstance(m, Merge) or m.sources is None or ins is None or len(ins.shape) != 2:
            continue
        dim = 0 if m.side == 0 else 1
        inner = comps.get((ins.attr("calls") or "").lstrip("%"))
        root = inner.instrs.get(inner.root) if inner is not None else None
        if root is None or root.opcode != "dot" or ins.shape[dim] != m.total:
            continue  # the output is not the dot's [M, N] as it stands
        if ins.shape[1 - dim] != m.other:
            continue
        spans = tuple(zip(m.spans(), m.sources, strict=True))
        pieces = frozenset().union(*m.sources)

        def make(ops, dim=dim, spans=spans, pieces=pieces):
            rest = frozenset().union(*ops) - pieces
            return Ranged(dim, tuple((sp, d | rest) for sp, d in spans), rest)

        out[name] = make
    return out


def merges(text: str) -> dict:
    """Per GEMM fusion of the entry computation (by name) one of whose dot's operands is
    a ``concatenate``: the :class:`Merge` (several dots of the function in one GEMM),
    or why it is not read as one (a str)."""
    comps, entry = parse(text)
    comp = comps[entry]
    out: dict = {}
    for ins in comp.order:
        if ins.opcode != "fusion" or _fusion_config(ins).get("kind") not in GEMM_KINDS:
            continue
        inner = comps.get((ins.attr("calls") or "").lstrip("%"))
        ds = [i for i in inner.order if i.opcode == "dot"] if inner else []
        if len(ds) != 1 or len(ds[0].operands) < 2:
            continue
        try:
            found = [_merged_operand(comps, comp, ins, inner, ds[0], side) for side in (0, 1)]
        except ValueError as e:  # a computation it calls is not in the module
            found = [f"%{ins.name}: its operands are not read: {e}"]
        found = [f for f in found if f is not None]
        if len(found) > 1:
            out[ins.name] = f"%{ins.name}: both operands of its dot are concatenates: not covered"
        elif found:
            out[ins.name] = found[0]
    return out


#: entry instructions that pass a buffer on without computing (a fusion reading one of
#: them reads what it passes on)
_PASS = ("bitcast", "get-tuple-element", "copy", "tuple")


#: instructions inside a fusion that only move or pad elements (each output element is
#: an input element's bits, or a constant pad)
_MOVES = ("bitcast", "reshape", "transpose", "copy", "slice", "concatenate", "pad", "tuple")


def _moves(inner: Computation, k: int, element: int | None = None) -> bool:
    """Whether parameter ``k`` of the fused computation ``inner`` reaches its root (its
    tuple element ``element``, for a multi-output fusion read through one) only through
    instructions that move elements (:data:`_MOVES`): the fusion's output holds that
    operand's bits where it holds them at all."""
    p = _parameter(inner, k)
    if p is None:
        return False
    todo, seen = [p.name], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for u in inner.users(name):
            if u.opcode not in _MOVES:
                return False
            todo.append(u.name)
    root = inner.instrs.get(inner.root)
    if element is not None and root is not None and root.opcode == "tuple":
        return 0 <= element < len(root.operands) and root.operands[element] in seen
    return inner.root in seen


def reads(text: str) -> dict:
    """Per fusion of the entry computation (by name), the entry fusions whose outputs it
    reads from memory: its operands, looked through the instructions that only pass a
    buffer on (bitcasts, tuple elements, copies), and through fusions that only move an
    operand's elements into their output (a pad or concatenate of it: the bytes read
    are that operand's)."""
    comps, entry = parse(text)
    comp = comps[entry]

    def producers(name: str, seen: set, element: int | None = None) -> set:
        ins = comp.instrs.get(name)
        if ins is None or name in seen:
            return set()
        seen.add(name)
        if ins.opcode == "fusion":
            inner = comps.get((ins.attr("calls") or "").lstrip("%"))
            out = {name}
            for k, o in enumerate(ins.operands):
                if inner is not None and _moves(inner, k, element):
                    out |= producers(o, seen)
            return out
        if ins.opcode == "get-tuple-element" and ins.operands:
            m = re.search(r"index=(\d+)", ins.attrs)
            return producers(ins.operands[0], seen, int(m.group(1)) if m else None)
        if ins.opcode in _PASS:
            return set().union(*(producers(o, seen) for o in ins.operands))
        return set()

    return {
        ins.name: frozenset().union(*(producers(o, set()) for o in ins.operands))
        for ins in comp.order
        if ins.opcode == "fusion"
    }
