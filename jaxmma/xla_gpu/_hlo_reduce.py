"""How XLA split a dot's K and padded it: the split-K reduces of a GEMM fusion's
partials, the order and output type of their adds (:mod:`._xla_reduce`), that the S
slices are contiguous cuts of K, and the +0 elements XLA appended to K before the GEMM."""

from __future__ import annotations

import math
import re

from . import _xla_reduce
from ._hlo_known import ROUNDED, _config_extra
from ._hlo_text import (
    LAYOUT_OPS,
    TYPES,
    Computation,
    Instr,
    _back,
    _called,
    _fusion_config,
    _index,
    _is_zero,
    _layout_ok,
    _physical,
    _reachable,
)


def _adds(comps, red: Instr) -> bool:
    """Whether ``red`` reduces with one add (a sum)."""
    body = comps.get((red.attr("to_apply") or "").lstrip("%"))
    return body is not None and [i.opcode for i in body.order if i.opcode != "parameter"] == ["add"]


def _split_reduces(comps, parent: Computation, fusion: Instr, nb: int, f32: bool, rmap=None):
    """The split-K reduces of ``fusion``'s output: ``[(user fusion, reduce, its
    computation), ...]``, empty when its output is not reduced over a batch dimension
    (a dot XLA did not split: its users read the dot's values).

    A split-K reduce is a ``reduce`` in a fusion reading the GEMM fusion's output
    (directly or through bitcasts) as the parameter it reduces, over one batch
    dimension of the dot, of f32 partials. Every such reduce must be over the same
    dimension; where one is found, any other use of the partials (a reduce of another
    kind, an elementwise use of the parameter, a use outside a fusion) is a ValueError:
    not understood."""
    values, todo = [fusion.name], [fusion.name]
    while todo:  # the fusion's output and its bitcasts
        for u in parent.users(todo.pop()):
            if u.opcode == "bitcast" and u.name not in values and _layout_ok(u):
                values.append(u.name)
                todo.append(u.name)
    found, other = [], []
    for user in parent.order:
        if not set(user.operands) & set(values) or user.name in values:
            continue
        if user.opcode != "fusion":
            other.append(f"%{user.name} ({user.opcode})")
            continue
        comp = _called(user, comps)
        for p in comp.order:
            i = _index(p) if p.opcode == "parameter" else -1
            if i < 0 or i >= len(user.operands) or user.operands[i] not in values:
                continue
            for u in comp.users(p.name):
                dims = u.dims("dimensions")
                if (
                    rmap is not None
                    and u.opcode == "reduce"
                    and u.operands[:1] == (p.name,)
                    and user.operands[i] == fusion.name
                ):
                    held = [rmap[d] if 0 <= d < len(rmap) else None for d in dims]
                    if None in held and not _adds(comps, u):
                        other.append(f"%{u.name} ({u.opcode}) in %{user.name}")
                        continue
                    if None in held:
                        raise ValueError(
                            f"%{fusion.name}: %{u.name} in %{user.name} reduces dimensions "
                            f"{list(dims)} of its output, which the GEMM fusion's root "
                            "does not show to be dimensions of its dot: not understood"
                        )
                    dims = tuple(held)
                if (
                    u.opcode == "reduce"
                    and u.operands[:1] == (p.name,)
                    and len(dims) == 1
                    and dims[0] < nb
                    and f32
                    and user.operands[i] == fusion.name
                ):  # a reduce of another kind than one add is refused by _reduce_order
                    found.append((user, u, comp))
                elif u.opcode == "reduce" and _adds(comps, u) and user.operands[i] != fusion.name:
                    raise ValueError(  # partials summed after a bitcast: not guessed
                        f"%{fusion.name}: its output reaches %{u.name} in %{user.name} through "
                        f"%{user.operands[i]}, other than as the operand of one split-K reduce: "
                        "not understood"
                    )
                else:
                    other.append(f"%{u.name} ({u.opcode}) in %{user.name}")
    if found:
        if len({r.dims("dimensions") for _, r, _ in found}) != 1 or other:
            names = [f"%{r.name} in %{u.name}" for u, r, _ in found]
            raise ValueError(
                f"%{fusion.name}: its split-K partials are reduced by {names} and also "
                f"read by {other or 'reduces over other dimensions'}: not understood"
            )
    return found


