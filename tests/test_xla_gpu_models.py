"""gpu_replay on captured transformer functions (``jaxmma/conformance/_xla_models.py``
run on an H100 into ``tests/golden/xla/xla-models-*.npz``): every output is either the
GPU's bits or refused with a reason, never silently different. Skipped until the
captures exist."""

import dataclasses
import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_capture as X
from jaxmma.conformance import _xla_models as XM
from jaxmma.xla_gpu import _hlo, _hlo_flow, _hlo_reduce, _hlo_text, _replay_ops, _xla_reduce
from jaxmma.xla_gpu import _replay as R

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "xla-models-*.npz")))
CASES = {c.name: c for c in XM.cases()}


def _records(files=FILES):
    out = []
    for path in files:
        with np.load(path) as z:
            for k in sorted(n for n in z.files if n.endswith(".meta")):
                meta = json.loads(str(z[k][()]))
                if "error" in meta or not meta["name"].startswith("model-"):
                    continue
                out.append((os.path.basename(path), meta))
    return out


RECORDS = _records()


def test_captures_present():
    if not FILES:
        pytest.skip(
            "no tests/golden/xla/xla-models-*.npz: run "
            "`python jaxmma/conformance/_xla_models.py --save DIR --run NAME` on an H100"
        )
    assert RECORDS


def _args(case):
    return [jnp.asarray(a) for a in XM.arrays(case, XM.inputs(case))]


def _replay(meta, mode):
    case = CASES[meta["name"]]
    args = _args(case)
    assert X.inputs_crc32(XM.inputs(case)) == meta["inputs_crc32"]
    out = jaxmma.gpu_replay(XM.function(case), meta["hlo"], unverified=mode)(*args)
    return jax.tree.leaves(out, is_leaf=lambda x: isinstance(x, jaxmma.Unverified))


def _verdicts(meta):
    """Per output: "same" (the GPU's SHA-256), "refused" (a jaxmma.Unverified naming
    its reasons) or "SILENT" (a value that is not the GPU's)."""
    out = []
    for o, s in zip(_replay(meta, "omit"), meta["outputs"], strict=True):
        if isinstance(o, jaxmma.Unverified):
            assert o.reasons and all(" at " in r and ": " in r for r in o.reasons), o
            with pytest.raises(ValueError, match=f"output {o.index} of fn is not reproduced"):
                np.asarray(o)
            out.append("refused")
        else:
            same = X.summary(X.output_bits(o))["sha256"] == s["sha256"]
            out.append("same" if same else "SILENT")
    return out


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: f"{r[0]}-{r[1]['name']}")
def test_every_output_is_the_gpus_or_refused(rec):
    """unverified="omit": each output either has the GPU's SHA-256 or is refused by a
    jaxmma.Unverified naming each operation it depends on and why; the default
    ("raise") raises exactly when some output is refused, naming the same operations."""
    _, meta = rec
    verdicts = _verdicts(meta)
    assert "SILENT" not in verdicts, (meta["name"], verdicts)
    assert len(verdicts) == len(meta["outputs"])
    case = CASES[meta["name"]]
    if "refused" in verdicts:
        with pytest.raises(ValueError, match="not established"):
            jaxmma.gpu_replay(XM.function(case), meta["hlo"])(*_args(case))
    else:
        outs = _replay(meta, "raise")
        for o, s in zip(outs, meta["outputs"], strict=True):
            assert X.summary(X.output_bits(o))["sha256"] == s["sha256"]


#: docs/xla_gpu.md, "Captures": of the 135 model outputs of the three processes, how
#: many gpu_replay reproduces bit for bit and how many it refuses (none is silently
#: different), per case
COUNTS = {
    "model-mlp-relu-f32": (3, 0),
    "model-mlp-step-f32": (9, 0),  # the loss: XLA's flattened f32 sum (was refused)
    "model-ln-f32": (3, 0),  # a Triton layer-norm fusion: its sums, rsqrt and x / 72
    # process 3 reduces its split-K partials over a [2, 72] Triton tile (a [2, 128] block)
    "model-mlp-relu-bf16": (3, 0),
    "model-mlp-gelu-f32": (3, 0),  # tanh and x**3 (two f32 multiplies, in MLIR emitters)
    # the layer norm's scale and shift in its GEMM's prologue, the attention scale in
    # the score GEMM's epilogue (tests/test_xla_gemm_fused.py)
    "model-attn-f32": (3, 0),
    # the loss's mean: a Triton reduce of the whole vector (tests/test_xla_scalar_sums.py)
    "model-xent-f32": (3, 0),
    # the log-softmax of bf16 logits: a one-row Triton tile of 16-bit inputs
    # (tests/test_xla_narrow_rows.py), then the mean as in f32
    "model-xent-bf16": (3, 0),
    # the whole block's loss: its sums, adds, dots and the output projection's two values
    # placed in their fusions by the module's stack frames (tests/test_xla_frames.py)
    "model-block-loss-f32": (3, 0),
    # the loss (the logits' GEMM reads the residual stream from the pad fusion that
    # computed it, one of two that each reduce its split-K partials) and the updated
    # second MLP and output weights (the cross-entropy gradient's scatter-add,
    # tests/test_xla_scatter.py); in process 3 an SGD update's product by 2^-4 in a
    # Triton fusion, which no FMA can change; the updated first MLP weight, its GELU
    # gradient's tanh as jax 0.11 writes it (tests/test_xla_tanh_grad.py); the updated
    # value and output projections, the layer norm's gradient's (x * 2) * broadcast(s)
    # as XLA reassociates and folds it (tests/test_xla_rewrites.py); the input, the first
    # layer norm's scale and shift, the query and key projections: the score gradient's
    # GEMMs paired by the merged projection's piece each reads, their partials' Triton
    # reduce over dimension 1, and the weight gradient reading them through a pad
    # fusion (tests/test_xla_frames.py). Refused: the second layer norm's scale and
    # shift (Triton column sums of [200, 72] in tiles of 4, not measured)
    "model-block-step-f32": (33, 6),
}


