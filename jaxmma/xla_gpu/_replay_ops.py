"""Which non-dot operations of a jaxpr XLA:GPU computes with the CPU's bits.

``gpu_replay`` computes each dot as the GPU module does; every other equation is bound
as JAX computes it on the replaying backend. That is only right where XLA:GPU's
arithmetic gives the same bits, so each equation that an output depends on is checked
here, at trace time (docs/xla_gpu.md, "What else a function computes"):

* exact on both: data movement, comparisons, selects, bit and integer operations,
  ``max`` / ``min`` (IEEE 754-2019 maximum / minimum on both: -0 < +0, NaN propagates),
  conversions with one defined rounding (to nearest even) into f32, bf16, f16;
* IEEE ``add`` / ``sub`` / ``mul`` / ``neg``, unless XLA:GPU may compute them otherwise:
  a multiply feeding an add or subtract may become one FMA (one rounding instead of
  two), and a bf16 / f16 result used by further arithmetic may be kept in f32
  (``xla_allow_excess_precision``, on by default), so its rounding may vanish; a
  product by a constant power of two is exact, so neither can change it;
* refused (:data:`REFUSED`): transcendental functions, division, square roots, float
  reductions and scans, conversions into fp8 or from floats to integers, control flow
  holding float arithmetic, anything not listed.

:func:`check` returns one :class:`Finding` per refused equation and, per output of the
function, the findings it depends on (outputs that do not depend on one are exact).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import source_info_util  # the user frames of an equation
from jax.extend import core as jcore

from .. import arith, util
from . import _hlo_frames, _replay_ieee, _replay_scatter, _xla_sum

#: equations that move, select, compare or reinterpret values without rounding: exact
MOVE = frozenset({
    "reshape", "broadcast_in_dim", "transpose", "squeeze", "expand_dims", "slice",
    "dynamic_slice", "dynamic_update_slice", "concatenate", "pad", "rev", "gather",
    "select_n", "copy", "copy_p", "sharding_constraint", "optimization_barrier",
})  # fmt: skip
#: exact on any element type (IEEE 754 operations without rounding, bits, integers)
EXACT = frozenset({
    "iota", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "xor",
    "shift_left", "shift_right_logical", "shift_right_arithmetic", "population_count",
    "clz", "bitcast_convert_type", "abs", "sign", "floor", "ceil", "round",
    "is_finite", "max", "min", "clamp", "stop_gradient", "random_bits", "random_wrap",
    "random_unwrap", "random_seed", "threefry2x32", "sort", "reduce_and", "reduce_or",
    "reduce_xor",
}) | MOVE  # fmt: skip
#: float max / min reductions: exact and order-independent where the combiner is IEEE
#: 754-2019 maximum / minimum (NaN propagates, -0 < +0); ``gpu_replay`` computes them by
#: that definition (XLA:CPU's own drops NaNs in long f32 rows)
MINMAX_REDUCE = frozenset({"reduce_max", "reduce_min"})
#: f32 functions reproduced as XLA:GPU computes them on an H100 (jaxmma.arith._gpu_math)
LIBDEVICE = frozenset(arith.GPU_FUNCTIONS)
#: float arithmetic checked for FMA contraction and excess precision
ARITH = frozenset({"add", "sub", "mul", "add_any", "neg", "integer_pow", "square"})
#: float ops that gpu_replay computes on bits (the CPU flushes subnormals): inside a loop
#: or conditional, which is bound as it is, they are refused
ON_BITS = _replay_ieee.NAMES
#: ops that commute with rounding: a bf16 / f16 value kept in f32 passes through them
#: and is rounded at the end to the same bits
COMMUTE = MOVE | {"max", "min", "clamp", "abs", "neg"}

_APPROX = (
    "XLA:GPU lowers it to libdevice or to its own approximation (for bf16 / f16 "
    "``ex2.approx`` / ``lg2.approx``, the ``afn`` flag in XLA's elemental emitter); "
)
#: the elementwise probes of tests/golden/xla/xla-models-*.npz (an H100, jax 0.11.2,
#: three processes, the same bits in each): per primitive, of 4096 raw-bit inputs, how
#: many f32 results of the GPU differ from the CPU's (jax, one operation at a time) and
#: by up to how many ulp, and how many bf16 results differ
PROBED = {
    "exp": (1249, "2 ulp on normal results; below 2^-126 the CPU gives 0 where the GPU "
            "gives subnormals", 22),
    "log": (173, "1 ulp", 0),
    "tanh": (1120, "2 ulp", 0),
    "logistic": (940, "3 ulp", 0),
    "erf": (953, "4 ulp", 0),
    "rsqrt": (1069, "1 ulp", 0),
    "sqrt": (701, "1 ulp; the CPU's is correctly rounded, the GPU's is not", 0),
    "div": (1229, "2 ulp; the CPU's is correctly rounded, the GPU's is not", 0),
}  # fmt: skip


def _measured(name: str) -> str:
    n32, ulp, n16 = PROBED[name]
    return (
        f"measured on an H100: the GPU's f32 {name} differs from the CPU's on {n32} of "
        f"4096 probe inputs (up to {ulp}), its bf16 {name} on {n16} of 4096"
        + (" (bf16 results are rounded from those f32 ones: they may differ elsewhere)"
           if n16 == 0 else "")
    )  # fmt: skip


_ELSEWHERE = (
    "reproduced in f32 where the module computes it in XLA's MLIR emitters "
    "(jaxmma.arith.GPU_FUNCTIONS); this one is bf16 / f16, or the module's text does not "
    "show it there. "
)
#: why each refused primitive is refused; the CPU's error was measured on 65,536 f32
#: inputs against float64 references (jax 0.10.2, x86-64)
REFUSED = {
    "exp": _ELSEWHERE + _APPROX + "the CPU's own exp is within 0.97 ulp; " + _measured("exp"),
    "exp2": _APPROX + "the CPU's own exp2 is a different polynomial",
    "log": _ELSEWHERE + _APPROX + "the CPU's own log is within 0.96 ulp; " + _measured("log"),
    "log1p": _APPROX + "the CPU's own log1p is within 2.4 ulp (measured)",
    "expm1": _APPROX + "the CPU's own expm1 is within 4.1 ulp (measured)",
    "tanh": _ELSEWHERE + _APPROX + "the CPU's own tanh is within 4.0 ulp; " + _measured("tanh"),
    "logistic": _ELSEWHERE
    + _APPROX
    + "the CPU's own logistic is within 2.1 ulp; "
    + _measured("logistic"),
    "erf": _ELSEWHERE + _APPROX + "the CPU's own erf is within 5.3 ulp; " + _measured("erf"),
    "rsqrt": _ELSEWHERE
    + "XLA:GPU computes it with an approximate reciprocal square root; the CPU's "
    "own rsqrt is within 1.6 ulp; " + _measured("rsqrt"),
    "sqrt": _ELSEWHERE + "XLA:GPU's f32 sqrt is not correctly rounded (an approximate square root, "
    "not sqrt.rn); " + _measured("sqrt"),
    "div": _ELSEWHERE + "XLA:GPU compiles f32 division as PTX div.full.f32 (nvptx_backend.cc sets "
    "-nvptx-prec-divf32=1), an approximation of up to 2 ulp; " + _measured("div"),
    "pow": "XLA:GPU computes pow with libdevice; the CPU's own pow differs",
    "reduce_sum": "XLA:GPU's reduction emitters add in their own order (threads, vector "
    "width, warps): f32 sums are reproduced where the module shows them in its MLIR "
    "emitters (jaxmma.xla_gpu._xla_sum); this one is not f32, or there is no module to read",
    "reduce_max": "a max reduction outside XLA's MLIR emitters (a Triton fusion, or no "
    "GPU module to read): its NaN and signed-zero rules are not measured",
    "reduce_min": "a min reduction outside XLA's MLIR emitters (a Triton fusion, or no "
    "GPU module to read): its NaN and signed-zero rules are not measured",
    "reduce_prod": "XLA:GPU's reduction emitters multiply in their own order",
    "argmax": "XLA:GPU's reduction order decides ties and NaNs; not modelled yet",
    "argmin": "XLA:GPU's reduction order decides ties and NaNs; not modelled yet",
    "cumsum": "XLA:GPU computes scans in its own order",
    "cumlogsumexp": "XLA:GPU computes scans in its own order",
    "cumprod": "XLA:GPU computes scans in its own order",
    "cummax": "XLA:GPU computes scans in its own order",
    "cummin": "XLA:GPU computes scans in its own order",
    "conv_general_dilated": "convolutions run in cuDNN or XLA's own emitters: not modelled",
}
_TRANSCENDENTAL = ("sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh",
                   "asinh", "acosh", "atanh", "cbrt", "erfc", "erf_inv", "lgamma",
                   "digamma", "igamma", "igammac", "bessel_i0e", "bessel_i1e",
                   "logaddexp", "nextafter", "rem", "polygamma", "zeta")  # fmt: skip
for _n in _TRANSCENDENTAL:
    REFUSED.setdefault(_n, _APPROX + f"the CPU's own {_n} differs")
LOWP = ("bfloat16", "float16")
WIDER = {"bfloat16": 16, "float16": 16, "float32": 32, "float64": 64}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One equation whose XLA:GPU bits are not established: ``op`` (with its output
    type), ``where`` (source location and name stack), ``reason``."""

    op: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.op} at {self.where}: {self.reason}"


