"""Policies with state and keys (``with_policy(fn, policy, stateful=True)``,
``jaxmma.policy.init_state``): unmodified flax linen, flax nnx and equinox models train
under ``jax.jit`` with delayed scaling, MXFP8 and NVFP4 by a policy alone, and each step's
loss, gradients and new state are, on raw bits, those of the same model written by hand
with the recipe's ``dot_general(state, key=...)`` / ``matmul`` and the per-dot keys of the
documented rule (``jax.random.fold_in(key, index)``). The oracle is that hand-written
model, not the jaxpr evaluation under test."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _raw_bits import bits as _bits
from _raw_bits import same as _same
from flax import linen as nn
from flax import nnx

import jaxmma
from jaxmma import recipes
from jaxmma.policy import Rule, dots, gemm, init_state, with_policy

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
LINEAR = (((1,), (0,)), ((), ()))
HEAD = recipes.bf16()
LR = 0.05
RNG = np.random.default_rng(3838)
RECIPES = {
    "delayed_scaling": lambda: recipes.delayed_scaling(history=3),
    "mxfp8": recipes.mxfp8,
    "nvfp4": recipes.nvfp4,  # stochastic gradients and the Hadamard transform
}


def _f32(*shape):
    return jnp.asarray(RNG.standard_normal(shape).astype(np.float32))


def _differ(a, b):
    """Some leaf of ``a`` differs from ``b``'s: the check of ``_same`` could fail."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert any(not np.array_equal(_bits(x), _bits(y)) for x, y in zip(la, lb, strict=True))


def _policy(rec):
    """The head kept in bf16 by one rule; every other dot on ``rec``."""
    return [Rule(r".*head", HEAD), rec]


def _hand_dot_generals(rec, state, key):
    """The hand-written model's ``dot_general``s: dot 0 (hidden) on ``rec`` with its
    state entry and key ``fold_in(key, 0)``, dot 1 (head) on bf16 (it draws nothing)."""
    k0 = None if key is None else jax.random.fold_in(key, 0)
    return rec.dot_general(state.get("dot0"), key=k0), HEAD.dot_general()


# ----- the three models, each with its unmodified call and its hand-written twin -----


class LinenMLP(nn.Module):
    hidden_dg: object = None
    head_dg: object = None

    @nn.compact
    def __call__(self, x):
        kw = lambda dg: {} if dg is None else {"dot_general": dg}  # noqa: E731
        x = nn.relu(nn.Dense(32, name="hidden", **kw(self.hidden_dg))(x))
        return nn.Dense(8, name="head", **kw(self.head_dg))(x)


def _linen(x):
    params = LinenMLP().init(jax.random.key(0), x)

    def hand(params, x, rec, state, key):
        return LinenMLP(*_hand_dot_generals(rec, state, key)).apply(params, x)

    return params, LinenMLP().apply, hand


class NnxMLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(16, 32, rngs=rngs)
        self.head = nnx.Linear(32, 8, rngs=rngs)

    def __call__(self, x):
        return self.head(jax.nn.relu(self.hidden(x)))


def _nnx(x):
    def call(model, x):
        return model(x)

    def hand(model, x, rec, state, key):  # the same layers, their dot_general= set
        model.hidden.dot_general, model.head.dot_general = _hand_dot_generals(rec, state, key)
        return model(x)

    return NnxMLP(nnx.Rngs(0)), call, hand


def _equinox(x):
    eqx = pytest.importorskip("equinox")

    class EqxMLP(eqx.Module):
        hidden: eqx.nn.Linear
        head: eqx.nn.Linear

        def __call__(self, x):
            return self.head(jax.nn.relu(self.hidden(x)))

    k1, k2 = jax.random.split(jax.random.key(0))
    model = EqxMLP(eqx.nn.Linear(16, 32, key=k1), eqx.nn.Linear(32, 8, key=k2))

    def call(model, x):
        return jax.vmap(model)(x)

    def hand(model, x, rec, state, key):  # Linear is weight @ x: x @ weight^T by hand
        hidden, head = _hand_dot_generals(rec, state, key)
        h = jax.nn.relu(hidden(x, model.hidden.weight.T, LINEAR) + model.hidden.bias[None, :])
        return head(h, model.head.weight.T, LINEAR) + model.head.bias[None, :]

    return model, call, hand


MODELS = {"linen": _linen, "nnx": _nnx, "equinox": _equinox}


def _stepper(loss):
    """A jitted SGD step of ``loss(params, state, key)``: ``((loss, gradients, new state),
    new params)``, the new state being the state's cotangent."""

    @jax.jit
    def step(params, state, key):
        value, (g, new_state) = jax.value_and_grad(loss, argnums=(0, 1))(params, state, key)
        return (value, g, new_state), jax.tree.map(lambda p, d: p - LR * d, params, g)

    return step


def _steps(step, params, state, key, n):
    """``n`` steps from ``params`` and ``state``, step ``i`` with key ``fold_in(key, i)``:
    each step's (loss, gradients, new state)."""
    out = []
    for i in range(n):
        got, params = step(params, state, jax.random.fold_in(key, i))
        out.append(got)
        state = got[2]
    return out


