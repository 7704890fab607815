"""flax and optax around jaxmma: ``nn.Dense(dot_general=...)`` with a recipe's
contraction, trained under ``jax.jit`` with an optax optimizer. The references are
hand-written recipe GEMMs on the layer's own parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from jaxmma import recipes

RNG = np.random.default_rng(77)


def _f32(*shape, scale=1.0):
    return jnp.asarray((RNG.standard_normal(shape) * scale).astype(np.float32))


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


class MLP(nn.Module):
    dot_general: object

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(32, dot_general=self.dot_general)(x))
        return nn.Dense(8, dot_general=self.dot_general)(x)


def test_dense_layers_are_the_hand_written_gemms():
    """Both layers of the model with a recipe's contraction: the output is the recipe's
    GEMMs on the layer's parameters, bit for bit (batch dimensions of x included). A plain
    instruction's ``jaxmma.dot_general`` in a dense layer: tests/test_gemm_api.py."""
    x = _f32(2, 16, 64, scale=30.0)  # wide values: unscaled e4m3 would saturate
    rec = recipes.current_scaling()
    model = MLP(rec.dot_general())
    params = jax.jit(model.init)(jax.random.key(0), x)["params"]  # one program, not op by op
    got = jax.jit(model.apply)({"params": params}, x)

    @jax.jit
    def hand(p):
        d0, d1 = p["Dense_0"], p["Dense_1"]
        first = rec.matmul(x.reshape(32, 64), d0["kernel"])
        h = jax.nn.relu(first + d0["bias"][None, :])
        return (rec.matmul(h, d1["kernel"]) + d1["bias"][None, :]).reshape(2, 16, 8), first

    want, first = hand(params)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # the recipe's GEMM differs from the exact product: the check above could fail
    exact = jnp.matmul(x.reshape(32, 64), params["Dense_0"]["kernel"], precision="highest")
    assert not np.array_equal(_bits(first), _bits(exact))


@pytest.mark.full  # 30 s of compilation; the forward test above runs in the quick run
def test_an_optax_training_step_under_jit():
    """adam on the fp8 recipe model: the gradients are those of the hand-written GEMMs
    (straight through, the backward on the recipe's e5m2 forms), and the loss falls."""
    x, t = _f32(64, 32), _f32(64, 8, scale=0.5)
    rec = recipes.current_scaling()
    model = MLP(rec.dot_general())
    params = model.init(jax.random.key(1), x)["params"]
    opt = optax.adam(3e-2)

    def loss(p):
        return jnp.mean((model.apply({"params": p}, x) - t) ** 2)

    @jax.jit
    def step(p, s):
        value, g = jax.value_and_grad(loss)(p)
        with jax.numpy_dtype_promotion("standard"):  # optax's own arithmetic is not strict
            updates, s = opt.update(g, s, p)
        return optax.apply_updates(p, updates), s, value, g

    def hand(p):
        d0, d1 = p["Dense_0"], p["Dense_1"]
        h = jax.nn.relu(rec.matmul(x, d0["kernel"]) + d0["bias"][None, :])
        return jnp.mean((rec.matmul(h, d1["kernel"]) + d1["bias"][None, :] - t) ** 2)

    want = jax.jit(jax.grad(hand))(params)
    state = opt.init(params)
    losses = []
    for i in range(8):
        params_before = params
        params, state, value, g = step(params, state)
        if i == 0:
            for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(want), strict=True):
                np.testing.assert_array_equal(_bits(a), _bits(b))
        losses.append(float(value))
    assert losses[-1] < 0.8 * losses[0], losses
    assert not np.array_equal(
        _bits(params["Dense_0"]["kernel"]), _bits(params_before["Dense_0"]["kernel"])
    )
