"""``wgmma.mma_async`` (PTX ISA 9.7.15.5.2): the forms, the errors, and the numerics.

The numerics are checked against an oracle written here with Python integers, apart
from the code it checks: MMA-Sim's published model of Hopper ``wgmma`` (Xie et al. 2025).
Each element is decoded from its bits by hand; a product ``a * b`` is exact and counts
with the exponent ``e_a + e_b`` of its factors (their leading-bit exponents; emin for
subnormals; a zero term counts as e_zero); every term, C included, is truncated toward
zero to F fractional bits below ``2**e_max``; the truncated terms are summed exactly; f32
results are truncated to 23 (fp8: 13) mantissa bits, f16 results rounded to nearest even;
overflow gives Inf, NaN is canonical, a zero result is +0.
"""

import functools
import itertools
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _suite import params

import jaxmma
from jaxmma import models, spec
from jaxmma.spec import _spec

OP = "wgmma.mma_async"
HEAD = "wgmma.mma_async.sync.aligned"
WGMMA = jaxmma.all_instructions(OP)
RNG = np.random.default_rng(2025)


# ---- the forms -------------------------------------------------------------------------------
def test_form_count_is_the_spec_count():
    """530 texts, counted by hand from the syntax blocks of 9.7.15.5.2:

    .f16: 32 shapes (N = 8, 16, ..., 256; K = 16) x dtype {.f16, .f32} = 64;
    .bf16: 32 shapes x .f32 = 32; .tf32: 32 shapes (K = 8) x .f32 = 32;
    fp8: 32 shapes (K = 32) x atype {.e4m3, .e5m2} x btype {.e4m3, .e5m2}
      x dtype {.f16, .f32} = 256;
    .s8/.u8: 16 shapes (N = 8, 16, 24, 32, 48, 64, ..., 224; K = 32) x 4 type mixes
      x with or without .satfinite = 128;
    .b1: 18 shapes (N = 8, 16, 24, 32, 48, 64, ..., 256; K = 256) x .and = 18.
    64 + 32 + 32 + 256 + 128 + 18 = 530 (466 forms of the table).
    """
    assert len(WGMMA) == 530
    assert len({i.text for i in WGMMA}) == 530
    assert len(spec.forms(OP)) == 466
    assert _spec.count_variants(OP) == 530

    def ns(atype, k):
        return sorted({i.n for i in WGMMA if i.atype == atype and i.k == k})

    floating = [8 * i for i in range(1, 33)]
    assert ns("f16", 16) == ns("bf16", 16) == ns("tf32", 8) == ns("e5m2", 32) == floating
    assert ns("s8", 32) == ns("u8", 32) == [8, 16, 24, 32] + list(range(48, 225, 16))
    assert ns("b1", 256) == [8, 16, 24, 32] + list(range(48, 257, 16))
    assert {i.m for i in WGMMA} == {64}
    pairs = {(i.atype, i.btype) for i in WGMMA}
    assert pairs == {("f16", "f16"), ("bf16", "bf16"), ("tf32", "tf32"), ("b1", "b1")} | set(
        itertools.product(("e4m3", "e5m2"), repeat=2)
    ) | set(itertools.product(("s8", "u8"), repeat=2))


@pytest.mark.parametrize("ins", WGMMA, ids=lambda i: i.text)
def test_every_form_parses_from_its_text(ins):
    again = jaxmma.instruction(ins.text + " {d0}, descA, descB, p, 1, 1;", arch="sm_90a")
    assert again == ins and again.arch == "sm_90a"
    assert ins.ctype == ins.dtype  # d is also the accumulator
    per_thread = 64 * ins.n * (16 if ins.dtype == "f16" else 32) // (128 * 32)
    assert ins.nregs == {"d": per_thread, "a": 4}  # 64 x K elements of A = 4 registers


def test_default_arch_is_sm_90a_and_versions():
    ins = jaxmma.instruction(f"{HEAD}.m64n256k16.f32.bf16.bf16")
    assert ins.arch == "sm_90a" and ins.ptx_version == "8.0" and ins.targets == "sm_90a"
    assert jaxmma.instruction(f"{HEAD}.m64n8k32.s32.u8.s8").ptx_version == "8.4"
    assert jaxmma.instruction(f"{HEAD}.m64n8k32.s32.u8.u8").ptx_version == "8.0"
    assert ins.runs_on("sm_90a") and not ins.runs_on("sm_90") and not ins.runs_on("sm_100a")


