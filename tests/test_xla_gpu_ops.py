"""gpu_replay's refusals: every operation whose XLA:GPU bits are not established is
refused at trace time with its name, place and reason; exact ones pass (no GPU needed)."""

import warnings

import jax
import jax.numpy as jnp
import pytest
from test_xla_gpu import CASES, record

import jaxmma
from jaxmma.conformance import _xla_capture as X
from jaxmma.xla_gpu import _hlo, _replay_ops

F32 = jnp.ones((4, 8), jnp.float32)
BF16 = jnp.ones((4, 8), jnp.bfloat16)


def findings(fn, *args):
    fs, per_output = _replay_ops.check(jax.make_jaxpr(fn)(*args))
    return [f for f in fs if any(f in t for t in per_output)], per_output


@pytest.mark.every_case
@pytest.mark.parametrize(
    "fn,args,op,why",
    [
        (jnp.exp, (F32,), "exp", "0.97 ulp"),
        (jnp.tanh, (F32,), "tanh", "ulp"),
        (jax.nn.sigmoid, (F32,), "logistic", "ulp"),
        (jax.lax.rsqrt, (F32,), "rsqrt", "approximate"),
        (jnp.sqrt, (F32,), "sqrt", "701 of 4096"),
        (lambda x: x / 3.0, (F32,), "div", "div.full.f32"),
        (jnp.sum, (F32,), "reduce_sum", "own order"),
        (lambda x: jnp.max(x, 0), (F32,), "reduce_max", "signed-zero"),
        (lambda x: x.astype(jnp.float8_e4m3fn), (F32,), "convert_element_type", "satfinite"),
        (lambda x, y: x * y + 1.0, (F32, F32), "add", "FMA"),
        (lambda x, y: 1.0 - (-(x * y)), (F32, F32), "sub", "FMA"),
        (lambda x: (x + x) * x, (BF16,), "mul", "excess_precision"),
        (lambda x: (x * 2.0).astype(jnp.bfloat16).astype(jnp.float32), (F32,),
         "convert_element_type", "excess_precision"),
        (lambda x: (x + 1).astype(jnp.bfloat16) > 1, (F32,), "gt", "excess_precision"),
        (lambda x: jax.lax.fori_loop(0, 2, lambda i, c: c * 3.0, x), (F32,), "scan",
         "not inspected"),
    ],
)  # fmt: skip
def test_refused(fn, args, op, why):
    live, per_output = findings(fn, *args)
    assert any(f.op.startswith(op + " ") and why in f.reason for f in live), live
    assert all(per_output)


