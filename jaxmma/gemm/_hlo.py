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
a ``ValueError`` naming the instruction and what is not understood.
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


@dataclasses.dataclass
class Computation:
    name: str
    instrs: dict
    order: list

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

    def signature(self) -> tuple:
        return (tuple(sorted(self.types)), self.batch, tuple(sorted((self.M, self.N))), self.K)


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


def _reduce_of(comps, parent: Computation, fusion: Instr):
    """The split-K reduce fed by ``fusion``: ``(user fusion, reduce, its computation)``,
    or None when nothing reduces the fusion's output. A reduce reached any other way
    (after a bitcast or a transpose, a convert, an add) is a ValueError: not understood."""
    found = None
    values, todo = [fusion.name], [fusion.name]
    while todo:  # the fusion's output and its layout changes
        for u in parent.users(todo.pop()):
            if u.opcode in LAYOUT_OPS and u.name not in values:
                values.append(u.name)
                todo.append(u.name)
    for user in parent.order:
        if user.opcode != "fusion" or not set(user.operands) & set(values):
            continue
        comp = _called(user, comps)
        for p in comp.order:
            i = _index(p) if p.opcode == "parameter" else -1
            if i < 0 or i >= len(user.operands) or user.operands[i] not in values:
                continue
            for r in _reachable(comp, p.name):
                if r.opcode != "reduce":
                    continue
                if user.operands[i] == fusion.name and r.operands[:1] == (p.name,):
                    if found is None:
                        found = (user, r, comp)
                        continue
                raise ValueError(
                    f"%{fusion.name}: its output reaches %{r.name} in %{user.name} other "
                    "than as the operand of one split-K reduce: not understood"
                )
    return found


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


def dots(text: str) -> list:
    """One :class:`DotPlan` per dot of the compiled module ``text``, in module order."""
    comps, _ = parse(text)
    fused = set()
    plans = []
    gemm_comps = set()
    for c in comps.values():
        for ins in c.order:
            if ins.opcode == "fusion":
                fused.add((ins.attr("calls") or "").lstrip("%"))
            if ins.opcode == "custom-call":
                target = ins.attr("custom_call_target") or ""
                if "gemm" in target.lower() or "matmul" in target.lower():
                    raise ValueError(
                        f"%{ins.name}: a library GEMM call ({target}) is not covered: only "
                        "XLA's Triton GEMM fusions are"
                    )
    for c in comps.values():
        for ins in c.order:
            if ins.opcode != "fusion":
                continue
            cfg = _fusion_config(ins)
            if cfg.get("kind") in GEMM_KINDS:
                gemm_comps.add((ins.attr("calls") or "").lstrip("%"))
                plans.append(_plan(comps, c, ins, cfg))
    for c in comps.values():
        for ins in c.order:
            if ins.opcode == "dot" and c.name not in gemm_comps:
                raise ValueError(
                    f"%{ins.name} (in {c.name}): a dot outside a Triton GEMM fusion is not "
                    "covered (its emitter's arithmetic is not modelled)"
                )
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
    if blc is not None:
        warps = int(blc.get("num_warps", 0))
        tiles = blc.get("output_tiles", [])
        tile = [int(t) for t in tiles[0]["sizes"]] if tiles else []
    else:
        tgc = fusion.backend_config().get("fusion_backend_config", {}).get("triton_gemm_config")
        if not tgc or int(tgc.get("split_k", 1)) != 1:
            raise ValueError(f"{where}: its Triton GEMM config {tgc} is not covered")
        warps = int(tgc["num_warps"])
        tile = [int(tgc["block_m"]), int(tgc["block_n"])]
    if warps <= 0:
        raise ValueError(f"{where}: no num_warps in its config")
    out_shape = dot.shape
    nb = len(lb)
    S, split_at, order, emitter, out = 1, None, None, "no split", TYPES.get(dot.dtype)
    if out is None:
        raise ValueError(f"{where}: a dot with {dot.dtype} output is not covered")
    found = _reduce_of(comps, parent, fusion)
    if found is not None:
        user, red, rcomp = found
        (d,) = red.dims("dimensions") or (None,)
        if d is None or d >= nb or dot.dtype != "f32":
            raise ValueError(
                f"{where}: %{red.name} in %{user.name} reduces its output over dimension "
                f"{red.dims('dimensions')}, not a split-K batch dimension"
            )
        S, split_at = out_shape[d], d
        order, emitter = _reduce_order(comps, user, red, rcomp, S, where)
        out = "f32"
        for c in rcomp.users(red.name):
            if c.opcode == "convert" and c.dtype in TYPES:
                out = TYPES[c.dtype]
    batch = tuple(out_shape[i] for i in range(nb) if i != split_at)
    lfree = [i for i in range(len(lhs.shape)) if i not in lb and i not in lc]
    rfree = [i for i in range(len(rhs.shape)) if i not in rb and i not in rc]
    M = math.prod(lhs.shape[i] for i in lfree)
    N = math.prod(rhs.shape[i] for i in rfree)
    K = lhs.shape[lc[0]] * S
    opts = _chain(where, a, b, warps, tile, dot)
    if S > 1:
        opts.update(split_k=S, split_rule="xla", split_reduce=order)
    opts["out_dtype"] = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}.get(out)
    if opts["out_dtype"] is None:
        raise ValueError(f"{where}: an output of type {out} is not covered")
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