@pytest.mark.parametrize(
    "text",
    [
        # the spec's examples (9.7.15.5.2), operands included
        f"{HEAD}.m64n8k16.f32.f16.f16 {{f32d0, f32d1}}, {{f16a0}}, descB, 1, -1, -1, 1;",
        f"{HEAD}.m64n72k16.f16.f16.f16 {{f16d0}}, descA, descB, scaleD, -1, 1, 1, 0;",
        f"{HEAD}.m64n120k16.f32.bf16.bf16 {{f32d0}}, {{bf16a0}}, descB, scaleD, -1, -1, 0;",
        f"{HEAD}.m64n16k8.f32.tf32.tf32 {{f32d0}}, descA, descB, 0, -1, -1;",
        f"{HEAD}.m64n8k32.f16.e4m3.e5m2 {{f16d0, f16d1}}, descA, descB, scaleD, -1, 1;",
        f"{HEAD}.m64n8k32.f32.e5m2.e4m3 {{f32d0}}, {{f16a0}}, descB, 1, -1, -1;",
        f"{HEAD}.m64n8k32.s32.s8.s8.satfinite {{s32d0}}, {{s32a0}}, descB, 1;",
        f"{HEAD}.m64n8k32.s32.u8.u8 {{s32d0}}, descA, descB, scaleD;",
        f"{HEAD}.m64n8k32.s32.s8.u8.satfinite {{s32d0}}, {{s32a0}}, descB, scaleD;",
        f"{HEAD}.m64n8k32.s32.u8.s8 {{s32d0}}, descA, descB, scaleD;",
        f"{HEAD}.m64n8k256.s32.b1.b1.and.popc {{s32d0}}, {{b32a0}}, descB, scaleD;",
    ],
)
def test_spec_examples_parse(text):
    ins = jaxmma.instruction(text)
    assert ins.opcode == OP and jaxmma.instruction(ins.text) == ins


def test_satfinite_in_the_syntax_position_is_the_same_instruction():
    # the syntax block writes shape{.satfinite}.s32..., the examples .s32.s8.s8.satfinite
    a = jaxmma.instruction(f"{HEAD}.m64n224k32.satfinite.s32.s8.u8")
    b = jaxmma.instruction(f"{HEAD}.m64n224k32.s32.s8.u8.satfinite")
    assert a == b and a.satfinite


FORBIDDEN = [
    # (text, arch, words the message must contain)
    (f"{HEAD}.m64n8k16.f32.f16.f16", "sm_90", ["sm_90", "sm_90a"]),
    (f"{HEAD}.m64n8k16.f32.f16.f16", "sm_100a", ["sm_100a", "sm_90a"]),
    (f"{HEAD}.m64n8k16.f32.f16.f16", "sm_89", ["sm_89", "sm_90a"]),
    (f"{HEAD}.m64n12k16.f32.f16.f16", None, ["shape", "m64n12k16", "m64n8k16", "m64n256k16"]),
    (f"{HEAD}.m64n264k16.f32.f16.f16", None, ["shape", "m64n264k16"]),
    (f"{HEAD}.m64n8k32.f32.f16.f16", None, ["shape", "m64n8k32", "m64n8k16"]),
    (f"{HEAD}.m32n8k16.f32.f16.f16", None, ["shape", "m32n8k16"]),
    (f"{HEAD}.m64n40k32.s32.s8.s8", None, ["shape", "m64n40k32", "m64n48k32"]),
    (f"{HEAD}.m64n240k32.s32.u8.u8", None, ["shape", "m64n240k32", "m64n224k32"]),
    (f"{HEAD}.m64n40k256.s32.b1.b1.and.popc", None, ["shape", "m64n40k256"]),
    (f"{HEAD}.m64n8k16.f16.bf16.bf16", None, [".dtype", "'f16'", "f32"]),
    (f"{HEAD}.m64n8k8.f16.tf32.tf32", None, [".dtype", "f32"]),
    (f"{HEAD}.m64n8k32.s32.e4m3.e4m3", None, [".dtype", "f16, f32"]),
    (f"{HEAD}.m64n8k32.f32.s8.s8", None, [".dtype", "s32"]),
    (f"{HEAD}.m64n8k16.f32.f16.bf16", None, [".btype", "bf16", "allowed: f16"]),
    (f"{HEAD}.m64n8k32.f32.e4m3.f16", None, [".btype", "e4m3, e5m2"]),
    (f"{HEAD}.m64n8k32.s32.s8.e4m3", None, [".btype", "s8, u8"]),
    (f"{HEAD}.m64n8k32.f32.e2m1.e2m1", None, [".atype", "e2m1"]),
    (f"{HEAD}.m64n8k16.f32.f64.f64", None, [".atype", "f64"]),
    (f"{HEAD}.m64n8k256.s32.b1.b1.xor.popc", None, ["bitOp", "xor", "and"]),
    (f"{HEAD}.m64n8k256.s32.b1.b1", None, ["and.popc"]),
    (f"{HEAD}.m64n8k256.s32.b1.b1.and", None, ["and.popc"]),
    (f"{HEAD}.m64n8k32.s32.s8.s8.and.popc", None, ["b1"]),
    (f"{HEAD}.m64n8k16.f32.f16.f16.satfinite", None, ["satfinite", "s8/.u8"]),
    (f"{HEAD}.m64n8k256.s32.b1.b1.and.popc.satfinite", None, ["satfinite"]),
    (f"{HEAD}.m64n8k16.row.col.f32.f16.f16", None, ["layout", "imm-trans"]),
    (f"{HEAD}.m64n8k16.f32.f16.f16.f32", None, [".dtype.atype.btype", "4 type"]),
    (f"{HEAD}.m64n8k16.f32.f16", None, [".dtype.atype.btype"]),
    (f"{HEAD}.m64n8k16.rn.f32.f16.f16", None, ["rounding"]),
    (f"{HEAD}.m64n8k32.kind::f8f6f4.f32.e4m3.e4m3", None, ["kind"]),
    ("wgmma.mma_async.aligned.m64n8k16.f32.f16.f16", None, [".sync"]),
    ("wgmma.mma_async.sync.aligned.f32.f16.f16", None, ["shape"]),
    ("wgmma.mma.sync.aligned.m64n8k16.f32.f16.f16", None, ["opcode", "wgmma.mma_async"]),
    ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16", None, [".sp", "not emulated"]),
]


