"""Chained GEMMs captured on an sm_90 GPU (tests/golden/sm_90/gemm-*.npz) against the emulator.

Each record holds the D registers of 32 warps, each warp one m x n tile of a GEMM that a
kernel computed as a chain of ``mma.sync`` over the k-steps (or, with ``promote_every``,
chains from +0 added into f32 totals by FADD); see ``jaxmma/conformance/_gemm.py``. The
inputs are regenerated from the record (their CRC32 is checked). Two oracles, bit for bit:

* a reference written here: the instruction's matrix-level function ``ins.mma`` chained in
  a Python loop over the zero-padded k-steps, promotion adds by the exact IEEE add of
  ``jaxmma.arith._numerics`` on raw bits (no host FMA contraction can interfere);
* ``jaxmma.matmul`` (the GEMM layer of issue #10), where it exists.
"""

import functools
import os

import jax
import numpy as np
import pytest
from _suite import params
from jax import lax

import jaxmma
from jaxmma import arith, conformance
from jaxmma.conformance import _gemm

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "sm_90")
FILES = _gemm.golden_files(GOLDEN) if os.path.isdir(GOLDEN) else []
RECORDS = [rec for path in FILES for rec in conformance.load_golden(path)]


def _id(rec) -> str:
    m = rec.meta
    form = m["text"].removeprefix("mma.sync.aligned.").replace(".row.col", "")
    return f"{form}-P{m['promote_every'] or 0}-S{m['steps']}-K{m['K']}"


# the quick run checks one (steps, K) size of each form and promotion, a different one daily
SAMPLED = params(RECORDS, lambda r: (r.meta["text"], r.meta["promote_every"]), salt="gemm", ids=_id)


def test_gemm_golden_files_hold_every_case():
    keys = sorted(r.meta["key"] for r in RECORDS)
    assert keys == sorted(c.key for c in _gemm.default_cases())
    assert len(keys) == 30
    for r in RECORDS:
        assert r.meta["arch"] == "sm_90" and r.meta["kind"] == "gemm"
        assert "H100" in r.meta["device"] or "H200" in r.meta["device"]


# ----------------------------------------------------------------------------- reference
@functools.cache
def _mma(ins):
    return jax.jit(ins.mma)


@functools.cache
def _fadd():
    return jax.jit(lambda x, y: arith.ieee_add(x, y, "f32"))


def _bits(x) -> np.ndarray:
    """Raw bits (uint32) of an emulator result (f32, f16 or s32 elements)."""
    x = np.asarray(x)
    if x.dtype.itemsize == 2:
        return x.view(np.uint16).astype(np.uint32)
    return x.view(np.uint32)


def _warp_tiles(case, A, B, C):
    """Tiles of warp ``w = (g * mt + i) * nt + j``, cut here by explicit slicing:
    ``A [W, S, m, k]``, ``B [W, S, k, n]``, ``C [W, m, n]`` (A, B zero-padded along K)."""
    ins = case.instruction()
    m, n, k, S = ins.m, ins.n, ins.k, case.steps
    pad = S * k - case.K
    assert 0 <= pad < k
    A = np.concatenate([A, np.zeros((*A.shape[:2], pad), A.dtype)], axis=2)
    B = np.concatenate([B, np.zeros((B.shape[0], pad, B.shape[2]), B.dtype)], axis=1)
    At, Bt, Ct = [], [], []
    for g in range(case.problems):
        for i in range(case.mt):
            for j in range(case.nt):
                rows, cols = slice(i * m, (i + 1) * m), slice(j * n, (j + 1) * n)
                At.append([A[g, rows, s * k : (s + 1) * k] for s in range(S)])
                Bt.append([B[g, s * k : (s + 1) * k, cols] for s in range(S)])
                Ct.append(C[g, rows, cols])
    return np.asarray(At), np.asarray(Bt), np.asarray(Ct)


def reference_chain(case, problem) -> np.ndarray:
    """D tiles ``[W, m, n]`` (raw bits): the instruction chained over the k-steps."""
    ins = case.instruction()
    At, Bt, Ct = _warp_tiles(case, problem.A, problem.B, problem.C)
    step, S, P = _mma(ins), case.steps, case.promote_every
    if P is None:
        d = Ct
        for s in range(S):
            d = step(At[:, s], Bt[:, s], d)
        return _bits(d)
    total = Ct  # f32 bits
    for g0 in range(0, S, P):
        acc = np.zeros_like(Ct)  # +0
        for s in range(g0, min(g0 + P, S)):
            acc = step(At[:, s], Bt[:, s], acc)
        acc_bits = lax.bitcast_convert_type(acc, np.uint32)
        total = _fadd()(total, acc_bits)
    return np.asarray(total, np.uint32)


def _hardware_tiles(rec, case) -> np.ndarray:
    return np.asarray(case.instruction().unfragment("d", rec.outputs["d"]), np.uint32)


