"""gpu_replay of XLA:GPU's GEMM fusions with arithmetic before the dot (a prologue) or
after it (an epilogue), against the GPU.

The GPU's bits are the captures ``tests/golden/xla/xla-gemm-fused-*.npz``
(``jaxmma/conformance/_xla_gemm_fused.py`` on an H200, sm_90 as the H100; two processes:
default autotuning and ``--xla_gpu_autotune_level=0``): a layer norm's scale and shift,
products and sums in the prologue; an attention scale, per-column scales, biases, a ReLU
and residuals in the epilogue; f32 and bf16. The reader takes these fusions as rounding
each operation on its own (``jaxmma.xla_gpu._hlo_known.ROUNDED``); the captures are
shown to tell that apart from an FMA and from a bf16 dot kept in f32."""

import json
import os
import re

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_gemm_fused as G
from jaxmma.xla_gpu import _hlo

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = [os.path.join(GOLDEN, f"xla-gemm-fused-{r}.npz") for r in ("gf1", "gf2")]


def _load():
    out = []
    for path in FILES:
        with np.load(path) as z:
            keys = sorted({int(k.split(".")[0]) for k in z.files})
            for k in keys:
                out.append((json.loads(str(z[f"{k}.meta"][()])), z[f"{k}.y"]))
    return out


CASES = _load()
#: refused by the excess-precision rule: a bf16 product and sum before the dot, which
#: XLA:GPU may compute in f32 without rounding between them (not measured)
REFUSED = {"affine-prologue-bf16"}


def _args(meta):
    (M, K, N), fn, dt = meta["shape"], meta["function"], meta["dtype"]
    return G.arrays(dt, G.inputs(fn, dt, M, K, N, meta["seed"]))


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def test_captures_cover_the_cases():
    assert {m["name"] for m, _ in CASES} == {c[0] for c in G.CASES}
    assert {m["run"] for m, _ in CASES} == {"gf1", "gf2"}
    assert all(m["device"].startswith(("NVIDIA H100", "NVIDIA H200")) for m, _ in CASES)  # sm_90


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]['run']}-{c[0]['name']}")
def test_replay_gives_the_gpus_bits(case):
    meta, gpu = case
    fn = jaxmma.gpu_replay(G.function(meta["function"]), meta["hlo"], unverified="omit")
    out = fn(*_args(meta))
    if meta["name"] in REFUSED:
        assert isinstance(out, jaxmma.Unverified)
        assert any("may keep in f32" in r for r in out.reasons), out.reasons
        return
    assert not isinstance(out, jaxmma.Unverified), out.reasons
    assert np.array_equal(_bits(out), gpu), int(np.sum(_bits(out) != gpu))


def _fused(meta) -> str:
    """The GEMM fusion's computation text."""
    h = meta["hlo"]
    i = h.index("%gemm_fusion")
    return h[i : h.index("\n}\n", i)]


def _fma(a, b, c):
    """``a * b + c`` rounded once to f32 (the f64 sum of the exact product, rounded to
    f32, differs from one rounding only on ties of the two roundings: none here, where
    the two f32 results of each element are compared with a third)."""
    return (a.astype(np.float64) * b + c).astype(np.float32)


def _tf32(x):
    """f32 rounded to tf32 with ties away from zero (XLA:GPU's f32 dots, docs/xla_gpu.md)."""
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize(
    "name", ["affine-prologue", "affine-epilogue", "bias-epilogue-bf16", "scale-epilogue-bf16"]
)
def test_the_captures_tell_the_roundings_apart(name):
    """An FMA in the f32 prologue or epilogue, or a bf16 dot's f32 accumulator fed to
    the bf16 epilogue unrounded, would change outputs the GPU gave: the other model
    computed here (NumPy, on the dot that gpu_replay reads for the fusion) differs from
    the GPU's bits in hundreds of outputs, where the replay differs in none."""
    for meta, gpu in (c for c in CASES if c[0]["name"] == name):
        body = _fused(meta)
        assert re.search(r"= \w+\[[\d,]+\]\{[\d,]+\} (add|multiply)\(", body)  # fused there
        (plan,) = _hlo.dots(meta["hlo"])
        arrs = G.inputs(meta["function"], meta["dtype"], *meta["shape"], meta["seed"])
        opts = dict(plan.options, out_dtype="float32")

        def dot(x, w, opts=opts):
            return np.asarray(jaxmma.matmul(jnp.asarray(x), jnp.asarray(w), **opts))

        if name == "affine-prologue":
            x, w, g, b = arrs
            sep, fused = x * g + b, _fma(x, g[None], b[None])
            assert np.sum(_tf32(sep) != _tf32(fused)) > 0  # the dot sees the difference
            other = dot(fused, w)
        elif name == "affine-epilogue":
            x, w, s, b = arrs
            other = _fma(dot(x, w), s[None], b[None])
        else:
            x, w = (jnp.asarray(a, jnp.bfloat16) for a in arrs[:2])
            acc = dot(x, w)  # the f32 accumulator, not rounded to bf16
            if name == "bias-epilogue-bf16":
                other = (acc + arrs[2]).astype(ml_dtypes.bfloat16)
            else:
                other = (acc * np.float32(ml_dtypes.bfloat16(G.SCALE))).astype(ml_dtypes.bfloat16)
        differ = int(np.sum(_bits(other) != gpu))
        assert differ > 100, (meta["run"], differ)


def _meta(name: str, run: str = "gf1"):
    return next(m for m, _ in CASES if m["name"] == name and m["run"] == run)


@pytest.mark.parametrize(
    "name, old, new, where",
    [
        # a subtraction (not measured) in place of the prologue's add
        ("affine-prologue", " add(%mul", " subtract(%mul", "(a prologue)"),
        # ... and of the epilogue's add
        ("affine-epilogue", " add(%mul", " subtract(%mul", "(an epilogue)"),
        # an epilogue sum of the dot with itself (one operand carried from the dot)
        (
            "residual-epilogue",
            " add(%parameter_2, %dot_general.0",
            " add(%dot_general.0, %dot_general.0",
            "(an epilogue)",
        ),
    ],
)
def test_unmeasured_fused_arithmetic_is_refused(name, old, new, where):
    meta = _meta(name)
    body = _fused(meta)
    assert old in body, body
    text = meta["hlo"].replace(body, body.replace(old, new, 1))
    (r,) = _hlo.read(text)
    assert isinstance(r, _hlo.Refusal) and where in r.reason, r
    fn = jaxmma.gpu_replay(G.function(meta["function"]), text, unverified="omit")
    out = fn(*_args(meta))
    assert isinstance(out, jaxmma.Unverified) and where in " ".join(out.reasons)
