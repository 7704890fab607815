"""The stack frames of a compiled module's metadata (``jaxmma/xla_gpu/_hlo_frames.py``):
the tables read, a jaxpr equation's own frames, and gpu_replay pairing equations with the
module's dots, reduces and adds by the source lines that made them, where shapes alone
leave the choice open; nothing is narrowed where the function's lines are not the
module's."""

import dataclasses
import glob
import inspect
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmma.conformance import _xla_capture as X
from jaxmma.conformance import _xla_models as XM
from jaxmma.xla_gpu import _hlo, _hlo_flow, _hlo_frames, _replay_ops
from jaxmma.xla_gpu import _replay as R

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "xla-models-*.npz")))
CASES = {c.name: c for c in XM.cases()}
SRC = "_xla_models.py"


def _meta(path: str, name: str) -> dict:
    with np.load(path) as z:
        for k in z.files:
            if k.endswith(".meta"):
                meta = json.loads(str(z[k][()]))
                if meta.get("name") == name:
                    return meta
    pytest.skip(f"no {name} in {os.path.basename(path)}")


def _line(needle: str) -> int:
    """The line of ``_xla_models.py`` that holds ``needle`` (once)."""
    with open(XM.__file__, encoding="utf-8") as f:
        hits = [i + 1 for i, s in enumerate(f.read().splitlines()) if needle in s]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


TABLES = """HloModule m, entry_computation_layout={{()->f32[]}}

FileNames
1 "/somewhere/else/model.py"

FunctionNames
1 "outer"
2 "inner"

FileLocations
1 {{file_name_id=1 function_name_id=1 line=10 end_line=10 column=4 end_column=9}}
2 {{file_name_id=1 function_name_id=2 line=3 end_line=3 column=11 end_column=20}}
3 {{file_name_id=1 function_name_id=2 line=4 end_line=4 column=7 end_column=20}}

StackFrames
1 {{file_location_id=1 parent_frame_id={p1}}}
2 {{file_location_id=2 parent_frame_id={p2}}}
3 {{file_location_id=3 parent_frame_id={p3}}}


ENTRY %main () -> f32[] {{
  ROOT %c = f32[] constant(1), metadata={{op_name="jit(f)/add" stack_frame_id=3}}
}}
"""


@pytest.mark.parametrize("parents", [(1, 2, 2), (0, 1, 1)], ids=["shown-plus-one", "shown-as-is"])
def test_frame_tables_both_conventions(parents):
    """Both ways a parent is printed (its number, or its number plus one with the
    outermost frame showing itself, as the captured XLA prints them) give the same
    chains, innermost first, with the file's base name."""
    p1, p2, p3 = parents
    text = TABLES.format(p1=p1, p2=p2, p3=p3)
    chains = _hlo_frames.table(text)
    outer = ("model.py", "outer", 10, 4)
    assert chains == {
        1: (outer,),
        2: (("model.py", "inner", 3, 11), outer),
        3: (("model.py", "inner", 4, 7), outer),
    }
    assert _hlo_frames.innermost(text) == {("model.py", "inner", 4, 7)}


def test_frame_tables_unreadable_give_nothing():
    """A parent that comes after its child under both readings: no frames at all
    (nothing is narrowed), rather than a guess."""
    text = TABLES.format(p1=3, p2=3, p3=3)
    assert _hlo_frames.table(text) == {}
    assert _hlo_frames.innermost(text) == frozenset()


def test_comprehension_frames_read_alike():
    """Python 3.11 gives a list comprehension a frame of its own, called at the same
    line; 3.12 runs it in its function's frame (PEP 709). Both read as the latter."""
    f11 = (("m.py", "f.<locals>.<listcomp>", 7, 22), ("m.py", "f", 7, 12), ("m.py", "g", 2, 4))
    f12 = (("m.py", "f", 7, 22), ("m.py", "g", 2, 4))
    assert _hlo_frames._inline(f11) == f12
    assert _hlo_frames._inline(f12) == f12


