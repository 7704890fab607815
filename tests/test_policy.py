"""Policies (``jaxmma.with_policy``, ``jaxmma.policy``, ``jaxmma.presets``): an unmodified
model under a policy gives the bits, forward and gradients, of the same model written by
hand with ``dot_general=partial(jaxmma.dot_general, ...)`` or a recipe's ``dot_general``.
The oracle is that hand-written path (the layers' own ``dot_general=`` argument), not the
jaxpr evaluation under test. Every comparison is on raw bits."""

import contextlib
import doctest
import functools
import io
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _raw_bits import bits as _bits
from _raw_bits import same as _same
from flax import linen as nn
from flax import nnx

import jaxmma
from jaxmma import presets, recipes
from jaxmma.intercept import _evaluate, _linen, _rules, _targets
from jaxmma.policy import Rule, dots, gemm

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
HAND = functools.partial(jaxmma.dot_general, instruction=BF16, arch="sm_90")
#: the policy: the hidden layer on bf16 mma.sync, the head kept as written by one rule
POLICY = [Rule(r".*head", "keep"), gemm(BF16, arch="sm_90")]
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "policy.md"
RNG = np.random.default_rng(38)


def _f32(*shape):
    return jnp.asarray(RNG.standard_normal(shape).astype(np.float32))


def _differ(a, b):
    assert not np.array_equal(_bits(a), _bits(b)), "the check above could not fail"


class LinenMLP(nn.Module):
    dot_general: object = None

    @nn.compact
    def __call__(self, x):
        kw = {} if self.dot_general is None else {"dot_general": self.dot_general}
        x = nn.relu(nn.Dense(32, name="hidden", **kw)(x))
        return nn.Dense(8, name="head")(x)


class NnxMLP(nnx.Module):
    def __init__(self, rngs, dot_general=jax.lax.dot_general):
        self.hidden = nnx.Linear(16, 32, dot_general=dot_general, rngs=rngs)
        self.head = nnx.Linear(32, 8, rngs=rngs)

    def __call__(self, x):
        return self.head(jax.nn.relu(self.hidden(x)))


def _loss(apply):
    return lambda params, x: jnp.sum(apply(params, x) ** 2)


def test_linen_model_is_the_hand_written_model():
    """An unmodified linen model under the policy: output and parameter gradients are
    those of the model whose hidden Dense has ``dot_general=partial(jaxmma.dot_general,
    ...)``; the head, kept by one rule, is the plain model's."""
    x = _f32(4, 16)
    variables = LinenMLP().init(jax.random.key(0), x)
    plain, hand = LinenMLP().apply, LinenMLP(HAND).apply
    ours = jaxmma.with_policy(plain, POLICY)
    _same(jax.jit(ours)(variables, x), jax.jit(hand)(variables, x))
    g_ours = jax.jit(jax.grad(_loss(ours)))(variables, x)
    _same(g_ours, jax.jit(jax.grad(_loss(hand)))(variables, x))
    g_plain = jax.jit(jax.grad(_loss(plain)))(variables, x)
    _differ(g_ours["params"]["hidden"]["kernel"], g_plain["params"]["hidden"]["kernel"])
    seen = dots(plain, POLICY)(variables, x)
    assert [(d.scope, d.rhs_path, d.rule) for d in seen] == [
        ("LinenMLP/hidden", "params/hidden/kernel", "rules[1]"),
        ("LinenMLP/head", "params/head/kernel", "rules[0]"),
    ]


def test_nnx_model_is_the_hand_written_model():
    """nnx records no module path: its dots are named by the model's pytree path (the
    model passed as an argument), and the same policy picks the same layers."""
    x = _f32(4, 16)
    model, hand = NnxMLP(nnx.Rngs(0)), NnxMLP(nnx.Rngs(0), dot_general=HAND)

    def call(m, x):
        return m(x)

    ours = jaxmma.with_policy(call, POLICY)
    _same(jax.jit(ours)(model, x), jax.jit(call)(hand, x))
    _same(jax.jit(jax.grad(_loss(ours)))(model, x), jax.jit(jax.grad(_loss(call)))(hand, x))
    _differ(jax.jit(ours)(model, x), jax.jit(call)(model, x))
    names = [(d.scope, d.rhs_path, d.rule) for d in dots(call, POLICY)(model, x)]
    assert names == [
        ("", "hidden/kernel/value", "rules[1]"),
        ("", "head/kernel/value", "rules[0]"),
    ]


