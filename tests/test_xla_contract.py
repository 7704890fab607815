"""XLA:GPU's Triton normalization fusions round every multiply and add on its own
(``jaxmma/conformance/_xla_contract.py`` run on an H100 in two processes into
``tests/golden/xla/xla-contract-*.npz``): affine centerings, affine layer norms and row
scalings, in tiles of one row and of several. Where the fusion's sums are read, the
replay (one rounding per operation) is the GPU's on every kept element, while the same
function with any one multiply-add as an exact FMA differs; where they are not read,
the replay refuses."""

import glob
import json
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.arith import _fma32
from jaxmma.conformance import _xla_contract as XC
from jaxmma.xla_gpu import _hlo

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "xla-contract-*.npz")))


def _records():
    out = []
    for path in FILES:
        with np.load(path) as z:
            for k in sorted({f.split(".")[0] for f in z.files}, key=int):
                meta = json.loads(str(z[f"{k}.meta"][()]))
                out.append((os.path.basename(path), meta, z[f"{k}.y"]))
    return out


RECORDS = _records()
#: replayed in the quick run: one-row and several-row tiles of each function
QUICK = {"200x72", "400x72", "2x200x72"}


def _fma(a, b, c):
    """fl(a * b + c), one rounding (an exact FMA on the bits)."""
    a, b, c = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.float32) for v in (a, b, c)))
    bits = [jax.lax.bitcast_convert_type(v, jnp.uint32) for v in (a, b, c)]
    return jax.lax.bitcast_convert_type(_fma32.ieee_fma_f32(*bits), jnp.float32)


def _contracted(name: str) -> dict:
    """The case's function with one multiply-add as an FMA, per multiply-add."""
    if name == "center_affine":

        def mean_fma(x, g, b):
            c = np.float32(1) / np.float32(x.shape[-1])
            return _fma(-jnp.sum(x, -1, keepdims=True), c, x) * g + b

        return {
            "affine": lambda x, g, b: _fma(x - jnp.mean(x, -1, keepdims=True), g, b),
            "mean": mean_fma,
        }
    if name == "layer_norm":

        def ln(x, g, b, affine=False, var=False):
            d = x - jnp.mean(x, -1, keepdims=True)
            c = np.float32(1) / np.float32(x.shape[-1])
            s = jnp.sum(d * d, -1, keepdims=True)
            v = _fma(s, c, np.float32(1e-5)) if var else s * c + np.float32(1e-5)
            r = d * jax.lax.rsqrt(v)
            return _fma(r, g, b) if affine else r * g + b

        return {
            "affine": lambda x, g, b: ln(x, g, b, affine=True),
            "variance": lambda x, g, b: ln(x, g, b, var=True),
        }
    return {
        "row scale": lambda x: _fma(x, jnp.sum(x, -1, keepdims=True), jnp.max(x, -1, keepdims=True))
    }


def _read(meta) -> bool:
    """Whether the replay reads the module's Triton sums (a tile of whole rows)."""
    sums = [s for s in _hlo.emitters(meta["hlo"]).sums if s.triton]
    return bool(sums) and all(_hlo._measured_norm(s.triton, {s.shape[-1]}) for s in sums)


def _case(rec):
    return pytest.param(rec, id=f"{rec[0][:-4]}-{rec[1]['name']}", marks=() if any(
        rec[1]["name"].endswith(q) for q in QUICK) else pytest.mark.full)  # fmt: skip


@pytest.mark.skipif(not FILES, reason="no captures")
def test_captures_cover_both_tilings():
    """Tiles of one row and of several rows among the read cases, in each process."""
    for path in FILES:
        recs = [m for f, m, _ in RECORDS if f == os.path.basename(path)]
        rows = set()
        for meta in recs:
            if _read(meta):
                rows |= {_hlo._measured_norm(s.triton, {s.shape[-1]})
                         for s in _hlo.emitters(meta["hlo"]).sums if s.triton}  # fmt: skip
        assert rows == {"row", "rows"}, (path, rows)


@pytest.mark.parametrize("rec", [_case(r) for r in RECORDS])
def test_no_contraction_in_triton_normalization(rec):
    """Read tiles: gpu_replay (no refusal) gives the GPU's kept rows, and an FMA in any
    one multiply-add gives other bits (the mean's and variance's products by 1/n only
    where 1/n is not a power of two: else they are exact either way). Other tiles are
    refused."""
    with jax.numpy_rank_promotion("allow"):  # the captured functions broadcast g and b
        _check(*rec)


def _check(_, meta, gpu):
    shape, n = tuple(meta["shape"]), meta["shape"][-1]
    xs = [jnp.asarray(a) for a in XC.case_inputs(meta["function"], shape, meta["seed"])]
    fn = XC.function(meta["function"])
    if not _read(meta):  # a tile of part of a row: its sums are not read
        with pytest.raises(ValueError, match="not established"):
            jaxmma.gpu_replay(fn, meta["hlo"])(*xs)
        return
    got = np.asarray(jaxmma.gpu_replay(fn, meta["hlo"])(*xs)).view(np.uint32)
    got = got.reshape(-1, n)[: len(gpu)]
    assert np.array_equal(got, gpu), int((got != gpu).sum())
    exact = n & (n - 1) == 0  # 1/n a power of two: the mean's and variance's products exact
    for what, alt in _contracted(meta["function"]).items():
        with warnings.catch_warnings():  # the FMA's bit operations are not the GPU's
            warnings.simplefilter("ignore", UserWarning)
            y = jaxmma.gpu_replay(alt, meta["hlo"], unverified="compute")(*xs)
        other = np.asarray(y).view(np.uint32).reshape(-1, n)[: len(gpu)]
        differ = int((other != gpu).sum())
        if exact and what in ("mean", "variance"):
            assert differ == 0, what
        else:
            assert differ > 0, (what, meta["name"])
