"""gpu_replay on captured transformer functions (``jaxmma/conformance/_xla_models.py``
run on an H100 into ``tests/golden/xla/xla-models-*.npz``): every output is either the
GPU's bits or refused with a reason, never silently different. Skipped until the
captures exist."""

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
from jaxmma.gemm import _hlo, _replay_ops

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "xla-models-*.npz")))
CASES = {c.name: c for c in XM.cases()}


def _records():
    out = []
    for path in FILES:
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
COUNTS = {"model-mlp-relu-f32": (3, 0), "model-mlp-step-f32": (6, 3)}


@pytest.mark.full  # make test within 5 minutes
def test_model_output_counts():
    """The counts of docs/xla_gpu.md: 9 of 135 outputs reproduced, 126 refused, 0
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
    assert total == [9, 126, 0], per_case
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
    """A step whose loss is refused (a float sum) and whose weights are reproduced: the
    weights come back with the GPU's bits, also under jit; the loss is a
    jaxmma.Unverified naming the sum, which cannot be used as a value."""
    meta = _meta("2", "model-mlp-step-f32")
    case = CASES[meta["name"]]
    fn = jaxmma.gpu_replay(XM.function(case), meta["hlo"], unverified="omit")
    loss, w1, w2 = jax.jit(fn)(*_args(case))
    assert isinstance(loss, jaxmma.Unverified) and loss.index == 0
    assert any(r.startswith("reduce_sum") for r in loss.reasons), loss.reasons
    for o, s in zip((w1, w2), meta["outputs"][1:], strict=True):
        assert X.summary(X.output_bits(o))["sha256"] == s["sha256"]
    with pytest.raises(ValueError, match="reduce_sum"):
        jnp.asarray(loss) + 1
    with pytest.raises(ValueError, match=r"outputs \[0\] of 3.*outputs \[1, 2\] are reproduced"):
        jaxmma.gpu_replay(XM.function(case), meta["hlo"])(*_args(case))


def test_refused_fusion_refuses_its_dot_only():
    """A GEMM fusion the reader refuses (a Triton reduce of S = 4 over a [2, 72] tile)
    refuses the dot it computes, named; the other dot of the module is still read."""
    meta = _meta("3", "model-mlp-relu-bf16")
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
