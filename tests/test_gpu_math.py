"""XLA:GPU's f32 elementwise functions (jaxmma.arith.GPU_FUNCTIONS: libdevice's exp and
log, div.full, rsqrt.approx, sqrt.approx, XLA's tanh, erf and logistic) against what the
GPU gave: XLA:GPU's results on the probe inputs of tests/golden/xla/xla-models-*.npz
(three processes, captured before the special function unit's tables were measured), and
ex2.approx.ftz.f32 itself on random inputs that did not build its tables
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
EXP = arith.GPU_FUNCTIONS["exp"][1]


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


#: probe case -> (primitive, the probe's inputs -> the function's arguments, the CPU's own)
PROBES = {
    "exp": ("exp", lambda x: (x,), jnp.exp),
    "log": ("log", lambda x: (np.abs(x),), jnp.log),  # the probe is log(abs(x))
    "tanh": ("tanh", lambda x: (x,), jnp.tanh),
    "logistic": ("logistic", lambda x: (x,), jax.nn.sigmoid),
    "erf": ("erf", lambda x: (x,), jax.scipy.special.erf),
    "rsqrt": ("rsqrt", lambda x: (np.abs(x),), jax.lax.rsqrt),
    "sqrt": ("sqrt", lambda x: (np.abs(x),), jnp.sqrt),
    "div": ("div", lambda a, b: (a, b), lambda a, b: a / b),
}


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_functions_give_the_gpus_bits(probe):
    prim, args_of, own_fn = PROBES[probe]
    inputs, runs = _probe(f"probe-{probe}-f32")
    args = args_of(*inputs)
    got = np.asarray(arith.GPU_FUNCTIONS[prim][1](*(_bits(a) for a in args)))
    for _, gpu in runs:
        assert _same(got, gpu).all(), (probe, int((~_same(got, gpu)).sum()))
    # the CPU's own function differs on these inputs (so the test can fail)
    own = _bits(own_fn(*(jnp.asarray(a) for a in args)))
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
    pos = arith._gpu_math.tables()["ex2_pos"]
    saved = pos.copy()
    try:
        pos += np.uint32(1)  # every result of a reduced argument >= 0, one ulp up
        changed = np.asarray(EXP(x.view(np.uint32)))
        assert (~_same(changed, runs[0][1])).sum() > 100
    finally:
        pos[:] = saved
    assert _same(EXP(x.view(np.uint32)), runs[0][1]).all()


@pytest.mark.full  # make test within 5 minutes: test_exp_and_div_with_x64 is its quick part
@pytest.mark.parametrize("x64", [False, True])
def test_same_bits_jitted_vmapped_and_with_x64(x64):
    (x,), runs = _probe("probe-exp-f32")
    bits = x.view(np.uint32)
    with jax.enable_x64(x64):
        for name, (_, f) in arith.GPU_FUNCTIONS.items():
            args = (bits, bits[::-1]) if name == "div" else (bits,)
            eager = np.asarray(f(*args))
            assert np.array_equal(np.asarray(jax.jit(f)(*args)), eager), name
            shaped = [a.reshape(64, 64) for a in args]
            assert np.array_equal(np.asarray(jax.vmap(f)(*shaped)).ravel(), eager), name


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_gpu_replay_reproduces_the_functions(probe):
    """gpu_replay of the probe function with the captured module now returns the GPU's
    bits (it refused them before), with unverified="raise" (the default)."""
    inputs, runs = _probe(f"probe-{probe}-f32")
    case = CASES[f"probe-{probe}-f32"]
    for hlo, gpu in runs:
        out = jaxmma.gpu_replay(XM.function(case), hlo)(*(jnp.asarray(a) for a in inputs))
        assert _same(np.asarray(out).view(np.uint32), gpu).all()


def test_bf16_exp_stays_refused():
    (x,), runs = _probe("probe-exp-bf16")
    case = CASES["probe-exp-bf16"]
    with pytest.raises(ValueError, match="exp"):
        jaxmma.gpu_replay(XM.function(case), runs[0][0])(jnp.asarray(x))


def test_functions_match_xla_gpu_on_held_out_inputs():
    """tests/golden/mufu/xla-gpu-math-h100.npz: XLA:GPU's results on an H100 (jax
    0.11.2, `python -m jaxmma.conformance._mufu_capture --check-xla`), 8192 per function
    from raw bit patterns, wide and small ranges, and special values (zeros, subnormals,
    Inf, NaN, break points); none of them built the tables."""
    with np.load(os.path.join(HERE, "golden", "mufu", "xla-gpu-math-h100.npz")) as z:
        for name, (_, f) in arith.GPU_FUNCTIONS.items():
            args = [z[f"{name}.in{j}"] for j in range(2 if name == "div" else 1)]
            gpu = z[f"{name}.out"]
            assert _same(f(*args), gpu).all(), (name, int((~_same(f(*args), gpu)).sum()))
            x = args[0].view(np.float32)
            assert np.isnan(x).sum() > 4 and ((args[0] >> 23) & 255 == 0).sum() > 1000


def test_exp_and_div_with_x64():
    """The quick run's share of the test above: exp and division jitted with x64 on give
    the bits they give with it off."""
    (x,), _ = _probe("probe-exp-f32")
    bits = x.view(np.uint32)
    for name in ("exp", "div"):
        f = arith.GPU_FUNCTIONS[name][1]
        args = (bits, bits[::-1]) if name == "div" else (bits,)
        off = np.asarray(jax.jit(f)(*args))
        with jax.enable_x64(True):
            on = np.asarray(jax.jit(f)(*args))
        assert np.array_equal(on, off), name


def test_replayed_functions_have_the_primitives_derivatives():
    """The emulated functions carry the primitive's own derivative (the raw bits carry
    none): jax.grad through gpu_replay equals jax.grad of the function, never zeros."""
    for probe in ("exp", "tanh", "div"):
        inputs, runs = _probe(f"probe-{probe}-f32")
        case = CASES[f"probe-{probe}-f32"]
        f = XM.function(case)
        args = [jnp.asarray(a) for a in inputs]
        hlo = runs[0][0]

        def loss(*a, f=f):
            return jnp.sum(f(*a))

        got = jax.grad(lambda *a, hlo=hlo, f=f: jnp.sum(jaxmma.gpu_replay(f, hlo)(*a)))(*args)
        want = jax.grad(loss)(*args)
        assert np.allclose(got, want, rtol=1e-6, equal_nan=True), probe
        assert np.count_nonzero(np.asarray(got)) > 32, probe
