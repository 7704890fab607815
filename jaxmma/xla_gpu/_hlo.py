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

The reader is in five modules, each on the one below: ``_hlo_text`` (the text parsed,
small graph helpers), ``_hlo_known`` (what the captures show, the rest refused),
``_hlo_reduce`` (split-K reduces and their order, K padding), ``_hlo_flow`` (data flow,
merged dots) and this one (the plans, the refusals, the emitters).
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from . import _hlo_frames, _xla_sum
from ._hlo_flow import Merge, merges, sources
from ._hlo_flow import reads as fusion_reads
from ._hlo_jvp import tanh_gradient
from ._hlo_known import _consistent, _epilogue, _known
from ._hlo_reduce import (
    _k_padding,
    _reduce_order,
    _reduced_type,
    _root_dims,
    _split_contiguous,
    _split_reduces,
)
from ._hlo_text import (
    GEMM_KINDS,
    TYPES,
    Computation,
    Instr,
    _called,
    _fusion_config,
    _pow2_const,
    parse,
)

ARCH = "sm_90"
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
    #: the stack frames of its dot's metadata (:mod:`._hlo_frames`), innermost first
    frames: tuple = dataclasses.field(default=(), compare=False)
    #: where XLA reduces the split-K partials in several fusions in different orders
    #: (one dot, a value per fusion): ``((fusion, reduce order, emitter), ...)``; the
    #: options hold the first. Empty: one value.
    variants: tuple = ()

    def variant(self, fusion: str) -> DotPlan:
        """The plan of the value the fusion ``fusion`` computes (one of :attr:`variants`)."""
        for name, order, emitter in self.variants:
            if name == fusion:
                opts = dict(self.options, split_reduce=order)
                return dataclasses.replace(
                    self, reduce=order, emitter=emitter, options=opts, variants=()
                )
        raise KeyError(fusion)

    def signature(self) -> tuple:
        return (tuple(sorted(self.types)), self.batch, tuple(sorted((self.M, self.N))), self.K)

    def bits(self) -> tuple:
        """What fixes the bits this plan gives a dot of its signature: two plans with the
        same ``bits()`` give every such dot the same bits, whichever computes it."""
        opts = dict(self.options)
        if str(opts.get("instruction", "")).startswith("wgmma"):
            opts["instruction"] = "wgmma k32"  # formatted with the function's own operands
        return (self.signature(), self.out, repr(sorted(opts.items())), repr(self.variants))

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
    #: as DotPlan's: the stack frames of its dot's metadata
    frames: tuple = dataclasses.field(default=(), compare=False)

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
    chains = _hlo_frames.table(text)
    for c in comps.values():
        for ins in c.order:
            if ins.opcode == "custom-call":
                target = ins.attr("custom_call_target") or ""
                if "gemm" in target.lower() or "matmul" in target.lower():
                    out.append(Refusal(ins.name, ins.op_name(), (
                        f"%{ins.name}: a library GEMM call ({target}) is not covered: only "
                        "XLA's Triton GEMM fusions are"), None,
                        frames=_hlo_frames.of(ins, chains)))  # fmt: skip
    for c in comps.values():
        for ins in c.order:
            if ins.opcode != "fusion":
                continue
            cfg = _fusion_config(ins)
            if cfg.get("kind") in GEMM_KINDS:
                gemm_comps.add((ins.attr("calls") or "").lstrip("%"))
                called = comps.get((ins.attr("calls") or "").lstrip("%"))
                ds = [i for i in called.order if i.opcode == "dot"] if called else []
                fr = _hlo_frames.of(ds[0] if len(ds) == 1 else ins, chains)
                try:
                    plan = dataclasses.replace(_plan(comps, c, ins, cfg), frames=fr)
                    if c.name == entry and ins.name in flow:
                        plan = dataclasses.replace(plan, sources=flow[ins.name])
                    if c.name == entry and ins.name in merged:
                        plan = dataclasses.replace(plan, merge=merged[ins.name])
                    out.append(plan)
                except Unread as e:
                    m = merged.get(ins.name) if c.name == entry else None
                    out.append(Refusal(ins.name, ins.op_name(), str(e), None, e.signature, m, fr))
                except ValueError as e:
                    mn = _mn(ds[0], called) if len(ds) == 1 else None
                    out.append(Refusal(ins.name, ins.op_name(), str(e), mn, frames=fr))
    for c in comps.values():
        for ins in c.order:
            if ins.opcode == "dot" and c.name not in gemm_comps:
                why = (
                    f"%{ins.name} (in {c.name}): a dot outside a Triton GEMM fusion is "
                    "not covered (its emitter's arithmetic is not modelled)"
                )
                fr = _hlo_frames.of(ins, chains)
                out.append(Refusal(ins.name, ins.op_name(), why, _mn(ins, c), frames=fr))
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
    variants: tuple = ()
    try:
        _known(fusion, cfg, comp, dot, where)  # its prologue and epilogue too
        if found and _epilogue(comp, dot, where):
            raise ValueError(
                f"{where}: K split, and arithmetic on %{dot.name}'s partials inside the "
                "GEMM fusion (an epilogue before the reduce): not covered"
            )
        if found:
            reads = []
            for user, red, rcomp in found:
                order_i, emitter_i = _reduce_order(comps, user, red, rcomp, S, where)
                reads.append((order_i, emitter_i, _reduced_type(red, rcomp, where)))
            if len({t for _, _, t in reads}) != 1 or len({u.name for u, _, _ in found}) != len(
                found
            ):
                raise ValueError(
                    f"{where}: its split-K partials are reduced by "
                    f"{[f'%{r.name} in %{u.name}' for u, r, _ in found]} to different types "
                    f"or twice in one fusion ({[(e, t) for _, e, t in reads]}): not covered"
                )
            if len({str(o) for o, _, _ in reads}) != 1:  # one dot, a value per fusion
                variants = tuple(
                    (u.name, o, e) for (u, _, _), (o, e, _) in zip(found, reads, strict=True)
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
        emitter, warps, out, opts, variants=variants,
    )  # fmt: skip


