"""XLA:GPU's own dots, captured on an H100 (tests/golden/xla/), reproduced on the CPU.

The captures (``python jaxmma/conformance/_xla_capture.py --save DIR --run NAME`` on a
GPU; jax 0.11.2) hold, per jitted function, the compiled HLO text, the input seeds and the
output bits (whole, or a 32 x 32 corner and the SHA-256 of the whole), for one process
with ``--xla_gpu_autotune_level=0`` (``pinned``) and three with default autotuning. Dots
of bf16/f16/f32-input records also carry FPRev probe results (the hardware's own reduce
tree, read off with special inputs run through the same compiled executable).

Independent references: the XLA split rule, reduce orders, tf32 rounding with ties away
and the fp8 -> f16 path are checked against slice-by-slice loops of the instruction's
matrix level with the adds written out in NumPy f32; the reduce trees against the
hardware's probes; the reader's options against the captured bits.
"""

import functools
import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxmma
from jaxmma.conformance import _xla_capture as X
from jaxmma.xla_gpu import _xla_reduce, xla_gpu_dots

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "xla")
RUNS = ("pinned", "auto1", "auto2", "auto3")
CASES = {c.name: c for c in X.cases()}
CORNER = 16


@functools.cache
def records():
    """``[(run, meta, arrays)]`` of every capture."""
    out = []
    for run in RUNS:
        with np.load(os.path.join(GOLDEN, f"xla-{run}.npz")) as z:
            keys = sorted(k for k in z.files if k.endswith(".meta"))
            for k in keys:
                meta = json.loads(str(z[k][()]))
                pre = k[: -len(".meta")]
                arrays = {n.split(".", 1)[1]: z[n] for n in z.files if n.startswith(pre + ".")}
                arrays.pop("meta")
                out.append((run, meta, arrays))
    return out


def record(run, name):
    return next(r for r in records() if r[0] == run and r[1]["name"] == name)


def _ids(r):
    return f"{r[0]}-{r[1]['name']}"


def _triton_configs(recs):
    return {p.emitter for r in recs for p in xla_gpu_dots(r[1]["hlo"]) if "Triton" in p.emitter}


# ----------------------------------------------------------------------------- references
def _lin(seed, shape, fmt):
    """Random normal values (bits from the capture generator) of ``fmt``."""
    bits = X.random_bits(f"test|{seed}", fmt, shape, -3, 1)
    return bits.view(ml_dtypes.finfo(X.DTYPE_NAMES[fmt]).dtype)


def _chain(ins, A, B, k):
    """The instruction's matrix level chained over k-steps from +0 (the reference)."""
    M, N = A.shape[0], B.shape[1]
    c = np.zeros((M, N), np.float32)
    for s in range(0, A.shape[1], k):
        c = np.asarray(ins.mma(A[:, s : s + k], B[s : s + k], c))
    return c


def _reduce(parts, order):
    parts = [np.float32(p) for p in parts]
    if order == "sequential":
        acc = np.zeros_like(parts[0])
        for p in parts:
            acc = (acc + p).astype(np.float32)
        return acc
    if order == "halving":
        while len(parts) > 1:
            h = len(parts) // 2
            parts = [(parts[i] + parts[i + h]).astype(np.float32) for i in range(h)]
        return parts[0]

    def tree(t):
        return parts[t] if isinstance(t, int) else (tree(t[0]) + tree(t[1])).astype(np.float32)

    return tree(order)


BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


@pytest.mark.parametrize(
    "order",
    [
        pytest.param("sequential", marks=pytest.mark.full),
        pytest.param("halving", marks=pytest.mark.full),
        ((0, 2), (1, 3)),
    ],
)
def test_xla_split_against_slice_loops(order):
    """bf16, K = 128 cut into 4 contiguous slices of 32; bf16 output after the reduce."""
    A, B = _lin(1, (16, 128), "bf16"), _lin(2, (128, 8), "bf16")
    ins = jaxmma.instruction(BF16, arch="sm_90")
    parts = [_chain(ins, A[:, 32 * s : 32 * s + 32], B[32 * s : 32 * s + 32], 16) for s in range(4)]
    want = _reduce(parts, order).astype(ml_dtypes.bfloat16)
    got = jaxmma.matmul(
        A, B, instruction=BF16, arch="sm_90", split_k=4, split_rule="xla",
        split_reduce=order, out_dtype=jnp.bfloat16,
    )  # fmt: skip
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), want.view(np.uint16))
    # the orders do differ on these inputs (else the test could not fail)
    other = _reduce(parts, "sequential" if order != "sequential" else "halving")
    assert not np.array_equal(_reduce(parts, order), other)