@pytest.mark.parametrize("text,arch,words", FORBIDDEN, ids=[f[0] + str(f[1]) for f in FORBIDDEN])
def test_forbidden_forms_raise_value_error_naming_the_qualifier(text, arch, words):
    with pytest.raises(ValueError) as err:
        jaxmma.instruction(text, arch=arch)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_register_level_is_not_emulated_yet():
    ins = jaxmma.instruction(f"{HEAD}.m64n8k16.f32.f16.f16")
    with pytest.raises(NotImplementedError, match=r"ins\.mma\(A, B, C"):
        ins(jnp.zeros((128, 4), jnp.uint32), 0, jnp.zeros((128, 4), jnp.uint32))


# ---- the oracle --------------------------------------------------------------------------------
# (exponent bits, mantissa bits, has Inf) of each input and output format, decoded by hand
FMT = {
    "f16": (5, 10, True),
    "bf16": (8, 7, True),
    "tf32": (8, 10, True),
    "f32": (8, 23, True),
    "e5m2": (5, 2, True),
    "e4m3": (4, 3, False),  # e4m3fn: no Inf; S.1111.111 is NaN
}
NBITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "e5m2": 8, "e4m3": 8}


def decode(bits: int, fmt: str):
    """-> ("nan" | "inf" | "num", sign, significand M, lsb exponent, leading exponent e):
    value ``(-1)**sign * M * 2**lsb``; ``e`` is the exponent of the hidden bit (emin for
    subnormals), None for zero."""
    eb, mb, has_inf = FMT[fmt]
    if fmt == "tf32":
        bits >>= 13  # the low 13 bits of the register are ignored
    bits &= (1 << (1 + eb + mb)) - 1
    sign, ex, man = bits >> (eb + mb), (bits >> mb) & ((1 << eb) - 1), bits & ((1 << mb) - 1)
    bias, top = (1 << (eb - 1)) - 1, (1 << eb) - 1
    if has_inf and ex == top:
        return ("inf" if man == 0 else "nan", sign, 0, 0, None)
    if not has_inf and ex == top and man == (1 << mb) - 1:
        return ("nan", sign, 0, 0, None)
    if ex == 0:
        return ("num", sign, man, 1 - bias - mb, None if man == 0 else 1 - bias)
    return ("num", sign, man | (1 << mb), ex - bias - mb, ex - bias)


def round_out(total: int, unit: int, dtype: str, f32_mantissa: int) -> int:
    """Bits of ``total * 2**unit`` in dtype: f32 truncated to ``f32_mantissa`` bits, f16
    rounded to nearest even; subnormals kept; overflow to Inf; zero is +0."""
    if total == 0:
        return 0
    sign, mag = int(total < 0), abs(total)
    if dtype == "f32":
        p, emin, emax, ebits, mbits = f32_mantissa, -126, 127, 8, 23
    else:
        p, emin, emax, ebits, mbits = 10, -14, 15, 5, 10
    lead = unit + mag.bit_length() - 1
    ulp = max(lead, emin) - p
    shift = ulp - unit
    if shift <= 0:
        q = mag << -shift
    elif dtype == "f32":
        q = mag >> shift  # toward zero
    else:
        q, rest = mag >> shift, mag & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        q += rest > half or (rest == half and q & 1)
    if q == 0:  # a sum that underflows to zero gives +0, as an exact zero does (MMA-Sim's
        return 0  # torch code would keep the sign; the jaxmma models of mma give +0)
    if q >> (p + 1):  # the rounding carried into a new binade
        q, ulp = q >> 1, ulp + 1
    inf = ((1 << ebits) - 1) << mbits
    if q >> p:  # normal
        e = ulp + p
        if e > emax:
            return (sign << (ebits + mbits)) | inf
        field = ((e + (1 << (ebits - 1)) - 1) << mbits) | ((q - (1 << p)) << (mbits - p))
    else:
        field = q << (mbits - p)
    return (sign << (ebits + mbits)) | field


