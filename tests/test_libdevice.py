"""libdevice's f32 exp and log with the H100's ex2.approx (jaxmma.arith._libdevice),
against what the GPU gave: XLA:GPU's jnp.exp / jnp.log on the probe inputs of
tests/golden/xla/xla-models-*.npz (three processes, captured before the ex2 tables were
measured), and ex2.approx.ftz.f32 itself on random inputs that did not build the tables
(tests/golden/mufu/ex2-h100.npz: raw bit patterns of every kind, and |x| in
[2^-30, 2^30])."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma import arith
from jaxmma.conformance import _xla_models as XM

HERE = os.path.dirname(__file__)
MODELS = [os.path.join(HERE, "golden", "xla", f"xla-models-{r}.npz") for r in (1, 2, 3)]
EX2 = os.path.join(HERE, "golden", "mufu", "ex2-h100.npz")
CASES = {c.name: c for c in XM.cases()}


def _probe(name: str):
    """(inputs, [(hlo, GPU output bits) per process]) of one probe case."""
    case = CASES[name]
    args = [np.asarray(a) for a in XM.arrays(case, XM.inputs(case))]
    runs = []
    for path in MODELS:
        with np.load(path) as z:
            for k in (n for n in z.files if n.endswith(".meta")):
                meta = json.loads(str(z[k][()]))
                if meta.get("name") == name and "error" not in meta:
                    runs.append((meta["hlo"], z[k.split(".")[0] + ".out0"].view(np.uint32)))
    assert len(runs) == 3, name
    return args, runs


def _same(got, want) -> np.ndarray:
    """Equal bits, or both NaN (payloads are not reproduced)."""
    got, want = np.asarray(got, np.uint32), np.asarray(want, np.uint32)
    nan = np.isnan(got.view(np.float32)) & np.isnan(want.view(np.float32))
    return (got == want) | nan


@pytest.mark.parametrize("fn", ["exp", "log"])
def test_libdevice_functions_give_the_gpus_bits(fn):
    (x,), runs = _probe(f"probe-{fn}-f32")
    if fn == "log":  # the probe is log(abs(x))
        x = np.abs(x)
    f = arith.libdevice_expf if fn == "exp" else arith.libdevice_logf
    got = np.asarray(f(x.view(np.uint32)))
    for _, gpu in runs:
        assert _same(got, gpu).all(), (fn, int((~_same(got, gpu)).sum()))
    # the CPU's own function differs on these inputs (so the test can fail)
    own = np.asarray(jnp.exp(x) if fn == "exp" else jnp.log(x)).view(np.uint32)
    assert (~_same(own, runs[0][1])).sum() > 100


def test_ex2_approx_on_inputs_that_did_not_build_its_tables():
    with np.load(EX2) as z:
        for kind in ("any", "typ"):
            x, gpu = z[f"{kind}_in"], z[f"{kind}_out"]
            got = np.asarray(jax.jit(arith.ex2_approx_ftz)(x))
            assert _same(got, gpu).all(), (kind, int((~_same(got, gpu)).sum()))
            if kind == "any":  # NaN, Inf, subnormal and zero inputs among them
                f = x.view(np.float32)
                assert np.isnan(f).sum() > 100 and (np.abs(f) < 2.0**-126).sum() > 100


def test_a_table_entry_off_by_one_is_seen():
    """The tables decide the bits: one changed entry changes a result on the probes."""
    (x,), runs = _probe("probe-exp-f32")
    pos, _ = arith._libdevice._ex2_tables()
    saved = pos.copy()
    try:
        pos += np.uint32(1)  # every result of a reduced argument >= 0, one ulp up
        changed = np.asarray(arith.libdevice_expf(x.view(np.uint32)))
        assert (~_same(changed, runs[0][1])).sum() > 100
    finally:
        pos[:] = saved
    assert _same(arith.libdevice_expf(x.view(np.uint32)), runs[0][1]).all()


@pytest.mark.parametrize("x64", [False, True])
def test_same_bits_jitted_vmapped_and_with_x64(x64):
    (x,), runs = _probe("probe-exp-f32")
    bits = x.view(np.uint32)
    with jax.enable_x64(x64):
        for f in (arith.libdevice_expf, arith.libdevice_logf):
            eager = np.asarray(f(bits))
            assert np.array_equal(np.asarray(jax.jit(f)(bits)), eager)
            assert np.array_equal(np.asarray(jax.vmap(f)(bits.reshape(64, 64))).ravel(), eager)


@pytest.mark.parametrize("fn", ["exp", "log"])
def test_gpu_replay_reproduces_f32_exp_and_log(fn):
    """gpu_replay of the probe function with the captured module now returns the GPU's
    bits (it refused them before), with unverified="raise" (the default)."""
    (x,), runs = _probe(f"probe-{fn}-f32")
    case = CASES[f"probe-{fn}-f32"]
    for hlo, gpu in runs:
        out = jaxmma.gpu_replay(XM.function(case), hlo)(jnp.asarray(x))
        assert _same(np.asarray(out).view(np.uint32), gpu).all()


def test_bf16_exp_stays_refused():
    (x,), runs = _probe("probe-exp-bf16")
    case = CASES["probe-exp-bf16"]
    with pytest.raises(ValueError, match="exp"):
        jaxmma.gpu_replay(XM.function(case), runs[0][0])(jnp.asarray(x))