def _where(eqn) -> str:
    try:
        from jax._src import source_info_util

        loc = source_info_util.summarize(eqn.source_info)
        stack = str(eqn.source_info.name_stack)
    except Exception:  # a JAX release without these: the op alone names it
        return "an unknown location"
    return f"{loc}" + (f" [{stack}]" if stack else "")


def _op(eqn) -> str:
    outs = ", ".join(v.aval.str_short() for v in eqn.outvars)
    return f"{eqn.primitive.name} -> {outs}"


def _is_float(aval) -> bool:
    return jnp.issubdtype(np.dtype(aval.dtype), jnp.floating)


def _pow2(vals) -> bool:
    """Every element a nonzero finite power of two (a product by it is exact)."""
    v = np.asarray(vals, np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v == 0):
        return False
    return bool(np.all(np.abs(np.frexp(v)[0]) == 0.5))


class _State:
    """Per variable: the findings it depends on (``taint``), whether it is an
    unrounded-in-a-fusion product (``prod``: may be contracted into an FMA) or a
    rounded bf16 / f16 result (``lowp``: may be kept in f32), its known values."""

    def __init__(self, facts=None, dots=None):
        self.taint, self.prod, self.lowp, self.vals = {}, {}, {}, {}
        self.facts = facts  # the module's _hlo.Emitters, or None: assume the worst
        self.dots = dots or {}  # id(dot equation) -> why no GEMM fusion computes it
        self.extra: dict = {}  # id(equation) -> why it is refused besides
        self.scaled: dict = {}  # var -> (var, f32 constant, id(jaxpr)): var * constant
        self.folds: dict = {}  # id(mul) -> (var a, fl(c1 * c2)): XLA's a * (c1 * c2)
        self.rank0: dict = {}  # var of self.scaled -> whether its constant is rank 0
        self.depth = 0  # calls entered: rewrites are read at the top level only
        self._producers: dict = {}  # id(jaxpr) -> {var: equation}

    def producer(self, jaxpr, v):
        """The equation of ``jaxpr`` that computes ``v`` (None for inputs and literals),
        followed into calls (XLA inlines them) to the one that computes their output."""
        if isinstance(v, jcore.Literal):
            return None
        table = self._producers.get(id(jaxpr))
        if table is None:
            table = {o: q for q in jaxpr.eqns for o in q.outvars}
            self._producers[id(jaxpr)] = table
        q = table.get(v)
        name = q.primitive.name if q is not None else ""
        if q is not None and name in util.CALLS and util.CALLS[name] in q.params:
            inner, _ = util.closed(q.params[util.CALLS[name]])
            return self.producer(inner, inner.outvars[q.outvars.index(v)])
        return q

    def local(self, jaxpr, v):
        """The equation of ``jaxpr`` itself that computes ``v`` (None for inputs,
        literals and the outputs of calls)."""
        q = self.producer(jaxpr, v)
        return q if q is not None and any(o is v for o in q.outvars) else None

    def get(self, table, v, default=None):
        if isinstance(v, jcore.Literal):
            return default
        return table.get(v, default)

    def values(self, v):
        if isinstance(v, jcore.Literal):
            return np.asarray(v.val)
        return self.vals.get(v)