def oracle_dot(a_bits, b_bits, c_bits, atype, btype, dtype, F, e_zero, f32_mantissa):
    """One element of D: the published fused-sum model over all k (one block)."""
    terms, nan, pos_inf, neg_inf = [], False, False, False
    for x, y in zip(a_bits, b_bits, strict=True):
        ka, sa, ma, la, ea = decode(int(x), atype)
        kb, sb, mb, lb, eb = decode(int(y), btype)
        s = sa ^ sb
        if (
            "nan" in (ka, kb)
            or (ka == "inf" and mb == 0 and kb == "num")
            or (kb == "inf" and ma == 0 and ka == "num")
        ):
            nan = True
        elif "inf" in (ka, kb):
            pos_inf, neg_inf = pos_inf or not s, neg_inf or bool(s)
        elif ma and mb:
            terms.append((s, ma * mb, la + lb, ea + eb))
        else:
            terms.append((0, 0, 0, e_zero))
    kc, sc, mc, lc, ec = decode(int(c_bits), dtype)
    nan |= kc == "nan"
    if kc == "inf":
        pos_inf, neg_inf = pos_inf or not sc, neg_inf or bool(sc)
    elif kc == "num":
        terms.append((sc, mc, lc, e_zero if mc == 0 else ec))
    if nan or (pos_inf and neg_inf):
        return 0x7FFFFFFF if dtype == "f32" else 0x7FFF
    if pos_inf or neg_inf:
        inf = 0x7F800000 if dtype == "f32" else 0x7C00
        return inf | ((0x80000000 if dtype == "f32" else 0x8000) if neg_inf else 0)
    e_max = max(t[3] for t in terms)
    unit = e_max - F
    total = 0
    for s, m, lsb, _ in terms:
        sh = lsb - unit
        t = m << sh if sh >= 0 else m >> -sh  # truncation of the magnitude
        total += -t if s else t
    return round_out(total, unit, dtype, f32_mantissa)


def oracle(ins, A, B, C, F, e_zero, f32_mantissa):
    A, B, C = (np.asarray(x) for x in (A, B, C))
    D = np.zeros(C.shape, np.uint32)
    for m, n in itertools.product(range(C.shape[0]), range(C.shape[1])):
        D[m, n] = oracle_dot(
            A[m], B[:, n], C[m, n], ins.atype, ins.btype, ins.dtype, F, e_zero, f32_mantissa
        )
    return D


def hopper(ins):
    """MMA-Sim's Hopper wgmma parameters, restated here: (F, e_zero, f32 mantissa bits)."""
    fp8 = ins.atype in ("e4m3", "e5m2")
    return (13 if fp8 else 25), (-133 if ins.dtype == "f32" else -21), (13 if fp8 else 23)


# ---- random raw bits, specials included ------------------------------------------------------
def random_bits(fmt: str, shape, rng=RNG, tiny=False):
    """Mostly moderate values (exponents near 0: cancellation and truncation matter), with
    zeros, subnormals, extreme exponents and arbitrary bit patterns (NaN, Inf). ``tiny``:
    exponents near the format's smallest instead of near 0."""
    eb, mb, _ = FMT[fmt]
    bias = (1 << (eb - 1)) - 1
    n = int(np.prod(shape))
    sign = rng.integers(0, 2, n)
    man = rng.integers(0, 1 << mb, n)
    ex = np.clip((1 if tiny else bias) + rng.integers(-4, 5, n), 1, (1 << eb) - 2)
    bits = (sign << (eb + mb)) | (ex << mb) | man
    kind = rng.random(n)
    bits = np.where(kind < 0.08, sign << (eb + mb), bits)  # signed zeros
    bits = np.where((kind >= 0.08) & (kind < 0.16), (sign << (eb + mb)) | man, bits)  # subnormal
    wide = (sign << (eb + mb)) | (rng.integers(1, (1 << eb) - 1, n) << mb) | man
    if not tiny:
        bits = np.where((kind >= 0.16) & (kind < 0.24), wide, bits)  # any finite exponent
        raw = rng.integers(0, 1 << (1 + eb + mb), n)
        bits = np.where(kind >= 0.97, raw, bits)  # anything: NaN and Inf included
    if fmt == "tf32":  # the register's low 13 bits are ignored: fill them with noise
        bits = (bits << 13) | rng.integers(0, 1 << 13, n)
    return bits.reshape(shape).astype(np.uint32)