@pytest.mark.full  # make test within 5 minutes
def test_model_output_counts():
    """The counts of docs/xla_gpu.md: 66 of 135 outputs reproduced, 69 refused, 0
    silently different."""
    if not RECORDS:
        pytest.skip("no captures")
    per_case: dict = {}
    for _, meta in RECORDS:
        v = _verdicts(meta)
        n = per_case.setdefault(meta["name"], [0, 0, 0])
        n[0] += v.count("same")
        n[1] += v.count("refused")
        n[2] += v.count("SILENT")
    total = [sum(n[i] for n in per_case.values()) for i in range(3)]
    assert total == [66, 69, 0], per_case
    for name, (same, refused) in COUNTS.items():
        assert per_case[name][:2] == [same, refused], name


def _meta(run: str, name: str):
    for f, meta in RECORDS:
        if f == f"xla-models-{run}.npz" and meta["name"] == name:
            return meta
    pytest.skip("no captures")


def test_k_padding_is_read_and_needed():
    """XLA:GPU pads K = 72 to 80 (4 slices of 20) and K = 200 to 224 (8 slices of 28):
    a zero pad bitcast into the GEMM fusion's operands. The plans say so (pad_k), and
    the GPU's output of the ReLU MLP is reproduced with the padding and not without it
    (slices of 18 move where the k-steps fall)."""
    meta = _meta("1", "model-mlp-step-f32")
    plans = jaxmma.xla_gpu_dots(meta["hlo"])
    pads = sorted((p.K, p.split, p.options.get("pad_k")) for p in plans)
    assert pads == [(72, 4, 80), (72, 4, 80), (144, 4, None), (200, 8, 224), (200, 8, 224)]
    meta = _meta("1", "model-mlp-relu-f32")
    case = CASES[meta["name"]]
    x, w1, w2 = _args(case)
    p1, p2 = jaxmma.xla_gpu_dots(meta["hlo"])
    assert p1.options["pad_k"] == 80 and "pad_k" not in p2.options
    unpadded = {k: v for k, v in p1.options.items() if k != "pad_k"}
    for opts, want in ((p1.options, True), (unpadded, False)):
        h = jax.nn.relu(jaxmma.matmul(x, w1, **opts))
        got = X.summary(X.output_bits(jaxmma.matmul(h, w2, **p2.options)))["sha256"]
        assert (got == meta["outputs"][0]["sha256"]) is want


def test_pad_k_option():
    """pad_k appends +0 elements to K: the same bits as padding the operands by hand;
    a K longer than pad_k and a non-int are refused, naming pad_k."""
    r = np.random.default_rng(7)
    A = jnp.asarray(r.standard_normal((16, 72)), jnp.float32)
    B = jnp.asarray(r.standard_normal((72, 24)), jnp.float32)
    opts = dict(instruction="mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", arch="sm_90",
                split_k=4, split_rule="xla")  # fmt: skip
    got = jaxmma.matmul(A, B, pad_k=80, **opts)
    want = jaxmma.matmul(jnp.pad(A, ((0, 0), (0, 8))), jnp.pad(B, ((0, 8), (0, 0))), **opts)
    assert np.array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
    with pytest.raises(ValueError, match="pad_k: K = 72 is longer than pad_k = 64"):
        jaxmma.matmul(A, B, pad_k=64, **opts)
    with pytest.raises(TypeError, match="pad_k"):
        jaxmma.matmul(A, B, pad_k=80.0, **opts)
    with pytest.raises(ValueError, match="split_k"):  # 72 in 4 equal slices: no
        jaxmma.matmul(A, B, pad_k=78, **opts)


def test_omit_mode_jits_and_refuses_by_name():
    """A step whose loss is refused (passed through a cumulative sum, which is refused)
    and whose weights are reproduced: the weights come back with the GPU's bits, also
    under jit; the loss is a jaxmma.Unverified naming the scan, which cannot be used as
    a value."""
    meta = _meta("2", "model-mlp-step-f32")
    case = CASES[meta["name"]]

    def step(*args):
        loss, w1, w2 = XM.function(case)(*args)
        return jnp.cumsum(loss.reshape(1))[0], w1, w2

    fn = jaxmma.gpu_replay(step, meta["hlo"], unverified="omit")
    loss, w1, w2 = jax.jit(fn)(*_args(case))
    assert isinstance(loss, jaxmma.Unverified) and loss.index == 0
    assert any(r.startswith("cumsum") for r in loss.reasons), loss.reasons
    for o, s in zip((w1, w2), meta["outputs"][1:], strict=True):
        assert X.summary(X.output_bits(o))["sha256"] == s["sha256"]
    with pytest.raises(ValueError, match="cumsum"):
        jnp.asarray(loss) + 1
    with pytest.raises(ValueError, match=r"outputs \[0\] of 3.*outputs \[1, 2\] are reproduced"):
        jaxmma.gpu_replay(step, meta["hlo"])(*_args(case))


