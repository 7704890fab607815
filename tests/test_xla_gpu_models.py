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


@pytest.mark.every_case
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
