"""XLA:GPU's f32 sums (jaxmma.xla_gpu._xla_sum, read from XLA's reduction emitters) against
an H100's: tests/golden/xla/xla-sums.npz (`python -m jaxmma.conformance._xla_sums`,
jax 0.11.2), random data whose every other order of adds gives other bits."""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_sums as XS
from jaxmma.xla_gpu import _hlo, _xla_sum

PATH = os.path.join(os.path.dirname(__file__), "golden", "xla", "xla-sums.npz")


def _records(path):
    """``(meta, output bits)`` of each case of a capture file."""
    with np.load(path) as z:
        keys = sorted({int(k.split(".")[0]) for k in z.files})
        return [(json.loads(str(z[f"{k}.meta"][()])), z[f"{k}.y"]) for k in keys]


RECORDS = _records(PATH)


def _input(meta):
    fn, make = XS.function(meta["kind"])
    return fn, make(XS.data(tuple(meta["shape"]), meta["seed"]))


def _mlir(meta) -> bool:
    return all(s.mlir for s in _hlo.emitters(meta["hlo"]).sums)


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: r[0]["name"])
def test_replay_gives_the_gpus_sum_or_refuses(rec):
    """Every sum in XLA's MLIR emitters (kInput, kLoop) replays to the GPU's bits, a long
    one XLA split in two such kernels too, the rows of 72 in one-warp Triton reduce
    fusions and the whole vectors of 1000 and 4096 in Triton reduce fusions (an order
    read later from other captures, tests/test_xla_scalar_sums.py); any other sum in a
    Triton fusion is refused by name."""
    meta, gpu = rec
    fn, x = _input(meta)
    out = jaxmma.gpu_replay(fn, meta["hlo"], unverified="omit")(jnp.asarray(x))
    if isinstance(out, jaxmma.Unverified):
        why = " ".join(out.reasons)
        assert not _mlir(meta) and ("outside XLA's MLIR" in why or "not measured" in why), meta
        assert meta["name"] not in TRITON_ROWS + TRITON_VECTORS
        return
    assert _mlir(meta) or meta["name"] in TRITON_ROWS + TRITON_VECTORS
    assert np.array_equal(np.asarray(out).view(np.uint32), gpu), meta["name"]


def test_the_orders_are_told_apart():
    """The CPU's own sums differ from the GPU's on these inputs (so the test above can
    fail), and so does a neighbouring order (load width 2 instead of 4)."""
    own = same = 0
    for meta, gpu in RECORDS:
        fn, x = _input(meta)
        own += int((np.asarray(fn(jnp.asarray(x))).view(np.uint32) != gpu).sum())
        if meta["name"] == "row_bf16-200x200":
            xf = np.asarray(x, np.float32)
            plan = _xla_sum.plan(xf.shape, (1,), narrow=True)
            assert plan.v == 4
            wrong = _xla_sum.SumPlan("row", plan.R, plan.n, 2)
            got = np.asarray(_xla_sum.reduce_sum(xf, xf.shape, (1,), wrong)).view(np.uint32)
            assert (got != gpu).sum() > 50
            same += 1
    assert own > 500 and same == 1


#: the captured sums in one-warp Triton reduce fusions of rows of 65 to 127 (tile [2], and
#: bf16 widened in a [1] tile)
TRITON_ROWS = ("row-200x72", "row_bf16-200x72")
#: the captured full sums in Triton reduce fusions of a whole vector (2 and 4 warps)
TRITON_VECTORS = ("full-1000", "full-4096")