def _rna_tf32(x):
    """f32 -> tf32 with ties away from zero (``cvt.rna.tf32.f32``) on the bits."""
    b = np.asarray(x, np.float32).view(np.uint32)
    return ((b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _rn_tf32(x):
    b = np.asarray(x, np.float32).view(np.uint32)
    odd = (b >> np.uint32(13)) & np.uint32(1)
    return ((b + np.uint32(0xFFF) + odd) & np.uint32(0xFFFFE000)).view(np.float32)


def test_tf32_rna_against_loops():
    A = _lin(3, (16, 64), "f32")
    B = _lin(4, (64, 8), "f32")
    A[0, :4] = np.float32(1 + 2**-11)  # exact ties: away from zero differs from even
    B[:4, 0] = np.float32(-(1 + 3 * 2**-11))
    ins = jaxmma.instruction(TF32, arch="sm_90")

    def reference(rnd):
        return _reduce(
            [_chain(ins, rnd(A[:, 32 * s : 32 * s + 32]), rnd(B[32 * s : 32 * s + 32]), 8)
             for s in range(2)], "sequential",
        )  # fmt: skip

    want = reference(_rna_tf32)
    got = jaxmma.matmul(A, B, instruction=TF32, arch="sm_90", split_k=2, split_rule="xla",
                        input_rounding="rna")  # fmt: skip
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))
    assert not np.array_equal(reference(_rn_tf32), want)  # the ties do matter here


def test_fp8_through_f16_against_loops():
    A = _lin(5, (16, 64), "e4m3")
    B = _lin(6, (64, 8), "e5m2")
    ins = jaxmma.instruction(F16, arch="sm_90")
    Ah, Bh = A.astype(np.float16), B.astype(np.float16)  # exact conversions
    want = _reduce([_chain(ins, Ah[:, :32], Bh[:32], 16), _chain(ins, Ah[:, 32:], Bh[32:], 16)],
                   "sequential")  # fmt: skip
    got = jaxmma.matmul(A, B, instruction=F16, arch="sm_90", split_k=2, split_rule="xla",
                        convert_inputs="f16")  # fmt: skip
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))


# ----------------------------------------------------------------------------- reduce trees
def _lca_tree(lca, S):
    """The pairing tree whose node sizes are ``lca[i][j]`` (FPRev reconstruction)."""

    def build(items):
        if len(items) == 1:
            return items[0]
        left = [items[0]]
        grown = True
        while grown:
            grown = False
            for j in items:
                if j not in left and any(lca[i][j] < len(items) for i in left):
                    left.append(j)
                    grown = True
        right = [j for j in items if j not in left]
        assert right, "inconsistent probe"
        return (build(sorted(left)), build(sorted(right)))

    return build(list(range(S)))


def _canon(t):
    return frozenset([t]) if isinstance(t, int) else frozenset([_canon(t[0]), _canon(t[1])])


def _canon_order(order, S):
    if order == "sequential":
        t = 0
        for s in range(1, S):
            t = (t, s)
        return _canon(t)
    if order == "halving":
        return _canon(_xla_reduce.butterfly(S, list(reversed(range(S.bit_length() - 1)))))
    return _canon(order)


@functools.cache
def extra_records():
    """Six more autotuned processes, HLO and probes only (``xla-extra.npz``)."""
    return [r for r in _npz_records("xla-extra.npz") if "probe" in r[2]]


