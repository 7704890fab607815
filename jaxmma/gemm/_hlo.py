"""Read XLA:GPU's compiled HLO text: for each dot, the ``matmul`` options that give its bits.

``jax.jit(f).lower(*args).compile().as_text()`` on a GPU shows every dot as a Triton GEMM
fusion (``"__triton_nested_gemm_fusion"``). Where XLA split K, the fusion's dot has one
more batch dimension of S slices (``f32[S, ..., M, N]`` partials, K cut into S contiguous
slices of K / S) and a second fusion reduces it; that fusion's emitter fixes the order of
the adds (:mod:`._xla_reduce`). What each part computes (docs/xla_gpu.md, measured on an
H100 with jax 0.11.2):

* bf16 / f16 operands: the ``mma.sync`` m16n8k16 chain (``wgmma`` with 4 warps gives the
  same bits);
* f32 operands at default precision: each rounded to tf32 with ties away from zero, then
  the m16n8k8 tf32 chain;
* fp8 operands: with 4 warps and 64 x 16 or 64 x 32 output tiles, the ``wgmma`` k32
  chain without promotion; with 2 warps and 16 x 8 tiles, both converted exactly to f16,
  then the f16 ``mma.sync`` chain; any other configuration is refused
  (:data:`FP8_ROUTES`);
* the result converted once (round to nearest even) after the reduce.

:func:`dots` returns one :class:`DotPlan` per dot; anything it does not understand raises
a ``ValueError`` naming the instruction and what is not understood. Where XLA merged
several dots into one GEMM (an operand that is a concatenate along its free dimension),
the plan's ``merge`` says so (:func:`merges`) and :meth:`DotPlan.pieces` splits it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

from . import _xla_reduce

ARCH = "sm_90"
#: HLO element types -> jaxmma format names
TYPES = {"bf16": "bf16", "f16": "f16", "f32": "f32", "f8e4m3fn": "e4m3", "f8e5m2": "e5m2"}
GEMM_KINDS = ("__triton_nested_gemm_fusion", "__triton_gemm")
MMA16 = "mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"
TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
WGMMA8 = "wgmma.mma_async.sync.aligned.m64n64k32.f32.{a}.{b}"
#: fp8 GEMM fusions whose route was measured on an H100 (tests/golden/xla: every output
#: of these configurations reproduced): (num_warps, output tile rows and columns) ->
#: ``wgmma`` k32 chain or both operands converted to f16 for the f16 ``mma.sync`` chain
#: in natural K order. Triton's own rule (wgmma for multiples of 4 warps and 64-row
#: tiles) is not enough: a 200 x 8 x 65536 dot with 4 warps and 64-row tiles ran another
#: route, with another K order (docs/xla_gpu.md); other configurations are refused.
FP8_ROUTES = {(4, (64, 16)): "wgmma", (4, (64, 32)): "wgmma", (2, (16, 8)): "f16"}

#: what the captures show of a Triton fusion's backend config (docs/xla_gpu.md, "What the
#: reader trusts"): the keys of ``fusion_backend_config``, and each field of its
#: ``block_level_fusion_config`` with the values seen (None: any value; the reader reads
#: it or it only schedules loads). A key, field or value outside these (another XLA
#: release, a feature the captures never ran: warp specialization, several CTAs) refuses
#: the fusion rather than being ignored.
FUSION_FIELDS = ("block_level_fusion_config", "kind")
BLOCK_FIELDS = {
    "num_warps": None, "output_tiles": None, "is_tma_allowed": None, "num_stages": None,
    "group_size": (0,), "is_warp_specialization_allowed": (False,), "num_ctas": (1,),
    "num_tiles_per_pid": (0,), "waves_per_eu": (0,),
}  # fmt: skip
#: attributes of a GEMM fusion instruction, of its dot, and keys of the dot's own backend
#: config (the Triton K tile, which does not move bits) and of the fusion's frontend
#: attributes, as the captures show them; anything else refuses the fusion
FUSION_ATTRS = ("kind", "calls", "metadata", "backend_config", "frontend_attributes")
DOT_ATTRS = (
    "lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims",
    "metadata", "backend_config", "operand_precision", "algorithm",
)  # fmt: skip
DOT_CONFIG = ("sizes",)
FRONTEND = ("xla.pdl_launch", "xla.no_invariant_operands")
#: operations a GEMM fusion may compute on its operands before the dot (a prologue)
#: whose bits are those of the function's own operations: data movement, a ReLU
#: (``maximum`` with 0), a product by a constant power of two (exact) and widening float
#: conversions (exact). Anything else there (an add, a product by another value, a
#: narrowing conversion) refuses the fusion: Triton's lowering of it is not measured.
PROLOGUE_MOVE = ("parameter", "constant", "broadcast", "bitcast", "transpose", "reshape", "copy")


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


@dataclasses.dataclass(frozen=True)
class DotPlan:
    """How one dot of a compiled module computes (the ``matmul`` keyword arguments).

    ``fusion``: the GEMM fusion's name; ``op_name``: its metadata; ``types``: the dot's
    operand formats; ``batch``: batch sizes; ``M``, ``N``, ``K``; ``split``: S;
    ``reduce``: the reduce order (``"sequential"``, ``"halving"`` or a pairing tree);
    ``emitter``: what computed the reduce; ``out``: the output format after the one
    conversion; ``options``: ``instruction``, ``arch`` and kernel options for
    :func:`jaxmma.matmul`."""

    fusion: str
    op_name: str
    types: tuple
    batch: tuple
    M: int
    N: int
    K: int
    split: int
    reduce: object
    emitter: str
    warps: int
    out: str
    options: dict

    #: per operand of the dot, the entry parameters (by number) its values depend on
    #: (the module's data flow, :func:`sources`); None where not read
    sources: tuple | None = dataclasses.field(default=None, compare=False)
    #: where an operand of the GEMM fusion is a concatenate: the :class:`Merge` the text
    #: shows (several dots of the function in one GEMM), or why it is not read as one
    #: (a str); None where no operand is a concatenate
    merge: object = dataclasses.field(default=None, compare=False)
    #: for one dot's part of a merged GEMM (:meth:`pieces`): ``(index, start, stop)``
    #: of its rows (the lhs merged) or columns (the rhs merged) in the merged GEMM
    piece: tuple | None = dataclasses.field(default=None, compare=False)

    def signature(self) -> tuple:
        return (tuple(sorted(self.types)), self.batch, tuple(sorted((self.M, self.N))), self.K)

    def bits(self) -> tuple:
        """What fixes the bits this plan gives a dot of its signature: two plans with the
        same ``bits()`` give every such dot the same bits, whichever computes it."""
        opts = dict(self.options)
        if str(opts.get("instruction", "")).startswith("wgmma"):
            opts["instruction"] = "wgmma k32"  # formatted with the function's own operands
        return (self.signature(), self.out, repr(sorted(opts.items())))

    def pieces(self) -> list:
        """One plan per dot of a merged GEMM (:attr:`merge`): its rows or columns, the
        same options (each row and column of the GEMM is computed from its own row of
        the lhs and column of the rhs alone, in every chain, split and reduce modelled),
        and the data flow of its own piece of the concatenated operand."""
        m = self.merge
        if not isinstance(m, Merge):
            return [self]
        out = []
        for i, (start, stop) in enumerate(m.spans()):
            src = None
            if self.sources is not None and m.sources is not None:
                both = list(self.sources)
                both[m.side] = m.sources[i]
                src = tuple(both)
            size = {"M": stop - start} if m.side == 0 else {"N": stop - start}
            out.append(dataclasses.replace(self, **size, sources=src, piece=(i, start, stop)))
        return out

    def label(self) -> str:
        """``%fusion``, with the rows or columns of a merged GEMM's piece."""
        if self.piece is None or not isinstance(self.merge, Merge):
            return f"%{self.fusion}"
        _, a, b = self.piece
        part = "rows" if self.merge.side == 0 else "columns"
        return f"%{self.fusion} ({part} {a}:{b} of {self.merge.total}, merged)"