def _diff_report(case, problem, hw, ref) -> str:
    bad = np.argwhere(hw != ref)
    w, r, c = (int(x) for x in bad[0])
    g = w // (case.mt * case.nt)
    per_dist = {}
    for x in bad:
        d = problem.dists[int(x[0]) // (case.mt * case.nt)]
        per_dist[d] = per_dist.get(d, 0) + 1
    return (
        f"{case.key}: {len(bad)}/{hw.size} elements differ (by distribution: {per_dist}); "
        f"first: warp {w} (problem {g}, {problem.dists[g]}) tile element ({r}, {c}): "
        f"hardware {int(hw[w, r, c]):#010x}, reference {int(ref[w, r, c]):#010x}"
    )


@pytest.mark.parametrize("rec", SAMPLED)
def test_reference_chain_matches_hardware(rec):
    case = _gemm.case_of(rec)
    problem = _gemm.regenerate(rec)  # raises if the generator drifted
    hw = _hardware_tiles(rec, case)
    ref = reference_chain(case, problem)
    assert hw.shape == ref.shape == (case.warps, case.instruction().m, case.instruction().n)
    assert np.array_equal(hw, ref), _diff_report(case, problem, hw, ref)


@pytest.mark.parametrize("rec", SAMPLED)
def test_matmul_matches_hardware(rec):
    if not hasattr(jaxmma, "matmul"):
        pytest.skip("jaxmma.matmul does not exist yet (the GEMM layer of issue #10)")
    case = _gemm.case_of(rec)
    problem = _gemm.regenerate(rec)
    ins = case.instruction()
    hw = _gemm.untile(case, _hardware_tiles(rec, case))  # [G, M, N]
    # all problems in one batched call; the raw K (matmul zero-pads it); raw element bits
    D = jaxmma.matmul(
        problem.A, problem.B, problem.C, instruction=ins, promote_every=case.promote_every
    )
    got = _bits(D)
    assert got.shape == hw.shape
    if not np.array_equal(got, hw):
        bad = np.argwhere(got != hw)
        g, r, c = (int(x) for x in bad[0])
        pytest.fail(
            f"{case.key}: {len(bad)}/{hw.size} elements differ; first: problem {g} "
            f"({problem.dists[g]}) element ({r}, {c}): hardware {int(hw[g, r, c]):#010x}, "
            f"matmul {int(got[g, r, c]):#010x}"
        )


def test_tiling_round_trip():
    """The capture's tiling (used to build the kernel's fragments) agrees with the slicing
    above, and untile inverts it."""
    case = _gemm.default_cases()[1]  # ragged K
    p = _gemm.inputs(case)
    A, B = p.padded()
    At, Bt, Ct = _gemm.tiles(case, A, B, p.C)
    Ar, Br, Cr = _warp_tiles(case, p.A, p.B, p.C)
    assert np.array_equal(At, Ar) and np.array_equal(Bt, Br) and np.array_equal(Ct, Cr)
    assert np.array_equal(_gemm.untile(case, Ct), p.C)
    assert case.K % case.instruction().k != 0 and not A[..., case.K :].any()


# ----------------------------------------------------------------------------- variants
def _by_key():
    return {r.meta["key"]: r for r in RECORDS}


def _variant(text, promote_every, steps):
    """The record of a FORMS entry with the given steps."""
    case = next(
        c
        for c in _gemm.default_cases()
        if c.text == text and c.promote_every == promote_every and c.steps == steps
    )
    return _by_key()[case.key], case


E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
S8 = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
S8_SAT = "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32"


def test_variants_share_their_inputs():
    groups = {}
    for r in RECORDS:
        groups.setdefault(_gemm.case_of(r).data_key, []).append(r)
    assert len(groups) == 21  # 7 type combinations x 3 (steps, K)
    for recs in groups.values():
        assert len({r.meta["inputs_crc32"] for r in recs}) == 1
        assert len({tuple(r.meta["dists"]) for r in recs}) == 1


@pytest.mark.parametrize("steps", [7, 64])
def test_promotion_every_4_steps_changes_the_hardware_bits(steps):
    """Same inputs: groups of 4 chained from +0 then FADDed into C differ from the plain
    chain (the order of the additions differs), in normal-distribution tiles too."""
    plain, case = _variant(E4M3, None, steps)
    prom, _ = _variant(E4M3, 4, steps)
    a, b = plain.outputs["d"], prom.outputs["d"]
    normal = [w for w in range(case.warps) if plain.meta["dists"][w // 4] == "normal"]
    assert (a[normal] != b[normal]).mean() > 0.05


@pytest.mark.parametrize("steps", [1, 7, 64])
def test_promotion_every_step_is_the_plain_chain_on_sm90(steps):
    """An observation about sm_90, not an assumption of the tests above: ptxas runs the
    fp8 ``mma.sync`` as two ``HMMA.16816.F32`` from zero (after converting to f16) and adds
    C with an ``FADD``, so promoting after every step gives the same bits as the chain."""
    plain, _ = _variant(E4M3, None, steps)
    prom, _ = _variant(E4M3, 1, steps)
    assert np.array_equal(plain.outputs["d"], prom.outputs["d"])


@pytest.mark.parametrize("steps", [1, 7, 64])
def test_satfinite_changes_the_bits_where_the_s32_chain_overflows(steps):
    wrap, case = _variant(S8, None, steps)
    sat, _ = _variant(S8_SAT, None, steps)
    a = wrap.outputs["d"].view(np.int32)
    b = sat.outputs["d"].view(np.int32)
    differ = a != b
    assert differ.any()
    if steps == 1:  # one step: saturated where they differ (later steps move away again)
        assert np.all(np.isin(b[differ], [2**31 - 1, -(2**31)]))
    special = [w for w in range(case.warps) if wrap.meta["dists"][w // 4] == "special"]
    normal = [w for w in range(case.warps) if wrap.meta["dists"][w // 4] == "normal"]
    assert differ[special].any() and not differ[normal].any()