def _npz_records(filename, run=None):
    """``[(run, meta, {"probe": ...} or {})]`` of a capture file holding HLO and probes
    (``run``: the key's folder where not given)."""
    out = []
    with np.load(os.path.join(GOLDEN, filename)) as z:
        for k in sorted(n for n in z.files if n.endswith(".meta")):
            meta = json.loads(str(z[k][()]))
            probe = k[: -len(".meta")] + ".probe"
            arrays = {"probe": z[probe]} if probe in z.files else {}
            out.append((run or k.split("/")[0], meta, arrays))
    return out


@functools.cache
def s128_records():
    """Ten more dots of one process (``xla-s128.npz``: HLO, output hashes and probes; an
    H100, jax 0.11.2), 128 or 256 x K x 128 or 256 with K up to 131072: XLA split K into
    128 slices reduced by its native emitter, or 64 by a Triton reduce, or gave the dot to
    cuBLAS (:func:`s128_cublas`)."""
    return _npz_records("xla-s128.npz", "s128")


def s128_cublas():
    return [r for r in s128_records() if "__cublas" in r[1]["hlo"]]


@functools.cache
def sweep_records():
    """A held-out sweep of one more process (``xla-sweep.npz``, an H100, jax 0.11.2):
    ``n x K x n`` dots, n 32 to 256, K 1024 to 262144, bf16 (f32 output) and f32, as
    XLA's autotuner compiled them: HLO, output hashes and, where ``n >= S``, probes.
    Each is read (its plan then has the probed tree and the output's SHA-256) or refused
    (cuBLAS, or a native reduce over 256 partials)."""
    return _npz_records("xla-sweep.npz", "sweep")


def _probed():
    s128 = [r for r in s128_records() if "__cublas" not in r[1]["hlo"]]
    sweep = [r for r in sweep_records() if _covered(r)]
    return [r for r in records() + extra_records() + s128 + sweep if "probe" in r[2]]


def test_probes_cover_every_emitter():
    recs = [r for r in _probed() if _covered(r)]
    emitters = {xla_gpu_dots(m["hlo"])[0].emitter.split(" (")[0] for _, m, _ in recs}
    assert emitters == {"loop fusion", "native reduction", "Triton reduce"}
    # tiles, warps and TMA seen on the H100: 9 in the first captures, 3 more in the sweep
    assert len(_triton_configs(recs)) == 12


def _covered(rec):
    try:
        xla_gpu_dots(rec[1]["hlo"])
    except ValueError:
        return False
    return True


def test_a_triton_tile_off_a_power_of_two_is_read_padded():
    """One extra capture has a Triton reduce tile of 80 (S = 16, 4 warps): it is read as
    the block Triton builds, 128 wide (its tree is then the one its probe shows: checked
    with the others below), where it used to be refused."""
    odd = [r for r in _probed() if "tile [1, 80]" in xla_gpu_dots(r[1]["hlo"])[0].emitter]
    assert len(odd) == 1 and all(_covered(r) for r in _probed())
    (plan,) = xla_gpu_dots(odd[0][1]["hlo"])
    assert _canon(plan.reduce) == _canon(_xla_reduce.triton_tree(16, [1, 128], 4, False))


@pytest.mark.parametrize("rec", [r for r in _probed() if _covered(r)], ids=_ids)
def test_reduce_order_is_the_hardware_tree(rec):
    """The reader's reduce order of each probed dot is the tree the GPU used."""
    run, meta, arrays = rec
    S = meta["probe_split"]
    hw = _lca_tree((S - arrays["probe"]).astype(int), S)
    (plan,) = xla_gpu_dots(meta["hlo"])
    assert plan.split == S
    assert _canon_order(plan.reduce, S) == _canon(hw), plan.emitter


