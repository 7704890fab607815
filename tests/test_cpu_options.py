"""``jaxmma.cpu_compiler_options()``: what it returns for a CPU's features, and that
jaxmma's GEMMs give the same bits compiled with the option as without it (a change of
XLA:CPU's vector width must not reach any result)."""

import doctest
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.util import _cpu

FORMS = {
    "bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90", {}),
    "e4m3 P4": (
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "sm_90",
        {"promote_every": 4},
    ),
    "NVFP4": (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3",
        "sm_120a",
        {},
    ),
    "MXFP8": (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
        ".f32.e4m3.e4m3.f32.ue8m0",
        "sm_120a",
        {},
    ),
}


@pytest.mark.parametrize(
    "flags, want",
    [
        (frozenset({"sse2", "avx2", "avx512f", "avx512bw"}), {"xla_cpu_prefer_vector_width": 512}),
        (frozenset({"sse2", "avx2", "fma"}), {}),
        (frozenset(), {}),
    ],
)
def test_the_option_follows_the_cpus_features(monkeypatch, flags, want):
    monkeypatch.setattr(_cpu, "_cpu_flags", lambda: flags)
    got = jaxmma.cpu_compiler_options()
    assert got == want
    got["changed"] = 1  # a copy: the module's own dict stays as it was
    assert jaxmma.cpu_compiler_options() == want


def _inputs(rng, m, k, n):
    """Normal values over a wide range, with zeros, -0, subnormals, NaN and Inf."""
    x = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-20, 20, (m, k))
    x = x.astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    x[0, :5] = [0.0, -0.0, 1e-40, np.nan, np.inf]
    w[3, :3] = [-np.inf, 3e-39, -0.0]
    c[1, :3] = [np.nan, -np.inf, 1e-42]
    return jnp.asarray(x), jnp.asarray(w), jnp.asarray(c)


def _xla_defaults() -> dict:
    """Compile options that undo the suite's ``XLA_FLAGS`` (``tests/_suite.py``: no
    backend optimization, no expensive LLVM passes, the loop emitter instead of the
    fusion emitters), so that a program is built as a user's is: LLVM's vectorizer only
    runs at full optimization."""
    flags = os.environ.get("XLA_FLAGS", "")
    out = {"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False}
    if "--xla_cpu_use_fusion_emitters=false" in flags:
        out["xla_cpu_use_fusion_emitters"] = True
    return out


@pytest.mark.skipif(
    "avx512f" not in _cpu._cpu_flags(),
    reason="no AVX-512 on this CPU: the option would change nothing",
)
@pytest.mark.parametrize("name", list(FORMS))
def test_gemms_give_the_same_bits_with_512_bit_vectors(name):
    text, arch, kw = FORMS[name]
    rng = np.random.default_rng(len(name))
    x, w, c = _inputs(rng, 48, 200, 136)  # ragged K, several column tiles of MXFP8's

    def f(a, b, c):
        return jaxmma.matmul(a, b, c, instruction=text, arch=arch, **kw)

    full = _xla_defaults()
    plain = np.asarray(jax.jit(f, compiler_options=full)(x, w, c)).view(np.uint32)
    wide = jax.jit(f, compiler_options=full | _cpu.AVX512)(x, w, c)
    wide = np.asarray(wide).view(np.uint32)
    assert np.isnan(plain.view(np.float32)).any()  # the special values reached the result
    np.testing.assert_array_equal(wide, plain)


def test_doctests():
    assert doctest.testmod(_cpu).failed == 0