class Unread(ValueError):
    """A GEMM fusion whose bits are not read, where its dot's signature is known."""

    def __init__(self, message: str, signature: tuple):
        super().__init__(message)
        self.signature = signature


def _called(ins: Instr, comps: dict) -> Computation:
    name = ins.attr("calls")
    if name is None or name.lstrip("%") not in comps:
        raise ValueError(f"%{ins.name}: its called computation {name!r} is not in the module")
    return comps[name.lstrip("%")]


def _fusion_config(ins: Instr) -> dict:
    fb = ins.backend_config().get("fusion_backend_config", {})
    return fb


def _chain(where: str, a: str, b: str, warps: int, tile: list, dot: Instr) -> dict:
    if a != b and not (a in ("e4m3", "e5m2") and b in ("e4m3", "e5m2")):
        raise ValueError(f"{where}: a dot of .{a} x .{b} operands is not covered")
    if a in ("bf16", "f16"):
        return {"instruction": MMA16.format(t=a), "arch": ARCH}
    if a == "f32":
        prec = dot.attr("operand_precision")
        algo = dot.attr("algorithm")
        if prec is not None and set(prec.strip("{}").split(",")) - {"default"}:
            raise ValueError(f"{where}: operand_precision={prec} is not covered (default only)")
        if algo is not None and algo != "dot_tf32_tf32_f32":
            raise ValueError(f"{where}: algorithm={algo} is not covered")
        return {"instruction": TF32, "arch": ARCH, "input_rounding": "rna"}
    route = FP8_ROUTES.get((warps, tuple(tile[-2:])))
    if route == "wgmma":
        return {"instruction": WGMMA8.format(a=a, b=b), "arch": "sm_90a"}
    if route == "f16":
        return {"instruction": MMA16.format(t="f16"), "arch": ARCH, "convert_inputs": "f16"}
    seen = ", ".join(f"{w} warps {list(t)} ({r})" for (w, t), r in FP8_ROUTES.items())
    raise ValueError(
        f"{where}: an fp8 dot with {warps} warps and output tile {tile} is not covered: "
        f"which instructions Triton runs for it, in which K order, has not been measured "
        f"(measured: {seen})"
    )


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