def test_native_reduction_over_128_partials_is_read():
    """S = 128 under XLA's native emitter: 32 lanes each adding four slices 32 apart in
    turn, then halving across the lanes (its probes: ``test_reduce_order_is_the_hardware_tree``);
    for S = 32 and 64 that tree is the halving one, as measured there."""
    native = [r for r in _probed() if xla_gpu_dots(r[1]["hlo"])[0].emitter == "native reduction"]
    assert {xla_gpu_dots(r[1]["hlo"])[0].split for r in native} == {32, 64, 128}
    for S in (32, 64):
        halving = _xla_reduce.butterfly(S, list(reversed(range(S.bit_length() - 1))))
        assert _canon_order(_xla_reduce.native_order(S), S) == _canon(halving)
        lanes = _xla_reduce.NATIVE_LANES
        tree = [i if S == lanes else (i, i + lanes) for i in range(lanes)]
        while len(tree) > 1:
            h = len(tree) // 2
            tree = [(tree[i], tree[i + h]) for i in range(h)]
        assert _canon(tree[0]) == _canon(halving)
    with pytest.raises(ValueError, match="measured for S = 2, 32, 64 and 128 only"):
        _xla_reduce.native_order(256)


def test_dots_xla_gave_to_cublas_are_refused():
    """Four of the S = 128 captures ran a cuBLAS call (with a native reduce after it):
    the reader refuses them, naming the call."""
    assert len(s128_cublas()) == 4
    for _, meta, _ in s128_cublas():
        with pytest.raises(ValueError, match="a library GEMM call .* is not covered"):
            xla_gpu_dots(meta["hlo"])


@pytest.mark.parametrize("name", ["bf16-128x32768x128", "f32-128x32768x128"])
def test_replay_of_a_native_reduce_over_128_partials(name):
    """The whole output of a dot split into 128 slices and reduced by XLA's native
    emitter, replayed on this backend: the GPU's SHA-256."""
    (meta,) = [m for _, m, _ in s128_records() if m["name"] == name]
    assert _replayed_sha256(CASES[name], meta) == meta["outputs"][0]["sha256"]


def _replayed_sha256(case, meta):
    """The SHA-256 of ``gpu_replay`` of the captured function on its inputs (one output)."""
    assert X.inputs_crc32(X.inputs(case)) == meta["inputs_crc32"]
    args = [jnp.asarray(a) for a in X.arrays(case, X.inputs(case))]
    out = jaxmma.gpu_replay(X.function(case), meta["hlo"])(*args)
    return X.summary(X.output_bits(out))["sha256"]


def test_sweep_is_read_or_refused_with_a_reason():
    """Every dot of the held-out sweep is read or refused by name: cuBLAS calls, and the
    native reduce over 256 partials, whose order no probe has shown."""
    reasons = set()
    for _, meta, _ in sweep_records():
        try:
            xla_gpu_dots(meta["hlo"])
        except ValueError as e:
            msg = str(e)
            assert "a library GEMM call" in msg or "over S = 256 partials" in msg, msg
            reasons.add("cublas" if "library" in msg else "S = 256")
    assert reasons == {"cublas", "S = 256"}
    assert sum(_covered(r) for r in sweep_records()) == 52


def _sweep_case(name):
    t, shape = name.split("-")
    n, K, _ = (int(x) for x in shape.split("x"))
    return X._dot(name, t, t, n, K, n, out="f32" if t == "bf16" else None)


def _work(name):
    return int(np.prod([int(x) for x in name.split("-")[1].split("x")]))


SWEEP_REPLAY = [r for r in sweep_records() if _covered(r) and _work(r[1]["name"]) <= 1 << 28]


@pytest.mark.parametrize("rec", SWEEP_REPLAY, ids=_ids)
def test_sweep_replays_to_the_gpus_bits(rec):
    """The held-out sweep's read dots up to 2**28 multiply-adds replayed whole: the GPU's
    SHA-256 (loop, Triton and native reduces at S = 8 to 128, the native S = 128 ones at
    64 x 64 outputs, which no probe covered)."""
    _, meta, _ = rec
    assert _replayed_sha256(_sweep_case(meta["name"]), meta) == meta["outputs"][0]["sha256"]


def test_butterfly():
    assert _xla_reduce.butterfly(4, [0, 1]) == ((0, 1), (2, 3))
    assert _xla_reduce.butterfly(4, [1, 0]) == ((0, 2), (1, 3))