def test_equation_frames_are_its_source_lines():
    """A jaxpr equation's chain: its own line and column, then its callers' lines."""

    def inner(x):
        return jnp.sum(x * 2.0, -1)

    def outer(x):
        return inner(x) + 1.0

    eqns = jax.make_jaxpr(outer)(jnp.ones((3, 4))).jaxpr.eqns
    red = next(e for e in eqns if e.primitive.name == "reduce_sum")
    chain = _hlo_frames.of_eqn(red)
    first = inspect.getsourcelines(inner)[1]
    assert chain[0][:3] == ("test_xla_frames.py", inner.__qualname__, first + 1)
    assert chain[1][:3] == ("test_xla_frames.py", outer.__qualname__, first + 4)


def _check(meta, text=None):
    """gpu_replay's analysis of a capture, without computing it: the jaxpr, the facts,
    the dot equations and their pairing, the analysis, and per output the reasons it is
    refused. ``text``: the module's text (default: the capture's)."""
    case = CASES[meta["name"]]
    args = [jnp.asarray(a) for a in XM.arrays(case, XM.inputs(case))]
    closed = jax.make_jaxpr(XM.function(case))(*args)
    text = text or meta["hlo"]
    facts = _hlo.emitters(text)
    a = R.analyse(closed, text, _hlo.read(text), facts)
    eqns = R._dot_eqns(closed.jaxpr, [])
    per_output = [sorted(str(f) for f in t) for t in a.per_output]
    return closed, facts, eqns, a.paired, per_output, a


@pytest.mark.skipif(not FILES, reason="no captures")
def test_two_layer_norms_told_apart():
    """The block's two layer norms have sums of the same shape in two Triton fusions
    of different tiles: each ``reduce_sum`` is paired with its own fusion by its caller's
    line (the first norm called from ``attn``, the second from ``block_loss``), where
    before both were refused (two orders for one shape)."""
    meta = _meta(FILES[0], "model-block-loss-f32")
    closed, facts, *_ = _check(meta)
    first, second = _line("h = ln(x, g, b)"), _line("ln(y, g2, b2)")
    sums = [s for s in facts.sums if s.shape == (200, 72) and s.dims == (1,)]
    callers = {s.frames[1][2] for s in sums}
    assert callers == {first, second}, callers
    tiles = {s.frames[1][2]: s.triton for s in sums}
    assert tiles[first] != tiles[second]  # the shapes alone cannot choose

    def sums_of(j, out):
        for e in j.eqns:
            if e.primitive.name == "reduce_sum" and e.invars[0].aval.shape == (200, 72):
                out.append(e)
            for s in jax.tree.leaves(list(e.params.values()), is_leaf=lambda x: hasattr(x, "eqns")):
                if hasattr(s, "eqns"):
                    sums_of(s, out)
                elif hasattr(s, "jaxpr"):
                    sums_of(s.jaxpr, out)
        return out

    eq = sums_of(closed.jaxpr, [])
    assert len(eq) == 4  # mean and variance of each norm
    for e in eq:
        plan = _replay_ops.sum_plan(e, facts)
        assert not isinstance(plan, str), plan
        caller = _hlo_frames.of_eqn(e)[1][2]
        (s,) = {x.triton for x in sums if x.frames[1][2] == caller}
        want = _replay_ops.sum_plan(e, _hlo.Emitters((), (), sums=(s and next(
            x for x in sums if x.frames[1][2] == caller),)))  # fmt: skip
        assert plan == want
    stripped = _hlo_frames.strip(facts)
    assert all(isinstance(_replay_ops.sum_plan(e, stripped), str) for e in eq)


