"""gpu_replay on captured transformer functions (``jaxmma/conformance/_xla_models.py``
run on an H100 into ``tests/golden/xla/xla-models-*.npz``): every output is either the
GPU's bits or refused with a reason, never silently different. Skipped until the
captures exist."""

import glob
import json
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_capture as X
from jaxmma.conformance import _xla_models as XM
from jaxmma.gemm import _replay_ops

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


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: f"{r[0]}-{r[1]['name']}")
def test_every_output_is_the_gpus_or_refused(rec):
    """Outputs that the replay does not refuse have the GPU's SHA-256; the rest are
    refused at trace time with a named reason (by default a ValueError)."""
    _, meta = rec
    case = CASES[meta["name"]]
    args = _args(case)
    assert X.inputs_crc32(XM.inputs(case)) == meta["inputs_crc32"]
    fn = XM.function(case)
    try:
        jaxmma.xla_gpu_dots(meta["hlo"])
    except ValueError as e:  # a dot the reader refuses: a reason, not a wrong answer
        msg = str(e)
        assert "%" in msg or "not covered" in msg or "not understood" in msg, msg  # names it
        return
    _, per_output = _replay_ops.check(jax.make_jaxpr(fn)(*args))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = jax.tree.leaves(jaxmma.gpu_replay(fn, meta["hlo"], unverified="compute")(*args))
    except ValueError as e:  # dots of fn and the module that do not pair up
        assert "GEMM fusion" in str(e) or "not covered" in str(e), e
        return
    if any(per_output):
        with pytest.raises(ValueError, match="not established"):
            jaxmma.gpu_replay(fn, meta["hlo"])(*args)
    assert len(outs) == len(meta["outputs"])
    for i, (o, s) in enumerate(zip(outs, meta["outputs"], strict=True)):
        if per_output[i]:
            continue  # refused by default
        got = X.summary(X.output_bits(o))["sha256"]
        assert got == s["sha256"], (meta["name"], i, "silently different")


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