def _root_dims(comp: Computation, dot: Instr):
    """Per dimension of the GEMM fusion's root, the dimension of its dot it holds (None
    where the root's layout operations do not show one)."""
    root = comp.instrs.get(comp.root) if comp.root else (comp.order[-1] if comp.order else None)
    if root is None:
        return None
    chain = {u.name for u in _reachable(comp, dot.name)} | {dot.name}
    out: list = []
    for d in range(len(root.shape)):
        at: tuple | None = (root, d)
        while at is not None and at[0].name != dot.name:
            ins = at[0]
            if ins.opcode in LAYOUT_OPS:
                at = _back(comp, ins, at[1])
                continue
            # an elementwise epilogue (ROUNDED): the one operand carried from the dot
            carried = [comp.instrs.get(o) for o in ins.operands if o in chain]
            keep = len(carried) == 1 and carried[0] is not None
            keep = keep and (ins.opcode, ins.dtype) in ROUNDED["epilogue"]
            at = (carried[0], at[1]) if keep and carried[0].shape == ins.shape else None
        out.append(at[1] if at is not None else None)
    return out


def _split_contiguous(parent, fusion, comp, dot, split_at: int, where: str) -> None:
    """ValueError unless each operand's split (the dot's batch dimension of S slices and
    its contracting dimension) is S contiguous slices of one dimension of the value the
    GEMM fusion reads: traced from the dot back to the fusion's parameter, the split
    dimension sits just above the slice in memory order, and the value the parameter is
    a bitcast of holds one dimension of exactly S x slice elements there."""
    lb, rb = dot.dims("lhs_batch_dims"), dot.dims("rhs_batch_dims")
    lc, rc = dot.dims("lhs_contracting_dims"), dot.dims("rhs_contracting_dims")
    for op, bd, cd in ((dot.operands[0], lb, lc), (dot.operands[1], rb, rc)):
        ins = comp.instrs.get(op)
        dims = [bd[split_at], cd[0]]
        while ins is not None and ins.opcode != "parameter":
            steps = [_back(comp, ins, d) for d in dims]
            if None in steps or steps[0][0] is not steps[1][0]:
                ins = None
                break
            ins, dims = steps[0][0], [e for _, e in steps]
        i = _index(ins) if ins is not None else -1
        if not 0 <= i < len(fusion.operands):
            raise ValueError(
                f"{where}: the split dimensions of %{dot.name}'s operand %{op} are not "
                "traced to a parameter of the GEMM fusion: how K was split is not shown"
            )
        shape, pos = _physical(ins)
        a, b = pos[dims[0]], pos[dims[1]]
        src = parent.instrs.get(fusion.operands[i])
        while src is not None and src.opcode == "bitcast":
            src = parent.instrs.get(src.operands[0])
        sshape = _physical(src)[0] if src is not None else ()
        before = math.prod(shape[:a])
        ok = b == a + 1 and any(
            math.prod(sshape[:q]) == before and sshape[q] == shape[a] * shape[b]
            for q in range(len(sshape))
        )
        if not ok:
            raise ValueError(
                f"{where}: the {shape[a]} slices of K in operand %{fusion.operands[i]} are "
                f"not shown to be contiguous cuts of one dimension of "
                f"%{src.name if src is not None else '?'}: not understood"
            )


