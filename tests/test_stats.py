"""recipes.stats against a NumPy oracle: ml_dtypes' own casts decide which elements
underflow, turn subnormal or saturate (jaxmma/training/_stats.py)."""

import doctest

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxmma import recipes
from jaxmma.training import _stats

DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e2m1": ml_dtypes.float4_e2m1fn,
}


def _oracle(x, fmt, scale):
    """(amax, underflow, subnormal, saturated) from ml_dtypes' cast of x * scale."""
    dtype = DTYPES[fmt]
    info = ml_dtypes.finfo(dtype)
    x = np.asarray(x, np.float32)
    with np.errstate(all="ignore"):
        v = x * np.asarray(scale, np.float32)
        r = v.astype(dtype).astype(np.float64)  # out-of-range: NaN (e4m3), Inf, or max
    number = ~np.isnan(v)
    finite = x[np.isfinite(x)]
    return (
        float(np.max(np.abs(finite))) if finite.size else 0.0,
        int(np.sum(number & (x != 0) & (r == 0))),
        int(np.sum(number & (r != 0) & (np.abs(r) < float(info.smallest_normal)))),
        int(np.sum(number & (np.abs(v) > float(info.max)))),
    )


def _got(s):
    return (float(s.amax), int(s.underflow), int(s.subnormal), int(s.saturated))


def _sweep(fmt):
    """Every positive value of the format, the midpoints between neighbours (ties), a
    quarter of the way between them, values past the maximum, with both signs, zeros,
    Inf and NaN."""
    dtype = DTYPES[fmt]
    codes = np.arange(2 ** ml_dtypes.finfo(dtype).bits, dtype=np.uint8)
    values = codes.view(dtype) if dtype != ml_dtypes.float4_e2m1fn else codes[:16].view(dtype)
    grid = np.unique(np.abs(values.astype(np.float64)))
    grid = grid[np.isfinite(grid)]
    top = grid[-1]
    grid = np.concatenate([grid, [top * 1.03, top * 1.1, top * 2, top * 1e3]])
    mids = (grid[:-1] + grid[1:]) / 2
    quarters = grid[:-1] + (grid[1:] - grid[:-1]) / 4
    pos = np.concatenate([grid, mids, quarters])
    return np.concatenate([pos, -pos, [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)


@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_every_value_and_tie_against_ml_dtypes(fmt):
    x = _sweep(fmt)
    scale = np.float32(4.0)  # exact: x / 4 * 4 is x
    want = _oracle(x / scale, fmt, scale)
    assert min(want[1:]) > 0, f"the sweep hits every count, got {want}"
    got = jax.jit(recipes.stats, static_argnums=1)(jnp.asarray(x / scale), fmt, scale)
    assert _got(got) == want
    assert int(got.size) == x.size


def test_random_values_and_row_scales_against_ml_dtypes():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 64)) * np.exp2(rng.integers(-14, 10, (8, 64)))).astype(np.float32)
    scale = np.float32(448.0) / np.max(np.abs(x), axis=1, keepdims=True) * np.float32(3.0)
    want = _oracle(x, "e4m3", scale)
    assert want[1] > 0 and want[3] > 0, want
    assert _got(recipes.stats(jnp.asarray(x), "e4m3", jnp.asarray(scale))) == want
    # vmap: one Stats per row, each that row's oracle
    rows = jax.vmap(recipes.stats, in_axes=(0, None, 0))(x, "e4m3", scale)
    for i in range(x.shape[0]):
        assert _got(jax.tree.map(lambda a, i=i: a[i], rows)) == _oracle(x[i], "e4m3", scale[i])


def test_bfloat16_input_and_default_scale():
    x = jnp.asarray([0.0, 1e-9, 2.0**-8, 1.0, 1e5], jnp.bfloat16)
    want = _oracle(np.asarray(x, np.float32), "e5m2", 1.0)
    assert _got(recipes.stats(x, "e5m2")) == want


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((jnp.ones(4), "e4m3fn"), ValueError, "fmt: expected one of e4m3, e5m2, e2m1"),
        ((jnp.ones(4, jnp.int32), "e4m3"), TypeError, "x: expected a float array"),
        ((jnp.ones(4), "e4m3", jnp.ones(3)), ValueError, "scale: expected a shape"),
        ((jnp.ones(4), "e4m3", "1.0"), TypeError, "scale: expected a float"),
    ],
)
def test_bad_arguments(args, error, words):
    with pytest.raises(error, match=words):
        recipes.stats(*args)


def test_doctest():
    result = doctest.testmod(_stats)
    assert result.attempted and not result.failed, result
