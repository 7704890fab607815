"""XLA's algebraic simplifier rewrites float products and sums with other rounding than
jax's: ``(x * c1) * c2`` becomes ``x * fl(c1 * c2)`` where the module shows that
constant (computed so by gpu_replay), and the products of products by constants that
it rewrites are refused, never computed with jax's rounding."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxmma.xla_gpu import _hlo, _replay_ops
from jaxmma.xla_gpu import _replay as R

C1, C2 = np.float32(0.7978845834732056), np.float32(0.044715)


def _facts(*constants):
    bits = frozenset(int(np.float32(c).view(np.uint32)) for c in constants)
    return _hlo.Emitters(contract=(), minmax=(), constants=bits)


def _check(f, facts, *args):
    closed = jax.make_jaxpr(f)(*args)
    folds: dict = {}
    findings, per_output = _replay_ops.check(closed, facts, {}, {}, folds)
    return closed, folds, findings, per_output


def test_folded_constants_round_once():
    """With ``fl(c1 * c2)`` in the module, ``(x * c1) * c2`` is ``x * fl(c1 * c2)``
    rounded once (NumPy's float32 product here), which differs from jax's two roundings
    on some of these inputs; without that constant it is jax's two roundings."""
    x = np.random.default_rng(7).standard_normal(4096).astype(np.float32)
    f = lambda x: (x * C1) * C2  # noqa: E731
    folded = np.float32(C1 * C2)
    once = (x * folded).view(np.uint32)
    twice = ((x * C1) * C2).view(np.uint32)
    assert (once != twice).sum() > 100
    for facts, want in ((_facts(C1, C2, folded), once), (_facts(C1, C2), twice)):
        closed, folds, findings, per_output = _check(f, facts, x)
        assert not findings and per_output == [frozenset()]
        plans = {("fold", k): v for k, v in folds.items()}
        (out,) = R._eval(closed.jaxpr, closed.consts, [jnp.asarray(x)], plans, facts)
        assert np.array_equal(np.asarray(out).view(np.uint32), want)
    assert len(_check(f, _facts(C1, C2, folded), x)[1]) == 1
    facts = _facts(C1, C2, folded)  # the folded product keeps jax's derivative
    closed, folds, _, _ = _check(f, facts, x)
    plans = {("fold", k): v for k, v in folds.items()}
    total = lambda v: R._eval(closed.jaxpr, closed.consts, [v], plans, facts)[0].sum()  # noqa: E731
    g = np.asarray(jax.grad(total)(jnp.asarray(x)))
    assert np.allclose(g, float(C1) * float(C2), rtol=1e-6)


def test_reassociated_products_refused():
    """``(a * c1) * (b * c2)`` of one element, ``a + a * b`` and ``(a + c1) + c2``:
    refused, each naming the rewrite; a product and a sum XLA leaves alone are not."""
    a = np.ones((4, 3), np.float32)
    b = np.ones((4,), np.float32)
    cases = {
        "(a * b) * fl(c1 * c2)": lambda a, b: (a[0, 0] * C1) * (b[0] * C2),
        "(1 + b)": lambda a, b: a * b[:, None] + a,
        "a + fl(c1 + c2)": lambda a, b: (a + C1) + C2,
    }
    for needle, f in cases.items():
        _, _, findings, _ = _check(f, _facts(C1, C2), a, b)
        assert any(needle in str(x) for x in findings), (needle, findings)
    _, _, findings, _ = _check(lambda a, b: a * b[:, None] + b[:, None], _facts(), a, b)
    assert not findings


def test_products_of_scaled_arrays_as_written():
    """``(a * c1) * (b * c2)`` on arrays: XLA's rule for it takes constant instructions,
    and jax multiplies an array by a broadcast of the scalar, so the module computes
    it as jax writes it, three roundings (the captured block step shows so), which
    differ from ``(a * b) * fl(c1 * c2)`` on some of these inputs."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 64, 64)).astype(np.float32)
    f = lambda a, b: (a * C1) * (b * C2)  # noqa: E731
    closed, folds, findings, per_output = _check(f, _facts(C1, C2), a, b)
    assert not findings and not folds and per_output == [frozenset()]
    ins = [jnp.asarray(a), jnp.asarray(b)]
    (out,) = R._eval(closed.jaxpr, closed.consts, ins, {}, _facts(C1, C2))
    want = ((a * C1) * (b * C2)).view(np.uint32)
    other = ((a * b) * np.float32(C1 * C2)).view(np.uint32)
    assert np.array_equal(np.asarray(out).view(np.uint32), want)
    assert (want != other).sum() > 100


def _triton_update(c: str) -> str:
    """A module whose one Triton fusion computes ``w - c * g`` (an SGD update)."""
    cfg = '{"fusion_backend_config":{"kind":"__triton"}}'
    return f"""HloModule m, entry_computation_layout={{(f32[8]{{0}}, f32[8]{{0}})->f32[8]{{0}}}}

%fused (p0: f32[8], p1: f32[8]) -> f32[8] {{
  %p0 = f32[8]{{0}} parameter(0)
  %p1 = f32[8]{{0}} parameter(1)
  %c = f32[] constant({c})
  %b = f32[8]{{0}} broadcast(%c), dimensions={{}}
  %m = f32[8]{{0}} multiply(%p1, %b)
  ROOT %s = f32[8]{{0}} subtract(%p0, %m)
}}

ENTRY %main (w: f32[8], g: f32[8]) -> f32[8] {{
  %w = f32[8]{{0}} parameter(0)
  %g = f32[8]{{0}} parameter(1)
  ROOT %f = f32[8]{{0}} fusion(%w, %g), kind=kCustom, calls=%fused, backend_config={cfg}
}}
"""


def test_power_of_two_products_cannot_contract():
    """A fusion outside XLA's MLIR emitters whose only product is by a power of two (a
    learning rate of 2^-4) is not among those that may contract a multiply-add: the
    product is exact, so an FMA rounds as the two operations do. By 0.07 it is."""
    assert _hlo.emitters(_triton_update("0.0625")).contract == ()
    assert _hlo.emitters(_triton_update("0.07")).contract == ("%f (__triton)",)


def _eval(f, facts, *args):
    closed, folds, findings, per_output = _check(f, facts, *args)
    assert not findings and per_output == [frozenset()], findings
    plans = {("fold", k): v for k, v in folds.items()}

    def run(*xs):
        return R._eval(closed.jaxpr, closed.consts, list(xs), plans, facts)[0]

    return folds, run


def test_product_by_a_broadcast_moves_the_constant():
    """``(a * c) * broadcast(b)`` is ``a * broadcast(b * c)`` (XLA's ``HandleMultiply``),
    each product rounded (NumPy float32), which differs from jax's order on some of
    these inputs; the same bits under jit, and jax's derivative."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((256, 16)).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    folds, run = _eval(lambda a, b: (a * C1) * b[:, None], _facts(C1), a, b)
    assert [type(v).__name__ for v in folds.values()] == ["Rebroadcast"]
    want = (a * (b * C1)[:, None]).view(np.uint32)
    assert (want != ((a * C1) * b[:, None]).view(np.uint32)).sum() > 100
    got = run(jnp.asarray(a), jnp.asarray(b))
    assert np.array_equal(np.asarray(got).view(np.uint32), want)
    jitted = jax.jit(run)(jnp.asarray(a), jnp.asarray(b))
    assert np.array_equal(np.asarray(jitted).view(np.uint32), want)
    da = jax.grad(lambda a: run(a, jnp.asarray(b)).sum())(jnp.asarray(a))
    assert np.allclose(np.asarray(da), (C1 * b)[:, None] * np.ones_like(a), rtol=1e-6)


def test_product_by_a_broadcast_folds_with_the_operands_constant():
    """Where the broadcast's operand is ``x / 72`` (XLA: ``x * fl(1 / 72)``), reshaped,
    and the module holds ``fl(fl(1 / 72) * c)``, XLA folds the two constants (the
    captured block step's layer-norm gradient): ``a * broadcast(x * fl(r * c))``;
    without that constant, ``a * broadcast(fl(x * r) * c)``. The two differ on some of
    these inputs."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((256, 16)).astype(np.float32)
    x = rng.standard_normal((256, 1)).astype(np.float32)
    r = np.float32(1) / np.float32(72)
    k = np.float32(r * C1)
    f = lambda a, x: (a * C1) * (x / 72.0).reshape(-1)[:, None]  # noqa: E731
    folded = (a * (x * k)).view(np.uint32)
    unfolded = (a * ((x * r) * C1)).view(np.uint32)
    assert (folded != unfolded).sum() > 100
    for facts, want in ((_facts(C1, k), folded), (_facts(C1), unfolded)):
        _, run = _eval(f, facts, a, x)
        got = run(jnp.asarray(a), jnp.asarray(x))
        assert np.array_equal(np.asarray(got).view(np.uint32), want)


def test_product_by_a_broadcast_constant_as_written():
    """XLA's rule takes the broadcast of a non-constant: ``(a * c) * broadcast(k)`` of a
    constant ``k`` is computed as jax writes it."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((256, 16)).astype(np.float32)
    k = rng.standard_normal(256).astype(np.float32)
    folds, run = _eval(lambda a: (a * C1) * jnp.asarray(k)[:, None], _facts(C1), a)
    assert not folds
    want = ((a * C1) * k[:, None]).view(np.uint32)
    assert np.array_equal(np.asarray(run(jnp.asarray(a))).view(np.uint32), want)


def test_product_by_a_broadcast_refused_where_the_rule_may_not_match():
    """Where XLA's rule for ``(a * c) * broadcast(b)`` may or may not match (``a``
    itself broadcast, an implicit broadcast of a rank-0 variable, a broadcast that only
    adds dimensions of 1, a constant ``a``, the product inside a call): refused, not
    computed in either order."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((256, 16)).astype(np.float32)
    x, b = rng.standard_normal((2, 256)).astype(np.float32)
    y = rng.standard_normal(16).astype(np.float32)
    s = np.float32(-3.5)
    K = jnp.asarray(a)
    inner = jax.jit(lambda a, b: (a * C1) * b[:, None])
    cases = [
        (lambda a, x, y, s, b: (x[:, None] * C1) * y[None, :]),
        (lambda a, x, y, s, b: (a * C1) * s),
        (
            lambda a, x, y, s, b: (
                (a.reshape(256, 16, 1) * C1) * jax.lax.broadcast_in_dim(a, (256, 16, 1), (0, 1))
            )
        ),
        (lambda a, x, y, s, b: (K * C1) * b[:, None]),
        (lambda a, x, y, s, b: inner(a, b) + inner(a, x)),
    ]
    for f in cases:
        _, folds, findings, _ = _check(f, _facts(C1), a, x, y, s, b)
        assert not folds, folds
        assert any("broadcast(b * c)" in str(x) for x in findings), findings
