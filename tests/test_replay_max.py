"""gpu_replay's max, min and clamp where NaNs and signed zeros decide, against XLA:GPU.

The GPU's bits are the capture ``tests/golden/xla/xla-triton-max.npz``
(``jaxmma/conformance/_xla_triton_max.py`` on an H100): max / min reductions in XLA's
Triton normalization fusions (softmax, ``x - max(x)``; tiles of one and two warps) and in
its MLIR reduction emitters, and elementwise ``maximum`` / ``minimum`` / ``clip``, on rows
holding NaNs of every payload and sign, zeros of both signs, infinities and
subnormals. The cases named ``-process2`` come from a second process, in which the
autotuner gave those max reductions (f32 and bf16, rows of 1000, two warps) to Triton
reduce fusions rather than to the MLIR emitters."""

import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_triton_max as M
from jaxmma.xla_gpu import _hlo

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla", "xla-triton-max.npz")


def _cases():
    with np.load(GOLDEN) as z:
        keys = sorted({int(k.split(".")[0]) for k in z.files})
        out = []
        for k in keys:
            meta = json.loads(str(z[f"{k}.meta"][()]))
            ys = [z[f"{k}.y{i}"] for i in range(3) if f"{k}.y{i}" in z.files]
            out.append((meta, ys))
        return out


CASES = _cases()


def _input(meta):
    n, seed = meta["shape"][1], meta["seed"]
    if meta["function"].endswith("_bf16"):
        return M.rows_bf16(n, meta["shape"][0], seed).view(ml_dtypes.bfloat16)
    return M.rows(n, meta["shape"][0], seed).view(np.float32)


def _u(x):
    x = np.asarray(x)
    return x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


#: captures still refused (none: the softmax of rows of 1000 in a two-warp Triton tile
#: is read by the order tests/test_xla_sums.py measures)
REFUSED: set = set()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0]["name"])
def test_replay_gives_the_gpus_bits(case):
    """Every output is the GPU's, bit for bit (NaN payloads included), or refused."""
    meta, want = case
    x = jnp.asarray(_input(meta))
    got = jaxmma.gpu_replay(M.function(meta["function"]), meta["hlo"], unverified="omit")(x)
    got = got if isinstance(got, tuple) else (got,)
    refused = [isinstance(g, jaxmma.Unverified) for g in got]
    assert any(refused) == (meta["name"] in REFUSED), [g for g in got if refused]
    for g, w in zip(got, want, strict=True):
        if not isinstance(g, jaxmma.Unverified):
            assert np.array_equal(_u(g), w), (meta["name"], np.count_nonzero(_u(g) != w))


def test_the_gpu_gives_its_canonical_nan():
    """The evidence the rule rests on, read from the capture: where a row holds a NaN
    (five payloads, both signs, quiet and signaling), the GPU's max of the row and
    every elementwise max / min / clip with a NaN operand is the canonical NaN, f32
    ``0x7FFFFFFF`` and bf16 ``0x7FFF``, never the operand's own NaN (what the CPU
    gives, and what the replay gave before)."""
    seen = 0
    for meta, want in CASES:
        x = _u(_input(meta))
        nan_bits = 0x7FFF if x.dtype == np.uint16 else 0x7FFFFFFF
        mag = x & (0x7FFF if x.dtype == np.uint16 else 0x7FFFFFFF)
        nan = mag > (0x7F80 if x.dtype == np.uint16 else 0x7F800000)
        if meta["function"].startswith("max_and_centered"):
            rows = nan.any(-1)
            assert rows.sum() == 16
            assert set(want[0][rows].tolist()) == {nan_bits}
            seen += 1
        if meta["function"].startswith("elementwise"):
            either = nan | nan[::-1]
            for w in want:
                assert set(w[either].tolist()) == {nan_bits}
            xs = jnp.asarray(_input(meta))
            cpu = np.asarray(jnp.maximum(xs, xs[::-1]))
            assert set(_u(cpu)[either].tolist()) != {nan_bits}  # the CPU keeps payloads
            seen += 1
    assert seen == 10  # eight reductions, two elementwise


def test_signed_zeros_and_subnormals():
    """From the capture: a row of zeros with one +0 has the max +0, one with a -0 among
    +0 the min -0, whatever the tile; subnormal rows keep their subnormal max (the CPU
    flushes them)."""
    for meta, want in CASES:
        if meta["function"] != "max_and_centered":
            continue
        x = _u(_input(meta))
        m = want[0]
        # rows 16-18: -0 with one +0; 19-21: +0 with one -0; 22, 23: negatives and zeros
        assert m[16:22].tolist() == [0] * 6
        assert m[22:24].tolist() == [0, 0]
        # rows 28-30: subnormals, their largest by value
        for r in (28, 29, 30):
            vals = x[r].view(np.float32).astype(np.float64)
            assert m[r] != 0 and m[r] == x[r][np.argmax(vals)]


def test_triton_max_reductions_are_read_as_ieee():
    """The module facts: the f32 and bf16 max / min reductions of these Triton fusions
    are not refused; a Triton fusion's f16 one still is (not measured)."""
    for meta, _ in CASES:
        assert _hlo.emitters(meta["hlo"]).minmax == (), meta["name"]
    (meta, _) = next(c for c in CASES if c[0]["name"] == "centered_max-64x1000")
    f16 = meta["hlo"].replace("f32[", "f16[")
    assert _hlo.emitters(f16).minmax  # the same Triton reduce on f16: refused


def test_the_cpu_differs():
    """So the tests above can fail: the CPU's own program differs from the GPU's
    capture in the NaN rows of every case with NaN outputs."""
    differs = 0
    for meta, want in CASES:
        x = jnp.asarray(_input(meta))
        cpu = jax.jit(M.function(meta["function"]))(x)
        cpu = cpu if isinstance(cpu, tuple) else (cpu,)
        differs += any(not np.array_equal(_u(c), w) for c, w in zip(cpu, want, strict=True))
    assert differs >= len(CASES) - 2
