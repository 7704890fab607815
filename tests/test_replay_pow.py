"""f32 ``x**y`` for ``y < 0`` through gpu_replay. jax lowers it to the products of
``x**-y`` and a divide of 1 by them; XLA:GPU computes f32 division with
``div.full.f32`` (jaxmma.arith.GPU_FUNCTIONS, measured against the GPU in
tests/test_gpu_math.py). The oracle here: the products in NumPy's IEEE float32
(subnormals kept), then that division model on their bits. The module text is a
captured one whose division runs in XLA's MLIR emitters (the ``probe-div-f32`` case of
tests/golden/xla/xla-models-1.npz)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma import arith

HERE = os.path.dirname(__file__)
MODELS = os.path.join(HERE, "golden", "xla", "xla-models-1.npz")
DIV = arith.GPU_FUNCTIONS["div"][1]


def _module(name: str) -> str:
    with np.load(MODELS) as z:
        for k in (n for n in z.files if n.endswith(".meta")):
            meta = json.loads(str(z[k][()]))
            if meta.get("name") == name and "error" not in meta:
                return meta["hlo"]
    raise AssertionError(name)


def _inputs(rng, n=4096):
    """``n`` values (the probe module's shape): raw bit patterns of every kind, values
    near 1, tiny ones (subnormal and underflowing powers), huge ones (overflowing
    powers), zeros of both signs, Inf."""
    q = (n - 8) // 4
    raw = rng.integers(0, 2**32, q, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = rng.uniform(0.5, 2.0, q).astype(np.float32)
    tiny = (rng.uniform(0.5, 1.0, q) * 2.0 ** rng.integers(-75, -40, q)).astype(np.float32)
    huge = (rng.uniform(0.5, 1.0, q) * 2.0 ** rng.integers(40, 70, q)).astype(np.float32)
    edge = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.0, -1.0], np.float32)
    x = np.concatenate([raw, near, tiny, huge, edge])
    x = np.where(rng.random(x.size) < 0.5, x, -x).astype(np.float32)
    assert x.size == n
    return x


def _oracle(x, y):
    """The products of jax's lowering of ``x**-y`` (square-and-multiply) in float32,
    then ``div.full(1, acc)``."""
    acc, p, n = None, x.copy(), -y
    with np.errstate(all="ignore"):
        while n > 0:
            if n & 1:
                acc = p if acc is None else (acc * p).astype(np.float32)
            n >>= 1
            if n > 0:
                p = (p * p).astype(np.float32)
    one = np.full(acc.shape, 0x3F800000, np.uint32)
    return np.asarray(DIV(one, acc.view(np.uint32)), np.uint32)


def _same(got, want):
    got, want = np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32)
    nan = np.isnan(got.view(np.float32)) & np.isnan(want.view(np.float32))
    return (got == want) | nan


@pytest.mark.parametrize("y", [-1, -2, -3])
def test_a_reciprocal_power_is_the_gpus_division_of_one_by_the_products(y):
    x = _inputs(np.random.default_rng(7 - y))
    args = (jnp.asarray(x), jnp.zeros(x.shape, jnp.float32))  # the module's two f32[4096]
    f = lambda v, _: v**y  # noqa: E731
    got = jax.jit(jaxmma.gpu_replay(f, _module("probe-div-f32")))(*args)
    want = _oracle(x, y)
    assert _same(got, want).all(), int((~_same(got, want)).sum())
    # the CPU's own power differs (correctly rounded division, subnormals flushed): the
    # replay did not fall back on it
    cpu = np.asarray(jax.jit(f)(*args))
    assert (~_same(cpu, want)).sum() > 10
    with jax.enable_x64(True):
        on = jax.jit(jaxmma.gpu_replay(f, _module("probe-div-f32")))(*args)
    assert _same(on, got).all()


def test_a_reciprocal_power_keeps_the_primitives_derivative():
    x = jnp.asarray(np.linspace(0.5, 3.0, 4096, dtype=np.float32))
    z = jnp.zeros(x.shape, jnp.float32)
    f = lambda v, _: v**-2  # noqa: E731
    loss = lambda v: jnp.sum(jaxmma.gpu_replay(f, _module("probe-div-f32"))(v, z))  # noqa: E731
    got = jax.grad(loss)(x)
    want = jax.grad(lambda v: jnp.sum(f(v, z)))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert np.all(np.asarray(got) != 0)


def test_a_reciprocal_power_is_refused_where_divisions_are_not_established():
    """bf16 (no bf16 division is measured), and an f32 one with a module whose MLIR
    emitters show no divide (an exp probe's): refused up front, with the reason."""
    x = jnp.asarray(np.linspace(0.5, 3.0, 4096, dtype=np.float32))
    z = jnp.zeros(x.shape, jnp.float32)

    def bf16(v, _):
        return (v.astype(jnp.bfloat16) ** -2).astype(jnp.float32)

    got = jaxmma.gpu_replay(bf16, _module("probe-div-f32"), unverified="omit")(x, z)
    assert isinstance(got, jaxmma.Unverified)
    assert any("bf16 / f16 division" in r for r in got.reasons), got.reasons
    f = lambda v: v**-2  # noqa: E731
    got = jaxmma.gpu_replay(f, _module("probe-exp-f32"), unverified="omit")(x)
    assert isinstance(got, jaxmma.Unverified)
    assert any("x**-2 is 1 / x**2" in r for r in got.reasons), got.reasons
    with pytest.raises(ValueError, match="not established"):
        jaxmma.gpu_replay(f, _module("probe-exp-f32"))(x)
