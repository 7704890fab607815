"""gpu_replay keeps f32 subnormals, which XLA:CPU flushes and XLA:GPU does not.

The GPU's bits are the capture ``tests/golden/xla/xla-subnormal.npz``
(``jaxmma/conformance/_xla_subnormal.py`` on an H100); the operations on bits
(``jaxmma.xla_gpu._replay_ieee``) are also checked against NumPy, whose float32 and
bfloat16 (ml_dtypes) arithmetic runs on the host without flushing."""

import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_subnormal as S
from jaxmma.xla_gpu import _replay_ieee, _xla_sum

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla", "xla-subnormal.npz")


def _u(x):
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


@pytest.mark.parametrize("name", S.CASES)
def test_replay_keeps_the_gpus_subnormals(name):
    """Every output of the captured functions is the GPU's, bit for bit, or refused;
    the CPU's own program differs from the GPU in most of them (the cases do read and
    make subnormals)."""
    with np.load(GOLDEN) as z:
        meta = json.loads(str(z[f"{name}.meta"][()]))
        want = [z[f"{name}.out{i}"] for i in range(meta["outputs"])]
    args = S.inputs(name)
    fn = S.function(name)
    got = jaxmma.gpu_replay(fn, meta["hlo"], unverified="omit")(*args)
    got = jax.tree.leaves(got, is_leaf=lambda x: isinstance(x, jaxmma.Unverified))
    cpu = jax.tree.leaves(jax.jit(fn)(*args))
    same = refused = cpu_differs = 0
    for g, c, w in zip(got, cpu, want, strict=True):
        cpu_differs += int(not np.array_equal(_u(c), w))
        if isinstance(g, jaxmma.Unverified):
            refused += 1
            continue
        assert np.array_equal(_u(g), w), (name, np.count_nonzero(_u(g) != w))
        same += 1
    assert (same, refused) == {"ops": (15, 0), "tanh-exp": (1, 0), "reduce": (3, 0)}[name]
    assert cpu_differs >= {"ops": 12, "tanh-exp": 1, "reduce": 2}[name]


def _eqn(fn, *args):
    (eqn,) = jax.make_jaxpr(fn)(*args).jaxpr.eqns
    return eqn


def _subnormal_heavy(n, seed):
    rng = np.random.default_rng(seed)
    raw = (rng.integers(0, 2**23, n) | (rng.integers(0, 2, n) << 31)).astype(np.uint32)
    x = raw.view(np.float32).copy()
    pick = rng.integers(0, 5, n)
    x[pick == 1] = rng.choice([0.0, -0.0], n)[pick == 1]
    x[pick == 2] = (rng.uniform(-4, 4, n) * 2.0**-126).astype(np.float32)[pick == 2]
    x[pick == 3] = rng.uniform(-2, 2, n).astype(np.float32)[pick == 3]
    x[::97] = np.nan
    return x


OPS = {
    "add": (lambda x, y: x + y, np.add),
    "sub": (lambda x, y: x - y, np.subtract),
    "mul": (lambda x, y: x * y, np.multiply),
    "max": (jax.lax.max, np.fmax),
    "min": (jax.lax.min, np.fmin),
    "lt": (lambda x, y: x < y, np.less),
    "le": (lambda x, y: x <= y, np.less_equal),
    "eq": (lambda x, y: x == y, np.equal),
    "ne": (lambda x, y: x != y, np.not_equal),
    "gt": (lambda x, y: x > y, np.greater),
    "ge": (lambda x, y: x >= y, np.greater_equal),
}


@pytest.mark.parametrize("op", OPS)
def test_binary_operations_on_bits_match_the_host(op):
    """f32 operations on subnormals, zeros of both signs, least normals and NaN: the
    bits NumPy computes on the host (NaN results compared as NaN; max / min where an
    operand is NaN are the bound operation's, not checked here)."""
    x, y = _subnormal_heavy(20_000, 1), _subnormal_heavy(20_000, 2)
    fn, ref = OPS[op]
    got = np.asarray(_replay_ieee.evaluate(_eqn(fn, x, y), [x, y])[0])
    with np.errstate(all="ignore"):
        want = ref(x, y)
    nan = np.isnan(x) | np.isnan(y)
    if op in ("max", "min"):
        pos_zeros = (x == 0) & (y == 0)  # which zero: the bound operation's
        keep = ~nan & ~pos_zeros
        assert np.array_equal(_u(got)[keep], _u(want)[keep])
    elif got.dtype == bool:
        assert np.array_equal(got, want)
    else:
        assert np.array_equal(np.isnan(got), np.isnan(want))
        keep = ~np.isnan(want)
        assert np.array_equal(_u(got)[keep], _u(want)[keep])
    # the CPU's own operation gives other bits on these inputs
    own = np.asarray(jax.jit(fn)(x, y))
    assert not np.array_equal(_u(own)[~nan], _u(want)[~nan])