@pytest.mark.skipif(not FILES, reason="no captures")
@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_block_loss_dots_paired_by_source_line(path):
    """In the block's loss (f32), the q / k / v projections and the output projection
    have one signature; the frames pair the projections with the merged GEMM's parts and
    the output projection with its own fusion, whose split-K partials XLA reduces twice,
    in the next layer norm's Triton fusion and in the residual's loop fusion, in two
    orders: one plan with a value per fusion (``variants``). Every equation that reads
    it is placed in one of them (the layer norm's in the Triton fusion, the final
    residual add in the loop fusion, the first residual add in both), and nothing else
    is refused: the softmax's subtraction and the norms' affine adds run in fusions
    that do not contract."""
    meta = _meta(path, "model-block-loss-f32")
    closed, _, eqns, paired, per_output, a = _check(meta)
    q_line = _line("q, k, v = (jnp.einsum(")
    proj = [p for e, p in zip(eqns, paired, strict=True)
            if _hlo_frames.of_eqn(e)[1:2] and _hlo_frames.of_eqn(e)[1][2] == q_line]  # fmt: skip
    assert len(proj) == 3 and all(isinstance(p, _hlo.DotPlan) and p.piece for p in proj)
    wo = [p for e, p in zip(eqns, paired, strict=True)
          if _hlo_frames.of_eqn(e)[0][2] == _line("return x + o @ wo")]  # fmt: skip
    assert len(wo) == 1 and isinstance(wo[0], _hlo.DotPlan), wo
    fusions = sorted(name for name, _, _ in wo[0].variants)
    assert len(fusions) == 2 and fusions[0].startswith("loop_") and "softmax" in fusions[1]
    orders = {str(order) for _, order, _ in wo[0].variants}
    assert len(orders) == 2  # two orders: two values
    kinds = {}
    for e in closed.jaxpr.eqns:
        how = a.decisions.get(id(e))
        if how:
            kinds.setdefault(how[0], []).append(e.primitive.name)
    assert kinds["dot"] == ["dot_general"]
    assert kinds["each"] == ["add"]  # x + o @ wo, cloned into both fusions
    assert sorted(kinds["pick"]) == ["add", "reduce_sum", "sub", "sub"], kinds
    assert per_output == [[]], per_output


@pytest.mark.skipif(not FILES, reason="no captures")
def test_several_values_refused_without_frames():
    """Without the module's stack frames (the tables removed) nothing shows which fusion
    runs the equations that read the output projection: they are refused, naming the
    fusions that hold its values."""
    meta = _meta(FILES[0], "model-block-loss-f32")
    text = meta["hlo"]
    i, j = text.index("\nFileNames"), text.index("\n\n\n%")
    *_, per_output, _ = _check(meta, text[:i] + text[j:])
    assert len(per_output) == 1 and per_output[0]
    assert any("once in each of" in r and "do not show which fusion" in r
               for r in per_output[0]), per_output  # fmt: skip


def test_edited_function_is_not_narrowed():
    """A function whose lines are not the module's (here: another function altogether)
    does not :func:`agree`, and gpu_replay then reads the module without frames."""
    if not FILES:
        pytest.skip("no captures")
    meta = _meta(FILES[0], "model-ln-f32")
    case = CASES[meta["name"]]
    args = [jnp.asarray(a) for a in XM.arrays(case, XM.inputs(case))]

    def other(x, g, b):  # the same shapes, written here
        mu = jnp.mean(x, -1, keepdims=True)
        return (x - mu) * g[None] + b[None]

    closed = jax.make_jaxpr(other)(*args)
    assert not _hlo_frames.agree(closed.jaxpr, meta["hlo"])
    assert _hlo_frames.agree(jax.make_jaxpr(XM.function(case))(*args).jaxpr, meta["hlo"])


