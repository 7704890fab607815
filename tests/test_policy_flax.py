"""The flax forms of a stateful policy (``jaxmma.policy.LinenModel``: the state in a
variable collection, the key from an rng stream; ``jaxmma.policy.NnxModel``: the state
in an ``NnxState`` Variable, the key from ``nnx.Rngs``): two training steps of an
unmodified linen and nnx model under delayed scaling, MXFP8 and NVFP4 (head kept in
bf16 by one rule) give, on raw bits, the losses, gradients and new states of the
functional form ``with_policy(..., stateful=True)`` with the same keys, which
tests/test_policy_state.py checks against the hand-written recipe models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _raw_bits import same as _same
from flax import linen as nn
from flax import nnx

from jaxmma import recipes
from jaxmma.policy import LinenModel, NnxModel, NnxState, Rule, init_state, with_policy

LR = 0.05
RNG = np.random.default_rng(3840)
RECIPES = {
    "delayed_scaling": lambda: recipes.delayed_scaling(history=3),
    "mxfp8": recipes.mxfp8,
    "nvfp4": recipes.nvfp4,  # stochastic gradients and the Hadamard transform
}
X = jnp.asarray(RNG.standard_normal((4, 16)).astype(np.float32) * 3)
Y = jnp.asarray(RNG.standard_normal((4, 8)).astype(np.float32))


def _policy(rec):
    return [Rule(r".*head", recipes.bf16()), rec]


def _mse(out):
    return jnp.mean((out - Y) ** 2)


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(8, name="head")(nn.relu(nn.Dense(32, name="hidden")(x)))


class NnxMLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(16, 32, rngs=rngs)
        self.head = nnx.Linear(32, 8, rngs=rngs)

    def __call__(self, x):
        return self.head(jax.nn.relu(self.hidden(x)))


def _functional_steps(apply, params, state, keys):
    """The functional form's steps: ``[(loss, gradients, new state)]`` per key."""

    @jax.jit
    def step(params, state, key):
        def loss(params, state):
            return _mse(apply(state, key, params, X))

        value, (g, new) = jax.value_and_grad(loss, argnums=(0, 1))(params, state)
        return (value, g, new), jax.tree.map(lambda p, d: p - LR * d, params, g)

    out = []
    for key in keys:
        got, params = step(params, state, key)
        out.append(got)
        state = got[2]
    return out


def _linen_steps(rec, n):
    lm = LinenModel(LinenMLP(), _policy(rec))
    variables = lm.init(jax.random.key(0), X)

    @jax.jit
    def step(variables, key):
        def loss(variables):
            return _mse(lm.apply(variables, X, rngs={"jaxmma": key}))

        value, g = jax.value_and_grad(loss)(variables)
        params = jax.tree.map(lambda p, d: p - LR * d, variables["params"], g["params"])
        return (value, {"params": g["params"]}, g["jaxmma"]), {
            "params": params,
            "jaxmma": g["jaxmma"],
        }

    keys = [jax.random.fold_in(jax.random.key(5), i) for i in range(n)]
    ours = []
    v = variables
    for key in keys:
        got, v = step(v, key)
        ours.append(got)
    params = {"params": variables["params"]}
    apply = with_policy(LinenMLP().apply, _policy(rec), stateful=True)
    state = init_state(LinenMLP().apply, _policy(rec))(params, X)
    _same(state, variables["jaxmma"])
    return ours, _functional_steps(apply, params, state, keys)


def _nnx_steps(rec, n):
    model = nnx.merge(*nnx.split(NnxMLP(nnx.Rngs(0))))  # a copy: the functional form's below
    nm = NnxModel(NnxMLP(nnx.Rngs(0)), _policy(rec), X, rngs=nnx.Rngs(jaxmma=7))
    wrt = nnx.DiffState(0, nnx.Any(nnx.Param, NnxState))

    @nnx.jit
    def step(nm):
        value, g = nnx.value_and_grad(lambda m: _mse(m(X)), argnums=wrt)(nm)
        new = nnx.filter_state(g, NnxState)
        grads = nnx.filter_state(g, nnx.Param)
        params = nnx.state(nm, nnx.Param)
        nnx.update(nm, jax.tree.map(lambda p, d: p - LR * d, params, grads))
        nnx.update(nm, new)
        return value, grads["model"], new["policy_state"].get_value()

    ours = [step(nm) for _ in range(n)]
    rngs = nnx.Rngs(jaxmma=7)  # the same stream: the same key at each step
    keys = [rngs["jaxmma"]() for _ in range(n)]

    def call(model, x):
        return model(x)

    apply = with_policy(call, _policy(rec), stateful=True)
    state = init_state(call, _policy(rec))(model, X)
    theirs = _functional_steps(apply, model, state, keys)
    theirs = [(v, nnx.state(g, nnx.Param), s) for v, g, s in theirs]
    return ours, theirs


