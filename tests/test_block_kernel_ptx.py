"""The compiled block-scaled kernel's fusion is a PTX routine (``gemm._block_kernel._ptx_fuse``)
that only a GPU runs. Here a small interpreter of the PTX instructions it uses (written
from the PTX ISA's definitions: two's-complement wrap-around, shifts clamped to the
register width, round-toward-zero conversion and multiply with exact arithmetic on
rationals) runs the routine's text on raw-bit inputs, and its D bits must equal the
interpreted kernel's int32 fusion (``_fuse_planes``), which the other block-kernel tests
tie to the XLA formulation."""

import jax.numpy as jnp
import numpy as np
import pytest
from _block_inputs import raw_c
from _ptx_interp import _parse, _run

from jaxmma.gemm import _block_kernel


def _inputs(rng, n, man, rep):
    """C bits, the four groups' dots ``T ss + count / 32`` (float32) and the scale groups'
    exponent words, as the kernel makes them: all-zero groups (count 0, term 0),
    cancelling ones (term 0, count > 0), scales of significand 0 (exponent word from
    ``_ABSENT``), the largest terms, and exponents over the scale format's range, far
    apart so that terms truncate."""
    c = raw_c(rng, (4, n)).reshape(-1)[:n]
    lo, hi = (-9, 8) if man else (-127, 127)  # the scale format's exponents
    big = 16 * 144 * (225 if man else 1)  # the largest |T ss|
    values, exps = [], []
    for _ in range(4):
        m = rng.integers(-big, big + 1, n)
        m = np.where(rng.random(n) < 0.1, rng.choice([-big, big, -1, 1], n), m)
        m = np.where(rng.random(n) < 0.1, 0, m)  # cancelling groups
        count = rng.integers(1, 17, n)
        count = np.where(rng.random(n) < 0.15, 0, count)  # all-zero groups
        m = np.where(count == 0, 0, m)
        values.append((m + count / 32).astype(np.float32))
    for _ in range(4 // rep):
        e = rng.integers(lo, hi + 1, (2, n)).sum(0) - 2
        absent = 2 * _block_kernel._ABSENT - 2  # both scales of significand 0
        exps.append(np.where(rng.random(n) < 0.05, absent, e).astype(np.int32))
    return c.view(np.int32), values, exps


def _int32_fusion(c, values, exps, man, rep):
    """The interpreted kernel's int32 fusion (``_fuse_planes``) of raw inputs: D bits."""
    planes = [jnp.asarray(v) for v in values], [jnp.asarray(e) for e in exps]
    return np.asarray(_block_kernel._fuse_planes(jnp.asarray(c), *planes, man, rep)).view(np.uint32)


@pytest.mark.parametrize("man, rep", [(3, 1), (0, 2), (0, 1)], ids=["nvfp4", "mxfp4", "4x-ue8m0"])
def test_ptx_fusion_gives_the_int32_fusion_bits(man, rep):
    rng = np.random.default_rng(11 + man + rep)
    n = 500
    c, values, exps = _inputs(rng, n, man, rep)
    want = _int32_fusion(c, values, exps, man, rep)
    prog = _parse(_block_kernel._ptx_fuse(4, rep, man))
    words = (
        [c.view(np.uint32)]
        + [v.view(np.uint32) for v in values]
        + [e.view(np.uint32) for e in exps]
    )
    got = np.array([_run(prog, [int(w[i]) for w in words]) for i in range(n)], np.uint32)
    kinds = want & 0x7F800000
    assert (kinds == 0).any() and (kinds == 0x7F800000).any() and (want == 0).any()
    np.testing.assert_array_equal(got, want)


def _near_inputs(rng, n, man, rep, pack):
    """Inputs around the fast routine's condition (:func:`_block_kernel._bounds`), in
    groups of ``pack`` elements (one routine; each element its own row and column):

    * a fifth of the groups inside the condition (scale exponents within the spread
      limits, C's exponent field between ``lo`` and ``hi``): the fast routine runs;
    * a half the same but for one element whose field is ``lo - 1``, ``lo``, ``hi`` or
      ``hi + 1``, its largest group at the bound and cancelled, so that its result is
      as small as C: the fast routine runs exactly where that field is inside, and a
      bound one off lets a truncated term through;
    * the rest anything near the limits (spreads one past them, fields within two of
      the bounds, C zero, any C bits): mostly the full routine."""
    off = 2 * man + 2
    groups = np.arange(n) // pack
    kind = rng.choice(3, n // pack, p=[0.2, 0.5, 0.3])[groups]  # inside, one near, free
    first = np.arange(n) % pack == rng.integers(0, pack, n // pack)[groups]
    edge = (kind == 1) & first  # the one element near a bound
    _, values, _ = _inputs(rng, n, man, rep)
    base_a, base_b = rng.integers(-14, 12, n), rng.integers(-14, 12, n)
    wide_a, wide_b = np.where(kind == 2, 15, 14), np.where(kind == 2, 35 - off - 11, 35 - off - 12)
    eas, ebs = [], []
    for _ in range(4 // rep):
        eas.append((base_a + rng.integers(0, wide_a)).astype(np.int32))
        ebs.append((base_b + rng.integers(0, wide_b)).astype(np.int32))
    # the largest exponents of a row and of a column often in one group: mx reaches its bound
    same = (rng.random(n) < 0.5) | edge
    eas[0] = np.where(same, np.max(eas, 0), eas[0]).astype(np.int32)
    ebs[0] = np.where(same, np.max(ebs, 0), ebs[0]).astype(np.int32)
    # groups 0 and 1 cancel in half the elements (same exponent, opposite sums): the
    # result is then as small as C and the other groups, and a truncated bit shows
    cancel = (rng.random(n) < 0.5) | edge
    if rep == 1:
        eas[1] = np.where(cancel, eas[0], eas[1]).astype(np.int32)
        ebs[1] = np.where(cancel, ebs[0], ebs[1]).astype(np.int32)
    m0 = np.floor(values[0])
    count = rng.integers(1, 17, n) / 32
    values[1] = np.where(cancel, -m0 + count, values[1]).astype(np.float32)
    for g in (2, 3):  # near a bound, the other groups' products cancel too: the sum is C
        values[g] = np.where(edge, rng.integers(1, 17, n) / 32, values[g]).astype(np.float32)
    lo, hi = (
        np.asarray(x)
        for x in _block_kernel._bounds(
            [jnp.asarray(e) for e in eas], [jnp.asarray(e) for e in ebs], man
        )
    )
    inside = lo + (rng.random(n) * (np.maximum(hi, lo) - lo + 1)).astype(np.int32)
    near = np.where(rng.random(n) < 0.5, lo, hi) + rng.integers(-2, 3, n)
    near = np.where(edge, np.where(rng.random(n) < 0.5, lo, hi + 1) - rng.integers(0, 2, n), near)
    field = np.where((kind == 2) | edge, near, inside)
    field = np.clip(field, 1, 254).astype(np.uint32)
    c = (rng.integers(0, 2, n, dtype=np.uint32) << 31) | (field << 23)
    c |= rng.integers(0, 1 << 23, n, dtype=np.uint32)
    odd = rng.random(n)
    c = np.where((kind == 2) & (odd < 0.1), 0, c)  # C zero: only hi counts
    raw = raw_c(rng, (4, n)).reshape(-1)[:n]
    c = np.where((kind == 2) & (odd > 0.9), raw, c).astype(np.uint32)
    exps = [a + b for a, b in zip(eas, ebs, strict=True)]
    return c.view(np.int32), values, exps, (lo, hi)


def _run_packed(text, pack, c, values, exps, lo, hi):
    """The packed routine's text run on each ``pack`` elements in turn: the D bits, and
    how many routines took the fast branch (straight to ``DONE``)."""
    prog = _parse(text)
    words = [c, *values, *exps, lo, hi]
    words = [np.asarray(w).view(np.uint32) for w in words]
    got, fast = np.zeros(len(c), np.uint32), 0
    for i in range(0, len(c), pack):
        trace = []
        inputs = [int(w[i + e]) for w in words for e in range(pack)]
        got[i : i + pack] = _run(prog, inputs, outs=pack, trace=trace)
        fast += trace == ["DONE0"]
    return got, fast


@pytest.mark.parametrize("man, rep", [(3, 1), (0, 2)], ids=["nvfp4", "mxfp4"])
def test_packed_routine_takes_the_fast_path_only_where_it_gives_the_same_bits(man, rep):
    """The compiled kernel's routine (``_ptx_packed``: a warp vote, then the fast routine
    or the full one, :data:`PACK` elements a routine) against the int32 fusion, on
    inputs around the fast routine's condition; both branches must run. C's bound
    ``lo`` one lower fails here; a looser ``hi`` or spread only truncates bits that the
    float32 result drops on these inputs, and the test below shows that dropping the
    condition altogether fails."""
    rng = np.random.default_rng(23 + man)
    pack, n = _block_kernel.PACK, 480
    c, values, exps, (lo, hi) = _near_inputs(rng, n, man, rep, pack)
    want = _int32_fusion(c, values, exps, man, rep)
    text = _block_kernel._ptx_packed(4, rep, man, pack)
    got, fast = _run_packed(text, pack, c, values, exps, lo, hi)
    assert 0 < fast < n // pack, fast  # both routines ran
    np.testing.assert_array_equal(got, want)


def test_fast_routine_alone_differs_where_the_condition_refuses():
    """The condition is needed: the fast routine run on every element (the vote forced
    true) differs from the int32 fusion on these inputs, so the test above can fail."""
    man, rep = 3, 1
    rng = np.random.default_rng(5)
    pack, n = _block_kernel.PACK, 480
    c, values, exps, (lo, hi) = _near_inputs(rng, n, man, rep, pack)
    want = _int32_fusion(c, values, exps, man, rep)
    text = _block_kernel._ptx_packed(4, rep, man, pack)
    text = text.replace("@!%all bra.uni", "@%never bra.uni").replace(
        "vote.sync.all.pred %all, %all, -1", "setp.ne.u32 %never, 0, 0"
    )
    got, _ = _run_packed(text, pack, c, values, exps, lo, hi)
    assert (got != want).sum() > 0
