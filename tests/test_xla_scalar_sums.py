"""gpu_replay of XLA:GPU's f32 sum of a whole vector (a loss's mean) against the GPU.

The GPU's results are the captures ``tests/golden/xla/xla-scalar-sums-{ss1,ss2}.npz``
(``jaxmma/conformance/_xla_scalar_sums.py``; an H100 and an H200, one process each):
``jnp.sum`` of vectors of 33 to 4096 elements, which the autotuner gave to Triton reduce
fusions of one program (output tile ``[]``; 1, 2 and 4 warps; with and without TMA) or
to XLA's MLIR row emitter. For each, FPRev probes (an anchor of ``+2**40``, one element
of ``-2**40``, ones elsewhere: the sum tells how many elements the smallest subtree
holding both has) and 256 random vectors. The order read from them is
``jaxmma.xla_gpu._xla_sum``'s (its docstring)."""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_scalar_sums as C

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = [os.path.join(GOLDEN, f"xla-scalar-sums-{r}.npz") for r in ("ss1", "ss2")]
#: FPRev vectors checked per anchor: every one up to this length, a sample above
EVERY = 1000


def _load():
    out = []
    for path in FILES:
        with np.load(path) as z:
            for k in sorted({int(k.split(".")[0]) for k in z.files}):
                meta = json.loads(str(z[f"{k}.meta"][()]))
                out.append((meta, z[f"{k}.fprev"], z[f"{k}.random"]))
    return out


CASES = _load()


def _config(hlo: str):
    """(TMA, warps) of the module's Triton reduce fusion, or None (an MLIR emitter)."""
    m = re.search(
        r'"is_tma_allowed":(\w+).*?"num_warps":"(\d+)","output_tiles":\[\{"sizes":\[\]\}\]', hlo
    )
    return (m.group(1) == "true", int(m.group(2))) if m else None


def test_captures_show_the_triton_vector_sums():
    configs = {_config(m["hlo"]) for m, _, _ in CASES} - {None}
    assert {w for _, w in configs} == {1, 2, 4}
    assert {t for t, _ in configs} == {True, False}


def _ids(case):
    meta = case[0]
    cfg = _config(meta["hlo"])
    how = "mlir" if cfg is None else f"{cfg[1]}w{'-tma' if cfg[0] else ''}"
    return f"{meta['run']}-{meta['n']}-{how}"


@pytest.mark.parametrize(
    "case",
    # make test within 5 minutes: vectors up to 200 in the quick run
    [pytest.param(c, marks=[pytest.mark.full] if c[0]["n"] > 200 else []) for c in CASES],
    ids=_ids,
)
def test_replay_gives_the_gpus_sums(case):
    """Every random vector's sum and every FPRev probe's (a sample of them above
    ``EVERY`` elements) is the GPU's, bit for bit; the one sum of an MLIR emitter whose
    order is not derived is refused."""
    meta, fprev, rand = case
    n = meta["n"]
    one = jaxmma.gpu_replay(C.function(), meta["hlo"], unverified="omit")(jnp.zeros(n, jnp.float32))
    if isinstance(one, jaxmma.Unverified):  # only XLA's MLIR multi-row emitter (n = 64)
        assert _config(meta["hlo"]) is None and n == 64, one.reasons
        assert any("multi-row emitter: not derived" in r for r in one.reasons), one.reasons
        return
    f = jax.jit(jax.vmap(jaxmma.gpu_replay(C.function(), meta["hlo"])))
    X = C.random_vectors(n, meta["seed"])
    got = np.asarray(f(jnp.asarray(X))).view(np.uint32)
    assert np.array_equal(got, rand), int(np.sum(got != rand))
    js = np.arange(n) if n <= EVERY else np.unique(np.r_[np.arange(64), np.arange(0, n, 13), n - 1])
    for row, a in zip(fprev, meta["anchors"], strict=True):
        jj = js[js != a]
        V = np.stack([C.fprev_vector(n, a, j) for j in jj])
        got = np.asarray(f(jnp.asarray(V)))
        assert np.array_equal(got.view(np.uint32), row[jj].view(np.uint32)), (a, jj[got != row[jj]])


def test_unmeasured_vector_sums_are_refused():
    """Eight warps (never captured) refuse the sum, naming the fusion's configuration."""
    meta = next(m for m, _, _ in CASES if _config(m["hlo"]) == (False, 1))
    text = meta["hlo"].replace('"num_warps":"1"', '"num_warps":"8"', 1)
    assert text != meta["hlo"]
    f = jaxmma.gpu_replay(C.function(), text)
    with pytest.raises(ValueError, match="8 warps.*not measured"):
        f(jnp.ones(meta["n"], jnp.float32))
