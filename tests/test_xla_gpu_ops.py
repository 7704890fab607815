"""gpu_replay's refusals: every operation whose XLA:GPU bits are not established is
refused at trace time with its name, place and reason; exact ones pass (no GPU needed)."""

import warnings

import jax
import jax.numpy as jnp
import pytest
from test_xla_gpu import CASES, record

import jaxmma
from jaxmma.conformance import _xla_capture as X
from jaxmma.gemm import _replay_ops

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
        (jnp.sqrt, (F32,), "sqrt", "not been probed"),
        (lambda x: x / 3.0, (F32,), "div", "div.full.f32"),
        (jnp.sum, (F32,), "reduce_sum", "own order"),
        (lambda x: jnp.max(x, 0), (F32,), "reduce_max", "signed zero"),
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

    def fn(a, b):
        d = a @ b
        return d, jnp.exp(d)

    with pytest.raises(ValueError, match=r"(?s)1 operation .* reaches outputs \[1\].*exp"):
        jaxmma.gpu_replay(fn, meta["hlo"])(A, B)
    with pytest.warns(UserWarning, match="exp -> float32"):
        d, _ = jaxmma.gpu_replay(fn, meta["hlo"], unverified="compute")(A, B)
    assert X.summary(X.output_bits(d))["sha256"] == meta["outputs"][0]["sha256"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: the dot alone
        jaxmma.gpu_replay(lambda a, b: a @ b, meta["hlo"])(A, B)


def test_unverified_option_is_checked():
    meta, _, _ = _dot_case()
    with pytest.raises(ValueError, match="unverified: expected one of"):
        jaxmma.gpu_replay(jnp.dot, meta["hlo"], unverified="ignore")