def _fold(eqn, st: _State, ins):
    """Known values of ``eqn``'s output from known inputs (scalar constants such as a
    learning rate or the 0.5 of a loss), or None."""
    name = eqn.primitive.name
    vals = [st.values(v) for v in eqn.invars]
    if any(x is None for x in vals) or len(eqn.outvars) != 1:
        return None
    if name in MOVE and len(vals) == 1:
        return vals[0]
    if name == "convert_element_type":
        return np.asarray(vals[0]).astype(eqn.params["new_dtype"])
    if all(np.asarray(x).size == 1 for x in vals) and name in ARITH | {"max", "min"}:
        try:
            out = util.bind(eqn, [np.asarray(x).reshape(v.aval.shape)
                                    for x, v in zip(vals, eqn.invars, strict=True)])[0]  # fmt: skip
            return np.asarray(out)
        except Exception:  # not foldable here: unknown
            return None
    return None


def _walk(jaxpr, consts, st: _State, findings: list):
    for v, c in zip(jaxpr.constvars, consts, strict=True):
        arr = np.asarray(c)
        if arr.size <= 1 << 16:
            st.vals[v] = arr
    for e in jaxpr.eqns:
        name = e.primitive.name
        taint = frozenset().union(*(st.get(st.taint, v, frozenset()) for v in e.invars))
        reasons = []
        prod = lowp = False
        sub = list(util.sub_jaxprs(e))
        if name in util.CALLS and util.CALLS[name] in e.params:
            inner, c = util.closed(e.params[util.CALLS[name]])
            k = len(e.invars) - len(inner.invars)
            for vo, vi in zip(e.invars[k:], inner.invars, strict=True):
                for table in (st.taint, st.prod, st.lowp):
                    if st.get(table, vo) is not None:
                        table[vi] = st.get(table, vo)
                if st.values(vo) is not None:
                    st.vals[vi] = st.values(vo)
                else:  # one jaxpr may be called at several sites: not this one's
                    st.vals.pop(vi, None)
            st.depth += 1
            _walk(inner, c, st, findings)
            st.depth -= 1
            for vo, vi in zip(e.outvars, inner.outvars, strict=True):
                for table in (st.taint, st.prod, st.lowp):
                    x = st.get(table, vi)
                    if x is not None:
                        table[vo] = x
                if st.values(vi) is not None:
                    st.vals[vo] = st.values(vi)
            if id(e) in st.extra:
                f = Finding(_op(e), _where(e), st.extra[id(e)])
                findings.append(f)
                for vo in e.outvars:
                    st.taint[vo] = st.get(st.taint, vo, frozenset()) | {f}
            continue
        if name == "dot_general":
            if id(e) in st.dots:  # else computed by the module's plan
                reasons.append("no GEMM fusion of the module is read for it: " + st.dots[id(e)])
        elif name == "scatter-add":  # one atomic add per element, or refused
            why = _replay_scatter.refusal(e, st.facts)
            if why:
                reasons.append(why)
        elif sub:
            inner_findings = []
            for j in sub:
                _walk(j, [], _State(), inner_findings)
                if any(_is_float(v.aval) and q.primitive.name in ARITH | ON_BITS
                       for q in j.eqns for v in q.invars):  # fmt: skip
                    inner_findings.append("float arithmetic inside")
            if inner_findings:
                reasons.append(
                    f"{name} holds operations that are refused, float arithmetic or float "
                    "comparisons (computed as the CPU computes them: subnormals flushed); "
                    "loops and conditionals are not inspected"
                )
        elif name in EXACT:
            if name in COMMUTE:
                lowp = any(st.get(st.lowp, v) for v in e.invars)
            if name in MOVE | {"neg"}:
                prod = any(st.get(st.prod, v) for v in e.invars)
            if name not in COMMUTE and any(st.get(st.lowp, v) for v in e.invars):
                reasons.append(_excess(e, st))
        elif name == "convert_element_type":
            reasons += _convert(e, st)
            src, dst = e.invars[0].aval.dtype, np.dtype(e.params["new_dtype"])
            if _is_float(e.invars[0].aval) and dst.name in WIDER:
                if WIDER.get(np.dtype(src).name, 0) <= WIDER[dst.name]:
                    prod = bool(st.get(st.prod, e.invars[0]))
                if dst.name in LOWP and WIDER.get(np.dtype(src).name, 0) > 16:
                    lowp = True
        elif name in ARITH and all(_is_float(v.aval) for v in e.outvars):
            if any(st.get(st.lowp, v) for v in e.invars):
                reasons.append(_excess(e, st))
            exact_scale = False
            if name == "mul":
                exact_scale = any(_pow2(st.values(v)) for v in e.invars
                                  if st.values(v) is not None)  # fmt: skip
                prod = not exact_scale
                reasons += _scaled(e, st, jaxpr)
            if name == "square":
                prod = True
            if name == "integer_pow":
                y = e.params["y"]
                low = np.dtype(e.outvars[0].aval.dtype).name in LOWP
                if y < 0 and not (is_f32(e) and _divides_here(st)):
                    reasons.append(f"x**{y} is 1 / x**{-y}: " + _division_refused(e))
                elif y > 2 and low:
                    reasons.append(f"x**{y} is several multiplies that XLA:GPU may keep in "
                                   "excess precision")  # fmt: skip
                prod = y >= 2  # its last multiply may be contracted with an add
            if name in ("add", "sub", "add_any"):
                reasons += _factored(e, st, jaxpr)
            if isinstance(st.folds.get(id(e)), TanhGrad):
                prod = True  # no add: a product, which a later add may contract
            elif name in ("add", "sub", "add_any") and _may_contract(e, st):
                for v in e.invars:
                    m = st.get(st.prod, v)
                    if m:
                        reasons.append(_contract_reason(m, st))
                        break
            if name == "neg":
                prod = any(st.get(st.prod, v) for v in e.invars)
            if np.dtype(e.outvars[0].aval.dtype).name in LOWP and not (
                exact_scale or name == "neg"
            ):
                lowp = True
            if prod and name in ("mul", "integer_pow"):
                prod = _where(e)
        elif name in ARITH:
            pass  # integer arithmetic: exact, wraps on both
        elif name == "reduce_sum" and trivial_sum(e):
            # a reshape: XLA's simplifier drops the reduce (xla-trivial-reduce-*.json)
            lowp = any(st.get(st.lowp, v) for v in e.invars)
            prod = any(st.get(st.prod, v) for v in e.invars)
        elif name == "reduce_sum" and is_f32(e):
            plan = sum_plan(e, st.facts)
            if isinstance(plan, str):
                reasons.append(plan)
            elif any(st.get(st.lowp, v) for v in e.invars):
                reasons.append(_excess(e, st))
        elif name == "div" and is_f32(e) and (r := reciprocal(e, st.values(e.invars[1]),
                                                            st.facts)) is not None:  # fmt: skip
            # x / c as XLA computes it: x * (1 / c), a product an add may contract with
            prod = _where(e) if not _pow2(r) else False
        elif name in LIBDEVICE and _libdevice_here(e, st):
            if any(st.get(st.lowp, v) for v in e.invars):  # f32 exp / log: libdevice
                reasons.append(_excess(e, st))
        elif name in MINMAX_REDUCE and _ieee_minmax(st):
            lowp = any(st.get(st.lowp, v) for v in e.invars)  # commutes with rounding
        elif name in REFUSED:
            if any(_is_float(v.aval) for v in e.invars):
                why = REFUSED[name]  # on integers these are exact
                if name in MINMAX_REDUCE and st.facts is not None:
                    why += " (the module's: " + ", ".join(st.facts.minmax) + ")"
                reasons.append(why)
        else:
            reasons.append(
                REFUSED.get(
                    name,
                    "not in the list of operations whose XLA:GPU bits are "
                    "established (docs/xla_gpu.md)",
                )  # fmt: skip
            )
        if id(e) in st.extra:
            reasons.append(st.extra[id(e)])
        if reasons:
            f = Finding(_op(e), _where(e), "; ".join(dict.fromkeys(reasons)))
            findings.append(f)
            taint = taint | {f}
        for v in e.outvars:
            st.taint[v] = taint
            if prod:
                st.prod[v] = prod if isinstance(prod, str) else _prod_src(e, st)
            if lowp:
                st.lowp[v] = True
        if len(e.outvars) == 1:
            val = _fold(e, st, None)
            if val is not None:
                st.vals[e.outvars[0]] = val