def test_refused_fusion_refuses_its_dot_only():
    """A GEMM fusion the reader refuses (its Triton reduce edited to 3 warps, not a
    power of two) refuses the dot it computes, named; the other dot of the module is
    still read."""
    meta = dict(_meta("3", "model-mlp-relu-bf16"))
    tile = '"output_tiles":[{"sizes":["2","72"]}]'
    meta["hlo"] = meta["hlo"].replace('"num_warps":"2",' + tile, '"num_warps":"3",' + tile)
    entries = _hlo.read(meta["hlo"])
    kinds = sorted(type(e).__name__ for e in entries)
    assert kinds == ["DotPlan", "Refusal"]
    refused = next(e for e in entries if isinstance(e, _hlo.Refusal))
    assert "Triton reduce of S = 4" in refused.reason and refused.signature is not None
    with pytest.raises(ValueError, match="Triton reduce of S = 4"):
        jaxmma.xla_gpu_dots(meta["hlo"])
    (out,) = _replay(meta, "omit")
    assert isinstance(out, jaxmma.Unverified)
    assert any("dot_general" in r and "Triton reduce of S = 4" in r for r in out.reasons)


def _probes():
    out = {}
    for path in FILES:
        with np.load(path) as z:
            for k in sorted(n for n in z.files if n.endswith(".meta")):
                meta = json.loads(str(z[k][()]))
                if "error" in meta or not meta["name"].startswith("probe-"):
                    continue
                i = k.split(".")[0]
                outs = [z[f"{i}.out{j}"] for j in range(len(meta["outputs"]))]
                meta["probe"] = z[f"{i}.probe"] if f"{i}.probe" in z.files else None
                out.setdefault(meta["name"], []).append((meta, outs))
    return out


#: docs/xla_gpu.md, "Elementwise probes": of 4096 inputs, how many results of the GPU
#: differ from the CPU's (one operation at a time), f32 and bf16; None: the CPU's own
#: bits change with XLA:CPU's optimization flags (the suite's fast-compile flags give
#: other counts than jax's defaults), so only "some differ" is checked
ELEMENTWISE = {
    "fma": (0, 0), "relu": (0, 0), "exp": (1249, 22), "log": (173, 0), "tanh": (None, 0),
    "logistic": (940, 0), "erf": (953, 0), "gelu": (None, 0), "gelu_erf": (None, 6),
    "rsqrt": (None, 0), "sqrt": (701, 0), "div": (1229, 0),
}  # fmt: skip


@pytest.mark.full  # make test within 5 minutes
def test_elementwise_probes():
    """The table of docs/xla_gpu.md and the counts in _replay_ops.PROBED, recomputed
    from the captures (the same bits in every process)."""
    probes = _probes()
    if not probes:
        pytest.skip("no captures")
    for fn, counts in ELEMENTWISE.items():
        for t, want in zip(("f32", "bf16"), counts, strict=True):
            case = CASES[f"probe-{fn}-{t}"]
            cpu = X.output_bits(np.asarray(XM.function(case)(*_args(case))))
            for meta, (gpu,) in probes[case.name]:
                n = int((cpu != gpu).sum())
                assert n == want if want is not None else n > 0, (case.name, meta["run"], n)
    for name, (n32, _, n16) in _replay_ops.PROBED.items():
        assert ELEMENTWISE[name] in ((n32, n16), (None, n16)), name
    for _, outs in probes["probe-minmax-f32"]:
        case = CASES["probe-minmax-f32"]
        cpu = jax.tree.leaves(XM.function(case)(*_args(case)))
        for o, g in zip(cpu, outs, strict=True):  # NaN payloads aside (not reproduced)
            nan = np.isnan(np.asarray(o)) & np.isnan(g.view(np.float32))
            assert np.array_equal(X.output_bits(o)[~nan], g[~nan]) and nan.sum() > 0


@pytest.mark.full  # make test within 5 minutes
def test_max_probes_give_plus_zero():
    """probe-max1-*: rows of -0 with one +0 anywhere reduce to +0 (and all -0 to -0),
    as IEEE 754-2019 maximum gives in any order; gpu_replay reproduces every output."""
    probes = _probes()
    if not probes:
        pytest.skip("no captures")
    names = [n for n in probes if n.startswith("probe-max1-")]
    assert len(names) == 5
    for name in names:
        case = CASES[name]
        bits = XM.inputs(case)
        for meta, _ in probes[name]:
            probe = meta["probe"]
            fn = jaxmma.gpu_replay(XM.function(case), meta["hlo"])
            for a, P in zip(XM.ANCHORS, XM.probe_inputs(case, bits), strict=True):
                got = np.asarray(fn(jnp.asarray(P)), np.float32)
                assert np.array_equal(got.view(np.uint32), probe[a].view(np.uint32)), name
            out = fn(*_args(case))
            assert X.summary(X.output_bits(out))["sha256"] == meta["outputs"][0]["sha256"]


@pytest.mark.full  # make test within 5 minutes
def test_sum_probes_hold_no_order():
    """probe-sum*: each row sums to n - 2 (2^15 + n - 1 where the column is the anchor)
    in every process and emitter: the +-2^15 magnitude is absorbed by no f32 partial
    sum, so these captures cannot tell a summation order (docs/xla_gpu.md)."""
    probes = _probes()
    if not probes:
        pytest.skip("no captures")
    for name in (n for n in probes if n.startswith("probe-sum")):
        case = CASES[name]
        rows, cols = case.args[0].shape
        R, n = (cols, rows) if case.kind == "probe_sum0" else (rows, cols)
        for meta, _ in probes[name]:
            probe = meta["probe"]
            for a in XM.ANCHORS:
                j = np.arange(R) % n
                want = np.where(j == a, 2.0**15 + n - 1, n - 2).astype(np.float32)
                if case.args[0].fmt == "bf16":
                    want = want.astype(jnp.bfloat16).astype(np.float32)
                assert np.array_equal(probe[a], want), (name, a)