@pytest.mark.full  # three replays of the block's loss
@pytest.mark.skipif(not FILES, reason="no captures")
def test_block_loss_needs_both_values():
    """The block's loss (f32, process 1) with each equation reading its fusion's value
    of the output projection is the GPU's bits. The two values differ (the projection
    in one order and the other: about 30 % of elements), and with the loop fusion's
    order alone (every reader taking that value) the loss is not the GPU's: the layer
    norm needs the Triton fusion's value. (With the Triton fusion's order alone the loss
    happens to be the same: the final residual's difference does not reach its
    rounding.)"""
    meta = _meta(FILES[0], "model-block-loss-f32")
    closed, _, eqns, _, per_output, a = _check(meta)
    assert per_output == [[]]
    case = CASES[meta["name"]]
    flat = [jnp.asarray(x) for x in XM.arrays(case, XM.inputs(case))]
    want = meta["outputs"][0]["sha256"]

    def sha(plans, decisions):
        (out,) = R._eval(closed.jaxpr, closed.consts, flat, plans, a.facts, decisions)
        return X.summary(X.output_bits(out))["sha256"]

    assert sha(a.plans, a.decisions) == want
    (wo,) = [e for e in eqns if a.plans[id(e)] is not None and a.plans[id(e)].variants]
    plan = a.plans[id(wo)]
    rng = np.random.default_rng(36)
    ops = [jnp.asarray(rng.standard_normal(v.aval.shape).astype(np.float32)) for v in wo.invars]
    tri, loop = (
        np.asarray(R.replay_dot(wo, plan.variant(k), *ops)).view(np.uint32)
        for k in ("triton_softmax.10", "loop_pad_fusion.2")
    )
    assert (tri != loop).mean() > 0.2  # about 30 % of random products
    one = dict(a.plans)
    one[id(wo)] = plan.variant("loop_pad_fusion.2")
    assert sha(one, {}) != want


def test_fusions_grouped_by_their_dots_frames():
    """:func:`_replay._by_frames` on two dots written on two lines: a fusion whose dot's
    frames are the other line's is left out of this dot's pairing; one whose dot shows
    no frames stays (it may be any dot); frames that fit no dot narrow nothing."""

    def f(a, b):
        x = a @ b
        y = b @ a
        return x, y

    eqns = [e for e in jax.make_jaxpr(f)(jnp.ones((4, 4)), jnp.ones((4, 4))).jaxpr.eqns
            if e.primitive.name == "dot_general"]  # fmt: skip
    first, second = (_hlo_frames.of_eqn(e) for e in eqns)
    assert first[0][2] + 1 == second[0][2]

    def item(frames):
        return types.SimpleNamespace(frames=frames, op_name="jit(f)/dot_general")

    mine, other, blind = item(first), item(second), item(())
    assert R._by_frames([0], eqns, [mine], [other]) == [([0], [mine], [])]
    assert R._by_frames([0], eqns, [mine], [other, blind]) == [([0], [mine], [blind])]
    elsewhere = item((("x.py", "g", 1, 0),))
    assert R._by_frames([0], eqns, [mine, elsewhere], []) == [([0], [mine], [])]
    nowhere = [item((("x.py", "g", 1, 0),)), item((("y.py", "h", 2, 0),))]
    assert R._by_frames([0], eqns, nowhere, []) == [([0], nowhere, [])]
    both = R._by_frames([0, 1], eqns, [mine, other], [])
    assert both == [([0], [mine], []), ([1], [other], [])]


def test_fusion_reads_look_through_buffers():
    """:func:`_hlo_flow.reads`: a fusion reads the fusions whose outputs reach it through
    bitcasts, tuple elements and copies, and not through an instruction that computes."""
    text = """HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%f1 (p: f32[4]) -> (f32[4], f32[4]) {
  %p = f32[4]{0} parameter(0)
  ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%p, %p)
}

%f2 (p: f32[4]) -> f32[4] {
  ROOT %p = f32[4]{0} parameter(0)
}

%f3 (p: f32[4], q: f32[2,2], r: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %q = f32[2,2]{1,0} parameter(1)
  ROOT %r = f32[4]{0} parameter(2)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %a = (f32[4]{0}, f32[4]{0}) fusion(%x), kind=kLoop, calls=%f1
  %g = f32[4]{0} get-tuple-element(%a), index=1
  %b = f32[4]{0} fusion(%g), kind=kLoop, calls=%f2
  %c = f32[4]{0} copy(%b)
  %d = f32[2,2]{1,0} bitcast(%c)
  %n = f32[4]{0} negate(%x)
  ROOT %e = f32[4]{0} fusion(%n, %d, %g), kind=kLoop, calls=%f3
}
"""
    got = _hlo_flow.reads(text)
    assert got == {"a": frozenset(), "b": frozenset({"a"}), "e": frozenset({"a", "b"})}