# ----------------------------------------------------------------------------- the reader
@pytest.mark.parametrize("rec", records(), ids=_ids)
def test_reader_maps_every_capture(rec):
    run, meta, _ = rec
    plans = xla_gpu_dots(meta["hlo"])
    case = CASES[meta["name"]]
    assert len(plans) == (1 if case.kind == "dot" else 5)
    for p in plans:
        assert p.K % p.split == 0
        if p.types[0] == "f32":
            assert p.options["input_rounding"] == "rna"
        if "e4m3" in p.types or "e5m2" in p.types:
            path = "wgmma" if p.warps == 4 else "mma.sync"
            assert p.options["instruction"].startswith(path)


def _operands(case):
    A, B = X.arrays(case, X.inputs(case))
    (lc, rc), (lb, _) = case.dims
    if lc[0] != A.ndim - 1:
        A = np.swapaxes(A, -1, -2)
    if rc[0] != B.ndim - 2:
        B = np.swapaxes(B, -1, -2)
    return (A[0], B[0]) if lb else (A, B)


def check_corner(run, name, n=CORNER):
    """The reader's options on a corner of the record's output: the captured bits."""
    _, meta, arrays = record(run, name)
    case = CASES[name]
    bits = X.inputs(case)
    assert X.inputs_crc32(bits) == meta["inputs_crc32"]
    (plan,) = xla_gpu_dots(meta["hlo"])
    A, B = _operands(case)
    D = jaxmma.matmul(jnp.asarray(A[:n]), jnp.asarray(B[:, :n]), **plan.options)
    want = arrays["out0"]
    want = want[0] if want.ndim == 3 else want
    np.testing.assert_array_equal(X.output_bits(D), want[:n, :n])


#: one record per chain and emitter family, cheap enough for the quick run
QUICK = [("auto1", "e4m3xe5m2-bf16-s32"), ("pinned", "e5m2xe4m3-f32-nosplit"),
         ("pinned", "f32-nosplit")]  # fmt: skip


@pytest.mark.parametrize("run,name", QUICK)
def test_golden_corner_quick(run, name):
    check_corner(run, name, n=8)


def _plan_key(meta):
    return tuple(
        (p.split, _canon_order(p.reduce, p.split) if p.split > 1 else None,
         p.options["instruction"], p.out)
        for p in xla_gpu_dots(meta["hlo"])
    )  # fmt: skip


def distinct(kind):
    """One record per function and plan (the same plan on the same inputs gives the same
    bits: ``test_autotuner_moves_bits_only_with_the_plan``)."""
    seen, out = set(), []
    for r in records():
        key = (r[1]["name"], _plan_key(r[1]))
        if CASES[r[1]["name"]].kind == kind and key not in seen:
            seen.add(key)
            out.append(r)
    return out


@pytest.mark.full
@pytest.mark.parametrize("rec", distinct("dot"), ids=_ids)
def test_golden_corner_all(rec):
    check_corner(rec[0], rec[1]["name"])


def _replay_outputs(run, name):
    _, meta, arrays = record(run, name)
    case = CASES[name]
    args = [jnp.asarray(a) for a in X.arrays(case, X.inputs(case))]
    outs = jaxmma.gpu_replay(X.function(case), meta["hlo"])(*args)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    for i, (o, s) in enumerate(zip(outs, meta["outputs"], strict=True)):
        got = X.output_bits(o)
        assert X.summary(got)["sha256"] == s["sha256"], (name, i)
        want = arrays[f"out{i}"]
        np.testing.assert_array_equal(got if s["whole"] else X.corner(got), want)


@pytest.mark.full  # make test within 5 minutes (7.6 s)
def test_replay_training_step_quick():
    """One bf16 SGD step (forward, dgrad, wgrad split into 16 slices, update) replayed:
    all five outputs have the GPU's SHA-256."""
    _replay_outputs("pinned", "train-bf16")