# What the reader trusts (docs/xla_gpu.md): hand-edited copies of captured modules, each
# showing something the captures never did. The replay must refuse what the edit
# touches, or stay exact: never return a value other than the GPU's.


def _text(name: str, run: str = "1") -> tuple:
    meta = _meta(run, name)
    return meta, meta["hlo"]


def _sha(o) -> str:
    return X.summary(X.output_bits(o))["sha256"]


def _edit(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


def _entry_line(text: str, name: str) -> str:
    return next(ln for ln in text.splitlines() if ln.lstrip().startswith(f"%{name} = "))


def _outputs(meta, text, *args):
    case = CASES[meta["name"]]
    fn = jaxmma.gpu_replay(XM.function(case), text, unverified="omit")
    out = fn(*(args or _args(case)))
    return jax.tree.leaves(out, is_leaf=lambda x: isinstance(x, jaxmma.Unverified))


def test_reordered_fusions_stay_exact():
    """The ENTRY lines of two GEMM fusions of one signature swapped (the text's order is
    no evidence): their plans give the same bits, so the step's two weights are still
    the GPU's; the module's data flow is read in dependency order, not text order."""
    meta, text = _text("model-mlp-step-f32")
    a, b = _entry_line(text, "gemm_fusion_dot.2"), _entry_line(text, "gemm_fusion_dot.4")
    edited = text.replace(a, "\0").replace(b, a).replace("\0", b)
    assert edited != text
    got, want = _hlo.read(edited), _hlo.read(text)
    assert [p.fusion for p in got] != [p.fusion for p in want]
    assert {p.fusion: p.sources for p in got} == {p.fusion: p.sources for p in want}
    outs = _outputs(meta, edited)  # the loss (an f32 sum) and the two weights
    assert [_sha(o) for o in outs] == [s["sha256"] for s in meta["outputs"]]


def _two_dots(x, a, b):
    return x @ a, x @ b


def _plan(fusion, sources, **opts):
    base = dict(instruction=_hlo.TF32, arch="sm_90", input_rounding="rna", out_dtype="float32")
    return _hlo.DotPlan(fusion, "", ("f32", "f32"), (), 16, 8, 64, opts.get("split_k", 1),
                        opts.get("split_reduce"), "", 4, "f32", {**base, **opts},
                        sources=sources)  # fmt: skip


def test_plans_that_differ_are_paired_by_data_flow_only():
    """Two dots of one signature (x @ a, x @ b) and two GEMM fusions with different
    plans: each dot gets the plan whose operands depend on its own arguments, whatever
    the fusions' order; where the module's data flow is not read, or does not tell the
    two apart, or is not the function's, both dots are refused (a reason, not a guess)."""
    args = [jnp.zeros(s, jnp.float32) for s in ((16, 64), (64, 8), (64, 8))]
    closed = jax.make_jaxpr(_two_dots)(*args)
    eqns = R._dot_eqns(closed.jaxpr, [])
    deps: dict = {}
    R.flows(closed.jaxpr, [frozenset({i}) for i in range(3)], deps)
    split = dict(split_k=4, split_rule="xla", split_reduce="sequential")
    pa, pb = _plan("fa", ({0}, {1}), **split), _plan("fb", ({2}, {0}))  # b's operands swapped
    for entries in ([pa, pb], [pb, pa]):
        assert R.pair(eqns, entries, deps) == [pa, pb]
    twin = jax.make_jaxpr(lambda x, a, b: (x @ a, (x + x) @ a))(*args).jaxpr
    twins: dict = {}
    R.flows(twin, [frozenset({i}) for i in range(3)], twins)
    for entries, why, (es, ds) in (
        ([pa, dataclasses.replace(pb, sources=None)], "data flow was not read", (eqns, deps)),
        ([pa, _plan("fb", ({0}, {3}))], "do not depend on the same arguments", (eqns, deps)),
        ([pa, _plan("fb", ({1}, {0}))], "same arguments as this dot's",
         (R._dot_eqns(twin, []), twins)),
    ):  # fmt: skip
        got = R.pair(es, entries, ds)
        assert all(isinstance(g, str) and "different plans" in g for g in got), got
        assert any(why in g for g in got), (why, got)
    assert R.pair(eqns, [pa, pb], None)[0].startswith("the GEMM fusions")
    same = _plan("fb", ({2}, {0}), **split)  # the same bits: any pairing is right
    assert R.pair(eqns, [pa, same], {}) == [pa, same]


def test_a_module_of_another_function_is_refused():
    """The captured ReLU MLP's module, replayed for a function that also returns x: every
    dot would pair by signature, but the module's results are not this function's, so
    no fusion is known to compute its dots (refused, naming why); x itself is exact."""
    meta, text = _text("model-mlp-relu-f32")
    f = XM.function(CASES[meta["name"]])
    out, x = jaxmma.gpu_replay(lambda *a: (f(*a), a[0]), text, unverified="omit")(
        *_args(CASES[meta["name"]])
    )
    assert isinstance(out, jaxmma.Unverified) and not isinstance(x, jaxmma.Unverified)
    assert any("not compiled from fn at these shapes" in r for r in out.reasons), out.reasons
    # the same module with another entry shape: refused the same way
    edited = text.replace("ENTRY %main.2 (x.1: f32[200,72]", "ENTRY %main.2 (x.1: f32[200,72]")
    edited = _edit(edited, "%x.1 = f32[200,72]{1,0} parameter(0)",
                   "%x.1 = f32[100,144]{1,0} parameter(0)")  # fmt: skip
    (o,) = _outputs(meta, edited)
    assert isinstance(o, jaxmma.Unverified)
    assert any("f32[100,144]" in r for r in o.reasons), o.reasons


#: edits of the captured ReLU MLP (both dots reproduced as captured), each something no
#: capture shows, and the words of the refusal
EDITS = {
    "config value": ('"num_ctas":1', '"num_ctas":2', "num_ctas=2"),
    "config field": ('"num_warps":"4"', '"num_warps":"4","split_k_mode":1',
                     "block_level_fusion_config.split_k_mode"),
    "warp specialization": ('"is_warp_specialization_allowed":false',
                            '"is_warp_specialization_allowed":true',
                            "is_warp_specialization_allowed=true"),
    "fusion config key": ('"kind":"__triton_nested_gemm_fusion"',
                          '"kind":"__triton_nested_gemm_fusion","new_key":0', "new_key"),
    "dot attribute": ("rhs_contracting_dims={1}, metadata",
                      "rhs_contracting_dims={1}, sparsity=L.1@2:4, metadata", "sparsity"),
    "dot backend config": ('backend_config={"sizes":[', 'backend_config={"mode":1,"sizes":[',
                           "backend config mode"),
    "frontend attribute": ('frontend_attributes={xla.pdl_launch="true"}',
                           'frontend_attributes={xla.pdl_launch="true",xla.other="1"}',
                           "frontend attribute xla.other"),
    "unknown GEMM kind": ('"kind":"__triton_nested_gemm_fusion"', '"kind":"__triton_gemm_v2"',
                          "outside a Triton GEMM fusion"),
    "prologue add": ("maximum(%parameter_0.1, %max.4)", "add(%parameter_0.1, %max.4)",
                     "not traced to a parameter"),
    "prologue max 0.5": ("%constant_6 = f32[] constant(0)", "%constant_6 = f32[] constant(0.5)",
                         "(a prologue)"),
    "swapped operands": ("fusion(%bitcast.3.0, %bitcast.2.0)", "fusion(%bitcast.2.0, %bitcast.3.0)",
                         "inconsistent text"),
}  # fmt: skip


@pytest.mark.every_case  # each edit is its own assumption
@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_unseen_module_text_is_refused(edit):
    """Each edit touches the GEMM fusions (all, or the second one); the reader refuses
    each touched fusion with the reason and the replay refuses the output, never
    returning other bits."""
    meta, text = _text("model-mlp-relu-f32")
    old, new, why = EDITS[edit]
    edited = _edit(text, old, new, text.count(old))
    refused = [e for e in _hlo.read(edited) if isinstance(e, _hlo.Refusal)]
    assert refused and all(why in r.reason for r in refused), [r.reason for r in refused]
    (o,) = _outputs(meta, edited)
    assert isinstance(o, jaxmma.Unverified), edit
    assert any(why in r for r in o.reasons), o.reasons


def test_strided_split_is_refused():
    """The first dot's x operand bitcast to [200, 4, 20] with layout {1,2,0}: the 4
    slices would then be strided in memory (k = 4 j + s), not contiguous as the split
    rule needs. Edited alike in the module and in the fusion's parameter, the text is
    consistent, and the split is refused, not read as contiguous."""
    meta, text = _text("model-mlp-relu-f32")
    edited = _edit(
        text, "%parameter_0 = f32[200,4,20]{2,1,0}", "%parameter_0 = f32[200,4,20]{1,2,0}"
    )
    edited = _edit(
        edited, "%bitcast.1.0 = f32[200,4,20]{2,1,0}", "%bitcast.1.0 = f32[200,4,20]{1,2,0}"
    )
    refused = [e for e in _hlo.read(edited) if isinstance(e, _hlo.Refusal)]
    assert [r.fusion for r in refused] == ["gemm_fusion_dot"]
    assert "not shown to be contiguous" in refused[0].reason
    (o,) = _outputs(meta, edited)
    assert isinstance(o, jaxmma.Unverified)


def test_split_dimension_is_mapped_through_the_root():
    """The fp8 MLP's second GEMM fusion ends in a bitcast of its dot (layout {1,2,0} to
    {2,1,0}): the reduce's dimension 0 is mapped through it to the dot's batch dimension
    of 4 slices. Made a transpose that moves the slices elsewhere, the reduce no longer
    reads a dimension of slices and the fusion is refused."""
    meta, text = _text("model-mlp-fp8")
    first = _hlo.read(text)[0]
    assert isinstance(first, _hlo.DotPlan) and first.split == 4
    comps, _ = _hlo_text.parse(text)
    fusion = next(i for c in comps.values() for i in c.order if i.name == "gemm_fusion_dot.1")
    comp = comps[fusion.attr("calls").lstrip("%")]
    dot = next(i for i in comp.order if i.opcode == "dot")
    assert _hlo_reduce._root_dims(comp, dot) == [0, 2, 1]


# Merged dots (docs/xla_gpu.md, "Merged dots"): XLA:GPU computes several dots of the
# function that share an operand as one GEMM whose other operand is a concatenate.


def _merged_mlp(edit: str = "merged") -> tuple:
    """The captured ReLU MLP's module (run 1), edited so that its first GEMM fusion's
    w1 operand is a concatenate of two entry parameters along N: the module of
    ``relu(concat(x @ wa, x @ wb)) @ w2``, which XLA would merge into the GEMM the GPU
    ran (the same operands, the same columns, so the captured output is its output).
    ``edit`` names a variant the replay must refuse."""
    meta, text = _text("model-mlp-relu-f32")
    text = _edit(text, "%w2.1 = f32[144,72]{1,0} parameter(2)",
                 "%w2.1 = f32[144,72]{1,0} parameter(3)")  # fmt: skip
    text = _edit(text, "(x.1: f32[200,72], w1.1: f32[72,144]",
                 "(x.1: f32[200,72], wa.1: f32[72,72], wb.1: f32[72,72]")  # fmt: skip
    w1 = 'f32[72,144]{1,0} parameter(1), metadata={op_name="w1" scheduling_name="w1.1"}'
    na, nb = 72, 72
    cat = {
        "merged": "%w1.1 = f32[72,144]{1,0} concatenate(%wa.1, %wb.1), dimensions={1}",
        # the pieces joined along K's dimension, then bitcast to the operand's shape
        "wrong axis": "%cat = f32[144,72]{1,0} concatenate(%wa.1, %wb.1), dimensions={0}\n"
        "  %w1.1 = f32[72,144]{1,0} bitcast(%cat)",
        # the GPU would compute x @ wa twice and x @ wb never
        "not the operands": "%w1.1 = f32[72,144]{1,0} concatenate(%wa.1, %wa.1), dimensions={1}",
        # 8 zero columns after the pieces (the function appends zeros to its output):
        # the GEMM's columns are not the dots' exactly
        "columns not covered": "%cat = f32[72,136]{1,0} concatenate(%wa.1, %wb.1), dimensions={1}\n"
        "  %zero = f32[] constant(0)\n"
        "  %w1.1 = f32[72,144]{1,0} pad(%cat, %zero), padding=0_0x0_8",
    }[edit]
    if edit == "columns not covered":
        nb = 64
        text = _edit(text, "wb.1: f32[72,72]", "wb.1: f32[72,64]")
    head = f"%wa.1 = f32[72,{na}]{{1,0}} parameter(1)\n  %wb.1 = f32[72,{nb}]{{1,0}} parameter(2)"
    text = _edit(text, "%w1.1 = " + w1, head + "\n  " + cat)
    return meta, text, nb


def _two_projections(x, wa, wb, w2):
    pad = [jnp.zeros((x.shape[0], 144 - wa.shape[1] - wb.shape[1]), x.dtype)]
    return jax.nn.relu(jnp.concatenate([x @ wa, x @ wb] + pad[: 1 if pad[0].size else 0], 1)) @ w2


def test_merged_dots_reproduce_the_gpu():
    """relu(concat(x @ wa, x @ wb)) @ w2 with the module whose first GEMM reads
    concat(wa, wb) (the captured MLP's, w1 = [wa | wb]): each of the two dots is its
    columns of the merged GEMM (split 4, K padded to 80, as read), and the output is the
    GPU's bits. The same module with the concatenation written in the function (one
    dot) is the GEMM as one dot, also the GPU's bits."""
    meta, text, _ = _merged_mlp()
    x, w1, w2 = _args(CASES[meta["name"]])
    (m,) = _hlo_flow.merges(text).values()
    assert (m.side, m.sizes, m.total, m.sources) == (1, (72, 72), 144, ({1}, {2}))
    plan = _hlo.read(text)[0]
    parts = plan.pieces()
    assert [(p.N, p.piece, p.sources) for p in parts] == [
        (72, (0, 0, 72), ({0}, {1})), (72, (1, 72, 144), ({0}, {2}))]  # fmt: skip
    assert all(p.options == plan.options and p.options["pad_k"] == 80 for p in parts)
    out = jaxmma.gpu_replay(_two_projections, text)(x, w1[:, :72], w1[:, 72:], w2)
    assert _sha(out) == meta["outputs"][0]["sha256"]

    def one_dot(x, a, b, w):
        return jax.nn.relu(x @ jnp.concatenate([a, b], 1)) @ w

    out = jaxmma.gpu_replay(one_dot, text)(x, w1[:, :72], w1[:, 72:], w2)
    assert _sha(out) == meta["outputs"][0]["sha256"]


@pytest.mark.every_case  # each edit is its own assumption
@pytest.mark.parametrize(
    "edit, why",
    [
        ("wrong axis", "does not keep the dot's free dimension"),
        ("not the operands", "do not depend on the same arguments"),
        ("columns not covered", "pads dimension 1, the merged one"),
    ],
)
def test_merged_dots_not_shown_are_refused(edit, why):
    """The merged module edited: the pieces joined along the other dimension (then
    bitcast into place), a concatenate of one dot's operand twice (data flow ties no
    piece to the other dot), zero columns padded after the pieces: the dots are
    refused with the reason, and so is the output, never other bits."""
    meta, text, nb = _merged_mlp(edit)
    x, w1, w2 = _args(CASES[meta["name"]])
    fn = jaxmma.gpu_replay(_two_projections, text, unverified="omit")
    out = fn(x, w1[:, :72], w1[:, 72 : 72 + nb], w2)
    assert isinstance(out, jaxmma.Unverified), edit
    assert any(why in r for r in out.reasons), out.reasons


def test_a_concatenate_along_k_is_not_merged_dots():
    """w1 = concat(wa, wb) along K (its rows): the GPU's one GEMM sums the products of
    both halves in one chain, which is not relu(x[:, :36] @ wa + x[:, 36:] @ wb) @ w2
    (two dots rounded and added). The concatenate is not read as merged dots, the two
    dots find no GEMM of their K, and the output is refused, naming the concatenate."""
    meta, text = _text("model-mlp-relu-f32")
    text = _edit(text, "%w2.1 = f32[144,72]{1,0} parameter(2)",
                 "%w2.1 = f32[144,72]{1,0} parameter(3)")  # fmt: skip
    text = _edit(text, "(x.1: f32[200,72], w1.1: f32[72,144]",
                 "(x.1: f32[200,72], wa.1: f32[36,144], wb.1: f32[36,144]")  # fmt: skip
    text = _edit(
        text,
        '%w1.1 = f32[72,144]{1,0} parameter(1), metadata={op_name="w1" scheduling_name="w1.1"}',
        "%wa.1 = f32[36,144]{1,0} parameter(1)\n  %wb.1 = f32[36,144]{1,0} parameter(2)\n"
        "  %w1.1 = f32[72,144]{1,0} concatenate(%wa.1, %wb.1), dimensions={0}",
    )
    (why,) = _hlo_flow.merges(text).values()
    assert isinstance(why, str) and "along dimension [0]" in why, why
    x, w1, w2 = _args(CASES[meta["name"]])

    def halves(x, wa, wb, w2):
        return jax.nn.relu(x[:, :36] @ wa + x[:, 36:] @ wb) @ w2

    out = jaxmma.gpu_replay(halves, text, unverified="omit")(x, w1[:36], w1[36:], w2)
    assert isinstance(out, jaxmma.Unverified)
    assert any("not read as merged dots" in r and "along dimension [0]" in r for r in out.reasons)


@pytest.mark.parametrize("run", ["1", "2", "3"])
@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_merged_weight_gradients_are_paired(run, fmt):
    """The captured training step (a whole block): XLA:GPU computes the weight gradients
    of wq, wk, wv as one 72 x 216 GEMM whose rhs is the concatenate of their three
    output gradients (padded in K), and the three projections as one 200 x 216 GEMM of
    concat(wv, wq, wk). Each of the three wgrad dots is paired with a part of the first
    (its data flow: h, and values of every argument), wo's with its own GEMM; the
    projections are parts of the second. In bf16 that fusion is refused (the layer
    norm's scale and shift in its prologue: bf16 arithmetic there is not measured), so
    they are refused with its reason; in f32 (whose prologue is read) they are paired
    with its parts by data flow. The output projection, of the same signature, is told
    from them by its source line (the stack frames of the module's metadata) and
    paired with its own GEMM, whose split-K partials XLA reduces in several fusions in
    two orders: one plan with a value per fusion (``variants``)."""
    meta, text = _text(f"model-block-step-{fmt}", run)
    case = CASES[meta["name"]]
    merged = {k: m for k, m in _hlo_flow.merges(text).items() if isinstance(m, _hlo_flow.Merge)}
    assert sorted((m.sizes, m.total, m.other) for m in merged.values()) == [
        ((72, 72, 72), 216, 72), ((72, 72, 72), 216, 200)]  # fmt: skip
    fwd_name, fwd = next((k, m) for k, m in merged.items() if m.other == 200)
    assert fwd.sources == ({5}, {3}, {4})  # concat(wv, wq, wk): the text's order
    closed = jax.make_jaxpr(XM.function(case))(*_args(case))
    eqns = R._dot_eqns(closed.jaxpr, [])
    deps: dict = {}
    R.flows(closed.jaxpr, [frozenset({i}) for i in range(13)], deps)
    paired = R.pair(eqns, _hlo.read(text), deps)
    everything = frozenset(range(13))
    wgrad = [p for e, p in zip(eqns, paired, strict=True)
             if R.signature(e)[2:] == ((72, 72), 200)]  # fmt: skip
    assert len(wgrad) == 4 and all(isinstance(p, _hlo.DotPlan) for p in wgrad), wgrad
    parts = [p for p in wgrad if p.piece is not None]
    assert len(parts) == 3 and {p.fusion for p in parts} == {
        k for k, m in merged.items() if m.other == 72
    }
    assert all(p.sources == ({0, 1, 2}, everything) and p.N == 72 for p in parts)
    proj = [p for e, p in zip(eqns, paired, strict=True)
            if deps[id(e)] in (({0, 1, 2}, {3}), ({0, 1, 2}, {4}), ({0, 1, 2}, {5}))]  # fmt: skip
    assert len(proj) == 3
    if fmt == "bf16":
        assert all("part of a merged GEMM" in p and "(a prologue)" in p for p in proj), proj
    else:
        assert all(isinstance(p, _hlo.DotPlan) and p.fusion == fwd_name for p in proj), proj
        assert sorted(p.sources[1] for p in proj) == [{3}, {4}, {5}]
        out = [p for e, p in zip(eqns, paired, strict=True)
               if deps[id(e)] == (frozenset(range(6)), {6})]  # fmt: skip
        assert len(out) == 1 and isinstance(out[0], _hlo.DotPlan), out
        assert out[0].fusion == "gemm_fusion_dot.21"  # its own fusion, by its source line
        assert len(out[0].variants) >= 2  # partials reduced in several fusions
        assert len({str(o) for _, o, _ in out[0].variants}) == 2  # in two orders


#: the routes _hlo reads (chain, split, reduce, K padding, conversions): name -> (format,
#: K, matmul options); the first two are the merged GEMMs of the captured block steps
ROUTES = {
    "tf32 pad 208 split 4": ("f32", 200, dict(instruction=_hlo.TF32, input_rounding="rna",
                             pad_k=208, split_k=4, split_reduce="sequential")),
    "bf16 pad 224 split 4": ("bf16", 200, dict(instruction=_hlo.MMA16.format(t="bf16"),
                             pad_k=224, split_k=4, split_reduce="sequential",
                             out_dtype="bfloat16")),
    "tf32 split 32 halving": ("f32", 1024, dict(instruction=_hlo.TF32, input_rounding="rna",
                              split_k=32, split_reduce=_xla_reduce.native_order(32))),
    "bf16 split 8 Triton tree": ("bf16", 256, dict(instruction=_hlo.MMA16.format(t="bf16"),
                                 split_k=8,
                                 split_reduce=_xla_reduce.triton_tree(8, [1, 32], 2, False))),
    "f16 unsplit": ("f16", 72, dict(instruction=_hlo.MMA16.format(t="f16"), out_dtype="float16")),
    "e4m3 wgmma split 4": ("e4m3", 128, dict(instruction=_hlo.WGMMA8.format(a="e4m3", b="e4m3"),
                           arch="sm_90a", split_k=4, split_reduce="sequential")),
    "e4m3 via f16": ("e4m3", 72, dict(instruction=_hlo.MMA16.format(t="f16"),
                     convert_inputs="f16")),
}  # fmt: skip


@pytest.mark.parametrize("route", list(ROUTES), ids=list(ROUTES))
def test_merged_gemm_rows_and_columns_are_independent(route):
    """What computing a merged dot on its own rests on: in every route the reader reads,
    each column (row) of a GEMM has the bits it has in the GEMM of that column's (row's)
    operand alone, with the same options; pieces of 72, 40 and 104 (not multiples of
    the instructions' tiles)."""
    fmt, K, opts = ROUTES[route]
    opts = {"arch": "sm_90", **({"split_rule": "xla"} if "split_k" in opts else {}), **opts}
    dt = jnp.dtype({"f32": "float32", "bf16": "bfloat16", "f16": "float16",
                    "e4m3": "float8_e4m3fn"}[fmt])  # fmt: skip
    r = np.random.default_rng(36)

    def rand(*shape):
        return jnp.asarray(r.standard_normal(shape), jnp.float32).astype(dt)

    A, Bs = rand(24, K), [rand(K, n) for n in (72, 40, 104)]
    whole = np.asarray(jaxmma.matmul(A, jnp.concatenate(Bs, 1), **opts))
    At, B = [rand(m, K) for m in (72, 40, 104)], Bs[1]
    rows = np.asarray(jaxmma.matmul(jnp.concatenate(At, 0), B, **opts))
    at = 0
    for Bi, Ai in zip(Bs, At, strict=True):
        n = Bi.shape[1]
        alone = np.asarray(jaxmma.matmul(A, Bi, **opts))
        assert np.array_equal(whole[:, at : at + n].view(np.uint8), alone.view(np.uint8))
        alone = np.asarray(jaxmma.matmul(Ai, B, **opts))
        assert np.array_equal(rows[at : at + n].view(np.uint8), alone.view(np.uint8))
        at += n


def test_jitted_replay_of_a_division_by_a_constant():
    """``jax.jit(gpu_replay(...))`` of the layer norm (its ``x / 72`` read as XLA's
    ``x * fl(1/72)``, whose reciprocal is computed while tracing) gives the GPU's bits;
    it raised a TracerArrayConversionError."""
    meta = _meta("1", "model-ln-f32")
    case = CASES[meta["name"]]
    out = jax.jit(jaxmma.gpu_replay(XM.function(case), meta["hlo"]))(*_args(case))
    assert X.summary(X.output_bits(out))["sha256"] == meta["outputs"][0]["sha256"]


#: captures of the block, MLP and cross-entropy cases on an H200 in two more processes,
#: taken after the rules they are replayed with were written (held out from them)
H200 = sorted(glob.glob(os.path.join(GOLDEN, "xla-h200-models-*.npz")))


@pytest.mark.full  # the block steps' replays
@pytest.mark.skipif(not H200, reason="no H200 captures")
def test_h200_captures_same_or_refused():
    """Every output of the H200 captures is the GPU's bits or refused, none silently
    different, and the f32 block loss, the cross-entropies and one process's f32 MLP
    step are reproduced (docs/xla_gpu.md, "Captures")."""
    per_case: dict = {}
    for _, meta in _records(H200):
        v = _verdicts(meta)
        n = per_case.setdefault(meta["name"], [0, 0, 0])
        for i, kind in enumerate(("same", "refused", "SILENT")):
            n[i] += v.count(kind)
    assert all(n[2] == 0 for n in per_case.values()), per_case
    for name in ("model-block-loss-f32", "model-xent-f32", "model-xent-bf16"):
        assert per_case[name][0] == 2, (name, per_case)
    assert per_case["model-mlp-step-f32"][0] >= 3, per_case


def _reduce_comp(root: str) -> _hlo_text.Computation:
    text = f"""HloModule m


%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %f (p: f32[2,4,200,36]) -> f32[2,36,200] {{
  %p = f32[2,4,200,36]{{3,2,1,0}} parameter(0)
  %z = f32[] constant(0)
  %r = f32[2,200,36]{{2,1,0}} reduce(%p, %z), dimensions={{1}}, to_apply=%add
  {root}
}}
"""
    comps, entry = _hlo_text.parse(text)
    return comps[entry]


def test_batched_partials_tile():
    """A Triton reduce of split-K partials ``[B, S, M, N]`` over dimension 1 (the
    attention gradient's batched dots): its output tile read in the reduce's own
    dimensions through a root transpose; one batch element a program, else not read."""
    t = "ROOT %t = f32[2,36,200]{2,1,0} transpose(%r), dimensions={0,2,1}"
    comp = _reduce_comp(t)
    red = comp.instrs["r"]
    assert _hlo_reduce._batch_tile(comp, red, [1, 16, 8]) == [8, 16]
    assert _hlo_reduce._batch_tile(comp, red, [2, 16, 8]) is None
    comp = _reduce_comp("ROOT %n = f32[2,200,36]{2,1,0} negate(%r)")
    assert _hlo_reduce._batch_tile(comp, comp.instrs["r"], [1, 16, 8]) is None