def test_equinox_model_is_the_hand_written_model():
    """equinox's Linear computes ``weight @ x`` (no ``dot_general=`` to hand in): the
    oracle is that product written with ``jaxmma.dot_general`` on the model's weights."""
    eqx = pytest.importorskip("equinox")
    x = _f32(4, 16)
    k1, k2 = jax.random.split(jax.random.key(0))
    model = eqx.nn.Sequential(
        [eqx.nn.Linear(16, 32, key=k1), eqx.nn.Lambda(jax.nn.relu), eqx.nn.Linear(32, 8, key=k2)]
    )
    # equinox records each module's class as its scope ("eqx.nn.Sequential/eqx.nn.Linear"
    # for both layers here): the operand paths tell the layers apart. Both layers are
    # emulated: an f32 dot kept as written is XLA's, whose summation order may differ
    # between two programs that lay its operands out differently.
    policy = [Rule(r"layers/2", gemm(F16, arch="sm_90")), gemm(BF16, arch="sm_90")]
    f16 = functools.partial(jaxmma.dot_general, instruction=F16, arch="sm_90")
    dn = (((1,), (1,)), ((), ()))  # weight [out, in] with x [batch, in]: W @ x^T

    def call(m, x):
        return jax.vmap(m)(x)

    def hand(m, x):  # the vmapped Linear is one GEMM, weight @ x^T (+ bias), by hand
        first, last = m.layers[0], m.layers[2]
        h = jax.nn.relu(HAND(first.weight, x, dn).T + first.bias[None, :])
        return f16(last.weight, h, dn).T + last.bias[None, :]

    ours = jaxmma.with_policy(call, policy)
    _same(eqx.filter_jit(ours)(model, x), eqx.filter_jit(hand)(model, x))
    g = eqx.filter_grad(lambda m: jnp.sum(ours(m, x) ** 2))(model)
    want = eqx.filter_grad(lambda m: jnp.sum(hand(m, x) ** 2))(model)
    _same(eqx.filter(g, eqx.is_array), eqx.filter(want, eqx.is_array))
    seen = [(d.lhs_path, d.rule) for d in dots(call, policy)(model, x)]
    assert seen == [("layers/0/weight", "rules[1]"), ("layers/2/weight", "rules[0]")]


def test_vmap_of_the_policy_is_vmap_of_the_hand_written_function():
    w1, w2, x = _f32(16, 32), _f32(32, 8), _f32(3, 4, 16)

    def f(w1, w2, x):
        return jnp.tanh(x @ w1) @ w2

    def hand(w1, w2, x):
        h = jnp.tanh(HAND(x, w1, (((1,), (0,)), ((), ()))))
        return HAND(h, w2, (((1,), (0,)), ((), ())))

    ours = jax.vmap(jaxmma.with_policy(f, gemm(BF16, arch="sm_90")), in_axes=(None, None, 0))
    _same(jax.jit(ours)(w1, w2, x), jax.jit(jax.vmap(hand, in_axes=(None, None, 0)))(w1, w2, x))


def test_a_recipe_rule_runs_the_recipes_backward_gemms():
    """A recipe target: the layer's forward and gradients are those of
    ``nn.Dense(dot_general=recipe.dot_general())``. The bf16 recipe's dgrad and wgrad are
    emulated GEMMs, so its gradients differ from the straight-through gradients a plain
    ``gemm`` target on the same instruction gives."""
    x = _f32(4, 16)
    rec = recipes.bf16()
    variables = LinenMLP().init(jax.random.key(1), x)
    ours = jaxmma.with_policy(LinenMLP().apply, [Rule(r".*hidden", rec)], unused="error")
    hand = LinenMLP(rec.dot_general()).apply
    g_ours = jax.jit(jax.grad(_loss(ours)))(variables, x)
    _same(g_ours, jax.jit(jax.grad(_loss(hand)))(variables, x))
    ste = jaxmma.with_policy(LinenMLP().apply, [Rule(r".*hidden", gemm(BF16, arch="sm_90"))])
    g_ste = jax.jit(jax.grad(_loss(ste)))(variables, x)
    _differ(g_ours["params"]["hidden"]["kernel"], g_ste["params"]["hidden"]["kernel"])