@pytest.mark.full  # two compiles of a model's training step per case: 5 to 15 s each
@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("framework", ["linen", "nnx"])
def test_the_flax_forms_train_as_the_functional_form(framework, recipe):
    """Two steps: loss, every gradient and the new state of each are the functional
    form's, bit for bit; the delayed-scaling histories fill."""
    rec = RECIPES[recipe]()
    ours, theirs = (_linen_steps if framework == "linen" else _nnx_steps)(rec, 2)
    _same(ours, theirs)
    new_state = ours[-1][2]
    assert sorted(new_state) == (["dot0"] if recipe == "delayed_scaling" else [])
    if recipe == "delayed_scaling":
        assert all(np.all(np.asarray(h)[:2] > 0) for h in jax.tree.leaves(new_state))


def test_linen_init_adds_the_collection():
    rec = recipes.delayed_scaling(history=2)
    variables = LinenModel(LinenMLP(), _policy(rec)).init(jax.random.key(0), X)
    assert sorted(variables) == ["jaxmma", "params"]
    _same(variables["params"], LinenMLP().init(jax.random.key(0), X)["params"])
    _same(variables["jaxmma"], {"dot0": rec.init()})


@pytest.mark.full  # an fp8 forward compiled twice: about 3.5 s
def test_linen_apply_reads_the_collection():
    """``apply`` without the stream's key (another stream given) is the functional form
    with key None (inference), bit for bit, the state read from the collection."""
    rec = recipes.delayed_scaling(history=2)
    lm = LinenModel(LinenMLP(), _policy(rec))
    variables = lm.init(jax.random.key(0), X)
    state = {"dot0": jax.tree.map(lambda h: h + 3.0, variables["jaxmma"]["dot0"])}
    apply = with_policy(LinenMLP().apply, _policy(rec), stateful=True)

    @jax.jit
    def both(params, state):
        ours = lm.apply({"params": params, "jaxmma": state}, X, rngs={"dropout": jax.random.key(1)})
        return ours, apply(state, None, {"params": params}, X)

    ours, theirs = both(variables["params"], state)
    _same(ours, theirs)


def test_nnx_model_draws_from_its_stream_writes_back_and_eval_takes_no_key():
    """A call draws the next key of ``rngs[stream]`` (the count advances); what the model
    mutates is written back; after ``.eval()`` no key is drawn."""

    class Counting(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(16, 8, rngs=rngs)
            self.calls = nnx.Variable(jnp.array(0))

        def __call__(self, x):
            self.calls[...] += 1
            return self.hidden(x)

    nm = NnxModel(Counting(nnx.Rngs(0)), recipes.bf16(), X, rngs=nnx.Rngs(jaxmma=3))
    assert nm.policy_state.get_value() == {}
    plain = nm.model.hidden(X)
    nm(X)
    nm(X)
    assert int(nm.model.calls[...]) == 2 and int(nm.rngs["jaxmma"].count[...]) == 2
    nm.eval()
    y = nm(X)
    assert int(nm.rngs["jaxmma"].count[...]) == 2 and int(nm.model.calls[...]) == 3
    assert y.shape == plain.shape


@pytest.mark.every_case  # refused before anything runs: each case is cheap
@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: LinenModel(LinenMLP(), recipes.bf16(), collection=3), TypeError, "collection"),
        (lambda: LinenModel(object(), recipes.bf16()), TypeError, "model: expected a flax linen"),
        (lambda: LinenModel(LinenMLP(), recipes.bf16(), unused="x"), ValueError, "unused"),
        (
            lambda: LinenModel(LinenMLP(), recipes.bf16()).apply(
                {"params": {}}, X, mutable=["jaxmma"]
            ),
            ValueError,
            r"mutable: the policy's collection 'jaxmma' is not mutated .* gradient",
        ),
        (
            lambda: LinenModel(LinenMLP(), recipes.bf16()).apply({}, X, rngs=jax.random.key(0)),
            TypeError,
            r"rngs: expected None or a dict of rng streams",
        ),
        (
            lambda: NnxModel(NnxMLP(nnx.Rngs(0)), recipes.bf16(), X, rngs=jax.random.key(0)),
            TypeError,
            r"rngs: expected None or an nnx.Rngs",
        ),
        (lambda: NnxModel(NnxMLP(nnx.Rngs(0)), recipes.bf16(), X, stream=1), TypeError, "stream"),
    ],
    ids=["collection", "model", "unused", "mutable", "rngs-linen", "rngs-nnx", "stream"],
)
def test_bad_arguments_are_refused_naming_them(call, error, match):
    with pytest.raises(error, match=match):
        call()