FLOAT_TEXTS = [
    f"{HEAD}.m64n8k16.f32.f16.f16",
    f"{HEAD}.m64n8k16.f16.f16.f16",
    f"{HEAD}.m64n8k16.f32.bf16.bf16",
    f"{HEAD}.m64n8k8.f32.tf32.tf32",
] + [f"{HEAD}.m64n8k32.{d}.{a}.{b}" for d in ("f32", "f16") for a in ("e4m3", "e5m2")
     for b in ("e4m3", "e5m2")]  # fmt: skip


def _operands(ins, rng=RNG, N=None):
    N = N or ins.n
    A = random_bits(ins.atype, (64, ins.k), rng)
    B = random_bits(ins.btype, (ins.k, N), rng)
    C = random_bits(ins.dtype, (64, N), rng)
    # rows 48-63 and the last 2 columns: tiny A, B and C (subnormal results, zero terms
    # that set e_max)
    A[48:] = random_bits(ins.atype, (16, ins.k), rng, tiny=True)
    B[:, -2:] = random_bits(ins.btype, (ins.k, 2), rng, tiny=True)
    C[48:] = random_bits(ins.dtype, (16, N), rng, tiny=True)
    C[56:] = 0
    return A, B, C


def _family(text):
    """(input family, dtype) of a wgmma text: the quick run checks one form of each."""
    ins = jaxmma.instruction(text)
    fam = (
        "fp8"
        if ins.atype in ("e4m3", "e5m2")
        else "int"
        if ins.atype in ("s8", "u8")
        else ins.atype
    )
    return fam, ins.dtype, ins.n


@pytest.mark.parametrize("text", params(FLOAT_TEXTS, _family, salt="oracle", ids=str))
def test_float_forms_match_the_oracle(text):
    ins = jaxmma.instruction(text)
    F, e_zero, man = hopper(ins)
    for seed in range(2):
        A, B, C = _operands(ins, np.random.default_rng(seed))
        got = np.asarray(models.mma_bits(ins, jnp.asarray(A), jnp.asarray(B), jnp.asarray(C)))
        want = oracle(ins, A, B, C, F, e_zero, man)
        bad = np.argwhere(got != want)
        assert bad.size == 0, [(tuple(i), hex(got[tuple(i)]), hex(want[tuple(i)])) for i in bad[:5]]


def test_the_oracle_sees_every_kind_of_input():
    """The random operands reach NaN/Inf results, subnormal results and output rounding."""
    ins = jaxmma.instruction(f"{HEAD}.m64n8k32.f16.e5m2.e5m2")
    A, B, C = _operands(ins, np.random.default_rng(0))
    D = oracle(ins, A, B, C, *hopper(ins))
    assert (D == 0x7FFF).any() and ((D & 0x7FFF) == 0x7C00).any()
    assert (((D & 0x7C00) == 0) & ((D & 0x3FF) != 0)).any()  # f16 subnormals


@pytest.mark.parametrize(
    "text", [f"{HEAD}.m64n8k16.f32.bf16.bf16", f"{HEAD}.m64n8k32.f16.e4m3.e5m2"]
)
def test_scale_operands_match_the_oracle(text):
    """imm-scale-a/b = -1 negate A/B; scale-d = False replaces C by +0."""
    ins = jaxmma.instruction(text)
    F, e_zero, man = hopper(ins)
    A, B, C = _operands(ins, np.random.default_rng(7))
    sa, sb = 1 << (NBITS[ins.atype] - 1), 1 << (NBITS[ins.btype] - 1)
    for scale_d, scale_a, scale_b in [(True, -1, 1), (False, 1, -1), (False, -1, -1)]:
        got = ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C), scale_d=scale_d,
                      scale_a=scale_a, scale_b=scale_b)  # fmt: skip
        got = np.asarray(jax.lax.bitcast_convert_type(got, _uint(got.dtype)))
        A2 = A ^ np.uint32(sa) if scale_a == -1 else A
        B2 = B ^ np.uint32(sb) if scale_b == -1 else B
        C2 = C if scale_d else np.zeros_like(C)
        np.testing.assert_array_equal(got, oracle(ins, A2, B2, C2, F, e_zero, man))


