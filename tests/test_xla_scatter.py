"""XLA:GPU's f32 scatter-add with one update per element (the gradient of
``take_along_axis``) through ``gpu_replay`` on a CPU, against captures on an H200
(``jaxmma/conformance/_xla_scatter.py``, two processes): every element's bits, every
pair of zeros, subnormals, least normals, infinities and NaN payloads as operand and
update. The GPU adds with the atomic add, which flushes subnormals; the CPU's own
scatter-add does not give those bits. Scatters whose updates may meet, of other types,
or declared unique are refused."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_scatter as XS

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "xla-scatter-*.npz")))
RECORDS = [(os.path.basename(f), name) for f in FILES for name in XS.CASES]


def _load(path: str, name: str):
    with np.load(path) as z:
        meta = json.loads(str(z[f"{name}.meta"][()]))
        ins = [z[f"{name}.in{i}"] for i in range(3)]
        out = z[f"{name}.out"]
    ins = [ins[0].view(np.float32), ins[1], ins[2].view(np.float32)]
    return meta, ins, out


def _ftz(b):
    b = b.copy()
    sub = (b & 0x7F800000) == 0
    b[sub] &= 0x80000000
    return b


@pytest.mark.skipif(not FILES, reason="no captures")
@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: f"{r[0]}-{r[1]}")
def test_scatter_add_is_the_gpus(rec):
    """gpu_replay gives the GPU's bits at every element; NumPy's subnormal-keeping add
    (what an add.f32 would give) does not, and an oracle written here (flush operand,
    update and sum to zeros of their sign, then the canonical NaN) does."""
    path = os.path.join(GOLDEN, rec[0])
    meta, ins, want = _load(path, rec[1])
    fn, args = XS.function(rec[1]), [jnp.asarray(x) for x in ins]
    if rec[1] == "grad-take":  # jax dropped the unused operand from the module
        fn, args = (lambda f, z: lambda lab, u: f(z, lab, u))(fn, args[0]), args[1:]
    got = np.asarray(jaxmma.gpu_replay(fn, meta["hlo"])(*args)).view(np.uint32)
    assert np.array_equal(got, want), int((got != want).sum())
    z, lab, u = ins
    r = np.arange(len(lab))
    o = z[r, lab].view(np.uint32)
    with np.errstate(all="ignore"):
        plain = (o.view(np.float32) + u).view(np.uint32)
        flushed = _ftz((_ftz(o).view(np.float32) + _ftz(u.view(np.uint32)).view(np.float32))
                       .view(np.uint32))  # fmt: skip
    nan = np.isnan(flushed.view(np.float32))
    flushed[nan] = 0x7FFFFFFF
    assert np.array_equal(want[r, lab], flushed)
    assert (want[r, lab] != plain).sum() > 1000  # the subnormal pairs


def _refusal(fn, *args) -> str:
    """The reason gpu_replay gives for ``fn``'s scatter, with the module's text of the
    first capture (the one scatter fusion it shows)."""
    meta, _, _ = _load(FILES[0], "batched-add")
    out = jaxmma.gpu_replay(fn, meta["hlo"], unverified="omit")(*args)
    assert isinstance(out, jaxmma.Unverified)
    return " ".join(out.reasons)


@pytest.mark.skipif(not FILES, reason="no captures")
def test_scatters_not_measured_are_refused():
    """Updates that may meet (indices computed, no batching dimensions), bf16, indices
    declared unique, an add of the result: each refused up front, naming why."""
    z = jnp.zeros((8, 4), jnp.float32)
    lab = jnp.arange(8, dtype=jnp.int32) % 4
    u = jnp.ones(8, jnp.float32)
    meet = lambda z, lab, u: z.at[lab // 2, lab].add(u)  # noqa: E731
    assert "may reach one element several times" in _refusal(meet, z, lab, u)
    half = lambda z, lab, u: XS.function("batched-add")(  # noqa: E731
        z.astype(jnp.bfloat16), lab, u.astype(jnp.bfloat16)
    ).astype(jnp.float32)
    assert "bfloat16" in _refusal(half, z, lab, u)
    dn = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(1,), scatter_dims_to_operand_dims=(1,),
        operand_batching_dims=(0,), scatter_indices_batching_dims=(0,),
    )  # fmt: skip
    unique = lambda z, lab, u: jax.lax.scatter_add(  # noqa: E731
        z, lab[:, None], u, dn, unique_indices=True
    )
    assert "declared unique" in _refusal(unique, z, lab, u)
    # an add of a scatter-add's result, here through take_along_axis's call: XLA's
    # algebraic simplifier may move the add into the scatter's operand
    plus = lambda z, lab, u: XS.function("grad-take")(z, lab, u) + z  # noqa: E731
    assert "scatter-add into the sum" in _refusal(plus, z, lab, u)


@pytest.mark.skipif(not FILES, reason="no captures")
def test_replayed_scatter_add_is_differentiable_and_jits():
    """The replayed scatter-add keeps the primitive's gradient (ones into the operand and
    the updates for a sum) and gives the same bits under ``jit``."""
    meta, ins, _ = _load(FILES[0], "batched-add")
    fn = jaxmma.gpu_replay(XS.function("batched-add"), meta["hlo"])
    z, lab, u = (jnp.asarray(x) for x in ins)
    gz, gu = jax.grad(lambda a, b: fn(a, lab, b).sum(), argnums=(0, 1))(
        jnp.ones_like(z), jnp.full_like(u, 2.0)
    )
    assert np.all(np.asarray(gz) == 1) and np.all(np.asarray(gu) == 1)
    eager = np.asarray(fn(z, lab, u)).view(np.uint32)
    jitted = np.asarray(jax.jit(lambda a, b: fn(a, lab, b))(z, u)).view(np.uint32)
    assert np.array_equal(eager, jitted)