def _scalar(st, v):
    """The f32 value of a scalar constant operand (a literal or a known value), else None."""
    c = st.values(v)
    if c is None or np.size(c) != 1 or np.dtype(v.aval.dtype) != np.float32:
        return None
    return np.float32(np.asarray(c).reshape(()))


def _scaled(e, st, jaxpr) -> list:
    """XLA's algebraic simplifier rewrites products by scalar constants, rounding once
    where jax rounds twice: ``(a * c1) * c2`` becomes ``a * fl(c1 * c2)`` (any operand
    order), ``(a * c1) * (b * c2)`` becomes ``(a * b) * fl(c1 * c2)`` and ``(a * c1) *
    broadcast(b)`` becomes ``a * broadcast(b * c1)`` (openxla/xla
    ``algebraic_simplifier.cc``, ``HandleMultiply``). The first is computed as XLA does
    where the module holds the constant ``fl(c1 * c2)`` (and as jax does where it holds
    no such constant: not rewritten), recorded in ``st.folds``; so is the third
    (:class:`Rebroadcast`: the module's folded constant decides whether ``b * c`` is
    folded further). The second needs both constants to be constant instructions, not
    broadcasts of one, and jax lowers a product of an array by a scalar as a product by
    a broadcast: on arrays of more than one element it is computed as jax writes it (the
    captured block step shows ``(g * c1) * (x**2 * 3)`` unchanged), on one element
    refused.
    Records ``e`` in ``st.scaled`` where it is a product by a scalar constant."""
    if np.dtype(e.outvars[0].aval.dtype) != np.float32 or len(e.invars) != 2:
        return []
    consts = [_scalar(st, v) for v in e.invars]
    inner = [None if isinstance(v, jcore.Literal) else st.scaled.get(v) for v in e.invars]
    inner = [x if x is not None and x[2] == id(jaxpr) else None for x in inner]
    reasons = []
    if any(c is not None for c in consts) and not all(c is not None for c in consts):
        k = 0 if consts[0] is not None else 1
        c2, other = consts[k], e.invars[1 - k]
        prev = inner[1 - k]
        # a rank-0 constant: what XLA's rules take (under a broadcast)
        rank0 = not np.shape(e.invars[k].aval)
        st.rank0[e.outvars[0]] = rank0
        if prev is None:
            st.scaled[e.outvars[0]] = (other, c2, id(jaxpr))
            return []
        a, c1, _ = prev
        with np.errstate(all="ignore"):
            folded = np.float32(c1 * c2)
        shown = st.facts.constants if st.facts is not None else None
        if shown is None:
            return ["(x * c1) * c2, which XLA's algebraic simplifier may fold into x * "
                    "fl(c1 * c2): no module to show whether it did"]  # fmt: skip
        if int(folded.view(np.uint32)) in shown and st.depth:
            return [_IN_CALL.format("(x * c1) * c2", "x * fl(c1 * c2)")]
        if int(folded.view(np.uint32)) in shown:
            st.folds[id(e)] = (a, folded)
            st.scaled[e.outvars[0]] = (a, folded, id(jaxpr))
            st.rank0[e.outvars[0]] = rank0 and bool(st.rank0.get(other))
        else:
            st.scaled[e.outvars[0]] = (other, c2, id(jaxpr))
        return reasons
    if any(x is not None for x in inner):
        # (a * c1) * (b * c2): the simplifier's rule takes constants that are constant
        # instructions, and jax lowers a product of an array by a scalar constant as a
        # product by a broadcast of it: only a product of one element can match
        if all(x is not None for x in inner):
            if math.prod(e.outvars[0].aval.shape) == 1:
                reasons.append(
                    "(a * c1) * (b * c2) of one element, which XLA's algebraic simplifier "
                    "computes as (a * b) * fl(c1 * c2): not modelled"
                )
            return reasons
        k = 0 if inner[0] is None else 1  # the operand that is not the scaled product
        why = _rebroadcast_refusal(e, st, jaxpr, k)
        if why == "":
            scaled, q = inner[1 - k], st.local(jaxpr, e.invars[1 - k])
            bcast = st.local(jaxpr, e.invars[k])
            st.folds[id(e)] = _rebroadcast(st, jaxpr, bcast, scaled[0], scaled[1], id(q))
        elif why:
            reasons.append(why)
    return reasons