def _reduce_order(comps, user: Instr, red: Instr, comp: Computation, S: int, where: str):
    dims = red.dims("dimensions")
    to_apply = red.attr("to_apply")
    body = comps.get((to_apply or "").lstrip("%"))
    if body is None or [i.opcode for i in body.order if i.opcode != "parameter"] != ["add"]:
        raise ValueError(f"{where}: %{red.name} reduces with something other than one f32 add")
    init = comp.instrs.get(red.operands[1]) if len(red.operands) > 1 else None
    if init is None or init.opcode != "constant" or init.args not in ("0", "0.0"):
        raise ValueError(f"{where}: %{red.name} starts from something other than +0")
    kind = user.attr("kind")
    if kind == "kLoop":
        return "sequential", "loop fusion"
    if kind == "kInput":
        return _xla_reduce.native_order(S, where), "native reduction"
    cfg = _fusion_config(user)
    if kind == "kCustom" and cfg.get("kind") == "__triton":
        extra = _config_extra(cfg)
        if extra:
            raise ValueError(
                f"{where}: the Triton reduce %{user.name} shows {', '.join(extra)} in its "
                "config, which the captured modules do not: not covered"
            )
        blc = cfg.get("block_level_fusion_config", {})
        tiles = blc.get("output_tiles", [])
        tile = [int(t) for t in tiles[0]["sizes"]] if len(tiles) == 1 else None
        if tile is not None and dims == (1,):
            tile = _batch_tile(comp, red, tile)
        if tile is None or dims not in ((0,), (1,)):
            raise ValueError(
                f"{where}: the Triton reduce %{user.name} (tiles {tiles}, dimensions {dims}) "
                "is not covered (one output tile, a reduce over dimension 0, or over "
                "dimension 1 with one element of dimension 0 a program)"
            )
        warps = int(blc.get("num_warps", 0))
        tma = bool(blc.get("is_tma_allowed", False))
        minor = red.shape[-1] if red.shape else 1
        if not tma and minor % 4:
            raise ValueError(
                f"{where}: the Triton reduce %{user.name} has rows of {minor} f32 (not a "
                "multiple of 16 bytes): its vector width is not covered"
            )
        tree = _xla_reduce.triton_tree(S, tile, warps, tma, where)
        return tree, f"Triton reduce (tile {tile}, {warps} warps, tma {tma})"
    raise ValueError(
        f"{where}: the split-K reduce %{user.name} (kind {kind}, "
        f"{cfg.get('kind')!r}) is not covered"
    )


def _batch_tile(comp: Computation, red: Instr, tile: list) -> list | None:
    """For a reduce over dimension 1 of ``[B, S, ...]`` partials: the output tile in the
    reduce's own dimensions (the fusion's root is the reduce, or a transpose of it)
    without its first, where that is 1; else None. A block ``[1, S, t...]`` is laid out
    as ``[S, t...]`` (:func:`._xla_reduce.triton_tree`): the lanes and warps that the
    kept dimensions leave go to the partials' dimension first, and the one batch row
    only repeats what is left, which the rule refuses where it exceeds S either way."""
    root = comp.instrs.get(comp.root)
    if root is not None and root.opcode == "transpose" and root.operands == (red.name,):
        perm = root.dims("dimensions")
        if sorted(perm) != list(range(len(tile))):
            return None
        own = [0] * len(tile)
        for i, p in enumerate(perm):
            own[p] = tile[i]
        tile = own
    elif root is None or root.name != red.name:
        return None
    return tile[1:] if len(tile) >= 2 and tile[0] == 1 else None


def _reduced_type(red: Instr, comp: Computation, where: str) -> str:
    """The format the split-K sum reaches its users in: the type of the conversions
    that are its only users, or f32 where it is used as it is (a root, an elementwise
    use); a ValueError where both happen (two values of one dot)."""
    users = comp.users(red.name)
    kinds = {TYPES.get(u.dtype, u.dtype) if u.opcode == "convert" else "f32" for u in users}
    if not users:
        kinds = {"f32"}
    if len(kinds) != 1:
        raise ValueError(
            f"{where}: the split-K sum %{red.name} is used both converted and as it is "
            f"({sorted(kinds)}): two values of one dot, not covered"
        )
    return kinds.pop()


#: operations between a GEMM fusion's parameter and its dot that keep a +0 element +0
#: (so that zeros XLA appended to K stay zeros): conversions between floats, and
#: ``maximum`` with a broadcast constant 0 (a fused ReLU)
_KEEPS_ZERO = ("convert", "maximum")


def _to_parameter(comp: Computation, name: str):
    """The parameter that the dot operand ``name`` of a GEMM computation reads, through
    operations that keep +0 elements +0 and the shape; None otherwise."""
    ins = comp.instrs.get(name)
    while ins is not None and ins.opcode != "parameter":
        if ins.opcode not in _KEEPS_ZERO:
            return None
        rest = [comp.instrs.get(o) for o in ins.operands[1:]]
        if ins.opcode == "maximum" and not all(_is_zero(comp, r) for r in rest):
            return None
        nxt = comp.instrs.get(ins.operands[0])
        if nxt is None or nxt.shape != ins.shape:
            return None
        ins = nxt
    return ins


