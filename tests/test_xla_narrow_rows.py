"""gpu_replay of XLA:GPU's row sums in Triton normalization fusions of bf16 inputs
(widened to f32 in the fusion), against the GPU.

The GPU's bits are ``tests/golden/xla/xla-narrow-rows-{nr1,nr2}.npz``
(``jaxmma/conformance/_xla_narrow_rows.py`` on an H100, two processes): FPRev probes
through ``x - sum(x)`` (every row of the probe for anchors 0, 1 and the last element)
and log-softmaxes of random bf16 rows, rows of 72 to 1000 in tiles of one row (1 and 2
warps) and of 2 and 4 rows (2 and 4 warps). A tile of one row lays the row out as for
f32 inputs; a tile of several rows puts 8 contiguous elements on a lane (16 bytes of
bf16) where f32 rows have 4."""

import json
import os
import re

import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_narrow_rows as C
from jaxmma.xla_gpu import _xla_sum

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
FILES = [os.path.join(GOLDEN, f"xla-narrow-rows-{r}.npz") for r in ("nr1", "nr2")]
#: refused, with the reason's words: a tile of part of a row, and an odd row length in
#: a tile of several rows (its vector width is not measured)
REFUSED = {"centered_sum-72": "tile [1, 64]", "centered_sum-333": "of 16-bit inputs: not measured"}


def _load():
    out = []
    for path in FILES:
        with np.load(path) as z:
            for k in sorted({int(k.split(".")[0]) for k in z.files}):
                meta = json.loads(str(z[f"{k}.meta"][()]))
                ys = [z[f"{k}.y{i}"] for i in range(3) if f"{k}.y{i}" in z.files]
                out.append((meta, ys))
    return out


CASES = _load()


def _inputs(meta):
    if meta["function"] == "centered_sum":
        return [C.probe_rows(meta["n"], a) for a in meta["anchors"]]
    return [C.random_rows(meta["n"], meta["seed"])]


def _tile(meta):
    m = re.search(r'"num_warps":"(\d+)","output_tiles":\[\{"sizes":\[([^\]]*)\]', meta["hlo"])
    return int(m.group(1)), [int(t.strip('"')) for t in m.group(2).split(",")]


def _quick(meta) -> bool:
    """In the quick run: the probes of rows up to 200 (the log-softmaxes' exp and log take
    longer to replay)."""
    return meta["function"] == "centered_sum" and meta["n"] <= 200


def test_captures_show_one_and_several_rows_a_tile():
    tiles = {(w, t[0]) for w, t in map(_tile, (m for m, _ in CASES))}
    assert {(1, 1), (2, 1), (2, 2), (4, 4)} <= tiles


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=[] if _quick(c[0]) else [pytest.mark.full])  # make test in 5 min
        for c in CASES
    ],
    ids=lambda c: f"{c[0]['run']}-{c[0]['name']}",
)
def test_replay_gives_the_gpus_bits(case):
    meta, ys = case
    f = jaxmma.gpu_replay(C.function(meta["function"]), meta["hlo"], unverified="omit")
    for x, y in zip(_inputs(meta), ys, strict=True):
        out = f(jnp.asarray(x, jnp.bfloat16))
        if meta["name"] in REFUSED:
            assert isinstance(out, jaxmma.Unverified)
            assert any(REFUSED[meta["name"]] in r for r in out.reasons), out.reasons
            return
        assert not isinstance(out, jaxmma.Unverified), out.reasons
        got = np.asarray(out).view(np.uint32)
        assert np.array_equal(got, y), int(np.sum(got != y))


@pytest.mark.full  # make test within 5 minutes
def test_the_f32_layout_differs_on_bf16_rows_of_several_a_tile():
    """Four contiguous elements a lane (the f32 rows' layout) instead of eight give other
    sums on most probe rows of 200 in [2, 200] tiles: the probes tell the widths apart."""
    meta, ys = next(c for c in CASES if c[0]["name"] == "centered_sum-200")
    warps, tile = _tile(meta)
    assert tile == [2, 200] and warps == 2
    n, a = meta["n"], meta["anchors"][0]
    x, y = _inputs(meta)[0], ys[0].view(np.float32).reshape(n, n)
    col = [next(c for c in range(n) if c not in (a, j)) for j in range(n)]
    gpu = np.float32(1) - y[np.arange(n), col]  # each row's sum
    for spt, lanes, along, want in ((8, 32, 1, 0), (4, 32, 2, None)):
        p = _xla_sum.SumPlan("triton_row", n, n, along, lanes=lanes, spt=spt)
        got = np.asarray(_xla_sum.reduce_sum(jnp.asarray(x), (n, n), (1,), p))
        differ = int(np.sum((got != gpu)[np.arange(n) != a]))
        assert differ == want if want is not None else differ > n // 2, (spt, differ)
