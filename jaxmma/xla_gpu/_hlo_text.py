"""The text of a compiled HLO module, read: :class:`Instr` and :class:`Computation`,
:func:`parse` and :func:`entry_types`, and the small helpers on one instruction or one
computation's graph that the HLO reader's other modules share (called computations,
parameter numbers, users, layouts, the dimension a bitcast or transpose keeps, constants
+0 and powers of two)."""

from __future__ import annotations

import dataclasses
import json
import math
import re

#: HLO element types -> jaxmma format names
TYPES = {"bf16": "bf16", "f16": "f16", "f32": "f32", "f8e4m3fn": "e4m3", "f8e5m2": "e5m2"}
GEMM_KINDS = ("__triton_nested_gemm_fusion", "__triton_gemm")


@dataclasses.dataclass(frozen=True)
class Instr:
    name: str
    type: str
    opcode: str
    operands: tuple
    attrs: str
    args: str = ""  # the text between the opcode's parentheses

    @property
    def dtype(self) -> str:
        return self.type.split("[", 1)[0]

    @property
    def shape(self) -> tuple:
        m = re.match(r"\w+\[([\d,]*)\]", self.type)
        if not m:
            return ()
        return tuple(int(d) for d in m.group(1).split(",") if d)

    def attr(self, key: str) -> str | None:
        m = re.search(rf"(?:^|, ){re.escape(key)}=(\{{[^}}]*\}}|[^,]*)", self.attrs)
        return m.group(1) if m else None

    def dims(self, key: str) -> tuple:
        v = self.attr(key)
        if v is None:
            return ()
        return tuple(int(d) for d in v.strip("{}").split(",") if d)

    def backend_config(self) -> dict:
        i = self.attrs.find("backend_config=")
        if i < 0:
            return {}
        text = self.attrs[i + len("backend_config=") :]
        try:
            obj, _ = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise ValueError(f"%{self.name}: its backend_config is not JSON") from None
        return obj

    def op_name(self) -> str:
        m = re.search(r'op_name="([^"]*)"', self.attrs)
        return m.group(1) if m else ""

    def attr_keys(self) -> list:
        """The names of the instruction's attributes (``key=value`` at the top level)."""
        keys, depth, quote, start = [], 0, False, 0
        s = self.attrs
        for j, c in enumerate(s + ","):
            if c == '"' and (j == 0 or s[j - 1] != "\\"):
                quote = not quote
            elif quote:
                continue
            elif c in "{([":
                depth += 1
            elif c in "})]":
                depth -= 1
            elif c == "," and depth == 0:
                part = s[start:j].strip()
                if part:
                    keys.append(part.split("=", 1)[0].strip())
                start = j + 1
        return keys


@dataclasses.dataclass
class Computation:
    name: str
    instrs: dict
    order: list
    root: str = ""  # the name of its ROOT instruction

    def users(self, name: str) -> list:
        return [i for i in self.order if name in i.operands]


def _matching(s: str, i: int, open_: str, close: str) -> int:
    """Index just after the bracket that closes the one at ``s[i]``."""
    depth = 0
    quote = False
    for j in range(i, len(s)):
        c = s[j]
        if c == '"' and s[j - 1] != "\\":
            quote = not quote
        elif quote:
            continue
        elif c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError(f"malformed HLO: unbalanced {open_!r} in {s[:80]!r}")


_HEAD = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_LINE = re.compile(r"^\s*(ROOT\s+)?%([\w.\-]+)\s*=\s*")