#: fusion kinds emitted by XLA's MLIR emitters (loop and reduction), which create their
#: float arithmetic without LLVM's ``contract`` flag (docs/xla_gpu.md)
MLIR_KINDS = ("kLoop", "kInput")
_ARITH_ADD = ("add", "subtract")
_MINMAX = ("maximum", "minimum")
_LIBDEVICE = ("exponential", "log", "tanh", "erf", "rsqrt", "sqrt", "divide")


@dataclasses.dataclass(frozen=True)
class Emitters:
    """What the non-dot fusions of a module let ``gpu_replay`` reproduce.

    ``contract``: fusions outside XLA's MLIR loop and reduction emitters that hold a
    multiply and an add or subtract (their lowering may contract them into one FMA),
    except GEMM fusions, whose prologues and epilogues round each operation
    (:data:`._hlo_known.ROUNDED`; the arithmetic they may hold is checked there);
    ``minmax``: fusions outside those emitters that reduce with ``maximum`` /
    ``minimum`` (their NaN and signed-zero rules are not measured), except the f32 and
    bf16 ones of Triton normalization fusions without TMA, which reduce as the MLIR
    emitters do:
    IEEE maximum / minimum, ``-0 < +0``, the canonical NaN (tests/golden/xla/
    xla-triton-max.npz: tiles of [1, 72] and [1, 1000], rows tiles, one and two warps,
    every NaN payload and sign, signed zeros, infinities, subnormals); ``libdevice``:
    fusions outside those emitters that hold one of the functions below (their
    lowering is not established; XLA's MLIR emitters call libdevice). Empty: not a
    concern for this module. ``in_mlir``: which of those functions the MLIR emitters'
    fusions do compute (an f32 ``exp`` is reproduced only where the module shows one).
    Those functions: ``exponential``, ``log``, ``tanh``, ``erf``, ``rsqrt``, ``sqrt``,
    ``divide`` (:data:`jaxmma.arith.GPU_FUNCTIONS`). XLA's Triton normalization fusions
    (``__triton``, its softmax and layer-norm fusions) of the measured kind
    (:func:`_measured_norm`) count with the MLIR emitters for ``contract`` and
    ``libdevice``: on an H100 their multiplies and adds round one by one, in tiles of
    one row and of several (tests/golden/xla/xla-contract-*.npz), and their ``exp``,
    ``rsqrt`` and division are libdevice's and ``div.full``
    (tests/golden/xla/xla-triton-norm.npz: a layer norm and a softmax, every element);
    their f32 and bf16 max / min reductions are IEEE's (above). ``sites``: the fusions'
    instructions with their stack frames, so that the fusions an equation runs in can be
    found (:mod:`._hlo_frames`); ``reads``: per fusion, the fusions whose outputs it reads
    from memory (:func:`._hlo_flow.reads`), as ``(name, frozenset)`` pairs."""

    contract: tuple
    minmax: tuple
    libdevice: tuple = ()
    in_mlir: frozenset = frozenset()
    sums: tuple = ()  # every f32 add-reduce of the module: _hlo.Sum
    #: every instruction of the fusions that shows stack frames: :class:`Site`
    sites: tuple = ()
    reads: tuple = dataclasses.field(default=(), compare=False)
    #: the bits of every f32 scalar constant of the module (XLA's folded products of
    #: constants among them)
    constants: frozenset = dataclasses.field(default=frozenset(), compare=False)
    #: the fusions that hold a ``scatter`` (as ``where`` names them)
    scatters: tuple = dataclasses.field(default=(), compare=False)
    #: how the module's jax linearized ``tanh`` (:func:`._hlo_jvp.tanh_gradient`)
    tanh_grad: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class Site:
    """One instruction of a fusion: its stack frames (:mod:`._hlo_frames`), the jax
    primitive its metadata names, ``where`` (the fusion, as :class:`Emitters` names it),
    its ``opcode`` and the fusion's name."""

    frames: tuple
    prim: str
    where: str
    opcode: str = ""
    fusion: str = ""