@pytest.mark.full  # make test within 5 minutes (the quick run replays a sample above)
def test_triton_rows_are_contiguous_per_lane():
    """In a Triton reduce fusion of rows (its tile over the kept dimension) a lane holds
    four contiguous elements; the strided lanes of the normalization fusions give other
    bits on most rows of the same capture."""
    for meta, gpu in RECORDS:
        if meta["name"] not in TRITON_ROWS:
            continue
        _, x = _input(meta)
        xf = np.asarray(x, np.float32)
        for kind, want in (("triton_rows", True), ("triton_row", False)):
            p = _xla_sum.SumPlan(kind, xf.shape[0], xf.shape[1])
            got = np.asarray(_xla_sum.reduce_sum(xf, xf.shape, (1,), p)).view(np.uint32)
            if want:
                assert np.array_equal(got, gpu), meta["name"]
            else:
                assert (got != gpu).sum() > xf.shape[0] // 3, meta["name"]


@pytest.mark.full  # make test within 5 minutes (the quick run replays a sample above)
def test_counts():
    """Of the 35 cases of one H100 process: how many replay and how many are refused
    (none silently; the autotuner gave 12 of the sums to Triton fusions, of which the two
    rows of 72 in one-warp reduce fusions and the full sums of 1000 and 4096 replay; the
    full sums of 16385 and 100,000 elements XLA split in two kernels replay)."""
    n = {"same": 0, "refused": 0}
    for meta, _ in RECORDS:
        fn, x = _input(meta)
        out = jaxmma.gpu_replay(fn, meta["hlo"], unverified="omit")(jnp.asarray(x))
        n["refused" if isinstance(out, jaxmma.Unverified) else "same"] += 1
    assert n == {"same": 27, "refused": 8}, n


@pytest.mark.parametrize(
    "shape,axes,narrow,why",
    [
        ((8, 64), (1,), False, "multi-row"),
        ((8, 128), (1,), True, "multi-row"),
        ((300, 16), (0,), False, "small-column"),
        ((2, 20000), (1,), False, "two kernels"),  # rows of a batch: not read yet
        ((5000, 70), (0,), False, "two kernels"),
        ((4, 5, 6), (1,), False, "neither rows nor columns"),
    ],
)
def test_unread_emitters_are_refused(shape, axes, narrow, why):
    assert why in _xla_sum.plan(shape, axes, narrow)


def test_split_params_follow_the_tree_rewriter():
    """XLA's split of a long sum, as the captured modules show it ([113, 145] for 16385
    elements, [250, 400] for 100,000) and for a prime length (padded)."""
    assert _xla_sum.split_params(16385) == (113, 145, 0)
    assert _xla_sum.split_params(100000) == (250, 400, 0)
    for meta, _ in RECORDS:
        if meta["kind"] == "full" and meta["shape"][0] > 16384:
            k1, k2, _ = _xla_sum.split_params(meta["shape"][0])
            shapes = {s.shape for s in _hlo.emitters(meta["hlo"]).sums}
            assert {(k1, k2), (k1,)} <= shapes, (meta["name"], shapes)
    k1, k2, pad = _xla_sum.split_params(100003)
    assert k1 * k2 == 100003 + pad and 0 < pad < k2


NORM = os.path.join(os.path.dirname(__file__), "golden", "xla", "xla-triton-norm.npz")


def _norm(key):
    with np.load(NORM) as z:
        xs = [z[f"{key}.in{i}"] for i in range(3 if key == "ln" else 1)]
        return XS.norm_functions()[key], xs, str(z[f"{key}.hlo"][()]), z[f"{key}.y"]


def test_triton_layer_norm_replays():
    """XLA's Triton layer-norm fusion (a [1, 72] tile, one warp): its two sums in the
    measured lane order, x / 72 as x * fl(1/72), rsqrt.approx, no contraction: every
    element the GPU's."""
    fn, xs, hlo, gpu = _norm("ln")
    assert XS.norm_inputs()["ln"][0].tobytes() == xs[0].tobytes()  # rebuilt from the seed
    (sums,) = {s.triton for s in _hlo.emitters(hlo).sums}
    assert sums == ((1, 72), 1, False)
    out = jaxmma.gpu_replay(fn, hlo)(*(jnp.asarray(x) for x in xs))
    assert np.array_equal(np.asarray(out).view(np.uint32), gpu.view(np.uint32))