def parse(text: str) -> tuple:
    """``(computations by name, entry name)`` of a module's text."""
    if not isinstance(text, str):
        raise TypeError(
            f"compiled_text: expected the str of compiled.as_text(), got {type(text).__name__}"
        )
    if not text.lstrip().startswith("HloModule"):
        raise ValueError(
            "compiled_text: malformed HLO: it does not start with 'HloModule' (pass the "
            "compiled module's text, jax.jit(f).lower(*args).compile().as_text(), not the "
            "lowered StableHLO of .lower(*args).as_text())"
        )
    modules = sum(1 for line in text.splitlines() if line.startswith("HloModule"))
    if modules > 1:
        raise ValueError(
            f"compiled_text: {modules} HLO modules in one text; pass each module's "
            "compiled.as_text() on its own"
        )
    comps, entry, cur = {}, None, None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if cur is None:
            m = _HEAD.match(s)
            if m:
                cur = Computation(m.group(2), {}, [])
                if m.group(1):
                    entry = cur.name
            continue
        if s == "}":
            comps[cur.name] = cur
            cur = None
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"compiled_text: malformed HLO at line {n}: {s[:100]!r}")
        rest = line[m.end() :]
        if rest.startswith("("):
            j = _matching(rest, 0, "(", ")")
            typ, rest = rest[:j], rest[j:].lstrip()
        else:
            typ, _, rest = rest.partition(" ")
        op = re.match(r"([\w\-]+)\(", rest)
        if not op:
            raise ValueError(f"compiled_text: malformed HLO at line {n}: {s[:100]!r}")
        j = _matching(rest, op.end() - 1, "(", ")")
        args = rest[op.end() : j - 1]
        operands = tuple(re.findall(r"%([\w.\-]+)", args))
        attrs = rest[j:].lstrip(", ")
        ins = Instr(m.group(2), typ, op.group(1), operands, attrs, args.strip())
        cur.instrs[ins.name] = ins
        cur.order.append(ins)
        if m.group(1):
            cur.root = ins.name
    if cur is not None:
        raise ValueError(f"compiled_text: malformed HLO: computation {cur.name!r} is not closed")
    if entry is None:
        raise ValueError(
            "compiled_text: malformed HLO: no ENTRY computation (pass the whole text of "
            "jax.jit(f).lower(*args).compile().as_text())"
        )
    return comps, entry


def _called(ins: Instr, comps: dict) -> Computation:
    name = ins.attr("calls")
    if name is None or name.lstrip("%") not in comps:
        raise ValueError(f"%{ins.name}: its called computation {name!r} is not in the module")
    return comps[name.lstrip("%")]


def _fusion_config(ins: Instr) -> dict:
    fb = ins.backend_config().get("fusion_backend_config", {})
    return fb


def _reachable(comp: Computation, name: str) -> list:
    seen, todo = [], [name]
    while todo:
        for u in comp.users(todo.pop()):
            if u not in seen:
                seen.append(u)
                todo.append(u.name)
    return seen


LAYOUT_OPS = ("bitcast", "copy", "reshape", "transpose")


def _layout_ok(ins: Instr) -> bool:
    """Whether ``ins`` has the default (descending, row-major) layout or none shown."""
    m = re.search(r"\]\{([\d,]*)\}", ins.type)
    if not m:
        return True
    dims = [int(d) for d in m.group(1).split(",") if d]
    return dims == sorted(dims, reverse=True)


def _bitcast_dim(out: Instr, src: Instr, d: int):
    """The dimension of ``src`` that dimension ``d`` of ``out = bitcast(src)`` holds
    (a bitcast keeps the bytes: the same size at the same place in memory order), or
    None where it holds no single dimension of ``src``."""
    oshape, opos = _physical(out)
    sshape, spos = _physical(src)
    if not 0 <= d < len(out.shape) or oshape[opos[d]] == 1:
        return None
    p = opos[d]
    before = math.prod(oshape[:p])
    back = {q: dim for dim, q in spos.items()}
    for q in range(len(sshape)):
        if math.prod(sshape[:q]) == before and sshape[q] == oshape[p]:
            return back[q]
    return None