@pytest.mark.full  # fp8 recipe compiles: about 5 s
def test_an_fp8_recipe_rule_is_the_hand_written_recipe():
    x = _f32(2, 8, 64) * 30.0
    rec = recipes.current_scaling()
    variables = LinenMLP().init(jax.random.key(2), x)
    ours = jaxmma.with_policy(LinenMLP().apply, [Rule(r".*head", "keep"), rec])
    hand = LinenMLP(rec.dot_general()).apply
    _same(jax.jit(ours)(variables, x), jax.jit(hand)(variables, x))
    _same(
        jax.jit(jax.grad(_loss(ours)))(variables, x), jax.jit(jax.grad(_loss(hand)))(variables, x)
    )


def test_control_flow_and_checkpoint_are_evaluated_with_the_policy():
    """Dots inside scan, cond, while_loop and checkpoint: the same control flow written
    with ``jaxmma.dot_general`` by hand gives the same bits, values and gradients."""
    w, xs = _f32(16, 16) * 0.3, _f32(5, 3, 16)
    dn = (((1,), (0,)), ((), ()))

    def make(dot):
        def f(w, xs):
            def body(c, x):
                c = jax.lax.cond(jnp.sum(x) > 0, lambda: jnp.tanh(dot(c, w)), lambda: c)
                return c, jnp.sum(c)

            c, ys = jax.lax.scan(body, xs[0], xs)
            c = jax.checkpoint(lambda c: jnp.sin(dot(c, w)))(c)
            c = jax.lax.while_loop(
                lambda s: s[0] < 2, lambda s: (s[0] + 1, jnp.tanh(dot(s[1], w))), (0, c)
            )[1]
            return jnp.sum(c) + jnp.sum(ys)

        return f

    plain = make(lambda a, b: jax.lax.dot_general(a, b, dn))
    hand = make(lambda a, b: HAND(a, b, dn))
    ours = jaxmma.with_policy(plain, gemm(BF16, arch="sm_90"))
    _same(jax.jit(ours)(w, xs), jax.jit(hand)(w, xs))
    _differ(jax.jit(ours)(w, xs), jax.jit(plain)(w, xs))
    assert len(dots(plain)(w, xs)) == 3  # scan's cond, checkpoint, while


@pytest.mark.full  # the gradient of a scan around a checkpoint: about 3 s of compiles
def test_gradients_through_scan_and_checkpoint_are_the_hand_written_ones():
    w, xs = _f32(16, 16) * 0.3, _f32(5, 3, 16)
    dn = (((1,), (0,)), ((), ()))

    def scanned(dot):  # reverse mode (while_loop has none): scan around a checkpoint
        def f(w, xs):
            step = jax.checkpoint(lambda c: jnp.tanh(dot(c, w)))
            return jnp.sum(jax.lax.scan(lambda c, x: (step(c + x), jnp.sum(c)), xs[0], xs)[1])

        return f

    ours = jaxmma.with_policy(scanned(lambda a, b: jax.lax.dot_general(a, b, dn)), POLICY[1])
    want = jax.jit(jax.grad(scanned(lambda a, b: HAND(a, b, dn))))(w, xs)
    _same(jax.jit(jax.grad(ours))(w, xs), want)


def test_einsum_and_batched_dots_are_matched():
    """einsum lowers to dot_general: an attention score ``bqd,bkd->bqk`` (a batch
    dimension) runs on the GEMM target as ``jaxmma.dot_general`` with its dimension
    numbers; a rule can pick it by shape."""
    q, k = _f32(2, 5, 16), _f32(2, 7, 16)
    policy = [Rule(None, gemm(BF16, arch="sm_90"), lhs_shape=(None, 5, 16))]
    ours = jaxmma.with_policy(lambda q, k: jnp.einsum("bqd,bkd->bqk", q, k), policy)
    _same(jax.jit(ours)(q, k), jax.jit(lambda q, k: HAND(q, k, (((2,), (2,)), ((0,), (0,)))))(q, k))