@pytest.mark.parametrize("op", ["floor", "ceil", "sign", "round"])
def test_rounding_of_subnormals(op):
    x = _subnormal_heavy(5000, 3)
    x = x[~np.isnan(x)]
    fn = {"floor": jnp.floor, "ceil": jnp.ceil, "sign": jnp.sign, "round": jax.lax.round}[op]
    ref = {"floor": np.floor, "ceil": np.ceil, "sign": np.sign, "round": np.trunc}[op]
    got = np.asarray(_replay_ieee.evaluate(_eqn(fn, x), [x])[0])
    want = ref(x).astype(np.float32)
    if op == "round":  # half away from zero; |x| < 1.5 here except the ordinary values
        want = np.where(np.abs(x) < 0.5, np.copysign(0.0, x), np.round(x)).astype(np.float32)
        small = np.abs(x) < 2.0**-100
        assert np.array_equal(_u(got)[small], _u(want)[small])
        return
    if op == "sign":  # XLA's sign of a zero is that zero (NumPy's: +0)
        want = np.where(x == 0, x, want)
    assert np.array_equal(_u(got), _u(want.astype(np.float32)))


def test_bf16_and_powers_and_reductions():
    """bf16 and f16 add / mul (widened to f32 exactly, rounded back: NumPy's and
    ml_dtypes' own rule), x**2
    and x**4 as squarings, and a max reduction whose largest element is a subnormal."""
    x, y = _subnormal_heavy(4096, 4), _subnormal_heavy(4096, 5)
    bx = (x * 2.0**110).astype(ml_dtypes.bfloat16)  # bf16 subnormals are below 2**-126 too
    by = (y * 2.0**-3).astype(ml_dtypes.bfloat16)
    for fn, ref in ((lambda a, b: a + b, np.add), (lambda a, b: a * b, np.multiply)):
        got = np.asarray(_replay_ieee.evaluate(_eqn(fn, bx, by), [bx, by])[0])
        want = ref(bx.astype(np.float32), by.astype(np.float32)).astype(ml_dtypes.bfloat16)
        keep = ~np.isnan(want.astype(np.float32))
        assert got.dtype == ml_dtypes.bfloat16
        assert np.array_equal(_u(got)[keep], _u(want)[keep])
    h = np.random.default_rng(6).integers(0, 2**16, 8192).astype(np.uint16).view(np.float16)
    hy = np.roll(h, 3)  # every f16 pattern class, subnormals included
    for fn, ref in ((lambda a, b: a + b, np.add), (lambda a, b: a * b, np.multiply)):
        got = np.asarray(_replay_ieee.evaluate(_eqn(fn, h, hy), [h, hy])[0])
        with np.errstate(all="ignore"):
            want = ref(h.astype(np.float32), hy.astype(np.float32)).astype(np.float16)
        keep = ~np.isnan(want)
        assert got.dtype == np.float16
        assert np.array_equal(_u(got)[keep], _u(want)[keep])
    for p in (2, 4):
        got = np.asarray(_replay_ieee.evaluate(_eqn(lambda a, p=p: a**p, x), [x])[0])
        want = x * x if p == 2 else (x * x) * (x * x)
        keep = ~np.isnan(x)
        assert np.array_equal(_u(got)[keep], _u(want)[keep])
    rows = np.full((3, 8), -1.0, np.float32)
    rows[0, 3], rows[1, 5], rows[2, 0] = 1e-40, -0.0, np.nan
    got = np.asarray(_replay_ieee.maximum(rows, (1,), True))
    assert _u(got).tolist() == [np.float32(1e-40).view(np.uint32), 0x80000000, 0x7FFFFFFF]


def test_values_on_bits_keep_the_derivative():
    """The bits carry no derivative: each value keeps its primitive's."""
    x, y = np.float32(3.0), np.float32(-2.0)
    eqn = _eqn(lambda a, b: a * b, x, y)
    g = jax.grad(lambda a: _replay_ieee.evaluate(eqn, [a, y])[0])(x)
    assert float(g) == -2.0
    eqn = _eqn(lambda a, b: jnp.maximum(a, b), x, y)
    g = jax.grad(lambda a: _replay_ieee.evaluate(eqn, [a, y])[0])(x)
    assert float(g) == 1.0


def test_a_triton_reduce_to_a_scalar_is_refused_not_an_error():
    """A Triton fusion whose output tile has no dimensions (a sum to a scalar) is
    refused with a reason (it raised IndexError)."""
    out = _xla_sum.triton_plan((224, 37), (0, 1), ((), 1, False), False)
    assert isinstance(out, str) and "tile []" in out