def _uint(dtype):
    return {2: jnp.uint16, 4: jnp.uint32}[jnp.dtype(dtype).itemsize]


def test_scale_arguments_are_validated():
    f = jaxmma.instruction(f"{HEAD}.m64n8k16.f32.f16.f16")
    i = jaxmma.instruction(f"{HEAD}.m64n8k32.s32.s8.s8")
    A, B, C = jnp.zeros((64, 16), jnp.float16), jnp.zeros((16, 8), jnp.float16), jnp.zeros((64, 8))
    with pytest.raises(ValueError, match="scale_a.*1 or -1.*got 2"):
        f.mma(A, B, C, scale_a=2)
    with pytest.raises(ValueError, match="scale_d"):
        f.mma(A, B, C, scale_d=0.5)
    Ai, Bi, Ci = (
        jnp.zeros((64, 32), jnp.int8),
        jnp.zeros((32, 8), jnp.int8),
        jnp.zeros((64, 8), jnp.int32),
    )
    with pytest.raises(ValueError, match=r"scale_b=-1.*floating.*\.s8"):
        i.mma(Ai, Bi, Ci, scale_b=-1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        f.mma(A, B, C, trans_a=1)
    with pytest.raises(TypeError, match="A: expected float16"):
        f.mma(A.astype(jnp.float32), B, C)
    with pytest.raises(ValueError, match="B: expected"):
        f.mma(A, B[:8], C)


# ---- integer and single-bit forms --------------------------------------------------------------
def _int_value(x, fmt):
    x = int(x) & 0xFF
    return x - 256 if fmt == "s8" and x >= 128 else x


@pytest.mark.parametrize("sat", [False, True])
@pytest.mark.parametrize(
    "a,b",
    [("s8", "u8")]
    + [
        pytest.param(*p, marks=pytest.mark.full) for p in [("s8", "s8"), ("u8", "s8"), ("u8", "u8")]
    ],
)
def test_integer_forms_match_the_oracle(a, b, sat):
    ins = jaxmma.instruction(f"{HEAD}.m64n16k32.s32.{a}.{b}" + (".satfinite" if sat else ""))
    rng = np.random.default_rng(3)
    A = rng.integers(0, 256, (64, 32)).astype(np.uint32)
    B = rng.integers(0, 256, (32, 16)).astype(np.uint32)
    C = rng.integers(0, 2**32, (64, 16), dtype=np.uint64).astype(np.uint32)
    C[:8] = np.array([0x7FFFFFFF, 0x80000000, 0x7FFFF000, 0x80000FFF], np.uint32).repeat(2)[:, None]
    got = np.asarray(ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C))).view(np.uint32)
    want = np.zeros_like(C)
    for m, n in itertools.product(range(64), range(16)):
        s = sum(_int_value(A[m, k], a) * _int_value(B[k, n], b) for k in range(32))
        c = int(C[m, n]) - (1 << 32) * (int(C[m, n]) >> 31)
        t = s + c
        t = min(max(t, -(2**31)), 2**31 - 1) if sat else t
        want[m, n] = t & 0xFFFFFFFF
    np.testing.assert_array_equal(got, want)
    if sat:  # the clamps are reached (the lower one needs a signed operand)
        assert (want == 0x7FFFFFFF).any()
        assert (want == 0x80000000).any() == ("s8" in (a, b))


def test_b1_and_popc_matches_the_oracle():
    ins = jaxmma.instruction(f"{HEAD}.m64n8k256.s32.b1.b1.and.popc")
    rng = np.random.default_rng(4)
    A = rng.integers(0, 2, (64, 256)).astype(np.uint32)
    B = rng.integers(0, 2, (256, 8)).astype(np.uint32)
    C = rng.integers(0, 2**32, (64, 8), dtype=np.uint64).astype(np.uint32)
    got = np.asarray(ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C))).view(np.uint32)
    want = ((A.astype(np.int64) @ B.astype(np.int64)) + C) & 0xFFFFFFFF
    np.testing.assert_array_equal(got, want.astype(np.uint32))


# ---- the published probe properties ------------------------------------------------------------
def _probe(text, a_vals, b_vals, c=0.0, arch=None):
    """D[0, 0] for A's row 0 = a_vals, B's column 0 = b_vals (the rest zero)."""
    ins = jaxmma.instruction(text, arch=arch)
    dt = {"e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2, "f16": jnp.float16,
          "bf16": jnp.bfloat16, "tf32": jnp.float32}  # fmt: skip
    A = np.zeros((ins.m, ins.k), np.float32)
    B = np.zeros((ins.k, ins.n), np.float32)
    for k, v in a_vals.items():
        A[0, k] = v
    for k, v in b_vals.items():
        B[k, 0] = v
    C = jnp.full((ins.m, ins.n), c, jnp.float32 if ins.dtype == "f32" else jnp.float16)
    A, B = jnp.asarray(A, dt[ins.atype]), jnp.asarray(B, dt[ins.btype])
    return float(ins.mma(A, B, C)[0, 0])


