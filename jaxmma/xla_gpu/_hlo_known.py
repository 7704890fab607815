"""What the HLO reader trusts (docs/xla_gpu.md, "What the reader trusts"): the backend
config keys, fields and values, the attributes and the prologue operations that the
captured modules show, and the checks that refuse a GEMM fusion showing anything else, or
text that is inconsistent."""

from __future__ import annotations

import json
import re

from ._hlo_text import Computation, Instr, _index, _is_zero, _physical, _pow2_const, _reachable

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
#: (``maximum`` with 0), a product by a constant power of two (exact), widening float
#: conversions (exact), and f32 products and sums (:data:`ROUNDED`). Anything else there
#: (a subtraction, bf16 / f16 arithmetic, a narrowing conversion) refuses the fusion:
#: Triton's lowering of it is not measured.
PROLOGUE_MOVE = ("parameter", "constant", "broadcast", "bitcast", "transpose", "reshape", "copy")
#: arithmetic that XLA's Triton GEMM fusions round one operation at a time, never
#: contracting a product and a sum into an FMA, per element type: in a prologue f32
#: ``multiply`` and ``add``; in an epilogue (on the dot's result, which the fusion first
#: rounds to the dot's own type) f32 and bf16 ``multiply``, ``add`` and ``maximum``.
#: Evidence: tests/golden/xla/xla-gemm-fused-*.npz (an H200, two processes; the same
#: results from an H100 in three before): every output of ``(x * g + b) @ w``,
#: ``(x @ w) * s + b``, biases, residuals, a ReLU and an attention scale is the
#: per-operation result; an FMA, or a bf16 dot kept in f32, would differ in 235 to
#: 24,767 outputs of each (tests/test_xla_gemm_fused.py)
ROUNDED = {
    "prologue": {("multiply", "f32"), ("add", "f32")},
    "epilogue": {(op, t) for op in ("multiply", "add", "maximum") for t in ("f32", "bf16")},
}
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
        if (ins.opcode, ins.dtype) in ROUNDED["prologue"]:
            continue
        raise ValueError(
            f"{where}: %{ins.name} ({ins.opcode}, {ins.dtype}) computes on %{dot.name}'s "
            "operands inside the GEMM fusion (a prologue): only data movement, a ReLU, "
            "widening conversions and f32 products and sums are covered (Triton's lowering "
            "of other arithmetic is not measured)"
        )
    _epilogue(comp, dot, where)


def _epilogue(comp: Computation, dot: Instr, where: str) -> list:
    """The operations a GEMM fusion computes on its dot's result (an epilogue), in order;
    ValueError unless each is data movement or one of :data:`ROUNDED`'s epilogue
    operations in the dot's own element type, with one operand carried from the dot and
    the others read from the fusion's parameters or constants by data movement alone."""
    chain = {u.name for u in _reachable(comp, dot.name)} | {dot.name}
    ops = []
    for ins in comp.order:
        if ins.name not in chain or ins.name == dot.name or ins.opcode in PROLOGUE_MOVE:
            continue
        carried = [o for o in ins.operands if o in chain]
        side = [comp.instrs.get(o) for o in ins.operands if o not in chain]
        ok = (ins.opcode, ins.dtype) in ROUNDED["epilogue"] and ins.dtype == dot.dtype
        ok = ok and len(carried) == 1 and all(_moved(comp, x) for x in side)
        if not ok:
            raise ValueError(
                f"{where}: %{ins.name} ({ins.opcode}, {ins.dtype}) computes on %{dot.name}'s "
                "result inside the GEMM fusion (an epilogue): only products, sums and "
                "maxima in the dot's type, with values read from the fusion's operands, are "
                "covered (Triton's lowering of other arithmetic is not measured)"
            )
        ops.append(ins)
    return ops


def _moved(comp: Computation, ins) -> bool:
    """``ins`` is a parameter or a constant, through data movement only."""
    seen = 0
    while ins is not None and seen < 10_000:
        if ins.opcode in ("parameter", "constant"):
            return True
        if ins.opcode not in PROLOGUE_MOVE or len(ins.operands) != 1:
            return False
        ins, seen = comp.instrs.get(ins.operands[0]), seen + 1
    return False


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