def test_triton_softmax_replays():
    """XLA's Triton softmax fusion (a [1, 100] tile, one warp): its max (IEEE, as
    tests/test_replay_max.py measures), exp, its sum in the measured lane order and
    ``div.full``: every element the GPU's; the MLIR emitter's order for the same rows
    would give other sums."""
    fn, xs, hlo, gpu = _norm("softmax")
    out = jaxmma.gpu_replay(fn, hlo)(jnp.asarray(xs[0]))
    assert np.array_equal(np.asarray(out).view(np.uint32), gpu.view(np.uint32))
    x = xs[0]
    e = np.asarray(arith_exp((x - x.max(-1, keepdims=True)).astype(np.float32)))
    plan = _xla_sum.triton_plan(e.shape, (1,), ((1, 100), 1, False), False)
    s = np.asarray(_xla_sum.reduce_sum(e, e.shape, (1,), plan))
    mlir = _xla_sum.plan(e.shape, (1,), False)
    s2 = np.asarray(_xla_sum.reduce_sum(e, e.shape, (1,), mlir))
    assert (s2 != s).mean() > 0.2


def arith_exp(x):
    f = jaxmma.arith.GPU_FUNCTIONS["exp"][1]
    return np.asarray(f(np.asarray(x, np.float32).view(np.uint32))).view(np.float32)


@pytest.mark.parametrize(
    "shape,config,why",
    [
        ((200, 72), ((1, 72), 8, False), "not measured"),  # 8 warps
        ((200, 72), ((2, 72), 1, False), "not measured"),  # two rows a program
        ((200, 72), ((1, 72), 1, True), "not measured"),  # TMA
        ((200, 72), ((1, 16), 1, False), "not measured"),  # part of a row a program
        ((200, 32), ((1, 32), 1, False), "row of 32"),
        ((200, 5000), ((1, 5000), 4, False), "row of 5000"),
        ((200, 100), ((1, 100), 4, False), "row of 100"),  # 64 elements a warp at least
        ((200, 200), ((1,), 1, False), "not measured"),  # rows tiles: rows of 65 to 127
        ((200, 72), ((4,), 1, False), "not measured"),  # rows tiles: [1] and [2] measured
        ((2, 200, 72), ((1, 1), 1, False), "not measured"),
    ],
)
def test_unmeasured_triton_reduces_are_refused(shape, config, why):
    assert why in _xla_sum.triton_plan(shape, (1,), config, False)


ROWS = os.path.join(os.path.dirname(__file__), "golden", "xla", "xla-triton-rows.npz")


ROW_RECORDS = _records(ROWS)


def _tile(hlo):
    """(rows a program, the tile's row length, warps) of the module's Triton
    normalization fusion."""
    (s,) = {s.triton for s in _hlo.emitters(hlo).sums if s.triton}
    return int(np.prod(s[0][:-1])), s[0][-1], s[1]


def _replayed(meta):
    shape = tuple(meta["shape"])
    x = XS.row_input(shape, meta["seed"])
    fn = XS.row_function(meta["function"])
    return x, jaxmma.gpu_replay(fn, meta["hlo"], unverified="omit")(jnp.asarray(x))


@pytest.mark.parametrize("rec", ROW_RECORDS, ids=lambda r: r[0]["name"])
def test_triton_rows_replay_or_refuse(rec):
    """Softmaxes, layer norms and ``x / sum(x)`` of rows of 33 to 16384, batched as
    attention's are, in XLA's Triton normalization fusions (three H100 processes): every
    kept row of an output the replay gives is the GPU's; the others are refused as not
    measured (tiles of part of a row, 8 warps)."""
    meta, gpu = rec
    n = meta["shape"][-1]
    _, out = _replayed(meta)
    rows, length, warps = _tile(meta["hlo"])
    if isinstance(out, jaxmma.Unverified):
        assert any("not measured" in r for r in out.reasons), out.reasons
        assert length != n or warps == 8, meta["name"]  # only those, in these captures
        return
    got = np.asarray(out).view(np.uint32).reshape(-1, n)[: len(gpu)]
    assert np.array_equal(got, gpu), (meta["name"], int((got != gpu).any(-1).sum()))