@pytest.mark.every_case
@pytest.mark.parametrize(
    "fn,args",
    [
        (lambda x, w: jnp.maximum(x @ w, 0), (F32, F32.T)),  # relu, max and min
        (lambda x: (x * 0.5 + 1.0, x * jnp.float32(-0.25) - x), (F32,)),  # exact products
        (lambda x, y: jnp.where(x > y, x, -y).T.reshape(-1)[:5], (F32, F32)),
        (lambda x, y: x - y, (BF16, BF16)),  # one rounding, as on the GPU
        (lambda x: (x - 2 * x).astype(jnp.bfloat16), (F32,)),
        (lambda x: (x * x) * 2.0, (F32,)),  # a product not added to anything
        (lambda b, g: b - jnp.bfloat16(2**-4) * g, (BF16, BF16)),  # an SGD update
        (lambda x: jnp.concatenate([x, jnp.abs(x)]).astype(jnp.float32), (BF16,)),
        (lambda i: (i * 3 + 1) // 2 % 5, (jnp.arange(6),)),  # integer arithmetic
    ],
)
def test_exact_ops_pass(fn, args):
    live, per_output = findings(fn, *args)
    assert not live and not any(per_output), live


def test_only_dependent_outputs_are_refused():
    def fn(x):
        return x * 2.0, jnp.exp(x), jnp.sum(x)  # the sum's value reaches output 2 only

    live, per_output = findings(fn, F32)
    assert [bool(t) for t in per_output] == [False, True, True]
    msg = _replay_ops.message(*_replay_ops.check(jax.make_jaxpr(fn)(F32)))
    assert "outputs [1, 2] of 3" in msg and "outputs [0] are reproduced" in msg


def test_dead_operations_are_not_refused():
    """A training step's loss sum that no output reads (as in the captured steps)."""

    def fn(x):
        _ = jnp.sum(jnp.exp(x))
        return x * 0.5

    assert findings(fn, F32) == ([], [frozenset()])


def test_message_names_the_source_line():
    live, _ = findings(lambda x: jnp.log(x), F32)
    assert "test_xla_gpu_ops.py" in live[0].where


def _dot_case():
    _, meta, _ = record("pinned", "f32-nosplit")
    case = CASES["f32-nosplit"]
    A, B = (jnp.asarray(x) for x in X.arrays(case, X.inputs(case)))
    return meta, A, B


def test_replay_refuses_then_computes_with_a_warning():
    """gpu_replay of a captured dot followed by exp: refused by default; with
    unverified='compute' the dot output keeps the GPU's bits and a warning names exp."""
    meta, A, B = _dot_case()

    def fn(a, b):  # the module's own types: the dot's value, selected past an exp
        d = a @ b
        return jax.lax.select(jnp.zeros(d.shape, bool), jnp.exp(d), d)

    with pytest.raises(ValueError, match=r"(?s)1 operation .* reaches outputs \[0\].*exp"):
        jaxmma.gpu_replay(fn, meta["hlo"])(A, B)
    with pytest.warns(UserWarning, match="exp -> float32"):
        d = jaxmma.gpu_replay(fn, meta["hlo"], unverified="compute")(A, B)
    assert X.summary(X.output_bits(d))["sha256"] == meta["outputs"][0]["sha256"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: the dot alone
        jaxmma.gpu_replay(lambda a, b: a @ b, meta["hlo"])(A, B)


def test_unverified_option_is_checked():
    meta, _, _ = _dot_case()
    with pytest.raises(ValueError, match="unverified: expected one of"):
        jaxmma.gpu_replay(jnp.dot, meta["hlo"], unverified="ignore")


def _module(kind):
    """A captured module: ``"mlir"`` (loop and reduction fusions only) or ``"triton"``
    (Triton softmax fusions beside the GEMM fusions)."""
    import json

    import numpy as np
    from test_xla_gpu_models import FILES

    if not FILES:
        pytest.skip("no captures")
    name = "probe-max1-200x72-f32" if kind == "mlir" else "model-xent-f32"
    with np.load(FILES[0]) as z:
        for k in z.files:
            if k.endswith(".meta"):
                meta = json.loads(str(z[k][()]))
                if meta["name"] == name:
                    return meta["hlo"]
    raise AssertionError(name)


def test_module_facts_lift_contraction_and_minmax():
    """With a module whose fusions are all XLA's MLIR loop / reduction emitters, or a
    Triton softmax fusion of a measured kind ([1, 100], one warp, no TMA), a product added
    to something and a float max / min reduction are reproduced; the same softmax fusion
    with TMA allowed (not measured) keeps the reductions refused, naming it."""
    from jaxmma.xla_gpu import _hlo

    text = _module("triton")
    tma = text.replace('"is_tma_allowed":false', '"is_tma_allowed":true')
    assert tma != text
    mlir, triton, unmeasured = (_hlo.emitters(t) for t in (_module("mlir"), text, tma))
    assert not mlir.contract and not mlir.minmax and not triton.minmax
    assert unmeasured.minmax and unmeasured.libdevice  # its max and its exp

    def fn(x, y):
        return x * y + 1.0, jnp.max(x, 1), jnp.min(x * y, 0)

    closed = jax.make_jaxpr(fn)(F32, F32)
    assert not any(_replay_ops.check(closed, mlir)[1])
    assert not any(_replay_ops.check(closed, triton)[1])
    fs, per_output = _replay_ops.check(closed, unmeasured)
    assert per_output[1] and any("%triton_softmax" in f.reason for f in fs if "reduce" in f.op)


def test_ieee_minmax_reduction():
    """gpu_replay's max / min reductions: NaN if any element is NaN, +0 over -0 for max
    (-0 over +0 for min), in any position and row length (XLA:CPU's own f32 reduce_max
    drops NaNs in long rows)."""
    import numpy as np

    from jaxmma.xla_gpu import _replay

    text = _module("mlir")  # f32[200, 72] -> f32[200]: gpu_replay at that shape
    for n in (3, 72, 1000, 4099):
        x = np.full((200 if n == 72 else 4, n), -0.0, np.float32)
        x[0, n // 2] = 0.0
        x[1, n - 1] = np.nan
        x[2, :] = -1.0
        x[2, 1] = 0.0
        if n == 72:
            mx = jaxmma.gpu_replay(lambda a: jnp.max(a, 1), text)(jnp.asarray(x))
            mn = jaxmma.gpu_replay(lambda a: jnp.min(-a, 1), text)(jnp.asarray(x))
        else:  # other shapes than the module's: the same definition, called directly
            (e,) = jax.make_jaxpr(lambda a: jnp.max(a, 1))(x).jaxpr.eqns
            (f,) = jax.make_jaxpr(lambda a: jnp.min(a, 1))(x).jaxpr.eqns
            mx, mn = _replay.ieee_minmax(e, jnp.asarray(x)), _replay.ieee_minmax(f, jnp.asarray(-x))
        mx, mn = np.asarray(mx), np.asarray(mn)
        assert mx[0] == 0 and not np.signbit(mx[0]) and np.isnan(mx[1]), n
        assert mx[2] == 0 and not np.signbit(mx[2]) and np.signbit(mx[3]) and mx[3] == 0, n
        assert mn[0] == 0 and np.signbit(mn[0]) and np.isnan(mn[1]), n
        assert mn[3] == 0 and not np.signbit(mn[3]), n


@pytest.mark.parametrize("libdevice", [(), ("%fusion (__triton)",)])
def test_f32_exp_and_log_follow_the_modules_emitters(libdevice):
    """f32 exp / log pass where every exponential and log of the module runs in XLA's
    MLIR emitters (libdevice, reproduced), and are refused where another fusion holds
    one; bf16 exp is refused either way."""
    facts = _hlo.Emitters((), (), libdevice, frozenset({"exponential", "log"}))
    for fn, x in ((jnp.exp, F32), (lambda v: jnp.log(jnp.abs(v)), F32), (jnp.exp, BF16)):
        fs, per_output = _replay_ops.check(jax.make_jaxpr(fn)(x), facts)
        refused = bool(libdevice) or x.dtype == jnp.bfloat16
        assert bool(fs) == refused and all(per_output) == refused, (fn, x.dtype, fs)
    # a module that computes no exponential: its exp is not the function's
    fs, _ = _replay_ops.check(jax.make_jaxpr(jnp.exp)(F32), _hlo.Emitters((), (), ()))
    assert fs