def _root_dims(comp: Computation, dot: Instr):
    """Per dimension of the GEMM fusion's root, the dimension of its dot it holds (None
    where the root's layout operations do not show one)."""
    root = comp.instrs.get(comp.root) if comp.root else (comp.order[-1] if comp.order else None)
    if root is None:
        return None
    out: list = []
    for d in range(len(root.shape)):
        at: tuple | None = (root, d)
        while at is not None and at[0].name != dot.name:
            at = _back(comp, at[0], at[1]) if at[0].opcode in LAYOUT_OPS else None
        out.append(at[1] if at is not None else None)
    return out


def _pow2_const(comp: Computation, ins) -> bool:
    """``ins`` is a constant nonzero finite power of two, or a broadcast of one (a
    product by it is exact inside the normal range)."""
    while ins is not None and ins.opcode == "broadcast":
        ins = comp.instrs.get(ins.operands[0])
    if ins is None or ins.opcode != "constant":
        return False
    try:
        v = float(ins.args)
    except ValueError:
        return False
    return math.isfinite(v) and v != 0 and math.frexp(abs(v))[0] == 0.5


#: exact float conversions (every value of the source is a value of the target)
WIDENING = {
    ("f8e4m3fn", "f16"), ("f8e4m3fn", "bf16"), ("f8e4m3fn", "f32"), ("f8e5m2", "f16"),
    ("f8e5m2", "bf16"), ("f8e5m2", "f32"), ("bf16", "f32"), ("f16", "f32"),
}  # fmt: skip


def _same(v, allowed) -> bool:
    return any(type(v) is type(a) and v == a for a in allowed)


def _config_extra(cfg: dict) -> list:
    """The keys, fields and values of a Triton fusion's backend config that the captures
    do not show (:data:`FUSION_FIELDS`, :data:`BLOCK_FIELDS`)."""
    extra = [k for k in cfg if k not in FUSION_FIELDS]
    for k, v in cfg.get("block_level_fusion_config", {}).items():
        if k not in BLOCK_FIELDS:
            extra.append(f"block_level_fusion_config.{k}")
        elif BLOCK_FIELDS[k] is not None and not _same(v, BLOCK_FIELDS[k]):
            extra.append(f"{k}={json.dumps(v)}")
    return extra