@dataclasses.dataclass(frozen=True)
class Sum:
    """One f32 ``reduce`` with an ``add`` reducer in the module: its operand's shape and
    reduced ``dims``, whether XLA's MLIR emitters compute it (``mlir``: a ``kInput`` or
    ``kLoop`` fusion, one operand, the default layout), whether the fusion's smallest
    input is narrower than 32 bits (``narrow``: it widens the row emitter's loads), and
    ``where`` (the fusion)."""

    shape: tuple
    dims: tuple
    mlir: bool
    narrow: bool
    where: str
    #: in a Triton normalization fusion (``__triton``): ``(tile sizes, warps, TMA)``
    triton: tuple | None = None
    #: some inputs of the fusion narrower than 32 bits, others not
    mixed: bool = False
    #: the reduce's stack frames and the jax primitive its metadata names
    frames: tuple = dataclasses.field(default=(), compare=False)
    prim: str = dataclasses.field(default="", compare=False)


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
    comps, entry = parse(text)
    chains = _hlo_frames.table(text)
    contract, minmax, libdevice, in_mlir, sums, sites = [], [], [], set(), [], []
    scatters = []
    for c in comps.values():
        for ins in c.order:
            if ins.opcode == "reduce" and c.name == entry:  # unfused
                sums += _sums(comps, c, [c], f"%{ins.name} (unfused)", False, chains=chains)
            if ins.opcode != "fusion":
                continue
            kind = ins.attr("kind")
            inner = _nested(comps, _called(ins, comps), set())
            cfg = _fusion_config(ins)
            where = f"%{ins.name} ({cfg.get('kind', kind)})"
            triton = _norm_config(cfg)
            fused = _called(ins, comps)
            own = _sums(comps, fused, inner, where, kind in MLIR_KINDS, triton, chains)
            sums += own
            if any(i.opcode == "scatter" for k in inner for i in k.order):
                scatters.append(where)
            for k in inner:
                for i in k.order:
                    fr = _hlo_frames.of(i, chains)
                    if fr:
                        prim = _hlo_frames.primitive(i)
                        sites.append(Site(fr, prim, where, i.opcode, ins.name))
            if kind in MLIR_KINDS:
                in_mlir |= {i.opcode for k in inner for i in k.order} & set(_LIBDEVICE)
                continue
            tkind = _fusion_config(ins).get("kind", kind)
            ops = {i.opcode for k in inner for i in k.order}
            rows = {x.shape[-1] for x in own if x.triton and x.dims == (len(x.shape) - 1,)}
            measured = _measured_norm(triton, rows)
            if measured:  # calls libdevice as the MLIR emitters do
                in_mlir |= ops & set(_LIBDEVICE)
            # the measured normalization tiles (one row or several a program) and GEMM
            # fusions (their prologues and epilogues, _hlo_known.ROUNDED): one rounding
            # per operation (tests/golden/xla/xla-contract-*.npz)
            if not measured and tkind not in GEMM_KINDS:
                if "multiply" in ops and ops & set(_ARITH_ADD) and not _exact_products(inner):
                    contract.append(f"%{ins.name} ({tkind})")
                if ops & set(_LIBDEVICE):
                    libdevice.append(f"%{ins.name} ({tkind})")
            for k in inner:
                for i in k.order:
                    red = (i.attr("to_apply") or "").lstrip("%")
                    if i.opcode == "reduce" and red in comps:
                        body = {j.opcode for j in comps[red].order}
                        ieee = (  # no TMA, as captured
                            triton and not triton[2] and i.type.split("[")[0] in ("f32", "bf16")
                        )
                        if body & set(_MINMAX) and not ieee:
                            minmax.append(f"%{ins.name} ({tkind})")

    def once(x: list) -> tuple:
        return tuple(dict.fromkeys(x))

    return Emitters(
        once(contract), once(minmax), once(libdevice), frozenset(in_mlir), tuple(sums),
        tuple(sites), tuple(sorted(fusion_reads(text).items())), _f32_constants(text),
        tuple(scatters), tanh_gradient(comps),
    )  # fmt: skip


