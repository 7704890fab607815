"""tanh's gradient as the capture's jax wrote it: jax 0.10 (this replay's) transposes its
linearization into ``e + e * t`` with ``e = g * (1 - t)``, jax 0.11 writes ``g * ((1 +
t) * (1 - t))``. The module shows which (``_hlo_jvp.tanh_gradient``); gpu_replay computes
the module's form where it shows jax 0.11's and refuses the equation otherwise."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmma.xla_gpu import _hlo, _hlo_jvp, _hlo_text, _replay_ops
from jaxmma.xla_gpu import _replay as R

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")

_HEAD = """HloModule m, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}

%fused (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %t = f32[8]{0} tanh(%p0)
  %c = f32[] constant(1)
  %one = f32[8]{0} broadcast(%c), dimensions={}
"""
_TAIL = """}

ENTRY %main (x: f32[8], g: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %g = f32[8]{0} parameter(1)
  ROOT %f = f32[8]{0} fusion(%x, %g), kind=kLoop, calls=%fused
}
"""
#: jax 0.11: g * ((t + 1) * (1 - t))
_PRODUCT = """  %a = f32[8]{0} add(%t, %one)
  %s = f32[8]{0} subtract(%one, %t)
  %m = f32[8]{0} multiply(%a, %s)
  ROOT %r = f32[8]{0} multiply(%p1, %m)
"""
#: jax 0.10: e + e * t, e = g * (1 - t)
_SUM = """  %s = f32[8]{0} subtract(%one, %t)
  %e = f32[8]{0} multiply(%p1, %s)
  %f = f32[8]{0} multiply(%e, %t)
  ROOT %r = f32[8]{0} add(%e, %f)
"""
_NONE = """  ROOT %r = f32[8]{0} multiply(%p1, %t)
"""


def _form(body: str) -> str:
    return _hlo_jvp.tanh_gradient(_hlo_text.parse(_HEAD + body + _TAIL)[0])


def test_module_shows_the_form():
    assert _form(_PRODUCT) == "product"
    assert _form(_SUM) == "other"
    assert _form(_NONE) == ""
    both = _PRODUCT.replace("ROOT %r", "%r") + _SUM.replace("%s ", "%s2 ").replace(
        "%s)", "%s2)"
    ).replace("%e", "%e2").replace("%f ", "%f2 ").replace("%f)", "%f2)")
    assert _form(both.replace("ROOT %r = f32[8]{0} add", "ROOT %r2 = f32[8]{0} add")) == "other"
    assert _hlo.emitters(_HEAD + _PRODUCT + _TAIL).tanh_grad == "product"


def test_captured_modules_show_their_jax():
    """In every capture whose module computes tanh's gradient, the form read off the
    module is the one its recorded jax version writes (0.11: the product)."""
    seen = 0
    for path in sorted(glob.glob(os.path.join(GOLDEN, "xla-*models-*.npz"))):
        with np.load(path) as z:
            for k in sorted(n for n in z.files if n.endswith(".meta")):
                meta = json.loads(str(z[k][()]))
                if "hlo" not in meta:
                    continue
                form = _hlo_jvp.tanh_gradient(_hlo_text.parse(meta["hlo"])[0])
                if form:
                    seen += 1
                    major, minor = (int(v) for v in meta["jax"].split(".")[:2])
                    assert form == ("product" if (major, minor) >= (0, 11) else "other"), meta[
                        "name"
                    ]
    if not seen:
        pytest.skip("no captures with tanh's gradient")


def _facts(form: str):
    return _hlo.Emitters(contract=(), minmax=(), in_mlir=frozenset({"tanh"}), tanh_grad=form)


def _step(x, g):
    t, vjp = jax.vjp(jnp.tanh, x)
    return t, vjp(g)[0]


def _replay(facts, x, g):
    closed = jax.make_jaxpr(_step)(x, g)
    folds: dict = {}
    findings, per_output = _replay_ops.check(closed, facts, {}, {}, folds)
    plans = {("fold", k): v for k, v in folds.items()}

    def run(x, g):
        return R._eval(closed.jaxpr, closed.consts, [x, g], plans, facts)

    return findings, per_output, folds, run


def _inputs():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(8192) * 3).astype(np.float32)
    g = rng.standard_normal(8192).astype(np.float32)
    g[:64] = rng.standard_normal(64).astype(np.float32) * np.float32(1e-38)  # subnormal
    return x, g


def test_jax_011_form_computed_where_the_module_shows_it():
    """``g * ((1 + t) * (1 - t))`` in float32 (NumPy, one rounding per operation, with
    the replay's own t), which differs from jax 0.10's ``e + e * t`` on some of these
    inputs; the same bits under jit."""
    x, g = _inputs()
    findings, per_output, folds, run = _replay(_facts("product"), x, g)
    assert not findings and per_output == [frozenset(), frozenset()]
    assert [type(v).__name__ for v in folds.values()] == ["TanhGrad"]
    t, d = (np.asarray(v) for v in run(jnp.asarray(x), jnp.asarray(g)))
    one = np.float32(1)
    want = g * ((t + one) * (one - t))
    e = g * (one - t)
    old = e + e * t
    assert np.array_equal(d.view(np.uint32), want.view(np.uint32))
    assert (want.view(np.uint32) != old.view(np.uint32)).sum() > 100
    jd = np.asarray(jax.jit(run)(jnp.asarray(x), jnp.asarray(g))[1])
    assert np.array_equal(jd.view(np.uint32), want.view(np.uint32))


def test_derivative_kept():
    """The rewritten gradient differentiates as ``g * (1 - t**2)`` does."""
    x, g = _inputs()
    _, _, _, run = _replay(_facts("product"), x, g)
    total = lambda g: run(jnp.asarray(x), g)[1].sum()  # noqa: E731
    dg = np.asarray(jax.grad(total)(jnp.asarray(g)))
    assert np.allclose(dg, 1 - np.tanh(x.astype(np.float64)) ** 2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", ["", "other"])
def test_refused_where_the_module_does_not_show_it(form):
    x, g = _inputs()
    findings, per_output, folds, _ = _replay(_facts(form), x, g)
    assert not folds and per_output[0] == frozenset()
    assert any("tanh's gradient" in str(f) for f in findings), findings
    assert per_output[1]


def test_hand_written_form_not_taken_for_the_gradient():
    """The same arithmetic written by hand (the gradient of ``(v + v * t) * (1 - t)``
    with respect to ``v``) is not jax's linearization of ``tanh``: refused, not
    rewritten, though the module shows jax 0.11's form."""
    x, g = _inputs()

    def f(x, g):
        t = jnp.tanh(x)
        return jax.vjp(lambda v: (v + v * t) * (1 - t), x)[1](g)[0]

    closed = jax.make_jaxpr(f)(x, g)
    folds: dict = {}
    findings, per_output = _replay_ops.check(closed, _facts("product"), {}, {}, folds)
    assert not folds
    assert per_output[0] and any("(1 + b)" in str(f) for f in findings), findings
