"""Policy statistics (``jaxmma.policy.stats``): each dot on a recipe gets
``recipes.stats`` of its x and w under the recipe's formats and the scales of its
forward casts. The oracle is ``recipes.stats`` called by hand on the operands the
hand-written recipe model computes, with scales from each recipe's documented rule
(docs/recipes.md), not the policy's evaluation."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _raw_bits import same as _same

from jaxmma import quant, recipes
from jaxmma.policy import Rule, stats, with_policy

RNG = np.random.default_rng(3839)
M, K, H, N = 8, 48, 32, 16  # K = 48: the MX recipes pad it to their blocks


def _f32(*shape, scale=1.0):
    return jnp.asarray((RNG.standard_normal(shape) * scale).astype(np.float32))


PARAMS = {"embed": _f32(K, H, scale=0.2), "hidden": _f32(H, N, scale=0.05), "head": _f32(N, 4)}
X = _f32(M, K, scale=3.0).at[0, :4].set(jnp.array([1e-12, -1e-9, 1e4, 0.0]))


def mlp(params, x):
    h = jnp.tanh(x @ params["embed"])
    return jnp.tanh(h @ params["hidden"]) @ params["head"]


def _policy(rec):
    return [Rule(r"head", "keep"), rec]


def _hand(rec, params, x, state=None):
    """The hand-written model's operands of its two recipe dots: ``[(x, w), (x, w)]``."""
    h = jnp.tanh(rec.matmul(x, params["embed"], None if state is None else state["dot0"]))
    return [(x, params["embed"]), (h, params["hidden"])]


def _blocks_along(t, axis, size):
    """``t [R, C]`` blocked along ``axis``, zero-padded: ``[R or C, blocks, size]``."""
    t = np.moveaxis(np.asarray(t, np.float32), axis, -1)
    pad = -t.shape[-1] % size
    t = np.pad(t, ((0, 0), (0, pad)))
    return t.reshape(t.shape[0], -1, size)


def _per_element(b, axis, n, size):
    """Block values ``[R or C, blocks]`` repeated over their blocks of ``size``, back to
    ``t``'s shape (``n`` along ``axis``)."""
    full = np.repeat(b, size, axis=1)[:, :n]
    return np.moveaxis(full, -1, axis)


def _tensor_scale(t, fmt):
    return recipes.scale_from_amax(recipes.amax(t), fmt)


def _mx_scale(t, fmt, axis):
    """2**-e with e the OCP shared exponent of each block of 32 along ``axis``."""
    b = _blocks_along(t, axis, 32)
    e = np.asarray(quant.shared_exponent(jnp.asarray(np.abs(b).max(-1)), fmt))
    return jnp.asarray(_per_element(np.ldexp(np.float32(1), -e), axis, t.shape[axis], 32))


def _nvfp4_x_scale(t):
    q = quant.quantize_nvfp4(t, axis=-1)
    s = np.asarray(q.scales).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return jnp.asarray(_per_element(1 / (s * np.float32(q.global_scale)), 1, t.shape[1], 16))


def _nvfp4_w_scale(w):
    qw, _ = recipes.quantize_nvfp4_2d(w)
    s = np.asarray(qw.scales).view(ml_dtypes.float8_e4m3fn).astype(np.float32)  # [K/16, N]
    return jnp.asarray(np.repeat(1 / (s * np.float32(qw.global_scale)), 16, axis=0))


def _rows_scale(t, fmt, axis):
    return recipes.scale_from_amax(recipes.amax(t, axis), fmt)