def test_a_dot_rounds_once_to_its_own_output_dtype():
    """A bf16 model's dot gives bf16: the GEMM's f32 result is rounded once, as the
    hand-written call with ``preferred_element_type=jnp.bfloat16``."""
    a, b = _f32(4, 32).astype(jnp.bfloat16), _f32(32, 8).astype(jnp.bfloat16)
    ours = jax.jit(jaxmma.with_policy(jnp.matmul, gemm(BF16, arch="sm_90")))(a, b)
    assert ours.dtype == jnp.bfloat16
    dn = (((1,), (0,)), ((), ()))
    _same(ours, jax.jit(lambda a, b: HAND(a, b, dn, preferred_element_type=jnp.bfloat16))(a, b))


def test_first_rule_wins_and_rules_match_dtypes_shapes_and_predicates():
    w1, w2, x = _f32(16, 32), _f32(32, 8).astype(jnp.bfloat16), _f32(4, 16)

    def f(w1, w2, x):
        return jnp.tanh(x @ w1).astype(jnp.bfloat16) @ w2

    policy = [
        Rule(None, "keep", rhs_dtype=jnp.bfloat16, name="bf16 kept"),
        Rule(None, gemm(BF16, arch="sm_90"), rhs_shape=(16, None), name="first"),
        Rule(None, gemm(E4M3, arch="sm_90"), name="never"),
        Rule(None, "keep", where=lambda d: d.index == 0, name="shadowed"),
    ]
    assert [d.rule for d in dots(f, policy)(w1, w2, x)] == ["first", "bf16 kept"]
    with pytest.raises(ValueError, match=r"rules \['never', 'shadowed'\] matched no dot"):
        jaxmma.with_policy(f, policy)(w1, w2, x)
    out = jaxmma.with_policy(f, policy, unused="ignore")(w1, w2, x)
    dn = (((1,), (0,)), ((), ()))
    _same(out, jnp.tanh(HAND(x, w1, dn)).astype(jnp.bfloat16) @ w2)


def test_unmatched_dots_are_kept_or_refused():
    w, x = _f32(16, 8), _f32(4, 16)
    f = lambda w, x: x @ w  # noqa: E731
    policy = Rule(r"nothing", gemm(BF16, arch="sm_90"))
    _same(jaxmma.with_policy(f, policy, unused="ignore")(w, x), f(w, x))
    with pytest.raises(ValueError, match=r"dot 0 .* matches no rule \(unmatched='error'\)"):
        jaxmma.with_policy(f, policy, unmatched="error", unused="ignore")(w, x)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Rule("(", "keep"), ValueError, r"path: '\(' is not a regular expression"),
        (lambda: Rule(None, "bf16"), TypeError, r"expected a target: .* got 'bf16'"),
        (lambda: Rule(None, "keep", lhs_shape=(4, -1)), ValueError, r"lhs_shape: expected"),
        (lambda: Rule(None, "keep", rhs_dtype="float99"), TypeError, r"rhs_dtype: expected"),
        (lambda: gemm(BF16, arch="sm_90", key=1), ValueError, r"\['key'\] not jaxmma.matmul"),
        (lambda: gemm(BF16, arch="sm_70"), ValueError, "sm_70"),
        (lambda: jaxmma.with_policy(jnp.dot, []), ValueError, r"at least one rule"),
        (lambda: jaxmma.with_policy(jnp.dot, {"a": 1}), TypeError, r"policy: expected"),
        (lambda: jaxmma.with_policy(jnp.dot, ["keep", 3]), TypeError, r"policy: rules\[1\]"),
        (lambda: jaxmma.with_policy(jnp.dot, "keep", unmatched="no"), ValueError, "unmatched"),
    ],
)
@pytest.mark.every_case  # no compilation: each case is a Python check
def test_a_bad_policy_is_refused_naming_it(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_dots_the_policy_cannot_reach_are_refused():
    w, x = _f32(16, 16), _f32(4, 16)
    keep_all = gemm(BF16, arch="sm_90")

    @jax.custom_vjp
    def custom(x, w):
        return x @ w

    custom.defvjp(lambda x, w: (x @ w, (x, w)), lambda r, g: (g @ r[1].T, r[0].T @ g))
    with pytest.raises(ValueError, match=r"custom derivative"):
        jaxmma.with_policy(custom, keep_all)(x, w)

    def solve(w, x):
        matvec = lambda v: w @ v  # noqa: E731
        return jax.lax.custom_linear_solve(matvec, x[0], lambda _, b: b)

    with pytest.raises(ValueError, match=r"'custom_linear_solve'"):
        jaxmma.with_policy(solve, keep_all)(w, x)

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1,), "VALID")

    xs, k = _f32(1, 2, 8), _f32(3, 2, 1)
    with pytest.raises(ValueError, match=r"'conv_general_dilated'.*unsupported='keep'"):
        jaxmma.with_policy(conv, keep_all, unused="ignore")(xs, k)
    _same(
        jaxmma.with_policy(conv, keep_all, unused="ignore", unsupported="keep")(xs, k), conv(xs, k)
    )


