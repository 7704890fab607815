"""The fixed-width engine gives the general multi-limb engine's bits, input for input.

The general engine (``_numerics.fused_sum``) is hardware-checked through the golden files;
here both engines run the same forms on inputs built to stress the fixed-width shortcuts:
raw random bits (NaN, Inf, subnormals), wide exponent ranges, sums that reach the int32
limit of a 16-product group, cancellation, results that round to subnormals or overflow,
and f16 ties. The general engine is forced by switching the dispatcher's choice off.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _suite import params

import jaxmma
from jaxmma import arith, bits, models
from jaxmma.arith import _numerics
from jaxmma.models import _chain

FORMS = [
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "sm_90"),
    ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", "sm_90"),
    ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "sm_90"),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_90"),
    ("mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e5m2.f16", "sm_90"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_80"),
    ("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16", "sm_75"),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "sm_89"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_120"),
    ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", "sm_80"),
    ("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e3m2.f32", "sm_120a"),
]
M, N = 24, 40


@functools.cache
def _jitted(ins, engine):
    """One compiled program per form and engine for the whole session (every input set of
    a form has the same shapes). ``engine`` only keys the cache: the general engine's
    program is traced, and so compiled, under the patch that switches the fixed one off."""
    del engine
    return jax.jit(lambda a, b, c: models.mma_bits(ins, a, b, c))


def _general(monkeypatch, ins, A, B, C):
    with monkeypatch.context() as m:
        # the name the floors above call (models._chain reads it from jaxmma.arith)
        m.setattr(arith, "fixed_supports", lambda *a, **k: False)
        return np.asarray(_jitted(ins, "general")(A, B, C))


def _fast(ins, A, B, C):
    return np.asarray(_jitted(ins, "fixed")(A, B, C))


def _encode(ins, fmt, x):
    out = bits.encode(fmt, jnp.asarray(x, jnp.float32), saturate=fmt not in ("f16", "bf16"))
    if ins.kind == "f8f6f4":
        out = bits.to_container(out, fmt)
    return out


def _inputs(ins, how, rng):
    k = ins.k
    shapes = {"a": (M, k), "b": (k, N), "c": (M, N)}
    fmts = {"a": ins.atype, "b": ins.btype, "c": ins.ctype}
    if how == "raw":
        out = {}
        for op, shape in shapes.items():
            f = bits.FORMATS[fmts[op]]
            x = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
            x = x if f.bits >= 32 else x & np.uint32((1 << f.bits) - 1)
            if ins.kind == "f8f6f4" and op != "c":
                x = np.asarray(_encode(ins, fmts[op], bits.decode(fmts[op], x)))
            out[op] = jnp.asarray(x)
        return out["a"], out["b"], out["c"]
    if how == "normal":
        vals = {op: rng.standard_normal(s) for op, s in shapes.items()}
    elif how == "wide":  # exponents spread over most of each format's range
        vals = {
            op: rng.standard_normal(s) * 2.0 ** rng.integers(-12, 12, s) for op, s in shapes.items()
        }
    elif how == "group_limit":  # every product near 4 * 2**e_max, one sign: int32 edge
        big = {
            "bf16": 1.9921875,
            "f16": 1.9990234375,
            "tf32": 1.9990234375,
            "e4m3": 1.875,
            "e5m2": 1.75,
            "e2m1": 1.5,
            "e3m2": 1.75,
            "e2m3": 1.875,
        }
        vals = {op: np.full(s, big.get(fmts[op], 1.0)) for op, s in shapes.items()}
        vals["c"] = np.full(shapes["c"], 3.9)
    elif how == "cancel":  # x and -x in the same block, with small leftovers
        a = rng.standard_normal(shapes["a"])
        a[:, 1::2] = -a[:, 0::2]
        b = np.repeat(rng.standard_normal((k // 2, N)), 2, axis=0)
        b[-1] += 2.0**-6
        vals = {"a": a, "b": b, "c": rng.standard_normal(shapes["c"]) * 2.0**-20}
    elif how == "tiny":  # results in the output format's subnormal range
        fa, fb = bits.FORMATS[fmts["a"]], bits.FORMATS[fmts["b"]]
        ea = 2.0 ** (fa.min_exp + rng.integers(0, 6, shapes["a"]))
        eb = 2.0 ** (fb.min_exp + rng.integers(0, 6, shapes["b"]))
        vals = {
            "a": rng.choice([-1.0, 1.0], shapes["a"]) * ea * rng.integers(1, 4, shapes["a"]),
            "b": rng.choice([-1.0, 1.0], shapes["b"]) * eb * rng.integers(1, 4, shapes["b"]),
            "c": np.zeros(shapes["c"]),
        }
    elif how == "huge":  # sums that overflow the accumulator
        top = {op: bits.decode(fmts[op], bits.FORMATS[fmts[op]].max_bits) for op in ("a", "b")}
        vals = {
            op: np.full(shapes[op], float(top[op])) * rng.choice([1.0, 0.5], shapes[op])
            for op in ("a", "b")
        }
        vals["c"] = rng.standard_normal(shapes["c"])
    elif how == "ties":  # f16 results halfway between two f16 values
        a = np.zeros(shapes["a"])
        b = np.zeros(shapes["b"])
        a[:, 0], b[0, :] = 1.0, 1.0
        a[:, 1], b[1, :] = 2.0**-11, rng.choice([1.0, 3.0], N)
        vals = {"a": a, "b": b, "c": np.zeros(shapes["c"])}
    else:
        raise AssertionError(how)
    return tuple(
        _encode(ins, fmts[op], vals[op])
        if op != "c" or fmts[op] != "f32"
        else jnp.asarray(np.asarray(vals[op], np.float32).view(np.uint32))
        for op in ("a", "b", "c")
    )


def _family(text_arch):
    """(D type, input family): the quick run checks one form of each, every input kind."""
    ins = jaxmma.instruction(*text_arch)
    fam = {"e4m3": "fp8", "e5m2": "fp8", "f16": "16", "bf16": "16"}.get(ins.atype, ins.atype)
    return ins.dtype, fam, ins.kind


@pytest.mark.parametrize(
    "text,arch", params(FORMS, _family, salt="fixed", ids=lambda x: f"{x[0]}-{x[1]}")
)
@pytest.mark.parametrize(
    "how", ["raw", "normal", "wide", "group_limit", "cancel", "tiny", "huge", "ties"]
)
def test_fixed_engine_matches_general(monkeypatch, text, arch, how):
    ins = jaxmma.instruction(text, arch=arch)
    rng = np.random.default_rng(abs(hash((text, arch, how))) % 2**32)
    A, B, C = _inputs(ins, how, rng)
    want = _general(monkeypatch, ins, A, B, C)
    got = _fast(ins, A, B, C)
    bad = np.flatnonzero(want != got)
    assert bad.size == 0, (
        f"{bad.size} of {want.size} differ, first at {bad[0]}: fixed {got.flat[bad[0]]:#x}, "
        f"general {want.flat[bad[0]]:#x}"
    )


def test_fixed_engine_is_chosen_for_the_common_forms():
    # the fast path must actually run where the docs say it does
    for text, arch in FORMS[:4]:
        ins = jaxmma.instruction(text, arch=arch)
        bm = models.block_model(ins.arch_number, ins)
        assert arith.fixed_supports(bm, ins.dtype, _chain.sig_bits(ins)), text


def test_fixed_engine_declines_what_it_cannot_hold():
    from jaxmma.arith import EXACT, BlockModel

    assert not arith.fixed_supports(EXACT, "f32", 8)
    assert not arith.fixed_supports(BlockModel(F=30, L=16, e_zero_f32=0, e_zero_f16=0), "f32", 8)
    assert not arith.fixed_supports(BlockModel(F=25, L=16, e_zero_f32=0, e_zero_f16=0), "f32", 24)


def test_f32_add_matches_the_general_sum():
    """The 32-bit FADD formulation equals the exact two-term sum rounded once, on random
    bits with zeros, infinities, NaNs, subnormals and near-cancelling pairs."""
    rng = np.random.default_rng(7)
    n = 1 << 16
    special = np.array(
        [
            0,
            0x80000000,
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0x7F800001,
            0xFFC12345,
            1,
            0x80000001,
            0x007FFFFF,
            0x00800000,
            0x7F7FFFFF,
            0xFF7FFFFF,
        ],
        np.uint32,
    )

    def draw():
        x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        pick = rng.random(n) < 0.1
        x[pick] = special[rng.integers(0, len(special), pick.sum())]
        return x

    x, y = draw(), draw()
    near = rng.random(n) < 0.3  # -x plus a few ulps: cancellation
    y[near] = (x[near] ^ np.uint32(0x80000000)) + rng.integers(-3, 4, near.sum()).astype(np.uint32)
    fast = np.asarray(arith.ieee_add(jnp.asarray(x), jnp.asarray(y), "f32"))
    general = np.asarray(_numerics.ieee_add_general(jnp.asarray(x), jnp.asarray(y), "f32"))
    assert np.array_equal(fast, general), np.flatnonzero(fast != general)[:5]