def _back(comp: Computation, ins: Instr, d: int):
    """``(instruction, dimension)`` one step towards the dot's operand: the operand of
    ``ins`` and its dimension that dimension ``d`` of ``ins`` holds, through data
    movement and elementwise operations; None where not shown."""
    if ins.opcode == "transpose":
        perm = ins.dims("dimensions")
        src = comp.instrs.get(ins.operands[0])
        return (src, perm[d]) if src is not None and d < len(perm) else None
    if ins.opcode == "bitcast":
        src = comp.instrs.get(ins.operands[0])
        e = _bitcast_dim(ins, src, d) if src is not None else None
        return (src, e) if e is not None else None
    if ins.opcode in ("copy", "convert", "maximum", "multiply"):
        srcs = [comp.instrs.get(o) for o in ins.operands]
        main = [
            x for x in srcs
            if x is not None and x.shape == ins.shape and not _is_zero(comp, x)
            and not _pow2_const(comp, x)
        ]  # fmt: skip
        return (main[0], d) if len(main) == 1 else None
    return None


def _const_value(comp: Computation, ins) -> float | None:
    """The value of ``ins`` where it is a scalar constant or a broadcast of one, else
    None."""
    while ins is not None and ins.opcode == "broadcast":
        ins = comp.instrs.get(ins.operands[0])
    if ins is None or ins.opcode != "constant":
        return None
    try:
        return float(ins.args)
    except ValueError:
        return None


def _pow2_const(comp: Computation, ins) -> bool:
    """``ins`` is a constant nonzero finite power of two, or a broadcast of one (a
    product by it is exact inside the normal range)."""
    v = _const_value(comp, ins)
    return v is not None and math.isfinite(v) and v != 0 and math.frexp(abs(v))[0] == 0.5


def _parameter(comp: Computation, k: int) -> Instr | None:
    """Parameter ``k`` of ``comp``, or None."""
    return next((x for x in comp.order if x.opcode == "parameter" and _index(x) == k), None)


def _index(p: Instr) -> int:
    return int(p.args) if p.args.isdigit() else -1


def _is_zero(comp: Computation, ins) -> bool:
    """``ins`` is the constant +0 or a broadcast of it."""
    while ins is not None and ins.opcode == "broadcast":
        ins = comp.instrs.get(ins.operands[0])
    return ins is not None and ins.opcode == "constant" and ins.args in ("0", "0.0")


def _physical(ins: Instr) -> tuple:
    """``(sizes in memory order, major first; position of each logical dimension)`` of
    ``ins``'s array (its layout ``{minor, ..., major}``; none shown: row-major)."""
    shape = ins.shape
    m = re.search(r"\]\{([\d,]*)", ins.type)
    minor = [int(d) for d in m.group(1).split(",") if d] if m else []
    if sorted(minor) != list(range(len(shape))):
        minor = list(range(len(shape)))[::-1]
    major = minor[::-1]
    return tuple(shape[d] for d in major), {d: i for i, d in enumerate(major)}


#: HLO element type names of numpy's dtypes (the function's arguments and results)
HLO_TYPES = {
    "float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64",
    "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2", "int8": "s8", "int16": "s16",
    "int32": "s32", "int64": "s64", "uint8": "u8", "uint16": "u16", "uint32": "u32",
    "uint64": "u64", "bool": "pred",
}  # fmt: skip


def _types(text: str) -> list:
    return [(t, tuple(int(d) for d in s.split(",") if d))
            for t, s in re.findall(r"(\w+)\[([\d,]*)\]", text)]  # fmt: skip


def entry_types(text: str) -> tuple:
    """``(parameters, results)`` of the module's entry computation: each a list of
    ``(HLO element type, shape)``, the parameters by number, the results flattened."""
    comps, entry = parse(text)
    comp = comps[entry]
    params = sorted((_index(i), i) for i in comp.order if i.opcode == "parameter")
    root = comp.instrs.get(comp.root) if comp.root else (comp.order[-1] if comp.order else None)
    return (
        [(i.dtype, i.shape) for _, i in params],
        _types(root.type) if root is not None else [],
    )