def _known(fusion: Instr, cfg: dict, comp: Computation, dot: Instr, where: str) -> None:
    """ValueError where the GEMM fusion shows anything the captures do not: a backend
    config key or field, a config value, an attribute of the fusion or its dot, or an
    operation computed on the dot's operands inside the fusion other than those whose
    bits are the function's own (:data:`PROLOGUE_MOVE`, a ReLU, a product by a power of
    two, a widening conversion)."""
    extra = _config_extra(cfg)
    extra += [f"the attribute {k}" for k in fusion.attr_keys() if k not in FUSION_ATTRS]
    fe = fusion.attr("frontend_attributes") or ""
    extra += [
        f"the frontend attribute {k}"
        for k in re.findall(r"([\w.\-]+)=", fe) if k not in FRONTEND
    ]  # fmt: skip
    extra += [f"%{dot.name}'s attribute {k}" for k in dot.attr_keys() if k not in DOT_ATTRS]
    extra += [
        f"%{dot.name}'s backend config {k}" for k in dot.backend_config() if k not in DOT_CONFIG
    ]
    if extra:
        raise ValueError(
            f"{where}: it shows {', '.join(extra)}, which the captured modules do not: not "
            "covered (another XLA release, or a feature whose bits are not measured)"
        )
    after = {u.name for u in _reachable(comp, dot.name)} | {dot.name}
    for ins in comp.order:
        if ins.name in after or ins.opcode in PROLOGUE_MOVE:
            continue
        ops = [comp.instrs.get(o) for o in ins.operands]
        if len(ops) == 2 and ins.opcode == "maximum" and any(_is_zero(comp, o) for o in ops):
            continue
        if len(ops) == 2 and ins.opcode == "multiply" and any(_pow2_const(comp, o) for o in ops):
            continue
        src = ops[0] if ops else None
        if ins.opcode == "convert" and src is not None and (src.dtype, ins.dtype) in WIDENING:
            continue
        raise ValueError(
            f"{where}: %{ins.name} ({ins.opcode}) computes on %{dot.name}'s operands inside "
            "the GEMM fusion (a prologue): only data movement, a ReLU, a product by a power "
            "of two and widening conversions are covered (Triton's lowering of other "
            "arithmetic is not measured)"
        )


def _consistent(parent: Computation, fusion: Instr, comp: Computation, where: str) -> None:
    """ValueError where the fusion's operands are not its computation's parameters (count,
    element type, shape, layout) or its type is not its root's: inconsistent text."""
    params = {_index(p): p for p in comp.order if p.opcode == "parameter"}
    if sorted(params) != list(range(len(fusion.operands))):
        raise ValueError(
            f"{where}: {len(fusion.operands)} operands, parameters {sorted(params)} in "
            f"%{comp.name}: inconsistent text"
        )
    root = comp.instrs.get(comp.root)
    pairs = [(parent.instrs.get(o), params[i]) for i, o in enumerate(fusion.operands)]
    for a, b in pairs + [(fusion, root)]:
        if a is None or b is None or (a.dtype, _physical(a)) != (b.dtype, _physical(b)):
            raise ValueError(
                f"{where}: %{a.name if a else '?'} ({a.type if a else '?'}) is read as "
                f"%{b.name if b else '?'} ({b.type if b else '?'}): inconsistent text"
            )


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