_IN_CALL = (
    "{} inside a call, which XLA's algebraic simplifier computes as {} (the call "
    "inlined), while one jaxpr may be called at several sites: not modelled"
)


def _rebroadcast_refusal(e, st, jaxpr, k: int) -> str | None:
    """For ``e = (a * c) * y`` (``y = e.invars[k]``): ``""`` where XLA's rule ``(a * c) *
    broadcast(b)`` -> ``a * broadcast(b * c)`` matches as :class:`Rebroadcast` computes
    it (``y`` a broadcast of a non-constant ``b`` with more elements than ``b``, made in
    this jaxpr, ``c`` a rank-0 constant, ``a`` a non-constant of the output's shape,
    not itself broadcast, at the top level); None where XLA has no rule for it (``y`` of
    the output's shape and not a broadcast, or a broadcast of a constant); else why
    it is refused."""
    y, ac = e.invars[k], e.invars[1 - k]
    out = e.outvars[0].aval.shape
    q = st.producer(jaxpr, y)
    local = st.local(jaxpr, y)
    broadcast = (q is not None and q.primitive.name == "broadcast_in_dim") or (
        not isinstance(y, jcore.Literal) and tuple(np.shape(y.aval)) != tuple(out)
    )
    if not broadcast:
        return None
    b = (
        local.invars[0]
        if local is not None and local.primitive.name == "broadcast_in_dim"
        else None
    )
    if b is not None and (st.values(b) is not None or b in jaxpr.constvars):
        return None  # Broadcast(Constant): not the rule's
    a = st.scaled[ac][0]
    aq = st.local(jaxpr, a) if not isinstance(a, jcore.Literal) else None
    exact = (
        b is not None
        and math.prod(np.shape(b.aval)) < math.prod(out)
        and tuple(d for d in out if d != 1) != tuple(d for d in np.shape(b.aval) if d != 1)
        and st.rank0.get(ac)
        and not isinstance(a, jcore.Literal)
        and tuple(np.shape(a.aval)) == tuple(out)
        and st.values(a) is None
        and a not in jaxpr.constvars
        and (aq is None or aq.primitive.name not in ("broadcast_in_dim", "reshape"))
        and not st.depth
    )
    if exact:
        return ""
    return (
        "(a * c) * broadcast(b), which XLA's algebraic simplifier may compute as a * "
        "broadcast(b * c) (another rounding): not modelled in this form"
    )


@dataclasses.dataclass(frozen=True)
class Rebroadcast:
    """XLA's ``(a * c) * broadcast(b)`` -> ``a * broadcast(b * c)`` (``HandleMultiply``)
    in place of the equation: ``bcast`` the broadcast equation, ``src`` the variable
    multiplied by ``k`` before it is broadcast, ``src`` reshaped to ``b``'s shape: ``b``
    itself with ``k = c``, or, where ``b`` is ``x * r`` (a product or a division by a
    scalar constant, through reshapes) and the module holds ``fl(r * c)``, ``x`` with
    ``k = fl(r * c)`` (XLA folds the two constants, as the captured block step shows)."""

    a: object
    bcast: object
    src: object
    k: np.float32
    inner: int  # id of the equation a * c


