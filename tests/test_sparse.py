"""Tests of jaxmma.operands._sparse (mma.sp metadata, compression, user tools; PTX ISA 9.7.14.6).

The oracle is kept apart from the code it checks: ``LAYOUTS_TABLE`` below is the table of
``docs/layouts.md`` ("Nibble n of a contributing lane -> (row, chunk)") written out row by
row, and :func:`oracle_indices` decodes a metadata register in plain Python loops from the
bullet points of the same section (chunk sizes, i0/i1, tf32 ``i0 // 2``, 4-bit pairs).
"""

from __future__ import annotations

import doctest
import itertools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxmma
from jaxmma import spec
from jaxmma.operands import _sparse as S

# ---------------------------------------------------------------------------------------
# The oracle: docs/layouts.md, "Sparse mma.sp metadata register e", transcribed.
F8F6F4 = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")

# (shape, A types, selectors, contributes(q, sel), row(g, q, n), chunk(g, q, n))
LAYOUTS_TABLE = [
    ("m16n8k16", ("f16", "bf16"), (0, 1, 2, 3),
     lambda q, s: q == s, lambda g, q, n: g + 8 * (n >> 2), lambda g, q, n: n & 3),
    ("m16n8k32", ("f16", "bf16"), (0, 1),
     lambda q, s: q >> 1 == s, lambda g, q, n: g + 8 * (n >> 2),
     lambda g, q, n: 4 * (q & 1) + (n & 3)),
    ("m16n8k8", ("tf32",), (0, 1, 2, 3),
     lambda q, s: q == s, lambda g, q, n: g + 8 * (n >> 2), lambda g, q, n: n & 3),
    ("m16n8k16", ("tf32",), (0, 1),
     lambda q, s: q >> 1 == s, lambda g, q, n: g + 8 * (n >> 2),
     lambda g, q, n: 4 * (q & 1) + (n & 3)),
    ("m16n8k32", ("s8", "u8"), (0, 1),
     lambda q, s: q >> 1 == s, lambda g, q, n: g + 8 * (q & 1), lambda g, q, n: n),
    ("m16n8k64", ("s8", "u8", *F8F6F4), (0,),
     lambda q, s: True, lambda g, q, n: g + 8 * (q & 1), lambda g, q, n: 8 * (q >> 1) + n),
    ("m16n8k64", ("s4", "u4"), (0, 1),
     lambda q, s: q >> 1 == s, lambda g, q, n: g + 8 * (q & 1), lambda g, q, n: n),
    ("m16n8k128", ("s4", "u4", "e2m1"), (0,),
     lambda q, s: True, lambda g, q, n: g + 8 * (q & 1), lambda g, q, n: 8 * (q >> 1) + n),
]  # fmt: skip

ORDERED_NIBBLES = (0b0100, 0b1000, 0b1001, 0b1100, 0b1101, 0b1110)
SP_NIBBLES = tuple(v for v in range(16) if v not in (0b0000, 0b0101, 0b1010, 0b1111))
TF32_NIBBLES = (0b0100, 0b1110)


def table_row(shape, atype):
    (row,) = [r for r in LAYOUTS_TABLE if r[0] == shape and atype in r[1]]
    return row


def chunk_size(shape, atype):
    """docs/layouts.md "Chunk size": 2 for tf32, 8 for s4/u4 and mxf4* e2m1, else 4."""
    if atype == "tf32":
        return 2
    if atype in ("s4", "u4") or (atype == "e2m1" and shape == "m16n8k128"):
        return 8
    return 4


def meaningful(key):
    shape, atype, _, variant = key
    if atype == "tf32":
        return TF32_NIBBLES
    return ORDERED_NIBBLES if variant == "sp::ordered_metadata" else SP_NIBBLES


def oracle_map(shape, atype, sel):
    """{(lane, nibble): (row, chunk)} for the contributing lanes."""
    _, _, _, contributes, row, chunk = table_row(shape, atype)
    out = {}
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        if contributes(q, sel):
            for n in range(8):
                out[lane, n] = (row(g, q, n), chunk(g, q, n))
    return out