def test_a_target_that_cannot_run_a_dot_names_rule_and_dot():
    """A recipe needs a linear layer's dot or one without batch dimensions."""
    q, k = _f32(2, 5, 16), _f32(2, 7, 16)
    policy = Rule(r".*", recipes.current_scaling(), name="fp8")
    f = lambda q, k: jnp.einsum("bqd,bkd->bqk", q, k)  # noqa: E731
    with pytest.raises(ValueError, match=r"rule 'fp8' on dot 0 .*dimension_numbers"):
        jaxmma.with_policy(f, policy)(q, k)


def test_presets_are_the_hand_written_gemms():
    """A preset as the whole policy is ``jaxmma.dot_general`` with the preset's
    instruction, arch and options (H100 tf32: cuBLAS's round-to-nearest of f32 inputs)."""
    a, b = _f32(8, 24), _f32(24, 8)
    dn = (((1,), (0,)), ((), ()))
    got = jax.jit(jaxmma.with_policy(jnp.matmul, presets.H100_TF32))(a, b)
    want = jaxmma.dot_general(
        a, b, dn, instruction="wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32",
        arch="sm_90a", input_rounding="rn",
    )  # fmt: skip
    _same(got, want)
    # the MX presets are the MX training recipes (their GEMMs: tests/test_recipes.py)
    assert presets.B200_MXFP8 == recipes.mxfp8() and presets.B200_MXFP4 == recipes.mxfp4()


@pytest.mark.full  # one compile of each block-scaled preset
@pytest.mark.parametrize("name", sorted(presets.TABLE))
def test_every_preset_runs_a_dot(name):
    p = presets.TABLE[name]
    a, b = _f32(64, 64), _f32(64, 64)
    got = jax.jit(jaxmma.with_policy(jnp.matmul, p.target))(a, b)
    assert got.shape == (64, 64) and got.dtype == jnp.float32
    assert np.all(np.isfinite(np.asarray(got)))


@pytest.mark.every_case
@pytest.mark.parametrize("name", sorted(presets.TABLE))
def test_docs_list_every_preset_with_its_instructions(name):
    text = DOCS.read_text()
    p = presets.TABLE[name]
    assert f"`presets.{name}`" in text
    for ins in p.instructions:
        assert f"`{ins}`" in text, f"docs/policy.md: {name}'s instruction {ins} is missing"
    assert getattr(presets, name) is p.target


def _docs_example(i):
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert len(blocks) == 5
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(blocks[i], "docs/policy.md", "exec"), {})
    return out.getvalue()


def test_the_example_of_docs_policy_runs():
    assert "rules[1] MLP/hidden params/hidden/kernel" in _docs_example(0)


@pytest.mark.full  # trains a model on three recipes: about 25 s of compiles
def test_the_state_and_keys_example_of_docs_policy_runs():
    assert _docs_example(1).splitlines()[:2] == ["['dot0']", "[ True  True  True]"]


@pytest.mark.full  # trains a linen model three steps under delayed scaling: about 10 s
def test_the_linen_example_of_docs_policy_runs():
    assert _docs_example(2).splitlines() == ["[ True  True  True]"]


@pytest.mark.full  # trains an nnx model three steps under NVFP4: about 20 s
def test_the_nnx_example_of_docs_policy_runs():
    assert _docs_example(3).splitlines() == ["3"]


@pytest.mark.full  # an MXFP8 forward: about 5 s
def test_the_statistics_example_of_docs_policy_runs():
    assert _docs_example(4).splitlines() == ["hidden {'w': (0, 24), 'x': (0, 18)}"]


@pytest.mark.full  # the examples compile a model: about 1.5 s
def test_doctests():
    for module in (_evaluate, _rules, _targets, _linen):
        assert doctest.testmod(module).failed == 0, module.__name__