FP8 = f"{HEAD}.m64n8k32.f32.e4m3.e4m3"


def test_fp8_keeps_13_fraction_bits():
    """1 + 2**-13 survives, 1 + 2**-14 does not (2**-6 * 2**-7 and 2**-7 * 2**-7)."""
    assert _probe(FP8, {0: 1, 1: 2.0**-6}, {0: 1, 1: 2.0**-7}) == 1 + 2.0**-13
    assert _probe(FP8, {0: 1, 1: 2.0**-7}, {0: 1, 1: 2.0**-7}) == 1.0
    # the accumulator is a term like the others, cut 13 bits below 2**e_max: 1 - 1 + C
    assert _probe(FP8, {0: 1, 1: -1}, {0: 1, 1: 1}, c=2.0**-13) == 2.0**-13
    assert _probe(FP8, {0: 1, 1: -1}, {0: 1, 1: 1}, c=2.0**-14) == 0.0
    assert _probe(FP8, {}, {}, c=2.0**-14) == 2.0**-14  # alone, C is e_max itself
    # 16-bit inputs keep 25 bits
    f16 = f"{HEAD}.m64n8k16.f32.f16.f16"
    assert _probe(f16, {0: 1, 1: -1}, {0: 1, 1: 1}, c=2.0**-25) == 2.0**-25
    assert _probe(f16, {0: 1, 1: -1}, {0: 1, 1: 1}, c=2.0**-26) == 0.0


def test_fp8_f32_results_have_13_mantissa_bits():
    """3 + 2**-13 (kept by the F = 13 sum) loses its last bit in the e8m13 result."""
    assert _probe(FP8, {0: 1.5, 1: 1.5, 2: 2.0**-6}, {0: 1, 1: 1, 2: 2.0**-7}) == 3.0
    assert _probe(FP8, {0: 1.5, 1: 1.5, 2: 2.0**-6}, {0: 1, 1: 1, 2: 2.0**-6}) == 3 + 2.0**-12


def test_fp8_block_is_all_32_products():
    """+U and -U at k = 0, 1 and a small term at k = 31: one fused sum of 32 drops the
    small term (it is 2**-20 below 2**e_max); blocks of 16 would keep it."""
    U = 2.0**7
    a = {0: U, 1: -U, 31: 2.0**-6}
    b = {0: U, 1: U, 31: 2.0**-6}
    assert _probe(FP8, a, b) == 0.0
    for k in (8, 15, 16, 30):  # wherever the small term is
        assert _probe(FP8, {0: U, 1: -U, k: 2.0**-6}, {0: U, 1: U, k: 2.0**-6}) == 0.0
    # the same products on one row of a sm_90 mma.sync (two f16 HMMAs, then C) keep it
    mma = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
    assert _probe(mma, a, b, arch="sm_90") == 2.0**-12


def test_fp8_wgmma_and_mma_sync_round_differently():
    """The NUMERICS probe: 1 + 2**-14 is kept by sm_90 mma.sync (F = 25 through f16
    HMMAs), dropped by wgmma (F = 13)."""
    a, b = {0: 1, 1: 2.0**-7}, {0: 1, 1: 2.0**-7}
    mma = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
    assert _probe(mma, a, b, arch="sm_90") == 1 + 2.0**-14
    assert _probe(FP8, a, b) == 1.0


def test_f16_results_round_to_nearest_even():
    f16 = f"{HEAD}.m64n8k32.f16.e4m3.e4m3"
    # 1 + 2**-11 is a tie between 1 and 1 + 2**-10: to even; 1 + 3 * 2**-12 rounds up
    assert _probe(f16, {0: 1, 1: 2.0**-6}, {0: 1, 1: 2.0**-5}) == 1.0
    assert (
        _probe(f16, {0: 1, 1: 2.0**-6, 2: 2.0**-6}, {0: 1, 1: 2.0**-5, 2: 2.0**-6}) == 1 + 2.0**-10
    )