@pytest.mark.full  # two compiles of a model's training step per case: 5 to 15 s each
@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("framework", sorted(MODELS))
def test_an_unmodified_model_trains_as_the_hand_written_model(framework, recipe):
    """Three jitted training steps: loss, every gradient and the new state of each step
    are the hand-written model's, bit for bit; the delayed-scaling histories fill."""
    rec = RECIPES[recipe]()
    x, y = _f32(4, 16) * 3.0, _f32(4, 8)
    params, plain, hand = MODELS[framework](x)
    policy = _policy(rec)
    assert [d.rule for d in dots(plain, policy)(params, x)] == ["rules[1]", "rules[0]"]
    apply = with_policy(plain, policy, stateful=True)
    state = init_state(plain, policy)(params, x)
    assert sorted(state) == (["dot0"] if recipe == "delayed_scaling" else [])

    def ours(params, state, key):
        return jnp.mean((apply(state, key, params, x) - y) ** 2)

    def mine(params, state, key):
        return jnp.mean((hand(params, x, rec, state, key) - y) ** 2)

    key, hand_step = jax.random.key(5), _stepper(mine)
    got = _steps(_stepper(ours), params, state, key, 3)
    _same(got, _steps(hand_step, params, state, key, 3))
    if recipe == "delayed_scaling":  # newest amax first: three steps fill three slots
        assert all(np.all(np.asarray(h) > 0) for h in jax.tree.leaves(got[-1][2]))
    if recipe == "nvfp4":  # the bits depend on the key: another step key, other gradients
        other = _steps(hand_step, params, state, jax.random.key(6), 1)[0]
        _differ(jax.tree.leaves(other[1]), jax.tree.leaves(got[0][1]))


@pytest.mark.full  # one fp8 training step, twice: about 4 s
def test_the_state_goes_through_a_checkpoint():
    """A dot under ``jax.checkpoint``: its state entry's cotangent is still the recipe's
    new state, the hand-written checkpointed call's."""
    rec = recipes.delayed_scaling(history=2)
    w, x = _f32(16, 8), _f32(4, 16)

    def f(w, x):
        return jax.checkpoint(lambda w: jnp.sin(x @ w))(w)

    apply = with_policy(f, rec, stateful=True)
    state = init_state(f, rec)(w, x)

    def hand(w, state, key):
        return jax.checkpoint(lambda w: jnp.sin(rec.matmul(x, w, state["dot0"])))(w)

    def loss(g):
        return lambda w, s, key: jnp.sum(g(w, s, key) ** 2)

    got = _stepper(loss(lambda w, s, k: apply(s, k, w, x)))(w, state, None)
    _same(got, _stepper(loss(hand))(w, state, None))
    assert np.all(np.asarray(got[0][2]["dot0"]["g"])[:1] > 0)


def test_init_state_has_one_entry_per_dot_keeping_state():
    """``"dot<i>"`` for each dot whose target keeps state, ``i`` its index among all the
    dots (as ``dots`` lists them), holding the recipe's initial amax histories."""
    w1, w2, w3, x = _f32(16, 16), _f32(16, 16), _f32(16, 8), _f32(4, 16)

    def f(w1, w2, w3, x):
        return jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3

    rec = recipes.delayed_scaling(history=5)
    policy = [Rule(None, "keep", where=lambda d: d.index == 1), rec]
    state = init_state(f, policy)(w1, w2, w3, x)
    assert sorted(state) == ["dot0", "dot2"]
    for entry in state.values():
        assert sorted(entry) == ["g", "w", "x"]
        for h in entry.values():
            assert h.shape == (5,) and h.dtype == jnp.float32
            np.testing.assert_array_equal(_bits(h), np.zeros(5, np.uint32))
    assert init_state(f, recipes.mxfp8())(w1, w2, w3, x) == {}


def test_each_dot_draws_from_the_step_key_folded_with_its_index():
    """Dot 1 on a GEMM with stochastic input rounding (dot 0 kept): it rounds with
    ``jax.random.fold_in(key, 1)``, its index among all the dots, as the hand-written
    ``jaxmma.dot_general(..., key=fold_in(key, 1))``; another step key, other bits."""
    w1, w2, x = _f32(16, 16), _f32(16, 8), _f32(4, 16)
    policy = [
        Rule(None, "keep", where=lambda d: d.index == 0),
        gemm(BF16, arch="sm_90", rounding="stochastic"),
    ]
    hand_dot = functools.partial(
        jaxmma.dot_general, instruction=BF16, arch="sm_90", rounding="stochastic"
    )

    def f(w1, w2, x):
        return jnp.tanh(x @ w1) @ w2

    def hand(key, w1, w2, x):
        return hand_dot(jnp.tanh(x @ w1), w2, LINEAR, key=jax.random.fold_in(key, 1))

    ours = with_policy(f, policy, stateful=True)

    @jax.jit  # one compile for the three
    def three(key, other):
        return ours(None, key, w1, w2, x), hand(key, w1, w2, x), ours(None, other, w1, w2, x)

    got, want, other = three(jax.random.key(11), jax.random.key(12))
    _same(got, want)
    _differ(got, other)