def _rebroadcast(st, jaxpr, bcast, a, c, inner: int) -> Rebroadcast:
    """The :class:`Rebroadcast` of ``e = (a * c) * bcast`` (``bcast`` a broadcast)."""
    b = bcast.invars[0]
    v, q = b, st.local(jaxpr, b)
    while q is not None and (
        q.primitive.name == "reshape" or (q.primitive.name == "reduce_sum" and trivial_sum(q))
    ):
        v = q.invars[0]
        q = st.local(jaxpr, v)
    r = x = None
    if q is not None and q.primitive.name == "mul" and st.scaled.get(v) is not None:
        x, r, _ = st.scaled[v]
    elif q is not None and q.primitive.name == "div" and is_f32(q):
        r = reciprocal(q, st.values(q.invars[1]), st.facts)
        x = q.invars[0] if r is not None and _scalar(st, q.invars[1]) is not None else None
    if x is not None and not isinstance(x, jcore.Literal) and st.facts is not None:
        with np.errstate(all="ignore"):
            k = np.float32(r * c)
        if int(k.view(np.uint32)) in st.facts.constants:
            return Rebroadcast(a, bcast, x, k, inner)
    return Rebroadcast(a, bcast, b, np.float32(c), inner)


def _factored(e, st, jaxpr) -> list:
    """Sums XLA's algebraic simplifier may rewrite with other rounding (openxla/xla
    ``algebraic_simplifier.cc``, ``HandleAdd``), refused: ``a + scatter-add(...)``
    (the add moved into the scatter's operand) and ``(a + c1) + c2`` (constants summed
    first). And ``a + a * b`` for an array ``b`` (either order, or a subtraction): the
    f32 block step's ``tanh`` gradient, which this jax (0.10) writes so, while the jax
    that compiled the captured module (0.11) linearizes ``tanh`` as a product of ``(1 +
    t) * (1 - t)`` (its own HLO before any XLA pass, dumped on an H200): another
    rounding, 1 to 194 elements of three weight updates differ. The form is refused
    wherever it appears."""
    if np.dtype(e.outvars[0].aval.dtype) != np.float32 or len(e.invars) != 2:
        return []
    x, y = e.invars
    ops = [st.producer(jaxpr, v) for v in (x, y)]
    if any(q is not None and q.primitive.name == "scatter-add" for q in ops):
        return ["a + scatter-add(...), which XLA's algebraic simplifier turns into a "
                "scatter-add into the sum (another order of adds): not modelled"]  # fmt: skip
    if e.primitive.name == "add" and any(_scalar(st, v) is not None for v in (x, y)):
        for q in ops:
            if (
                q is not None
                and q.primitive.name == "add"
                and any(_scalar(st, v) is not None for v in q.invars)
            ):
                return ["(a + c1) + c2, which XLA's algebraic simplifier computes as "
                        "a + fl(c1 + c2): not modelled"]  # fmt: skip
    for a, q in ((x, ops[1]), (y, ops[0])):
        if q is None or q.primitive.name != "mul" or not any(v is a for v in q.invars):
            continue
        other = [v for v in q.invars if v is not a]
        if other and _scalar(st, other[0]) is None:
            grad = _tanh_vjp(e, st, jaxpr)
            shown = st.facts.tanh_grad if st.facts is not None else ""
            if grad is not None and shown == "product" and st.depth:
                return [_IN_CALL.format("tanh's gradient e + e * t", "jax 0.11 wrote it")]
            if grad is not None and shown == "product":
                st.folds[id(e)] = grad
                return []
            if grad is not None:
                return [
                    "tanh's gradient e + e * t (e = g * (1 - t)), as this jax writes it; "
                    "the module does not show how its jax wrote it (jax 0.11: g * ((1 + t) "
                    f"* (1 - t)), another rounding; the module's form: {shown or 'none'})"
                ]
            return ["a + a * b, which jax 0.11 writes as a product of (1 + b) where it "
                    "is tanh's gradient (another rounding): not modelled"]  # fmt: skip
    return []


@dataclasses.dataclass(frozen=True)
class TanhGrad:
    """tanh's gradient ``g * ((1 + t) * (1 - t))``, as jax 0.11 writes it, in place of
    an equation ``e + e * t`` with ``e = g * (1 - t)`` (jax 0.10's transpose of its
    linearization): ``g`` and ``t`` are the variables (:mod:`._hlo_jvp`)."""

    g: object
    t: object
    inner: int = 0  # id of the equation E = g * (1 - t), which reads g and t


def _line(e) -> tuple:
    """The innermost user frame of an equation (file, line): jax's own rules give the
    equations they write the frame of the call they linearize."""
    tb = e.source_info.traceback
    for f in source_info_util.user_frames(tb) if tb is not None else ():
        return (f.file_name, f.start_line)
    return ()


def _tanh_vjp(e, st, jaxpr) -> TanhGrad | None:
    """``TanhGrad(g, t)`` where ``e`` is ``add_any(E, E * t)`` (either order) with ``E =
    g * (1 - t)`` and ``t = tanh(x)`` in f32, all in ``jaxpr`` and all at the source line
    of the ``tanh`` (jax's linearization, not the same arithmetic written by hand);
    else None."""
    if e.primitive.name != "add_any":
        return None

    def prod(v, name):
        q = st.producer(jaxpr, v)
        return q if q is not None and q.primitive.name == name and len(q.invars) == 2 else None

    for E, F in (e.invars, e.invars[::-1]):
        f = prod(F, "mul")
        if f is None or not any(v is E for v in f.invars):
            continue
        t = [v for v in f.invars if v is not E]
        q = prod(E, "mul")
        tq = st.producer(jaxpr, t[0]) if t else None
        if q is None or tq is None or tq.primitive.name != "tanh" or not is_f32(tq):
            continue
        for g, d in (q.invars, q.invars[::-1]):
            s = prod(d, "sub")
            if s is not None and s.invars[1] is t[0] and _scalar(st, s.invars[0]) == 1:
                line = _line(tq)
                if line and all(_line(x) == line for x in (e, f, q, s)):
                    return TanhGrad(g, t[0], id(q))
    return None


