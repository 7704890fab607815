"""jaxmma.dot_general (lax.dot_general semantics, a flax-style Dense), vmap, jit caching,
sharding and the errors of the GEMM layer."""

import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.gemm import _pipeline

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
INS = jaxmma.instruction(BF16, arch="sm_90")
RNG = np.random.default_rng(21)


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _mm(A, B):
    return jaxmma.matmul(A, B, instruction=INS)


# ----------------------------------------------------------------------------- dot_general
# (lhs shape, rhs shape, dimension_numbers, lhs -> [batch, M, K], rhs -> [batch, K, N])
CASES = [
    ((12, 20), (20, 6), (((1,), (0,)), ((), ())), (0, 1), (0, 1)),
    ((20, 12), (6, 20), (((0,), (1,)), ((), ())), (1, 0), (1, 0)),  # contracting not last
    ((3, 12, 20), (3, 20, 6), (((2,), (1,)), ((0,), (0,))), (0, 1, 2), (0, 1, 2)),
    ((12, 3, 20), (20, 3, 6), (((2,), (0,)), ((1,), (1,))), (1, 0, 2), (1, 0, 2)),  # batch inside
    ((12, 4, 5), (5, 4, 6), (((1, 2), (1, 0)), ((), ())), None, None),  # two contracting dims
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_dot_general_is_matmul_on_transposed_inputs(case):
    ls, rs, dn, lt, rt = case
    lhs, rhs = _f32(*ls), _f32(*rs)
    got = jaxmma.dot_general(lhs, rhs, dn, instruction=INS)
    ref = jax.lax.dot_general(lhs, rhs, dn, precision=jax.lax.Precision.HIGHEST)
    assert got.shape == ref.shape and got.dtype == jnp.float32
    if lt is None:  # contracting (1, 2) of lhs meets (1, 0) of rhs: K flattened in that order
        L = lhs.reshape(12, 20)
        R = rhs.transpose(1, 0, 2).reshape(20, 6)
    else:
        L, R = lhs.transpose(lt), rhs.transpose(rt)
    want = _mm(L, R)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=0.05, atol=0.1)


def test_dot_general_preferred_element_type_and_precision():
    lhs, rhs = _f32(12, 20), _f32(20, 6)
    dn = (((1,), (0,)), ((), ()))
    base = jaxmma.dot_general(lhs, rhs, dn, instruction=INS)
    for precision in (None, jax.lax.Precision.HIGHEST, "highest", ("default", "default")):
        out = jaxmma.dot_general(lhs, rhs, dn, precision=precision, instruction=INS)
        np.testing.assert_array_equal(_bits(out), _bits(base))
    out = jaxmma.dot_general(lhs, rhs, dn, preferred_element_type=jnp.bfloat16, instruction=INS)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(_bits(out), _bits(np.asarray(base).astype(jnp.bfloat16)))


class Dense:
    """The computation of flax.linen.Dense (features, kernel [in, features], bias), with
    its ``dot_general=`` hook called as flax calls it."""

    def __init__(self, kernel, bias, dot_general=jax.lax.dot_general, precision=None):
        self.kernel, self.bias = kernel, bias
        self.dot_general, self.precision = dot_general, precision

    def __call__(self, inputs):
        y = self.dot_general(
            inputs,
            self.kernel,
            (((inputs.ndim - 1,), (0,)), ((), ())),
            precision=self.precision,
        )
        return y + jnp.reshape(self.bias, (1,) * (y.ndim - 1) + (-1,))