def _mm(w, x):
    return x @ w


def _scan(w, xs):
    return jax.lax.scan(lambda c, x: (jnp.tanh(x @ w), None), xs[0], xs)[0]


def _cond(w, x):
    return jax.lax.cond(jnp.sum(x) > 0, lambda: x @ w, lambda: x[:, :8])


DELAYED = recipes.delayed_scaling(history=2)
KEY = jax.random.key(0)
W, X = jnp.ones((16, 8)), jnp.ones((4, 16))


def _delayed_state():
    return {"dot0": DELAYED.init()}


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (  # state without stateful=True
            lambda: with_policy(_mm, DELAYED)(W, X),
            ValueError,
            r"rule 'rules\[0\]' on dot 0 .* keeps state .*stateful=True.*init_state",
        ),
        (
            lambda: with_policy(_mm, DELAYED, stateful=True)({}, None, W, X),
            ValueError,
            r"rule 'rules\[0\]' on dot 0 .* state has no entry 'dot0'",
        ),
        (
            lambda: with_policy(_mm, DELAYED, stateful=True)(
                {**_delayed_state(), "dot7": DELAYED.init()}, None, W, X
            ),
            ValueError,
            r"state: entries \['dot7'\] name no dot .* \['dot0'\]",
        ),
        (  # the recipe's own check of its entry, with rule and dot
            lambda: with_policy(_mm, DELAYED, stateful=True)(
                {"dot0": {"x": jnp.zeros(2)}}, None, W, X
            ),
            ValueError,
            r"rule 'rules\[0\]' on dot 0 .*: state: expected recipe.init\(\)'s dict",
        ),
        (
            lambda: with_policy(_mm, DELAYED, stateful=True)([1], None, W, X),
            TypeError,
            r"state: expected None or the dict of jaxmma.policy.init_state",
        ),
        (
            lambda: with_policy(_mm, recipes.nvfp4(), stateful=True)(None, 3, W, X),
            TypeError,
            r"key: expected None or one jax.random key",
        ),
        (  # a GEMM that draws in its forward needs a key even to evaluate
            lambda: with_policy(_mm, gemm(BF16, arch="sm_90", rounding="stochastic"))(W, X),
            ValueError,
            r"on dot 0 .* rounds its inputs stochastically .* forward needs a key",
        ),
        (  # a recipe that draws in its backward: the gradient, naming rule and dot
            lambda: jax.grad(lambda w: jnp.sum(with_policy(_mm, recipes.nvfp4())(w, X)))(W),
            ValueError,
            r"rule 'rules\[0\]' on dot 0 .* Hadamard .* gradient needs a jax.random key",
        ),
        (
            lambda: with_policy(_scan, DELAYED, stateful=True)(
                _delayed_state(), None, jnp.ones((16, 16)), jnp.ones((3, 4, 16))
            ),
            ValueError,
            r"keeps state .* inside 'scan'",
        ),
        (
            lambda: with_policy(_cond, DELAYED, stateful=True)(_delayed_state(), None, W, X),
            ValueError,
            r"keeps state .* inside 'cond'",
        ),
        (
            lambda: with_policy(_scan, recipes.nvfp4(), stateful=True)(
                None, KEY, jnp.ones((16, 16)), jnp.ones((3, 4, 16))
            ),
            ValueError,
            r"inside 'scan', whose body runs more than once",
        ),
        (
            lambda: with_policy(_mm, DELAYED, stateful="yes"),
            TypeError,
            r"stateful: expected True or False",
        ),
    ],
    ids=[
        "state-not-stateful",
        "entry-missing",
        "entry-extra",
        "entry-malformed",
        "state-not-dict",
        "key-not-key",
        "forward-draws-no-key",
        "backward-draws-no-key",
        "state-in-scan",
        "state-in-cond",
        "key-in-scan",
        "stateful-not-bool",
    ],  # fmt: skip
)
@pytest.mark.every_case  # traced (jax.eval_shape), never run: each case is cheap
def test_what_a_dot_needs_and_lacks_is_refused_naming_it(call, error, match):
    with pytest.raises(error, match=match):
        jax.eval_shape(call)


@pytest.mark.full  # the NVFP4 forward compiled three times: about 2 s
def test_without_a_key_a_recipe_runs_its_forward():
    """Inference: with no key the NVFP4 recipe's forward is ``rec.matmul(x, w)``'s, under
    ``with_policy(fn, policy)`` and ``stateful=True`` with ``key=None`` alike."""
    rec, w, x = recipes.nvfp4(), _f32(16, 8), _f32(4, 16) * 5.0

    @jax.jit  # one compile for the three
    def three(w, x):
        plain = with_policy(_mm, rec)(w, x)
        return plain, with_policy(_mm, rec, stateful=True)(None, None, w, x), rec.matmul(x, w)

    plain, stateful, want = three(w, x)
    _same(plain, want)
    _same(stateful, want)
    _differ(want, x @ w)