def test_fusion_reads_look_through_moving_fusions():
    """A fusion that only pads or concatenates an operand into its output passes that
    operand's bytes on: its readers read the fusion that computed them too; not through
    an operand it computes with, nor one it does not use."""
    text = """HloModule m, entry_computation_layout={(f32[4]{0})->f32[10]{0}}

%f1 (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

%cat (p: f32[4], q: f32[4], r: f32[4]) -> f32[10] {
  %p = f32[4]{0} parameter(0)
  %q = f32[4]{0} parameter(1)
  %r = f32[4]{0} parameter(2)
  %e = f32[4]{0} exponential(%q)
  %c = f32[8]{0} concatenate(%p, %e), dimensions={0}
  %z = f32[] constant(0)
  ROOT %d = f32[10]{0} pad(%c, %z), padding=0_2
}

%use (p: f32[10]) -> f32[10] {
  %p = f32[10]{0} parameter(0)
  ROOT %n = f32[10]{0} negate(%p)
}

ENTRY %main (x: f32[4]) -> f32[10] {
  %x = f32[4]{0} parameter(0)
  %a = f32[4]{0} fusion(%x), kind=kLoop, calls=%f1
  %b = f32[4]{0} fusion(%x), kind=kLoop, calls=%f1
  %c = f32[4]{0} fusion(%x), kind=kLoop, calls=%f1
  %m = f32[10]{0} fusion(%a, %b, %c), kind=kLoop, calls=%cat
  ROOT %u = f32[10]{0} fusion(%m), kind=kLoop, calls=%use
}
"""
    got = _hlo_flow.reads(text)
    assert got["m"] == frozenset({"a", "b", "c"})
    assert got["u"] == frozenset({"m", "a"})
    # a multi-output fusion passes on only what the element read holds
    two = (
        text.replace(
            "%cat (p: f32[4], q: f32[4], r: f32[4]) -> f32[10] {",
            "%cat (p: f32[4], q: f32[4], r: f32[4]) -> (f32[10], f32[4]) {",
        )
        .replace(
            "  ROOT %d = f32[10]{0} pad(%c, %z), padding=0_2\n",
            "  %d = f32[10]{0} pad(%c, %z), padding=0_2\n"
            "  ROOT %t = (f32[10]{0}, f32[4]{0}) tuple(%d, %e)\n",
        )
        .replace(
            "  %m = f32[10]{0} fusion(%a, %b, %c), kind=kLoop, calls=%cat\n",
            "  %m = (f32[10]{0}, f32[4]{0}) fusion(%a, %b, %c), kind=kLoop, calls=%cat\n"
            "  %m0 = f32[10]{0} get-tuple-element(%m), index=0\n"
            "  %m1 = f32[4]{0} get-tuple-element(%m), index=1\n"
            "  %v = f32[4]{0} fusion(%m1), kind=kLoop, calls=%f1\n",
        )
        .replace("ROOT %u = f32[10]{0} fusion(%m)", "ROOT %u = f32[10]{0} fusion(%m0)")
    )
    got = _hlo_flow.reads(two)
    assert got["u"] == frozenset({"m", "a"}) and got["v"] == frozenset({"m"}), got