def test_flax_style_dense_layer():
    dg = functools.partial(jaxmma.dot_general, instruction=BF16, arch="sm_90")
    x, w, b = _f32(2, 5, 20), _f32(20, 6), _f32(6)
    layer = Dense(w, b, dot_general=dg, precision=jax.lax.Precision.DEFAULT)
    y = layer(x)
    assert y.shape == (2, 5, 6)
    want = np.asarray(_mm(x.reshape(10, 20), w)).reshape(2, 5, 6) + b
    np.testing.assert_array_equal(_bits(y), _bits(want.astype(np.float32)))
    ref = Dense(w, b)(x)
    np.testing.assert_allclose(np.asarray(y), np.asarray(ref), rtol=0.05, atol=0.1)
    # trainable: straight-through gradients of the kernel (bf16-rounded inputs)
    g = jax.grad(lambda w: jnp.sum(Dense(w, b, dot_general=dg)(x)))(w)
    xb = np.asarray(jnp.asarray(x, jnp.bfloat16), np.float64).reshape(10, 20)
    np.testing.assert_allclose(np.asarray(g), xb.T @ np.ones((10, 6)), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- vmap, jit
def test_vmap_gives_the_batched_bits():
    A, B, C = _f32(3, 20, 36), _f32(3, 36, 12), _f32(3, 20, 12)
    batched = jaxmma.matmul(A, B, C, instruction=INS)
    mapped = jax.vmap(lambda a, b, c: jaxmma.matmul(a, b, c, instruction=INS))(A, B, C)
    np.testing.assert_array_equal(_bits(mapped), _bits(batched))
    shared_b = jax.vmap(lambda a: jaxmma.matmul(a, B[0], instruction=INS))(A)
    np.testing.assert_array_equal(_bits(shared_b), _bits(jaxmma.matmul(A, B[0], instruction=INS)))


def test_compiles_once_per_shape(monkeypatch):
    traces = []
    real = _pipeline.forward

    def counting(*args):
        traces.append(1)
        return real(*args)

    monkeypatch.setattr(_pipeline, "forward", counting)
    A, B = _f32(17, 29), _f32(29, 11)  # a shape no other test uses
    d1 = jaxmma.matmul(A, B, instruction=BF16, arch="sm_90")
    d2 = jaxmma.matmul(A + 1, B, instruction=INS)  # same configuration, Instruction object
    assert len(traces) == 1
    np.testing.assert_array_equal(_bits(d1), _bits(_mm(A, B)))
    assert not np.array_equal(_bits(d1), _bits(d2))
    jaxmma.matmul(_f32(18, 29), B, instruction=INS)  # a new shape traces again
    assert len(traces) == 2
    calls = []

    @jax.jit
    def model(a, b):
        calls.append(1)
        return jaxmma.matmul(a, b, instruction=INS)

    model(A, B)
    model(A * 2, B)
    assert len(calls) == 1


# ----------------------------------------------------------------------------- sharding
SHARDING = textwrap.dedent(
    """
    import jax, numpy as np, jaxmma
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    assert len(jax.devices()) == 4
    ins = jaxmma.instruction("{text}", arch="sm_90")
    rng = np.random.default_rng(0)
    A = rng.standard_normal((2, 4, 32, 40)).astype(np.float32)
    B = rng.standard_normal((40, 24)).astype(np.float32)
    mesh = Mesh(np.array(jax.devices()), ("x",))
    bits = lambda x: np.asarray(x).view(np.uint32)
    one = bits(jaxmma.matmul(A, B, instruction=ins))
    for spec in (P(None, None, "x", None), P(None, "x", None, None)):  # M, then a batch dim
        As = jax.device_put(A, NamedSharding(mesh, spec))
        D = jaxmma.matmul(As, B, instruction=ins)
        assert np.array_equal(bits(D), one), spec
        Dj = jax.jit(lambda a, b: jaxmma.matmul(a, b, instruction=ins))(As, B)
        assert np.array_equal(bits(Dj), one), spec
        assert len(Dj.sharding.device_set) == 4
    print("OK")
    """
)


def test_sharded_over_four_devices_gives_one_device_bits():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    code = SHARDING.format(text=BF16)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


# ----------------------------------------------------------------------------- errors
def _both(fn, *args):
    """The error of ``fn(*args)`` eagerly and under jit."""
    yield lambda: fn(*args)
    yield lambda: jax.jit(fn)(*args)


SP = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
ERRORS = [
    (
        "mismatched K",
        ValueError,
        "A, B: contracting sizes differ",
        lambda a, b: jaxmma.matmul(a, b[:-1], instruction=INS),
    ),
    (
        "C shape",
        ValueError,
        "C: expected trailing shape",
        lambda a, b: jaxmma.matmul(a, b, a, instruction=INS),
    ),
    (
        "int dtype",
        TypeError,
        "A: expected bfloat16.*got int32",
        lambda a, b: jaxmma.matmul(a.astype(jnp.int32), b, instruction=INS),
    ),
    (
        "bool dtype",
        TypeError,
        "B: expected .*got bool",
        lambda a, b: jaxmma.matmul(a, b > 0, instruction=INS),
    ),
    (
        "promote f16",
        ValueError,
        "promote_every: .*f16",
        lambda a, b: jaxmma.matmul(
            a, b, instruction="mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", promote_every=2
        ),
    ),
    (
        "promote 0",
        ValueError,
        "promote_every: expected None or a positive",
        lambda a, b: jaxmma.matmul(a, b, instruction=INS, promote_every=0),
    ),
    (
        "promote -1",
        ValueError,
        "promote_every: expected None or a positive",
        lambda a, b: jaxmma.matmul(a, b, instruction=INS, promote_every=-1),
    ),
    (
        "promote float",
        TypeError,
        "promote_every: expected None or a positive int",
        lambda a, b: jaxmma.matmul(a, b, instruction=INS, promote_every=2.0),
    ),
    (
        "promote bool",
        TypeError,
        "promote_every: expected None or a positive int",
        lambda a, b: jaxmma.matmul(a, b, instruction=INS, promote_every=True),
    ),
    (
        "arch",
        ValueError,
        "sm_75",
        lambda a, b: jaxmma.matmul(
            a, b, instruction="mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", arch="sm_75"
        ),
    ),
    (
        "ldmatrix",
        ValueError,
        "instruction: .*ldmatrix.*no matrix product",
        lambda a, b: jaxmma.matmul(a, b, instruction="ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
    ),
    (
        "not an instruction",
        TypeError,
        "instruction: expected PTX text",
        lambda a, b: jaxmma.matmul(a, b, instruction=3),
    ),
    (
        "dimension numbers",
        ValueError,
        "dimension_numbers: contracting dimension",
        lambda a, b: jaxmma.dot_general(a, b, (((1,), (1,)), ((), ())), instruction=INS),
    ),
]


@pytest.mark.parametrize("name,exc,match,fn", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_at_trace_time(name, exc, match, fn):
    a, b = _f32(16, 32), _f32(32, 8)
    for call in _both(fn, a, b):
        with pytest.raises(exc, match=match):
            call()


def test_sparse_a_without_the_structure_is_refused():
    ins = jaxmma.instruction(SP, arch="sm_90")
    A = np.ones((16, 64), np.float16)  # 4 non-zeros in every 4
    with pytest.raises(ValueError, match=r"A\[0, 0\]: row 0, chunk 0"):
        jaxmma.matmul(A, np.ones((64, 8), np.float16), instruction=ins)