def _exact_products(comps: list) -> bool:
    """Whether every multiply of ``comps`` is by a constant power of two (through
    broadcasts): exact inside the normal range, so contracting it with an add into an
    FMA cannot change a rounding (as a learning rate of 2^-4 in an SGD update)."""

    return all(
        any(_pow2_const(c, c.instrs.get(o)) for o in i.operands)
        for c in comps
        for i in c.order
        if i.opcode == "multiply"
    )


def _f32_constants(text: str) -> frozenset:
    """The bits of the module's f32 scalar constants (XLA prints each so that it reads
    back to the same float32)."""
    out = set()
    for v in re.findall(r"= f32\[\] constant\(([^)]*)\)", text):
        try:
            out.add(int(np.float32(float(v)).view(np.uint32)))
        except ValueError:
            continue
    return frozenset(out)


def _width(type_: str) -> int:
    """Bits of an HLO element type (``f32[2,3]{1,0}`` -> 32, ``pred`` 8, ``f8e4m3fn`` 8)."""
    name = type_.split("[", 1)[0]
    m = re.match(r"[a-z]+(\d+)", name)
    return 8 if name == "pred" or not m else int(m.group(1))


def _norm_config(cfg: dict) -> tuple | None:
    """``(tile sizes, warps, TMA)`` of a Triton normalization fusion (kind ``__triton``
    with a block-level config: XLA's softmax and layer-norm fusions), else None."""
    blc = cfg.get("block_level_fusion_config")
    if cfg.get("kind") != "__triton" or not blc or len(blc.get("output_tiles", [])) != 1:
        return None
    tile = tuple(int(t) for t in blc["output_tiles"][0].get("sizes", []))
    return tile, int(blc.get("num_warps", 0)), bool(blc.get("is_tma_allowed", False))


def _measured_norm(config: tuple | None, lengths: set | None = None) -> str | None:
    """``"row"`` or ``"rows"`` for a Triton normalization fusion of a measured kind: a
    tile of one whole row, or of several, whose sums :func:`._xla_sum.triton_plan` reads
    (tests/golden/xla/xla-triton-norm.npz, xla-triton-rows.npz); else None. In both,
    ``exp``, ``rsqrt`` and division are libdevice's and ``div.full``, and every multiply
    and add is rounded on its own, never contracted into an FMA
    (tests/golden/xla/xla-contract-*.npz: affine layer norms, centerings and row
    scalings in tiles of one to eight rows match one rounding per operation on every
    element, while an FMA in any of their multiply-adds differs on 744 to 38,652).
    ``lengths``: the lengths of the rows the fusion reduces; a tile shorter than one of
    them (part of a row a program) is not of a measured kind."""
    if config is None:
        return None
    tile, warps, tma = config
    if len(tile) < 2 or any(n != tile[-1] for n in lengths or ()):
        return None
    rows = math.prod(tile[:-1])
    plan = _xla_sum.triton_plan((rows, tile[-1]), (1,), ((rows, tile[-1]), warps, tma), False)
    if isinstance(plan, str) or plan.kind != "triton_row":
        return None
    return "row" if rows == 1 else "rows"


def _sums(
    comps: dict,
    fused: Computation,
    inner: list,
    where: str,
    mlir: bool,
    triton=None,
    chains=None,
) -> list:
    """The f32 add-reduces among ``inner`` (the fusion's computations) as :class:`Sum`;
    ``fused``: the fusion's own computation, whose parameters are its inputs."""
    widths = [_width(i.type) for i in fused.order if i.opcode == "parameter"]
    narrow = bool(widths) and min(widths) < 32
    mixed = narrow and max(widths) >= 32
    out = []
    for k in inner:
        for i in k.order:
            red = (i.attr("to_apply") or "").lstrip("%")
            if i.opcode != "reduce" or red not in comps:
                continue
            if "add" not in {j.opcode for j in comps[red].order} or not i.type.startswith("f32"):
                continue
            src = k.instrs.get(i.operands[0])
            if src is None:
                continue
            rank = len(src.shape)
            layout = "{" + ",".join(str(d) for d in reversed(range(rank))) + "}"
            plain = len(i.operands) == 2 and src.type.endswith(layout)
            norm = triton if plain else None
            fr = _hlo_frames.of(i, chains or {})
            out.append(
                Sum(
                    src.shape,
                    i.dims("dimensions"),
                    mlir and plain,
                    narrow,
                    where,
                    norm,
                    mixed,
                    fr,
                    _hlo_frames.primitive(i),
                )  # fmt: skip
            )
    return out