def test_slices_of_merged_gemm_depend_on_their_piece():
    """A fusion that only slices a merged GEMM's output within one piece (the block
    step's query and key, cut from the one GEMM of concat(wv, wq, wk)) depends on that
    piece's weight and the shared operand's arguments, not on the other pieces'; the
    score gradient's two GEMMs read the key's and the query's, as the jaxpr's two dots
    do (their operands' arguments, by jax's own tracing), and the probabilities'
    gradient the value's."""
    if not FILES:
        pytest.skip("no captures")
    for path in FILES:
        with np.load(path) as z:
            metas = [json.loads(str(z[k][()])) for k in z.files if k.endswith(".meta")]
        meta = next((m for m in metas if m.get("name") == "model-block-step-f32"), None)
        if meta is None:
            continue
        case = next(c for c in XM.cases() if c.name == meta["name"])
        args = [jnp.asarray(a) for a in XM.arrays(case, XM.inputs(case))]
        closed = jax.make_jaxpr(XM.function(case))(*args)
        deps: dict = {}
        R.flows(closed.jaxpr, [frozenset({i}) for i in range(len(args))], deps)
        eqns = R._dot_eqns(closed.jaxpr, [])
        # the score einsum's two transposes: [2, 200, 36] from a [.., 200, 200] gradient
        score = [deps[id(e)] for e in eqns if e.outvars[0].aval.shape == (2, 200, 36)
                 and "thd,shd->hts" in str(e.source_info.name_stack)]  # fmt: skip
        src = _hlo_flow.sources(meta["hlo"])
        every = frozenset(range(len(args)))  # the score gradient: the loss's arguments
        gemms = [v for v in src.values() if v[0] == every and len(v[1]) == 4
                 and v[1] <= frozenset(range(6))]  # fmt: skip
        assert sorted(sorted(d[1]) for d in score) == [[0, 1, 2, 3], [0, 1, 2, 4]]
        got = sorted(sorted(v[1]) for v in gemms)  # and the probabilities' gradient: wv
        assert got == [[0, 1, 2, 3], [0, 1, 2, 4], [0, 1, 2, 5]], (path, got)


@pytest.mark.full  # the analysis of the block's training step, three times
@pytest.mark.skipif(len(FILES) < 2, reason="no captures")
def test_step_loss_reads_the_stored_value():
    """The block's training step (f32, process 2): XLA reduces the residual stream's
    split-K partials once in each of two pad fusions, and the logits' GEMM fusion reads
    one of them from memory. gpu_replay gives the logits dot that fusion's value, and the
    loss is the GPU's bits. Without the module's data flow, or where the GEMM fusion
    read both pad fusions, the loss is refused, the reason naming the read from memory."""
    meta = _meta(FILES[1], "model-block-step-f32")
    closed, facts, eqns, _, per_output, a = _check(meta)
    assert per_output[0] == []
    (logits,) = [e for e in eqns if e.outvars[0].aval.shape == (200, 100)]
    how, key = a.decisions[id(logits)]
    assert how == "pick"
    gemm = a.plans[id(logits)].fusion
    assert key in dict(facts.reads)[gemm]
    # the residual add x + o @ wo that the logits read, cloned into both pad fusions
    (pair,) = {frozenset(d[1]) for d in a.decisions.values()
               if d[0] == "each" and key in d[1] and len(d[1]) == 2}  # fmt: skip
    assert all(k.startswith("loop_pad_fusion") for k in pair), pair
    case = CASES[meta["name"]]
    flat = [jnp.asarray(x) for x in XM.arrays(case, XM.inputs(case))]
    out = R._eval(closed.jaxpr, closed.consts, flat, a.plans, a.facts, a.decisions)[0]
    assert X.summary(X.output_bits(out))["sha256"] == meta["outputs"][0]["sha256"]
    text = meta["hlo"]
    both = dict(facts.reads)
    both[gemm] = both[gemm] | pair
    for reads in ((), tuple(both.items())):
        b = R.analyse(closed, text, _hlo.read(text), dataclasses.replace(facts, reads=reads))
        reasons = [str(f) for f in b.per_output[0]]
        assert any("reads it from memory, and not from one fusion" in r for r in reasons), reasons