def _pad_of(comps, parent: Computation, name: str):
    """``(pad instruction, its computation, bitcast-free source)`` where the value
    ``name`` of ``parent`` is a ``pad`` (or a fusion whose root is one) seen through
    bitcasts; None otherwise."""
    ins = parent.instrs.get(name)
    while ins is not None and ins.opcode == "bitcast":
        ins = parent.instrs.get(ins.operands[0])
    if ins is None:
        return None
    index = None
    if ins.opcode == "get-tuple-element":  # one output of a multi-output fusion
        m = re.search(r"index=(\d+)", ins.attrs)
        index = int(m.group(1)) if m else None
        ins = parent.instrs.get(ins.operands[0]) if m else None
        if ins is None or ins.opcode != "fusion":
            return None
    if ins.opcode == "pad" and index is None:
        return ins, parent
    if ins.opcode == "fusion":
        comp = _called(ins, comps)
        root = comp.order[-1] if comp.order else None
        if root is not None and index is not None:
            ok = root.opcode == "tuple" and index < len(root.operands)
            root = comp.instrs.get(root.operands[index]) if ok else None
        if root is not None and root.opcode == "pad":
            return root, comp
    return None


def _k_padding(comps, parent, fusion, comp, dot, split_at, where):
    """``(K, padded K)`` where XLA appended +0 elements to the dot's K before its GEMM
    fusion, else None.

    Seen in the module as a ``pad`` (alone or the root of a loop fusion) with +0 high
    padding on one dimension, bitcast into the GEMM fusion's operand so that the padded
    dimension is exactly the operand's K (its split dimension and the slice, when XLA
    split K). Both operands must be padded alike, and nothing but conversions and a
    ReLU may stand between the fusion's parameters and the dot (each keeps a +0 +0).
    A pad of another form on K is a ValueError; a pad of M or N is not K padding (the
    dot's M or N then differ from the function's, and the dot is not paired)."""
    lb, rb = dot.dims("lhs_batch_dims"), dot.dims("rhs_batch_dims")
    lc, rc = dot.dims("lhs_contracting_dims"), dot.dims("rhs_contracting_dims")
    reads = []
    for op, bd, cd in ((dot.operands[0], lb, lc), (dot.operands[1], rb, rc)):
        group = ([bd[split_at]] if split_at is not None else []) + [cd[0]]
        param = _to_parameter(comp, op)
        i = _index(param) if param is not None else -1
        found = (
            _pad_of(comps, parent, fusion.operands[i]) if 0 <= i < len(fusion.operands) else None
        )
        if found is None:
            reads.append(None)
            continue
        pad, pcomp = found
        cfg = [tuple(int(x) for x in d.split("_")) for d in (pad.attr("padding") or "").split("x")]
        shape, pos = _physical(pad)  # bitcasts keep the bytes: compare in memory order
        g, gpos = _physical(param)
        padded = [pos[j] for j, c in enumerate(cfg) if any(c)]
        at = [gpos[d] for d in group]
        lo, hi = at[0], at[-1] + 1
        if at != list(range(lo, hi)):
            reads.append(None)  # the split and the slice not adjacent in memory
            continue
        maps = (
            len(padded) == 1
            and len(cfg) == len(shape)
            and (
                math.prod(shape[: padded[0]]) == math.prod(g[:lo])
                and shape[padded[0]] == math.prod(g[lo:hi])
                and math.prod(shape[padded[0] + 1 :]) == math.prod(g[hi:])
            )
        )
        if not maps:
            if any(
                math.prod(shape[:j]) < math.prod(g[:hi])
                and math.prod(shape[: j + 1]) > math.prod(g[:lo])
                for j in padded
            ):
                raise ValueError(
                    f"{where}: the operand %{fusion.operands[i]} is padded by %{pad.name} "
                    f"(padding={pad.attr('padding')}) across its K in a way not understood"
                )
            reads.append(None)
            continue
        padded = [j for j, c in enumerate(cfg) if any(c)]
        c = cfg[padded[0]]
        value = pcomp.instrs.get(pad.operands[1]) if len(pad.operands) > 1 else None
        if len(c) != 2 or c[0] != 0 or c[1] <= 0 or not _is_zero(pcomp, value):
            raise ValueError(
                f"{where}: %{pad.name} pads K with padding={pad.attr('padding')} and value "
                f"{value.args if value is not None else '?'}: only +0 elements appended "
                "to K are covered"
            )
        n = pad.shape[padded[0]]
        reads.append((n - c[1], n))
    if reads[0] is None and reads[1] is None:
        return None
    if reads[0] != reads[1]:
        raise ValueError(
            f"{where}: K is padded on one operand only or unalike ({reads}): not understood"
        )
    return reads[0]