def _may_contract(e, st) -> bool:
    """Whether the add or subtract ``e`` may run in a fusion that may contract it: where
    the module's stack frames show which of its adds ``e`` is (:mod:`._hlo_frames`),
    whether one of those is in such a fusion; else whether the module has one."""
    if _uncontracted(st):
        return False
    if st.facts is None:
        return True
    adds = [s for s in st.facts.sites if s.opcode in ("add", "subtract")]
    fit = _hlo_frames.fitting(e, adds, lambda s: s.frames, lambda s: s.prim)
    return not fit or any(s.where in st.facts.contract for s in fit)


def _uncontracted(st) -> bool:
    """The module computes every multiply and add in XLA's MLIR loop and reduction
    emitters, which do not contract them (probe-fma-f32: the GPU's ``a * b + c`` is the
    rounded product plus ``c`` on 4096 of 4096 inputs, the FMA on 3055)."""
    return st.facts is not None and not st.facts.contract


def _ieee_minmax(st) -> bool:
    """Every float max / min reduction of the module runs in XLA's MLIR emitters, whose
    ``maximum`` / ``minimum`` are IEEE 754-2019's (order-independent)."""
    return st.facts is not None and not st.facts.minmax


def trivial_sum(e) -> bool:
    """A ``reduce_sum`` over dimensions of size 1 only (or none): XLA's algebraic
    simplifier replaces it by a reshape, taking the init value +0 as the adder's
    identity, so the GPU's sum is the element's own bits (-0, subnormals and NaN
    payloads kept, where ``-0 + 0`` would be +0): tests/golden/xla/
    xla-trivial-reduce-*.json, an H100."""
    shape = e.invars[0].aval.shape
    return all(shape[a] == 1 for a in e.params["axes"])


def is_f32(e) -> bool:
    """Every input and output of the equation is f32."""
    return all(np.dtype(v.aval.dtype) == np.float32 for v in (*e.invars, *e.outvars))


def sum_plan(e, facts):
    """The :class:`._xla_sum.SumPlan` of an f32 ``reduce_sum`` equation in the module
    whose :class:`._hlo.Emitters` are ``facts``, or why it is refused: the module must
    add every f32 reduce of that operand shape and axes in XLA's MLIR emitters, with one
    load width."""
    shape, axes = tuple(e.invars[0].aval.shape), tuple(e.params["axes"])
    if facts is None:
        return REFUSED["reduce_sum"]
    found = [s for s in facts.sums if s.shape == shape and s.dims == axes]
    full = len(shape) > 1 and sorted(axes) == list(range(len(shape)))
    if not found and (full or len(shape) == 1):  # XLA flattens a full reduction
        N = math.prod(shape)
        found = [s for s in facts.sums if s.shape == (N,) and s.dims == (0,)]
        shape, axes = (N,), (0,)
        if not found and N > 16384:  # and splits a long one: [k1, k2] rows, then [k1]
            k1, k2, _ = _xla_sum.split_params(N)
            rows = [s for s in facts.sums if s.shape == (k1, k2) and s.dims == (1,)]
            sums = [s for s in facts.sums if s.shape == (k1,) and s.dims == (0,)]
            if rows and sums:
                other = [s.where for s in rows + sums if not s.mlir]
                if not other and len({s.narrow for s in rows}) == 1:
                    return _xla_sum.split_plan(N, rows[0].narrow)
    if not found:
        return (f"no f32 add-reduce of {list(shape)} over {list(axes)} in the module "
                "(XLA rewrote it, or split it in two kernels)")  # fmt: skip
    # of several, those its source lines made (the stack frames of their metadata)
    found = _hlo_frames.nearest(e, found, lambda s: s.frames, lambda s: s.prim)
    if all(s.triton is not None for s in found) and (
        len({(s.triton, s.narrow, s.mixed) for s in found}) == 1
    ):
        s0 = found[0]
        return _xla_sum.triton_plan(shape, axes, s0.triton, s0.narrow, s0.mixed)
    other = [s.where for s in found if not s.mlir]
    if other:
        where = ", ".join(dict.fromkeys(other))
        return (
            f"its reduce runs outside XLA's MLIR reduction emitters, in {where} "
            "(their order is not established)"
        )
    if len({s.narrow for s in found}) > 1:
        return "the module adds reduces of this shape with two load widths"
    return _xla_sum.plan(shape, axes, found[0].narrow)  # (a full one: the same as flat)