@pytest.mark.full
@pytest.mark.parametrize(
    "rec",
    distinct("train") + [r for r in distinct("dot") if r[1]["name"] in ("bf16-batch", "bf16-s32")],
    ids=_ids,
)
def test_replay_whole_outputs(rec):
    """gpu_replay of the whole jitted function: every output's SHA-256 is the GPU's."""
    _replay_outputs(rec[0], rec[1]["name"])


def test_autotuner_moves_bits_only_with_the_plan():
    """Across the four processes, two captures of a function that the reader gives the
    same plan (reduce order, chain, split, output) have the same bits, so every change
    of bits comes with a change of plan; the autotuned processes do differ somewhere.
    (Different plans may still round to the same bf16 / f16 output.)"""
    by_name = {}
    for run, meta, _ in records():
        shas = tuple(o["sha256"] for o in meta["outputs"])
        by_name.setdefault(meta["name"], []).append((run, shas, _plan_key(meta)))
    moved = 0
    for name, caps in by_name.items():
        for i, (r1, s1, k1) in enumerate(caps):
            for r2, s2, k2 in caps[i + 1 :]:
                if k1 == k2:
                    assert s1 == s2, (name, r1, r2)
                moved += s1 != s2 and r1 != "pinned"
    assert moved > 0


# ----------------------------------------------------------------------------- bad input
GOOD = record("auto1", "bf16-s32")[1]["hlo"]


def test_lowered_stablehlo_is_refused_with_the_fix():
    text = jax.jit(lambda a, b: a @ b).lower(jnp.ones((4, 4)), jnp.ones((4, 4))).as_text()
    with pytest.raises(ValueError, match=r"compile\(\)\.as_text\(\)"):
        jaxmma.xla_gpu_dots(text)


@pytest.mark.parametrize(
    "text,msg",
    [
        ("", "does not start with 'HloModule'"),
        (GOOD.replace("ENTRY ", ""), "no ENTRY"),
        (GOOD[: GOOD.rindex("}")], "is not closed"),
        (GOOD.replace("%parameter_0 = ", "parameter_0 ", 1), "malformed HLO at line"),
    ],
)
def test_malformed_hlo(text, msg):
    with pytest.raises(ValueError, match=msg):
        jaxmma.xla_gpu_dots(text)


def test_not_text():
    with pytest.raises(TypeError, match="compiled_text"):
        jaxmma.xla_gpu_dots(b"HloModule")


def _triton_reduce_text():
    return next(m["hlo"] for _, m, _ in records() if '"kind":"__triton"' in m["hlo"])


@pytest.mark.parametrize(
    "edit,msg",
    [
        (
            lambda t: t.replace('"num_warps":"2"', '"num_warps":"3"'),
            "powers of two only",
        ),  # fmt: skip
        (lambda t: t.replace('"kind":"__triton"', '"kind":"__unknown"'), "is not covered"),
        (lambda t: t.replace("add(%lhs, %rhs)", "maximum(%lhs, %rhs)"), "other than one f32 add"),
    ],
)
def test_unknown_reduce(edit, msg):
    text = edit(_triton_reduce_text())
    with pytest.raises(ValueError, match=msg):
        jaxmma.xla_gpu_dots(text)


def test_unknown_fp8_config():
    _, meta, _ = record("auto1", "e4m3xe4m3-f32-s32")
    text = meta["hlo"].replace('"num_warps":"4","output_tiles":[{"sizes":["1","64"',
                               '"num_warps":"8","output_tiles":[{"sizes":["1","16"')  # fmt: skip
    assert text != meta["hlo"]
    with pytest.raises(ValueError, match="fp8 dot with 8 warps"):
        jaxmma.xla_gpu_dots(text)


@pytest.mark.parametrize(
    "tile",
    [
        '"num_warps":"4","output_tiles":[{"sizes":["1","64","8"',  # Triton's rule says wgmma
        '"num_warps":"8","output_tiles":[{"sizes":["1","64","16"',
        '"num_warps":"4","output_tiles":[{"sizes":["1","128","32"',
    ],
)
def test_unmeasured_fp8_configs_are_refused_not_guessed(tile):
    _, meta, _ = record("auto1", "e4m3xe4m3-f32-s32")
    text = meta["hlo"].replace('"num_warps":"4","output_tiles":[{"sizes":["1","64","16"', tile)
    assert text != meta["hlo"]
    with pytest.raises(ValueError, match="fp8 dot with .* not covered.*has not been measured"):
        jaxmma.xla_gpu_dots(text)