# ---- any M and N, batches, jit, vmap -------------------------------------------------------------
def test_mma_bits_works_for_any_m_and_n():
    """The GEMM layer passes whole matrices: rows and columns are independent."""
    ins = jaxmma.instruction(f"{HEAD}.m64n8k32.f32.e4m3.e5m2")
    rng = np.random.default_rng(5)
    A, B, C = (jnp.asarray(x) for x in (random_bits("e4m3", (64, 32), rng),
               random_bits("e5m2", (32, 24), rng), random_bits("f32", (64, 24), rng)))  # fmt: skip
    bits = jax.jit(functools.partial(models.mma_bits, ins))  # one program per shape
    full = np.asarray(bits(A, B, C))
    part = np.asarray(bits(A[5:8], B[:, 3:20], C[5:8, 3:20]))
    np.testing.assert_array_equal(part, full[5:8, 3:20])
    per_tile = [np.asarray(bits(A, B[:, j:j + 8], C[:, j:j + 8]))
                for j in (0, 8, 16)]  # fmt: skip
    np.testing.assert_array_equal(np.concatenate(per_tile, axis=1), full)


def test_jit_vmap_and_batches_give_the_same_bits():
    ins = jaxmma.instruction(f"{HEAD}.m64n16k16.f32.bf16.bf16")
    rng = np.random.default_rng(6)
    A = jnp.asarray(random_bits("bf16", (3, 64, 16), rng)).astype(jnp.uint16)
    B = jnp.asarray(random_bits("bf16", (3, 16, 16), rng)).astype(jnp.uint16)
    C = jnp.asarray(random_bits("f32", (3, 64, 16), rng))
    batched = ins.mma(A, B, C)
    one = jnp.stack([ins.mma(A[i], B[i], C[i]) for i in range(3)])
    jitted = jax.jit(lambda a, b, c: ins.mma(a, b, c, scale_a=-1))(A, B, C)
    mapped = jax.vmap(lambda a, b, c: ins.mma(a, b, c, scale_a=-1))(A, B, C)
    bits = lambda x: np.asarray(x).view(np.uint32)  # noqa: E731
    np.testing.assert_array_equal(bits(batched), bits(one))
    np.testing.assert_array_equal(bits(jitted), bits(mapped))
    assert batched.dtype == jnp.float32 and batched.shape == (3, 64, 16)


def test_exact_model_is_available():
    ins = jaxmma.instruction(FP8)
    a, b = {0: 1, 1: 2.0**-7}, {0: 1, 1: 2.0**-7}
    A = jnp.zeros((64, 32), jnp.float8_e4m3fn).at[0, 0].set(1).at[0, 1].set(2.0**-7)
    B = jnp.zeros((32, 8), jnp.float8_e4m3fn).at[0, 0].set(1).at[1, 0].set(2.0**-7)
    C = jnp.zeros((64, 8), jnp.float32)
    assert float(ins.mma(A, B, C, model="exact")[0, 0]) == 1 + 2.0**-14
    assert _probe(FP8, a, b) == 1.0
    assert math.isfinite(float(ins.mma(A, B, C)[0, 0]))


def test_arch_parser_knows_sm_90a():
    assert spec.parse_arch("sm_90a").name == "sm_90a"


# ---- against an H100 ---------------------------------------------------------------------------
GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "sm_90", "wgmma-sm_90a.npz")
with np.load(GOLDEN) as _z:
    RECORDS = [json.loads(str(_z[f"{j}.text"])) for j in range(len(_z.files) // 6)]


@pytest.mark.parametrize(
    "j",
    params(
        range(len(RECORDS)),
        lambda j: _family(RECORDS[j]["text"]),
        salt="h100",
        ids=lambda j: f"{RECORDS[j]['text']}{RECORDS[j]['imm']}",
    ),
)
def test_matches_the_h100(j):
    """Every D element that an H100 computed (jaxmma.conformance._wgmma_capture: random raw
    bits with NaN/Inf/subnormals, tiny rows, cancelling pairs, scale-d false in every
    fourth warpgroup) equals the model's, bit for bit."""
    rec = RECORDS[j]
    ins = jaxmma.instruction(rec["text"], arch="sm_90a")
    scale_a, scale_b = (rec["imm"] + [1, 1])[:2]
    with np.load(GOLDEN) as z:
        A, B, C, D, sd = (z[f"{j}.{x}"] for x in ("a", "b", "c", "d", "scale_d"))
    assert set(np.unique(sd)) == {0, 1}
    for flag in (1, 0):
        idx = np.nonzero(sd == flag)[0]
        got = ins.mma(*(jnp.asarray(x[idx].astype(np.uint32)) for x in (A, B, C)),
                      scale_d=bool(flag), scale_a=scale_a, scale_b=scale_b)  # fmt: skip
        got = np.asarray(got).view(np.uint16 if ins.dtype == "f16" else np.uint32)
        bad = np.argwhere(got != D[idx])
        assert bad.size == 0, (flag, [(tuple(i), hex(got[tuple(i)]), hex(D[idx][tuple(i)]))
                                      for i in bad[:5]])  # fmt: skip