def reciprocal(e, c, facts) -> np.float32 | None:
    """``fl(1 / c)`` for an f32 division by a constant scalar ``c`` (known values, or
    None) whose GPU result is ``x * fl(1 / c)`` rounded once, else None. XLA's algebraic
    simplifier turns ``x / c`` into ``x * fl(1 / c)`` (the captured layer norms' means);
    where it does not, ``div.full`` gives ``x * rcp.approx(c)``, the same where
    ``rcp.approx(c) == fl(1 / c)``; where the two differ the module must hold no divide."""
    if c is None or np.size(c) != 1 or facts is None:
        return None
    c = np.float32(np.asarray(c).reshape(()))
    if not np.isfinite(c) or c == 0 or not 2.0**-125 < abs(c) < 2.0**125:
        return None
    r = np.float32(1) / c
    if not np.isfinite(r) or abs(r) < 2.0**-126:
        return None
    fn = arith.GPU_FUNCTIONS["div"][1]
    with jax.ensure_compile_time_eval():  # a constant, also while gpu_replay is jitted
        approx = np.asarray(fn(np.float32(1).view(np.uint32), c.view(np.uint32)))
    approx = approx.view(np.float32)
    if facts.libdevice:  # a divide in a fusion whose lowering is not measured
        return None
    return r if approx == r or "divide" not in facts.in_mlir else None


def _emitted(st, hlo) -> bool:
    """Whether the module's MLIR emitters compute the HLO opcodes ``hlo`` and every
    function of :data:`jaxmma.arith.GPU_FUNCTIONS` in the module runs in them."""
    facts = st.facts
    return facts is not None and not facts.libdevice and set(hlo) <= facts.in_mlir


def _divides_here(st) -> bool:
    """Whether the module's f32 divisions are XLA:GPU's known ones (:func:`_emitted`):
    ``x**y`` for ``y < 0``, which jax lowers to ``1 / x**-y`` (the products of
    ``x**-y``, then a divide)."""
    return _emitted(st, ("divide",))


def _division_refused(e) -> str:
    if not is_f32(e):
        return "a bf16 / f16 division, whose XLA:GPU lowering is not established"
    return "a division, " + REFUSED["div"]


def _libdevice_here(e, st) -> bool:
    """An f32 function of :data:`jaxmma.arith.GPU_FUNCTIONS` (not a float16 one: XLA
    computes those with other instructions), in a module whose MLIR emitters compute it
    (its HLO opcodes) and whose every such function runs in them."""
    return is_f32(e) and _emitted(st, arith.GPU_FUNCTIONS[e.primitive.name][0])


def _contract_reason(m, st) -> str:
    if st.facts is None:
        where = "its emitters"
    else:
        where = "the fusions " + ", ".join(st.facts.contract) + " (not XLA's MLIR emitters)"
    return (
        f"XLA:GPU may contract it with the multiply at {m} into one FMA (one rounding "
        f"instead of two): {where} may contract, which has not been probed"
    )


def _prod_src(e, st):
    for v in e.invars:
        m = st.get(st.prod, v)
        if m:
            return m
    return _where(e)


def _excess(e, st) -> str:
    return (
        "an operand is a rounded bf16 / f16 result that XLA:GPU may keep in f32 "
        "(xla_allow_excess_precision, on by default, removes the rounding between fused "
        "operations)"
    )


def _convert(e, st) -> list:
    src = np.dtype(e.invars[0].aval.dtype)
    dst = np.dtype(e.params["new_dtype"])
    sf, df = jnp.issubdtype(src, jnp.floating), jnp.issubdtype(dst, jnp.floating)
    if df and dst.name not in WIDER:
        return [
            f"a conversion into {dst.name}: XLA:GPU may convert with saturating "
            "instructions (cvt.rn.satfinite) where the CPU gives NaN or inf on overflow; "
            "not established"
        ]
    if sf and not df and dst != np.bool_:
        return [f"a conversion of floats into {dst.name} (clamping, NaN): not established"]
    if sf and df and WIDER.get(src.name, 0) <= 16 and WIDER[dst.name] > 16:
        if st.get(st.lowp, e.invars[0]):
            return [_excess(e, st)]
    return []


def check(closed_jaxpr, facts=None, dots=None, extra=None, folds=None) -> tuple:
    """``(findings, per_output)`` of a closed jaxpr: every refused equation, and per
    output the findings it depends on (an empty set: the output is exact). ``facts``:
    the GPU module's :class:`._hlo.Emitters` (None: every emitter is assumed to
    contract and to reduce max / min in an unknown way); ``dots``: the dot equations
    (by ``id``) that no read GEMM fusion computes, each with the reason; ``extra``:
    other equations (by ``id``) refused with a reason (:func:`._versions.resolve`);
    ``folds``: a dict filled with the products XLA computes with folded constants (by
    ``id``: ``(var a, fl(c1 * c2))``, :func:`_scaled`)."""
    st = _State(facts, dots)
    st.extra = extra or {}
    if folds is not None:
        st.folds = folds
    findings: list = []
    jaxpr = closed_jaxpr.jaxpr
    _walk(jaxpr, closed_jaxpr.consts, st, findings)
    per_output = [st.get(st.taint, v, frozenset()) for v in jaxpr.outvars]
    return findings, per_output


def message(findings, per_output, where: str = "fn") -> str:
    """The refusal: each finding that reaches an output, and which outputs it reaches."""
    live = [f for f in findings if any(f in t for t in per_output)]
    hit = [i for i, t in enumerate(per_output) if t]
    ok = [i for i, t in enumerate(per_output) if not t]
    lines = [
        f"{where}: {len(live)} operation{'s' if len(live) != 1 else ''} whose XLA:GPU bits "
        f"are not established reach{'es' if len(live) == 1 else ''} outputs {hit} of "
        f"{len(per_output)} (flattened)" + (f"; outputs {ok} are reproduced:" if ok else ":")
    ]
    for f in live:
        outs = [i for i, t in enumerate(per_output) if f in t]
        lines.append(f"  - {f} (outputs {outs})")
    lines.append(
        "Pass unverified='omit' to get the other outputs (each refused one replaced by a "
        "jaxmma.Unverified naming its reasons), or unverified='compute' to compute them "
        "as JAX does on this backend, with a warning (docs/xla_gpu.md)."
    )
    return "\n".join(lines)