def test_two_modules_in_one_text_are_refused():
    _, meta, _ = record("auto1", "e4m3xe4m3-f32-s32")
    assert len(jaxmma.xla_gpu_dots(meta["hlo"])) == 1
    with pytest.raises(ValueError, match="2 HLO modules in one text"):
        jaxmma.xla_gpu_dots(meta["hlo"] + "\n" + meta["hlo"])


def test_cpu_module_is_refused():
    """A module compiled for the CPU has its dot outside any Triton fusion."""
    x = jnp.ones((8, 16), jnp.bfloat16)
    text = jax.jit(jnp.dot).lower(x, x.T).compile().as_text()
    with pytest.raises(ValueError, match="outside a Triton GEMM fusion"):
        jaxmma.xla_gpu_dots(text)


def test_replay_refuses_another_function():
    _, meta, _ = record("pinned", "bf16-s32")
    x = jnp.ones((64, 2048), jnp.bfloat16)
    with pytest.raises(ValueError, match="not compiled from fn at these shapes"):
        jaxmma.gpu_replay(jnp.dot, meta["hlo"])(x, x.T)


@pytest.mark.parametrize(
    "kw,err,msg",
    [
        (dict(convert_inputs="f16", input_rounding="rn"), ValueError, "contradicts"),
        (dict(convert_inputs="bf16"), ValueError, "expected None or 'f16'"),
    ],
)
def test_contradicting_options(kw, err, msg):
    A = jnp.ones((16, 32), jnp.float8_e4m3fn)
    with pytest.raises(err, match=msg):
        jaxmma.matmul(A, A.T, instruction=F16, arch="sm_90", **kw)


def test_convert_inputs_needs_f16_instruction_and_fp8():
    A = jnp.ones((16, 32), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match="feeds fp8 inputs to an f16 instruction"):
        jaxmma.matmul(A, A.T, instruction=BF16, arch="sm_90", convert_inputs="f16")
    with pytest.raises(TypeError, match="A: convert_inputs='f16' takes float8"):
        jaxmma.matmul(A.astype(jnp.float16), A.T, instruction=F16, arch="sm_90",
                      convert_inputs="f16")  # fmt: skip


def test_replay_under_jit_and_grad():
    """The replayed function jits to the same bits and differentiates straight through
    (the tangent of the exact product of the tf32 values the chain reads)."""
    _, meta, _ = record("pinned", "f32-nosplit")
    case = CASES["f32-nosplit"]
    A, B = (jnp.asarray(x) for x in X.arrays(case, X.inputs(case)))
    run = jaxmma.gpu_replay(X.function(case), meta["hlo"])
    got = X.output_bits(jax.jit(run)(A, B))
    assert X.summary(got)["sha256"] == meta["outputs"][0]["sha256"]
    g = jax.grad(lambda a: run(a, B).sum())(A)
    want = np.broadcast_to(_rna_tf32(np.asarray(B)).astype(np.float64).sum(1), g.shape)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)


def test_reduce_reached_another_way_is_refused():
    """Partials that reach the reduce through a bitcast: not understood, not guessed."""
    text = record("pinned", "bf16-s32")[1]["hlo"]
    old = "  ROOT %input_reduce_fusion = bf16[64,64]{1,0} fusion(%gemm_fusion_dot),"
    assert old in text
    new = ("  %bc = f32[32,64,64]{2,1,0} bitcast(%gemm_fusion_dot)\n"
           "  ROOT %input_reduce_fusion = bf16[64,64]{1,0} fusion(%bc),")  # fmt: skip
    with pytest.raises(ValueError, match="other than as the operand of one split-K reduce"):
        jaxmma.xla_gpu_dots(text.replace(old, new))