def _index(p: Instr) -> int:
    return int(p.args) if p.args.isdigit() else -1


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
        if len(tiles) != 1 or dims != (0,):
            raise ValueError(
                f"{where}: the Triton reduce %{user.name} (tiles {tiles}, dimensions {dims}) "
                "is not covered (one output tile, a reduce over dimension 0)"
            )
        tile = [int(t) for t in tiles[0]["sizes"]]
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


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A dot of the module whose bits are not read: ``fusion`` (the GEMM fusion, custom
    call or dot), ``op_name`` (its metadata), ``reason`` (the ValueError's text), and
    ``mn``: the sorted ``(M, N)`` of its dot where the text shows them, else None (it
    could then be any dot of the function); ``signature``: as DotPlan's, where the
    reader read the dot's shapes, split and K padding before it refused."""

    fusion: str
    op_name: str
    reason: str
    mn: tuple | None
    signature: tuple | None = None
    #: as DotPlan's: the :class:`Merge` its operands show, or why not one, or None
    merge: object = None

    def pieces(self) -> list:
        """One refusal per dot of a merged GEMM (:attr:`merge`), each with its part's
        signature, where the reader read the signature; else itself."""
        m = self.merge
        if not isinstance(m, Merge) or self.signature is None:
            return [self]
        fmt, batch, _, K = self.signature
        return [
            dataclasses.replace(self, signature=(fmt, batch, tuple(sorted((m.other, b - a))), K))
            for a, b in m.spans()
        ]

    def could_be(self, signature: tuple) -> bool:
        """Whether it may be the GEMM of a dot with ``signature`` (see DotPlan): its own
        signature where the reader got that far, else its ``{M, N}``, else any."""
        if self.signature is not None:
            return self.signature == signature
        return self.mn is None or self.mn == tuple(signature[2])


def _mn(dot: Instr, comp: Computation):
    """Sorted ``(M, N)`` of ``dot``'s free dimensions, or None where not readable."""
    try:
        lhs, rhs = (comp.instrs[o] for o in dot.operands[:2])
        lb, rb = dot.dims("lhs_batch_dims"), dot.dims("rhs_batch_dims")
        lc, rc = dot.dims("lhs_contracting_dims"), dot.dims("rhs_contracting_dims")
        M = math.prod(d for i, d in enumerate(lhs.shape) if i not in lb and i not in lc)
        N = math.prod(d for i, d in enumerate(rhs.shape) if i not in rb and i not in rc)
    except (KeyError, ValueError):
        return None
    return tuple(sorted((M, N)))


def read(text: str) -> list:
    """One :class:`DotPlan` or :class:`Refusal` per dot of the compiled module ``text``:
    library GEMM calls first, then the GEMM fusions in module order, then dots outside
    them. Malformed text raises (nothing can be read from it)."""
    comps, entry = parse(text)
    out: list[DotPlan | Refusal] = []
    gemm_comps = set()
    flow = sources(text)
    merged = merges(text)
    for c in comps.values():
        for ins in c.order:
            if ins.opcode == "custom-call":
                target = ins.attr("custom_call_target") or ""
                if "gemm" in target.lower() or "matmul" in target.lower():
                    out.append(Refusal(ins.name, ins.op_name(), (
                        f"%{ins.name}: a library GEMM call ({target}) is not covered: only "
                        "XLA's Triton GEMM fusions are"), None))  # fmt: skip
    for c in comps.values():
        for ins in c.order:
            if ins.opcode != "fusion":
                continue
            cfg = _fusion_config(ins)
            if cfg.get("kind") in GEMM_KINDS:
                gemm_comps.add((ins.attr("calls") or "").lstrip("%"))
                try:
                    plan = _plan(comps, c, ins, cfg)
                    if c.name == entry and ins.name in flow:
                        plan = dataclasses.replace(plan, sources=flow[ins.name])
                    if c.name == entry and ins.name in merged:
                        plan = dataclasses.replace(plan, merge=merged[ins.name])
                    out.append(plan)
                except Unread as e:
                    m = merged.get(ins.name) if c.name == entry else None
                    out.append(Refusal(ins.name, ins.op_name(), str(e), None, e.signature, m))
                except ValueError as e:
                    called = comps.get((ins.attr("calls") or "").lstrip("%"))
                    ds = [i for i in called.order if i.opcode == "dot"] if called else []
                    mn = _mn(ds[0], called) if len(ds) == 1 else None
                    out.append(Refusal(ins.name, ins.op_name(), str(e), mn))
    for c in comps.values():
        for ins in c.order:
            if ins.opcode == "dot" and c.name not in gemm_comps:
                why = (
                    f"%{ins.name} (in {c.name}): a dot outside a Triton GEMM fusion is "
                    "not covered (its emitter's arithmetic is not modelled)"
                )
                out.append(Refusal(ins.name, ins.op_name(), why, _mn(ins, c)))
    return out


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


def _flow(comps: dict, comp: Computation, params: list, memo: dict) -> dict:
    """Per instruction of ``comp``, the entry parameters its value depends on (a
    frozenset; a list of them for a tuple), given those of its parameters. Fusions are
    followed inside (a multi-output fusion's outputs each depend on what they read);
    anything else depends on all its operands."""
    env: dict = {}

    def of(name):
        v = env.get(name, frozenset())
        return frozenset().union(*v) if isinstance(v, list) else v

    for ins in _topo(comp):
        if ins.opcode == "parameter":
            i = _index(ins)
            env[ins.name] = params[i] if 0 <= i < len(params) else frozenset()
        elif ins.opcode == "fusion" and (ins.attr("calls") or "").lstrip("%") in comps:
            inner = comps[(ins.attr("calls") or "").lstrip("%")]
            key = (inner.name, tuple(of(o) for o in ins.operands))
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
    env = _flow(comps, comp, [frozenset({i}) for i in range(n)], memo)
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
#: prologue inside the GEMM fusion (per element; :func:`_known` checks which)
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


def dots(text: str) -> list:
    """One :class:`DotPlan` per dot of the compiled module ``text``, in module order; the
    first dot not understood raises its ValueError (:func:`read` returns a
    :class:`Refusal` for each instead)."""
    plans = read(text)
    for p in plans:
        if isinstance(p, Refusal):
            raise ValueError(p.reason)
    return plans


def _plan(comps, parent: Computation, fusion: Instr, cfg: dict) -> DotPlan:
    where = f"%{fusion.name}"
    comp = _called(fusion, comps)
    ds = [i for i in comp.order if i.opcode == "dot"]
    if len(ds) != 1:
        raise ValueError(f"{where}: expected one dot in its computation, found {len(ds)}")
    dot = ds[0]
    lhs, rhs = (comp.instrs.get(o) for o in dot.operands[:2])
    if lhs is None or rhs is None:
        raise ValueError(f"{where}: the operands of %{dot.name} are not in its computation")
    for x in (lhs, rhs):
        if x.dtype not in TYPES:
            raise ValueError(f"{where}: an operand of element type {x.dtype} is not covered")
    a, b = TYPES[lhs.dtype], TYPES[rhs.dtype]
    lb, rb = dot.dims("lhs_batch_dims"), dot.dims("rhs_batch_dims")
    lc, rc = dot.dims("lhs_contracting_dims"), dot.dims("rhs_contracting_dims")
    if len(lc) != 1 or len(rc) != 1:
        raise ValueError(f"{where}: %{dot.name} contracts {len(lc)} dimensions (one covered)")
    blc = cfg.get("block_level_fusion_config")
    if blc is None:  # an older XLA's triton_gemm_config: no capture shows one
        raise ValueError(
            f"{where}: no block_level_fusion_config in its backend config: not covered"
        )
    warps = int(blc.get("num_warps", 0))
    tiles = blc.get("output_tiles", [])
    tile = [int(t) for t in tiles[0]["sizes"]] if tiles else []
    if warps <= 0:
        raise ValueError(f"{where}: no num_warps in its config")
    _consistent(parent, fusion, comp, where)
    out_shape = dot.shape
    nb = len(lb)
    S, split_at, order, emitter, out = 1, None, None, "no split", TYPES.get(dot.dtype)
    if out is None:
        raise ValueError(f"{where}: a dot with {dot.dtype} output is not covered")
    rmap = _root_dims(comp, dot)
    found = _split_reduces(comps, parent, fusion, nb, dot.dtype == "f32", rmap or [])
    if found:
        split_at = (rmap or [])[found[0][1].dims("dimensions")[0]]
        S = out_shape[split_at]
    batch = tuple(out_shape[i] for i in range(nb) if i != split_at)
    lfree = [i for i in range(len(lhs.shape)) if i not in lb and i not in lc]
    rfree = [i for i in range(len(rhs.shape)) if i not in rb and i not in rc]
    M = math.prod(lhs.shape[i] for i in lfree)
    N = math.prod(rhs.shape[i] for i in rfree)
    K = lhs.shape[lc[0]] * S
    if split_at is not None:
        _split_contiguous(parent, fusion, comp, dot, split_at, where)
    padded = _k_padding(comps, parent, fusion, comp, dot, split_at, where)
    if padded is not None:
        if padded[1] != K:
            raise ValueError(f"{where}: K padded to {padded[1]}, the dot reads {K}: not understood")
        K = padded[0]
    sig = (tuple(sorted((a, b))), batch, tuple(sorted((M, N))), K)
    try:
        after = [u for u in _reachable(comp, dot.name) if u.opcode not in LAYOUT_OPS]
        if after:
            raise ValueError(
                f"{where}: {', '.join(f'%{u.name} ({u.opcode})' for u in after)} computes "
                f"on %{dot.name}'s result inside the GEMM fusion (an epilogue): not covered"
            )
        _known(fusion, cfg, comp, dot, where)
        if found:
            reads = []
            for user, red, rcomp in found:
                order_i, emitter_i = _reduce_order(comps, user, red, rcomp, S, where)
                reads.append((order_i, emitter_i, _reduced_type(red, rcomp, where)))
            if len({(str(o), t) for o, _, t in reads}) != 1:
                raise ValueError(
                    f"{where}: its split-K partials are reduced by "
                    f"{[f'%{r.name} in %{u.name}' for u, r, _ in found]} in different "
                    f"orders or to different types ({[(e, t) for _, e, t in reads]}): one "
                    "dot, two values, not covered"
                )
            order, emitter, out = reads[0]
            emitter = " and ".join(dict.fromkeys(e for _, e, _ in reads))
        opts = _chain(where, a, b, warps, tile, dot)
    except ValueError as e:
        raise Unread(str(e), sig) from None
    if padded is not None:
        opts["pad_k"] = padded[1]
    if S > 1:
        opts.update(split_k=S, split_rule="xla", split_reduce=order)
    opts["out_dtype"] = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}.get(out)
    if opts["out_dtype"] is None:
        raise Unread(f"{where}: an output of type {out} is not covered", sig)
    return DotPlan(
        fusion.name, dot.op_name() or fusion.op_name(), (a, b), batch, M, N, K, S, order,
        emitter, warps, out, opts,
    )  # fmt: skip