def oracle_indices(shape, atype, k, e, sel):
    """Dense column of every stored element, int [16, k/2], decoded from e uint32 [32]."""
    cs = chunk_size(shape, atype)
    idx = np.full((16, k // 2), -1, np.int64)
    for (lane, n), (r, c) in oracle_map(shape, atype, sel).items():
        nib = (int(e[lane]) >> (4 * n)) & 0xF
        i0, i1 = nib & 3, nib >> 2
        if cs == 4:
            idx[r, 2 * c], idx[r, 2 * c + 1] = 4 * c + i0, 4 * c + i1
        elif cs == 2:
            idx[r, c] = 2 * c + i0 // 2
        else:
            idx[r, 4 * c : 4 * c + 4] = [
                8 * c + 2 * i0,
                8 * c + 2 * i0 + 1,
                8 * c + 2 * i1,
                8 * c + 2 * i1 + 1,
            ]
    assert (idx >= 0).all(), "the docs/layouts.md table leaves a chunk undescribed"
    return idx


# ---------------------------------------------------------------------------------------
# Every sparse form of the spec table, one instruction each
SPARSE_KEYS = sorted({(f.shape, f.atype, f.kind, f.sparse) for f in spec.FORMS
                      if f.opcode == "mma" and f.sparse}, key=str)  # fmt: skip
_INS = {}
for _i in jaxmma.all_instructions("mma"):
    if _i.sparse:
        _INS.setdefault((_i.shape, _i.atype, _i.kind, _i.sparse), _i)


def key_id(key):
    shape, atype, kind, variant = key
    return f"{shape}-{atype}-{kind or 'none'}-{variant.replace('::', '_')}"


def selectors(key):
    return table_row(key[0], key[1])[2]


# Raw-bit fields: (bits of the value, bits that are not sign/padding)
def field(key):
    _, atype, kind, _ = key
    if atype in ("f16", "bf16"):
        return 0xFFFF, 0x7FFF
    if atype == "tf32":
        return 0xFFFFFFFF, 0x7FFFFFFF
    if atype in ("e4m3", "e5m2", "s8", "u8"):
        return 0xFF, (0x7F if atype[0] == "e" else 0xFF)
    if atype in ("e3m2", "e2m3"):  # kind::f8f6f4 container, element in bits [5:0]
        return 0x3F, 0x1F
    if atype == "e2m1" and kind in ("mxf4", "mxf4nvf4"):
        return 0xF, 0x7
    if atype == "e2m1":  # container bits [5:2]
        return 0x3C, 0x1C
    return 0xF, 0xF  # s4 / u4


def random_sparse(key, rng, batch=(), masks=None):
    """A dense raw-bit uint32 matrix [*batch, 16, K] following the pattern, and per chunk
    the slots that are non-zero (bool [*batch, 16, nch, slots])."""
    shape, atype = key[0], key[1]
    k = _INS[key].k
    cs = chunk_size(shape, atype)
    width = 2 if cs == 8 else 1
    slots, keep = cs // width, cs // width // 2
    nch = k // cs
    full, mag = field(key)
    if masks is None:
        masks = np.zeros(batch + (16, nch, slots), bool)
        for pos in np.ndindex(*batch, 16, nch):
            cnt = rng.integers(0, keep + 1)
            masks[pos][rng.choice(slots, cnt, replace=False)] = True
    vals = rng.integers(0, 2**32, masks.shape + (width,), dtype=np.uint64).astype(np.uint32)
    vals &= np.uint32(full)
    low = np.uint32(mag & -mag)  # the lowest magnitude bit
    if width == 2:  # a non-zero pair: element 0 or 1 may be zero, not both
        both = (vals[..., 0] & mag) | (vals[..., 1] & mag)
        vals[..., 0] |= np.where(both == 0, low, 0).astype(np.uint32)
    else:
        vals[..., 0] |= np.where(vals[..., 0] & mag, 0, low).astype(np.uint32)
    vals = np.where(masks[..., None], vals, 0).astype(np.uint32)
    return vals.reshape(masks.shape[:-3] + (16, k)), masks


# ---------------------------------------------------------------------------------------
def test_every_sparse_form_is_covered():
    assert len(SPARSE_KEYS) == 44
    assert set(SPARSE_KEYS) == set(_INS)
    for key in SPARSE_KEYS:
        ins = _INS[key]
        geo = S._geometry(ins)
        assert geo.selectors == selectors(key)
        assert geo.chunk_size == chunk_size(key[0], key[1])
        assert geo.valid == meaningful(key)


@pytest.mark.parametrize("key", SPARSE_KEYS, ids=key_id)
def test_metadata_indices_match_layouts_md(key):
    ins = _INS[key]
    rng = np.random.default_rng(zlib.crc32(key_id(key).encode()))
    nibs = np.array(meaningful(key), np.uint32)
    for sel in selectors(key):
        used = sorted({lane for lane, _ in oracle_map(key[0], key[1], sel)})
        e = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)  # garbage
        for lane in used:
            e[lane] = np.sum(
                rng.choice(nibs, 8) << (4 * np.arange(8, dtype=np.uint32)), dtype=np.uint32
            )
        want = oracle_indices(key[0], key[1], ins.k, e, sel)
        got = S.metadata_indices(ins, jnp.asarray(e), sel, check=True)
        assert got.dtype == jnp.int32 and got.shape == (16, ins.k // 2)
        np.testing.assert_array_equal(np.asarray(got), want)
        # lanes outside the selected set do not matter
        e2 = e.copy()
        others = [lane for lane in range(32) if lane not in used]
        e2[others] = ~e2[others]
        np.testing.assert_array_equal(np.asarray(S.metadata_indices(ins, e2, sel)), want)
        # any bits at all (undefined-behaviour nibbles included): the plain index decode
        e3 = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
        np.testing.assert_array_equal(
            np.asarray(S.metadata_indices(ins, e3, sel)),
            oracle_indices(key[0], key[1], ins.k, e3, sel),
        )


@pytest.mark.parametrize("key", SPARSE_KEYS, ids=key_id)
def test_compress_decompress_round_trip(key):
    ins = _INS[key]
    rng = np.random.default_rng(zlib.crc32(key_id(key).encode()) + 1)
    A, masks = random_sparse(key, rng)
    cs = chunk_size(key[0], key[1])
    for sel in selectors(key):
        vals, e = S.compress(ins, A, sel, registers=False)
        assert e.dtype == jnp.uint32 and e.shape == (32,)
        assert vals.dtype == jnp.uint32 and vals.shape == (16, ins.k // 2)
        e = np.asarray(e)
        used = {lane for lane, _ in oracle_map(key[0], key[1], sel)}
        assert all(e[lane] == 0 for lane in range(32) if lane not in used)
        # the metadata is meaningful for the variant (sorted and distinct)
        for lane, n in oracle_map(key[0], key[1], sel):
            assert (int(e[lane]) >> (4 * n)) & 0xF in meaningful(key)
        idx = oracle_indices(key[0], key[1], ins.k, e, sel)
        np.testing.assert_array_equal(np.asarray(vals), np.take_along_axis(A, idx, -1))
        # every non-zero element is stored
        stored = np.zeros(A.shape, bool)
        np.put_along_axis(stored, idx, True, axis=-1)
        assert not (A[~stored]).any()
        np.testing.assert_array_equal(np.asarray(S.decompress(ins, vals, e, sel)), A)
        got_vals, got_idx = S.matrix_operands(ins, jnp.asarray(A), None)
        np.testing.assert_array_equal(np.asarray(got_idx), idx)
        np.testing.assert_array_equal(np.asarray(got_vals), np.asarray(vals))
        assert np.asarray(idx).max() < ins.k and (np.diff(idx // cs, axis=-1) >= 0).all()
    # registers, for the last selector
    a, e = S.compress(ins, A, sel)
    assert a.dtype == jnp.uint32 and a.shape == (32, ins.nregs["a"])
    np.testing.assert_array_equal(np.asarray(ins.unfragment("a", a)), np.asarray(vals))
    np.testing.assert_array_equal(np.asarray(S.decompress(ins, a, e, sel)), A)


def test_compress_canonical_metadata():
    ins = _INS["m16n8k16", "f16", None, "sp::ordered_metadata"]
    rows = {
        (): 0b0100,
        (0,): 0b0100,
        (1,): 0b0100,
        (2,): 0b1000,
        (3,): 0b1100,
        (1, 3): 0b1101,
        (0, 2): 0b1000,
        (2, 3): 0b1110,
    }
    for nz, nib in rows.items():
        A = np.zeros((16, 16), np.float16)
        A[5, [4 + i for i in nz]] = 1.0
        _, e = S.compress(ins, A.astype(jnp.float16), 1, registers=False)
        assert (int(e[4 * 5 + 1]) >> 4) & 0xF == nib, nz  # row 5 chunk 1: lane 21 nibble 1
    tf32 = _INS["m16n8k8", "tf32", None, "sp"]
    for col, nib in ((None, 0b0100), (0, 0b0100), (1, 0b1110)):
        A = np.zeros((16, 8), np.float32)
        if col is not None:
            A[0, col] = 2.0
        _, e = S.compress(tf32, A, 0)
        assert int(e[0]) & 0xF == nib
    s4 = _INS["m16n8k64", "s4", None, "sp"]
    A = np.zeros((16, 64), np.uint32)
    A[0, 7] = 0x9  # the second element of pair 3 only
    vals, e = S.compress(s4, A, 0, registers=False)
    assert int(e[0]) & 0xF == 0b1100
    assert np.asarray(vals)[0, :4].tolist() == [0, 0, 0, 0x9]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_round_trip_property(data):
    key = data.draw(
        st.sampled_from(
            [
                ("m16n8k16", "f16", None, "sp::ordered_metadata"),
                ("m16n8k16", "tf32", None, "sp"),
                ("m16n8k64", "s4", None, "sp::ordered_metadata"),
                ("m16n8k64", "e2m1", "f8f6f4", "sp::ordered_metadata"),
            ]
        )
    )
    ins = _INS[key]
    sel = data.draw(st.sampled_from(selectors(key)))
    batch = data.draw(st.sampled_from([(), (2,)]))
    cs = chunk_size(key[0], key[1])
    slots = 4 if cs != 2 else 2
    nch = ins.k // cs
    n = int(np.prod(batch, dtype=np.int64)) * 16 * nch
    allowed = [m for m in itertools.product((False, True), repeat=slots) if sum(m) <= slots // 2]
    chunk_masks = data.draw(st.lists(st.sampled_from(allowed), min_size=n, max_size=n))
    masks = np.array(chunk_masks, bool).reshape(batch + (16, nch, slots))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    A, _ = random_sparse(key, rng, masks=masks)
    vals, e = S.compress(ins, A, sel, registers=False)
    assert e.shape == batch + (32,)
    np.testing.assert_array_equal(np.asarray(S.decompress(ins, vals, e, sel)), A)
    S.metadata_indices(ins, e, sel, check=True)  # sorted, distinct: valid everywhere
    S.validate(ins, A)


# ---------------------------------------------------------------------------------------
# prune
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def oracle_prune(mag, A, cs, width):
    """Keep per chunk the keep slots of largest magnitude, ties to the lower index."""
    out = np.zeros_like(A)
    slots = cs // width
    for pos in np.ndindex(*A.shape[:-1]):
        for c in range(A.shape[-1] // cs):
            m = [
                sum(mag[pos + (c * cs + s * width + w,)] for w in range(width))
                for s in range(slots)
            ]
            for s in sorted(range(slots), key=lambda s: (-m[s], s))[: slots // 2]:
                for w in range(width):
                    col = c * cs + s * width + w
                    out[pos + (col,)] = A[pos + (col,)]
    return out


def _check_prune(ins, A, mag, cs, width):
    got = np.asarray(S.prune(ins, A))
    assert got.dtype == np.asarray(A).dtype
    want = oracle_prune(mag, np.asarray(A), cs, width)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    S.validate(ins, got)
    np.testing.assert_array_equal(np.asarray(S.prune(ins, got)).view(np.uint8), got.view(np.uint8))


def test_prune_keeps_the_largest():
    rng = np.random.default_rng(7)
    f16 = _INS["m16n8k32", "f16", None, "sp"]
    A = rng.choice([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf], (2, 16, 32))
    A[0, 0, :4] = [1.0, np.nan, -1.0, 1.0]  # NaN is the largest; tie 1.0/-1.0: lower index
    A = A.astype(np.float16)
    mag = np.where(np.isnan(A), np.inf, np.abs(A.astype(np.float32)))
    _check_prune(f16, A, mag, 4, 1)
    assert np.isnan(np.asarray(S.prune(f16, A))[0, 0, 1])
    # the same, as raw bits
    bits = A.view(np.uint16)
    got = np.asarray(S.prune(f16, bits))
    np.testing.assert_array_equal(got, np.asarray(S.prune(f16, A)).view(np.uint16))

    tf32 = _INS["m16n8k16", "tf32", None, "sp::ordered_metadata"]
    A = rng.standard_normal((16, 16)).astype(np.float32)
    A[3, 4:6] = [-2.5, 2.5]
    _check_prune(tf32, A, np.abs(A), 2, 1)

    s8 = _INS["m16n8k32", "s8", None, "sp"]
    A = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    A[0, :4] = [-128, 127, 5, -5]
    _check_prune(s8, A, np.abs(A.astype(np.int32)), 4, 1)
    bits = A.view(np.uint8)  # raw bits of s8: two's complement
    np.testing.assert_array_equal(
        np.asarray(S.prune(s8, bits)), np.asarray(S.prune(s8, A)).view(np.uint8)
    )


@pytest.mark.parametrize(
    "key",
    [
        ("m16n8k64", "s4", None, "sp"),
        ("m16n8k128", "u4", None, "sp"),
        ("m16n8k128", "e2m1", "mxf4", "sp::ordered_metadata"),
        ("m16n8k64", "e2m1", "f8f6f4", "sp::ordered_metadata"),
    ],
    ids=key_id,
)
def test_prune_pairs_and_raw_bits(key):
    ins = _INS[key]
    rng = np.random.default_rng(3)
    atype, kind = key[1], key[2]
    A = rng.integers(0, 16, (16, ins.k)).astype(np.uint8)
    if atype == "s4":
        mag = np.abs(np.where(A >= 8, A.astype(np.int32) - 16, A))
    elif atype == "u4":
        mag = A.astype(np.int32)
    else:
        mag = np.array(E2M1_VALUES)[A & 7]
        if kind == "f8f6f4":
            A = A << 2  # the container: element in bits [5:2]
    cs = chunk_size(key[0], atype)
    _check_prune(ins, A, mag, cs, 2 if cs == 8 else 1)


# ---------------------------------------------------------------------------------------
# errors
K16 = ("m16n8k16", "f16", None, "sp")
K32_ORDERED = ("m16n8k32", "f16", None, "sp::ordered_metadata")


def test_selector_errors():
    e = jnp.zeros(32, jnp.uint32)
    for key, bad, allowed in (
        (K16, 4, "0, 1, 2, 3"),
        (K32_ORDERED, 2, "0, 1"),
        (("m16n8k64", "s8", None, "sp"), 1, "0"),
        (("m16n8k128", "e2m1", "mxf4nvf4", "sp::ordered_metadata"), 3, "0"),
    ):
        ins = _INS[key]
        with pytest.raises(ValueError, match=rf"selector={bad} .*allowed: {allowed}$"):
            S.metadata_indices(ins, e, bad)
        A = jnp.zeros((16, ins.k), jnp.uint32)
        with pytest.raises(ValueError, match=rf"selector={bad} "):
            S.compress(ins, A, bad)
        with pytest.raises(ValueError, match=rf"selector={bad} "):
            S.decompress(ins, jnp.zeros((16, ins.k // 2), jnp.uint32), e, bad)
    ins = _INS[K16]
    for bad in (None, True, -1, 1.0, "0"):
        with pytest.raises(ValueError, match="selector="):
            S.metadata_indices(ins, e, bad)
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda e, s: S.metadata_indices(ins, e, s))(e, 0)
    # through the instruction (register level)
    ins = _INS[K32_ORDERED]
    a, b, c = (jnp.zeros((32, ins.nregs[x]), jnp.uint32) for x in "abc")
    with pytest.raises(ValueError, match=r"selector=2 .*allowed: 0, 1"):
        ins(a, b, c, e, selector=2)


def test_operand_errors():
    ins = _INS[K16]
    with pytest.raises(TypeError, match="uint32"):
        S.metadata_indices(ins, jnp.zeros(32, jnp.int32), 0)
    with pytest.raises(ValueError, match=r"\[\.\.\., 32\]"):
        S.metadata_indices(ins, jnp.zeros(16, jnp.uint32), 0)
    with pytest.raises(ValueError, match="required"):
        S.metadata_indices(ins, None, 0)
    dense = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    with pytest.raises(ValueError, match="mma.sp"):
        S.prune(dense, jnp.zeros((16, 16), jnp.float16))
    with pytest.raises(ValueError, match=r"compressed shape"):
        S.compress(ins, jnp.zeros((16, 8), jnp.float16))
    with pytest.raises(ValueError, match=r"\[16, 8\]"):
        S.matrix_operands(ins, jnp.zeros((16, 16), jnp.uint32), jnp.zeros((16, 8), jnp.int32))
    with pytest.raises(TypeError, match="metadata"):
        S.matrix_operands(ins, jnp.zeros((16, 8), jnp.uint32), jnp.zeros((16, 8)))
    with pytest.raises(ValueError, match="metadata"):
        S.matrix_operands(ins, jnp.zeros((16, 8), jnp.uint32), jnp.zeros((16, 4), jnp.int32))
    with pytest.raises(ValueError, match="values"):
        S.decompress(ins, jnp.zeros((16, 16), jnp.uint32), jnp.zeros(32, jnp.uint32), 0)


def _valid_e(ins, sel, rng):
    key = (ins.shape, ins.atype, ins.kind, ins.sparse)
    A, _ = random_sparse(key, rng)
    return np.array(S.compress(ins, A, sel, registers=False)[1])


def _lane_nibble(key, sel, row, chunk):
    (where,) = [ln for ln, rc in oracle_map(key[0], key[1], sel).items() if rc == (row, chunk)]
    return where


def test_checked_mode_names_lane_nibble_row_chunk():
    rng = np.random.default_rng(11)
    for key, bad_nibble in (
        (K16, 0b0101),
        (K32_ORDERED, 0b0001),
        (K32_ORDERED, 0b1111),
        (("m16n8k8", "tf32", None, "sp"), 0b1000),
        (("m16n8k64", "s4", None, "sp::ordered_metadata"), 0b0000),
    ):
        ins = _INS[key]
        sel = selectors(key)[-1]
        e = _valid_e(ins, sel, rng)
        row, chunk = 9, 2
        lane, n = _lane_nibble(key, sel, row, chunk)
        e[lane] = (e[lane] & ~np.uint32(0xF << (4 * n))) | np.uint32(bad_nibble << (4 * n))
        S.metadata_indices(ins, e, sel)  # default: decoded, no error
        pattern = (
            rf"lane {lane}, nibble {n} \(bits {4 * n + 3}:{4 * n}\) = "
            rf"0b{bad_nibble:04b} describes row {row}, chunk {chunk} "
        )
        with pytest.raises(ValueError, match=pattern):
            S.metadata_indices(ins, e, sel, check=True)
        with S.checked(), pytest.raises(ValueError, match=pattern):
            S.metadata_indices(ins, e, sel)
        assert not S.is_checked()
        S.checked(True)
        try:
            assert S.is_checked()
            with pytest.raises(ValueError, match=pattern):
                S.decompress(ins, jnp.zeros((16, ins.k // 2), jnp.uint32), e, sel)
            S.metadata_indices(ins, e, sel, check=False)
        finally:
            S.checked(False)
        assert not S.is_checked()
    # unsorted indices are meaningful for mma.sp, not for ::ordered_metadata
    for variant, raises in (("sp", False), ("sp::ordered_metadata", True)):
        ins = _INS["m16n8k32", "s8", None, variant]
        e = _valid_e(ins, 0, rng)
        e[0] = (e[0] & ~np.uint32(0xF)) | np.uint32(0b0001)
        if raises:
            with pytest.raises(ValueError, match=r"lane 0, nibble 0 .*row 0, chunk 0 "):
                S.metadata_indices(ins, e, 0, check=True)
        else:
            S.metadata_indices(ins, e, 0, check=True)


def test_checked_mode_under_jit_and_vmap_raises_at_run_time():
    ins = _INS[K32_ORDERED]
    rng = np.random.default_rng(5)
    E = np.stack([_valid_e(ins, 1, rng) for _ in range(3)])
    lane, n = _lane_nibble(K32_ORDERED, 1, 12, 6)
    E[2, lane] = (E[2, lane] & ~np.uint32(0xF << (4 * n))) | np.uint32(0b1010 << (4 * n))

    def f(e):
        return S.metadata_indices(ins, e, 1, check=True)

    valid = jax.jit(f)(E[0])  # valid: nothing raised, the plain decode
    np.testing.assert_array_equal(np.asarray(valid), np.asarray(S.metadata_indices(ins, E[0], 1)))
    pattern = rf"lane {lane}, nibble {n} \(bits {4 * n + 3}:{4 * n}\) = 0b1010 describes row 12"
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"ValueError: invalid.*: e: " + pattern):
        jax.jit(jax.vmap(f))(E)  # run once per mapped element: no batch index
        jax.effects_barrier()  # a GPU reports host-callback errors here
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"e\[2\]: " + pattern):
        jax.jit(f)(E)  # batched inside the traced function
        jax.effects_barrier()  # a GPU reports host-callback errors here
    with pytest.raises(ValueError, match=r"e\[2\]: " + pattern):  # concrete batch: eager error
        f(E)


def test_too_many_nonzeros():
    ins = _INS[K32_ORDERED]
    A = np.zeros((2, 16, 32), np.float16)
    A[1, 3, 8:11] = [1.0, -2.0, 3.0]
    A[1, 7, :] = 1.0
    A = jnp.asarray(A)
    pattern = r"A\[1\]: row 3, chunk 2 \(dense columns 8\.\.11\) has 3 non-zero elements"
    for call in (
        lambda: S.validate(ins, A),
        lambda: S.compress(ins, A, 1),
        lambda: S.matrix_operands(
            ins, jax.lax.bitcast_convert_type(A, jnp.uint16).astype(jnp.uint32), None
        ),
    ):
        with pytest.raises(ValueError, match=pattern):
            call()
    B = jnp.zeros((32, 8), jnp.float16)
    C = jnp.zeros((16, 8), jnp.float16)  # the .f16.f16.f16.f16 form
    with pytest.raises(ValueError, match=r"A: row 3, chunk 2 .*\(2:4, "):
        ins.mma(A[1], B, C)
    # -0.0 is zero
    Z = np.zeros((16, 32), np.float16)
    Z[0, :4] = [-0.0, 1.0, -0.0, 2.0]
    S.validate(ins, Z)
    pruned = np.where(Z == 0, np.float16(0), Z)  # the pruned -0s come back as +0
    np.testing.assert_array_equal(
        np.asarray(S.prune(ins, Z)).view(np.uint16), pruned.view(np.uint16)
    )
    vals, e = S.compress(ins, Z, 0, registers=False)
    assert int(e[0]) & 0xF == 0b1101  # the non-zeros 1 and 3 are stored, not the -0s
    # pairs
    s4 = _INS["m16n8k64", "s4", None, "sp"]
    P = np.zeros((16, 64), np.uint32)
    P[15, 56:64] = [0, 1, 1, 0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"A: row 15, chunk 7 .* 3 non-zero pairs"):
        S.validate(s4, P)
    # traced: validate raises when the program runs
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"row 15, chunk 7 .* 3 non-zero pairs"):
        jax.jit(lambda a: S.validate(s4, a))(P)
        jax.effects_barrier()  # a GPU reports host-callback errors here
    # traced, unchecked: the lowest-index non-zero slots are kept
    vals, _ = jax.jit(lambda a: S.compress(s4, a, 0, registers=False))(P)
    assert np.asarray(vals)[15, 28:32].tolist() == [0, 1, 1, 0]


def test_matrix_level_metadata_checks():
    ins = _INS[K32_ORDERED]
    rng = np.random.default_rng(2)
    A, _ = random_sparse(K32_ORDERED, rng)
    vals, idx = (np.asarray(x) for x in S.matrix_operands(ins, A, None))
    got_vals, got_idx = S.matrix_operands(ins, vals, idx)
    np.testing.assert_array_equal(np.asarray(got_idx), idx)
    bad = idx.copy()
    bad[4, 6] = 2  # chunk 3 (columns 12..15) pointing into chunk 0
    with pytest.raises(ValueError, match=r"metadata: row 4, chunk 3 has dense columns \[2, "):
        S.matrix_operands(ins, vals, bad)
    dup = idx.copy()
    dup[4, 6:8] = [13, 13]
    S.matrix_operands(ins, vals, dup)  # what nibble 0b0101 decodes to: allowed by default
    with pytest.raises(ValueError, match=r"row 4, chunk 3 .*ascending"):
        S.matrix_operands(ins, vals, dup, check=True)
    desc = idx.copy()
    desc[4, 6:8] = [15, 12]
    with pytest.raises(ValueError, match=r"row 4, chunk 3"):
        S.matrix_operands(ins, vals, desc, check=True)
    S.matrix_operands(_INS["m16n8k32", "f16", None, "sp"], vals, desc, check=True)
    # 4-bit pairs
    s4 = _INS["m16n8k64", "s4", None, "sp"]
    A, _ = random_sparse(("m16n8k64", "s4", None, "sp"), rng)
    vals, idx = (np.asarray(x) for x in S.matrix_operands(s4, A, None))
    bad = idx.copy()
    bad[0, 1] = bad[0, 0] + 2
    with pytest.raises(ValueError, match=r"row 0, chunk 0 .*pairs"):
        S.matrix_operands(s4, vals, bad)
    # traced: raised in checked mode when the program runs; otherwise the row is marked
    bad = idx.copy()
    bad[0, :] = 0
    f = jax.jit(lambda v, i: S.matrix_operands(s4, v, i, rows=True)[1:])
    got, rows = f(vals, bad)
    np.testing.assert_array_equal(np.asarray(got), bad)
    np.testing.assert_array_equal(np.asarray(rows), np.arange(16) == 0)
    g = jax.jit(lambda v, i: S.matrix_operands(s4, v, i, check=True)[1])
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"metadata: row 0, chunk 0 has dense"):
        g(vals, bad)
        jax.effects_barrier()  # a GPU reports host-callback errors here


# ---------------------------------------------------------------------------------------
# jit / vmap
def test_jit_and_vmap():
    key = ("m16n8k16", "bf16", None, "sp")
    ins = _INS[key]
    rng = np.random.default_rng(9)
    A, _ = random_sparse(key, rng, batch=(3,))
    vals, E = S.compress(ins, A, 2, registers=False)
    eager = np.asarray(S.metadata_indices(ins, E, 2))
    for i in range(3):
        np.testing.assert_array_equal(eager[i], oracle_indices(*key[:2], 16, np.asarray(E[i]), 2))
    jitted = jax.jit(lambda e: S.metadata_indices(ins, e, 2))
    np.testing.assert_array_equal(np.asarray(jitted(E)), eager)
    mapped = jax.vmap(lambda e: S.metadata_indices(ins, e, 2))
    np.testing.assert_array_equal(np.asarray(mapped(E)), eager)
    # compress / decompress / prune under jit and vmap
    jc = jax.jit(lambda a: S.compress(ins, a, 2, registers=False))
    v2, e2 = jc(A)
    np.testing.assert_array_equal(np.asarray(v2), np.asarray(vals))
    np.testing.assert_array_equal(np.asarray(e2), np.asarray(E))
    a_regs, e3 = jax.vmap(lambda a: S.compress(ins, a, 2))(A)
    assert a_regs.shape == (3, 32, ins.nregs["a"])
    np.testing.assert_array_equal(np.asarray(e3), np.asarray(E))
    dense = jax.vmap(lambda a, e: S.decompress(ins, a, e, 2))(a_regs, e3)
    np.testing.assert_array_equal(np.asarray(dense), A)
    dense = jax.jit(lambda v, e: S.decompress(ins, v, e, 2))(vals, E)
    np.testing.assert_array_equal(np.asarray(dense), A)
    X = jnp.asarray(rng.standard_normal((3, 16, 16)), jnp.bfloat16)
    p = np.asarray(S.prune(ins, X)).view(np.uint16)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda x: S.prune(ins, x))(X)).view(np.uint16), p
    )
    np.testing.assert_array_equal(
        np.asarray(jax.vmap(lambda x: S.prune(ins, x))(X)).view(np.uint16), p
    )


def test_strict_promotion():
    key = ("m16n8k64", "u4", None, "sp")
    ins = _INS[key]
    A, _ = random_sparse(key, np.random.default_rng(1), batch=(2,))
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        vals, e = S.compress(ins, A, 1, registers=False, check=True)
        idx = S.metadata_indices(ins, e, 1, check=True)
        S.matrix_operands(ins, vals, idx, check=True)
        np.testing.assert_array_equal(np.asarray(S.decompress(ins, vals, e, 1)), A)
        S.validate(ins, S.prune(ins, A))


def test_docstring_examples():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(S, extraglobs={"jaxmma": jaxmma, "jnp": jnp}):
        runner.run(test)
    assert runner.failures == 0
    assert runner.tries >= 4


# ---------------------------------------------------------------------------------------
# End to end through the public API
def test_matrix_level_equals_register_level():
    ins = jaxmma.instruction(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32", arch="sm_90"
    )
    rng = np.random.default_rng(42)
    A = S.prune(ins, jnp.asarray(rng.standard_normal((2, 16, 32)), jnp.float16))
    A = A.at[0, 3, 4:8].set(0).at[1, 5, 8:12].set(jnp.float16([0, 0, 0, 1.5]))
    B = jnp.asarray(rng.standard_normal((2, 32, 8)), jnp.float16)
    C = jnp.asarray(rng.standard_normal((2, 16, 8)), jnp.float32)
    D = np.asarray(jax.jit(ins.mma)(A, B, C)).view(np.uint32)
    b = ins.fragment("b", jax.lax.bitcast_convert_type(B, jnp.uint16).astype(jnp.uint32))
    c = ins.fragment("c", jax.lax.bitcast_convert_type(C, jnp.uint32))
    run = jax.jit(lambda a, b, c, e, s: ins(a, b, c, e, selector=s), static_argnums=4)
    for s in (0, 1):
        a, e = S.compress(ins, A, selector=s)
        d = run(a, b, c, e, s)
        np.testing.assert_array_equal(np.asarray(ins.unfragment("d", d)), D)
    # explicit metadata at the matrix level
    vals, e = S.compress(ins, A, 1, registers=False)
    idx = S.metadata_indices(ins, e, 1)
    D2 = jax.jit(lambda v, i, b, c: ins.mma(v, b, c, metadata=i))(vals, idx, B, C)
    np.testing.assert_array_equal(np.asarray(D2).view(np.uint32), D)


# ---------------------------------------------------------------------------------------
# check= as an argument; the checked() context sets the default of eager calls only
def _bad_e(ins, sel=0):
    e = _valid_e(ins, sel, np.random.default_rng(3))
    e[0] = (e[0] & ~np.uint32(0xF)) | np.uint32(0b0101)  # i0 == i1: undefined
    return jnp.asarray(e)


def test_checked_context_applies_to_eager_calls_only():
    ins = _INS[K32_ORDERED]
    e = _bad_e(ins)
    f = jax.jit(lambda x: S.metadata_indices(ins, x, 0))
    with S.checked():
        with pytest.raises(ValueError, match="lane 0, nibble 0"):
            S.metadata_indices(ins, e, 0)
        f(e)  # traced: only an explicit check=True checks, nothing is baked in
    f(e)


def test_checked_context_is_per_thread():
    import threading

    seen = []
    with S.checked():
        t = threading.Thread(target=lambda: seen.append(S.is_checked()))
        t.start()
        t.join()
        assert S.is_checked()
    assert seen == [False] and not S.is_checked()


def test_check_argument_on_the_instruction():
    ins = _INS[K32_ORDERED]
    a, b = jnp.zeros((32, 4), jnp.uint32), jnp.zeros((32, 4), jnp.uint32)
    c = jnp.zeros((32, ins.nregs["c"]), jnp.uint32)
    C = jnp.zeros((16, 8), jnp.float16 if ins.ctype == "f16" else jnp.float32)
    e = _bad_e(ins)
    ins(a, b, c, e, selector=0)  # decoded as is by default
    with pytest.raises(ValueError, match="lane 0, nibble 0"):
        ins(a, b, c, e, selector=0, check=True)
    g = jax.jit(lambda x: ins(a, b, c, x, selector=0, check=True))
    with pytest.raises(jax.errors.JaxRuntimeError, match="ValueError: .*lane 0, nibble 0"):
        g(e)
        jax.effects_barrier()  # a GPU reports host-callback errors here
    g(_valid_e(ins, 0, np.random.default_rng(0)))  # valid metadata runs under plain jit
    vals = jnp.zeros((16, 16), jnp.float16)
    dup = np.array([[4 * ch + j for ch in range(8) for j in (0, 1)]] * 16, np.int32)
    dup[:, 1] = 0  # chunk 0 stores column 0 twice: what nibble 0b0000 decodes to
    dup = jnp.asarray(dup)
    ins.mma(vals, jnp.zeros((32, 8), jnp.float16), C, metadata=dup)
    with pytest.raises(ValueError, match="metadata: row 0, chunk 0"):
        ins.mma(
            vals,
            jnp.zeros((32, 8), jnp.float16),
            C,
            metadata=dup,
            check=True,
        )