@pytest.mark.full  # make test within 5 minutes (the quick run replays a sample above)
def test_triton_rows_counts():
    """Of the 97 captures: 67 replay (whole rows, one to eight a program, 1, 2 or 4
    warps), 30 are refused (parts of rows, 8 warps)."""
    n = {"same": 0, "refused": 0}
    for meta, _ in ROW_RECORDS:
        n["refused" if isinstance(_replayed(meta)[1], jaxmma.Unverified) else "same"] += 1
    assert n == {"same": 67, "refused": 30}, n


def _lane_tree_sum(e, warps, within, lanes=32, spt=1):
    """A NumPy model of a Triton row sum, written apart from _xla_sum: the row padded to a
    power of two; in lane ``l`` of warp ``w`` (``warps`` warps and ``lanes`` lanes along
    the row) the elements ``spt (l + lanes w + lanes warps r) + s``; each lane's elements
    added ``within`` ("tree": pairwise in the order of ``(r, s)``, or "seq": in that
    order), the lanes by the shuffle tree, the warps' results by the same tree."""
    R, n = e.shape
    P = 1 << (n - 1).bit_length()
    x = np.zeros((R, P), np.float32)
    x[:, :n] = e
    q = x.reshape(R, P // (spt * lanes * warps), warps, lanes, spt)
    regs = list(q.transpose(1, 4, 0, 2, 3).reshape(-1, R, warps, lanes))
    if within == "seq":
        acc = regs[0]
        for r in regs[1:]:
            acc = acc + r
    else:
        while len(regs) > 1:
            regs = [regs[i] + regs[i + 1] for i in range(0, len(regs), 2)]
        acc = regs[0]
    d = lanes // 2
    while d >= 1:
        acc = acc + acc[..., np.arange(lanes) ^ d]
        d //= 2
    part = acc[..., 0]  # [R, warps]
    while part.shape[-1] > 1:
        h = part.shape[-1] // 2
        part = part[..., :h] + part[..., h:]
    return part[:, 0]


@pytest.mark.full  # 30 s: a check on the model, not on the replay (which the quick run tests)
def test_triton_row_order_is_told_apart():
    """The captured softmaxes in whole-row tiles against a NumPy model of the order: one
    row a program, one element a lane and repetition, every warp along the row; several
    rows a program, four contiguous elements a lane, lanes and warps along the row as far
    as it reaches. Pairwise in each lane gives every kept row; a sequential sum in each
    lane gives other bits on many rows, so the replay tests above can fail."""
    div = jaxmma.arith.GPU_FUNCTIONS["div"][1]
    same = other = 0
    for meta, gpu in ROW_RECORDS:
        n = meta["shape"][-1]
        rows, length, warps = _tile(meta["hlo"])
        if meta["function"] != "softmax" or length != n or warps == 8:
            continue
        x = XS.row_input(tuple(meta["shape"]), meta["seed"]).reshape(-1, n)[: len(gpu)]
        e = arith_exp(x - x.max(-1, keepdims=True))
        P = 1 << (n - 1).bit_length()
        if rows == 1:
            layout = dict(lanes=32, spt=1, warps=warps)
        else:
            lanes = min(32, P // 4)
            layout = dict(lanes=lanes, spt=4, warps=min(warps, max(1, P // (4 * lanes))))
        for within in ("tree", "seq"):
            s = _lane_tree_sum(e, within=within, **layout)
            s = np.broadcast_to(s[:, None], e.shape)
            y = np.asarray(div(e.view(np.uint32), s.view(np.uint32)))
            rows_off = int((y != gpu).any(-1).sum())
            if within == "tree":
                assert rows_off == 0, meta["name"]
                same += 1
            else:
                other += rows_off
    assert same >= 25 and other >= 40, (same, other)