#: fusion kinds emitted by XLA's MLIR emitters (loop and reduction), which create their
#: float arithmetic without LLVM's ``contract`` flag (docs/xla_gpu.md)
MLIR_KINDS = ("kLoop", "kInput")
_ARITH_ADD = ("add", "subtract")
_MINMAX = ("maximum", "minimum")


@dataclasses.dataclass(frozen=True)
class Emitters:
    """What the non-dot fusions of a module let ``gpu_replay`` reproduce.

    ``contract``: fusions outside XLA's MLIR loop and reduction emitters that hold a
    multiply and an add or subtract (their lowering may contract them into one FMA);
    ``minmax``: fusions outside those emitters that reduce with ``maximum`` /
    ``minimum`` (their NaN and signed-zero rules are not measured). Empty: not a
    concern for this module."""

    contract: tuple
    minmax: tuple


def _nested(comps: dict, comp: Computation, seen: set) -> list:
    """``comp`` and every computation it calls (fusions, reducers), once each."""
    if comp.name in seen:
        return []
    seen.add(comp.name)
    out = [comp]
    for ins in comp.order:
        for key in ("calls", "to_apply"):
            name = (ins.attr(key) or "").lstrip("%")
            if name in comps:
                out += _nested(comps, comps[name], seen)
    return out


def emitters(text: str) -> Emitters:
    """The :class:`Emitters` facts of the compiled module ``text``."""
    comps, _ = parse(text)
    contract, minmax = [], []
    for c in comps.values():
        for ins in c.order:
            if ins.opcode != "fusion":
                continue
            kind = ins.attr("kind")
            if kind in MLIR_KINDS:
                continue
            tkind = _fusion_config(ins).get("kind", kind)
            inner = _nested(comps, _called(ins, comps), set())
            ops = {i.opcode for k in inner for i in k.order}
            if "multiply" in ops and ops & set(_ARITH_ADD):
                contract.append(f"%{ins.name} ({tkind})")
            for k in inner:
                for i in k.order:
                    red = (i.attr("to_apply") or "").lstrip("%")
                    if i.opcode == "reduce" and red in comps:
                        body = {j.opcode for j in comps[red].order}
                        if body & set(_MINMAX):
                            minmax.append(f"%{ins.name} ({tkind})")
    return Emitters(tuple(dict.fromkeys(contract)), tuple(dict.fromkeys(minmax)))