def _block_scale(t, rows, cols, fmt):
    R, C = t.shape
    a = np.abs(np.asarray(t)).reshape(R // rows, rows, C // cols, cols).max((1, 3))
    s = np.asarray(recipes.scale_from_amax(jnp.asarray(a), fmt))
    return jnp.asarray(np.repeat(np.repeat(s, rows, 0), cols, 1))


#: recipe -> (x's scale, w's scale) by each recipe's rule
SCALES = {
    "current_scaling": (lambda x: _tensor_scale(x, "e4m3"), lambda w: _tensor_scale(w, "e4m3")),
    "rowwise": (lambda x: _rows_scale(x, "e4m3", 1), lambda w: _rows_scale(w, "e4m3", 0)),
    "mxfp8": (lambda x: _mx_scale(x, "e4m3", 1), lambda w: _mx_scale(w, "e4m3", 0)),
    "mxfp4": (lambda x: _mx_scale(x, "e2m1", 1), lambda w: _mx_scale(w, "e2m1", 0)),
    "nvfp4": (_nvfp4_x_scale, _nvfp4_w_scale),
}
FMT = {"mxfp4": "e2m1", "nvfp4": "e2m1"}


def _expected(name, rec, params, x):
    sx, sw = SCALES[name]
    fmt = FMT.get(name, "e4m3")
    return {
        key: {"x": recipes.stats(a, fmt, sx(a)), "w": recipes.stats(w, fmt, sw(w))}
        for key, (a, w) in zip(("embed", "hidden"), _hand(rec, params, x), strict=True)
    }


def _check(name, rec):
    run = jax.jit(stats(mlp, _policy(rec)))
    out, got = run(PARAMS, X)
    assert sorted(got) == ["embed", "hidden"]
    _same(got, _expected(name, rec, PARAMS, X))
    _same(out, jax.jit(with_policy(mlp, _policy(rec)))(PARAMS, X))
    return got


@pytest.mark.full  # two compiles of a two-layer fp8 forward: about 7 s
def test_current_scaling_statistics_are_recipes_stats_by_hand():
    got = _check("current_scaling", recipes.current_scaling())
    x = got["embed"]["x"]  # X's planted values: 1e-12 underflows e4m3 at scale 448 / 1e4
    assert int(x.underflow) >= 2 and float(x.amax) == 1e4 and int(x.size) == M * K


@pytest.mark.full  # one compile of each recipe's forward: 1 to 4 s each
@pytest.mark.parametrize("name", ["rowwise", "mxfp8", "mxfp4", "nvfp4"])
def test_block_and_row_statistics_are_recipes_stats_by_hand(name):
    _check(name, getattr(recipes, name)())


@pytest.mark.full  # 128-blocks: a model of its own, one compile
def test_blockwise_statistics_are_recipes_stats_by_hand():
    rec = recipes.blockwise()
    w, x = _f32(256, 128, scale=0.1), _f32(128, 256)

    def f(params, x):
        return x @ params["proj"]

    _, got = jax.jit(stats(f, rec))({"proj": w}, x)
    want = recipes.stats(x, "e4m3", _block_scale(x, 1, 128, "e4m3"))
    _same(
        got, {"proj": {"x": want, "w": recipes.stats(w, "e4m3", _block_scale(w, 128, 128, "e4m3"))}}
    )


def test_delayed_scaling_statistics_use_the_state():
    """Scales from the amax histories (here twice the tensors' amax: no saturation), not
    from this step's amax; with stateful=True, (state, key) first, as with_policy."""
    rec = recipes.delayed_scaling(history=2)
    x_amax, w_amax = 2 * float(jnp.max(jnp.abs(X))), 2 * float(jnp.max(jnp.abs(PARAMS["embed"])))
    entry = {"x": jnp.array([x_amax, 0.0]), "w": jnp.array([w_amax, 1.0]), "g": jnp.ones(2)}

    def f(params, x):
        return x @ params["embed"]

    @jax.jit  # one compile for the two; arguments, not constants XLA could fold
    def both(state, params, x):
        got = stats(f, rec, stateful=True)(state, None, params, x)
        return got, rec.matmul(x, params["embed"], state["dot0"])

    (out, got), want_out = both({"dot0": entry}, PARAMS, X)
    sx = recipes.scale_from_amax(jnp.float32(x_amax), "e4m3")
    sw = recipes.scale_from_amax(jnp.float32(w_amax), "e4m3")
    want = {"x": recipes.stats(X, "e4m3", sx), "w": recipes.stats(PARAMS["embed"], "e4m3", sw)}
    _same(got, {"embed": want})
    _same(out, want_out)


@pytest.mark.full  # a training step compiled twice: about 9 s
def test_statistics_are_the_aux_of_a_training_step():
    """Under jax.value_and_grad(has_aux=True): the gradient is with_policy's, the
    statistics those of the forward."""
    rec = recipes.current_scaling()

    def loss(params, x):
        out, st = stats(mlp, _policy(rec))(params, x)
        return jnp.sum(out**2), st

    def plain(params, x):
        return jnp.sum(with_policy(mlp, _policy(rec))(params, x) ** 2)

    @jax.jit
    def both(params, x):
        return jax.value_and_grad(loss, has_aux=True)(params, x), jax.grad(plain)(params, x)

    ((_, st), g), want = both(PARAMS, X)
    _same(g, want)
    _same(st, _expected("current_scaling", rec, PARAMS, X))


def test_names_keys_and_what_has_no_statistics():
    """Keys: a dot's first name, with its index where several dots share it; bf16
    recipes, GEMM targets and kept dots have no entry."""

    def shared(params, x):
        return jnp.tanh(x @ params["w"]) @ params["w"]

    sq = {"w": _f32(K, K, scale=0.1)}
    _, st = jax.eval_shape(stats(shared, recipes.current_scaling()), sq, X)
    assert sorted(st) == ["w (dot 0)", "w (dot 1)"]
    _, st = jax.eval_shape(
        stats(mlp, [Rule("embed", recipes.bf16()), recipes.rowwise()]), PARAMS, X
    )
    assert sorted(st) == ["head", "hidden"]


def test_a_dot_in_a_loop_is_refused_naming_it():
    def f(w, xs):
        return jax.lax.scan(lambda c, x: (jnp.tanh(x @ w), None), xs[0], xs)[0]

    with pytest.raises(ValueError, match=r"dot 0 .*statistics of a dot inside 'scan'"):
        jax.eval_shape(
            stats(f, recipes.current_scaling()), jnp.ones((16, 16)), jnp.ones((3, 4, 16))
        )
