"""``.f64`` mma (an IEEE fma chain per rounding mode) against an exact rational oracle.

The oracle is written here, apart from the code it checks: binary64 bits are decoded to
``fractions.Fraction``, ``a * b + c`` is formed exactly, and the result is rounded by an
explicit IEEE 754 rounding function per mode. Special values follow IEEE 754 (2019) 6.3
and 7.2; NaN results follow what an H100 gives (``HW_CHAINS``): a NaN operand propagates
quieted, B's before C's before A's, and an invalid operation gives ``0xFFF8000000000000``.
"""

import random
import struct
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma import spec
from jaxmma.arith import _float64

MODES = ("rn", "rz", "rm", "rp")
NAN = 0x7FFF_FFFF_FFFF_FFFF
INVALID = 0xFFF8_0000_0000_0000  # the NaN of Inf * 0 and Inf - Inf (H100)
QUIET = 0x0008_0000_0000_0000
PINF = 0x7FF0_0000_0000_0000
NINF = 0xFFF0_0000_0000_0000
MAXF = 0x7FEF_FFFF_FFFF_FFFF  # float.fromhex("0x1.fffffffffffffp1023")
NEG0 = 0x8000_0000_0000_0000
ONE = 0x3FF0_0000_0000_0000


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


# ---- the oracle ----------------------------------------------------------------------------
def bits_of(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def decode(u: int):
    """('nan',) | ('inf', neg) | ('num', neg, Fraction)."""
    neg = u >> 63
    e = (u >> 52) & 0x7FF
    m = u & ((1 << 52) - 1)
    if e == 0x7FF:
        return ("nan",) if m else ("inf", neg)
    mag = Fraction(m, 1 << 1074) if e == 0 else Fraction((1 << 52) | m) * Fraction(2) ** (e - 1075)
    return ("num", neg, -mag if neg else mag)


def round_to_f64(v: Fraction, mode: str) -> int:
    """A nonzero exact rational -> binary64 bits, IEEE 754 rounding per mode."""
    neg = v < 0
    mag = -v if neg else v
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    assert Fraction(2) ** e <= mag < Fraction(2) ** (e + 1)
    ulp_e = max(e, -1022) - 52
    scaled = mag / Fraction(2) ** ulp_e
    q, rem = divmod(scaled.numerator, scaled.denominator)
    rem = Fraction(rem, scaled.denominator)
    if mode == "rn":
        up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and q % 2 == 1)
    elif mode == "rz":
        up = False
    elif mode == "rp":
        up = rem > 0 and not neg
    else:
        up = rem > 0 and neg
    q += up
    if q == 1 << 53:
        q, ulp_e = 1 << 52, ulp_e + 1
    sign = int(neg) << 63
    if ulp_e + 52 > 1023:  # |result| >= 2**1024: overflow
        to_inf = {"rn": True, "rz": False, "rp": not neg, "rm": neg}[mode]
        return sign | (PINF if to_inf else MAXF)
    if q >= 1 << 52:
        return sign | ((ulp_e + 52 + 1023) << 52) | (q - (1 << 52))
    assert ulp_e == -1074
    return sign | q  # subnormal, or zero with the sign of the exact value


def oracle_fma(a: int, b: int, c: int, mode: str) -> int:
    """fma as an H100 runs it inside ``.f64`` ``mma`` (hardware vectors below)."""
    da, db, dc = decode(a), decode(b), decode(c)
    for x, d in ((b, db), (c, dc), (a, da)):  # a NaN operand: B's first, then C, then A
        if d[0] == "nan":
            return x | QUIET
    pneg = da[1] ^ db[1]
    if da[0] == "inf" or db[0] == "inf":
        other = db if da[0] == "inf" else da
        if other[0] == "num" and other[2] == 0:
            return INVALID  # Inf * 0
        if dc[0] == "inf" and dc[1] != pneg:
            return INVALID  # Inf - Inf
        return NINF if pneg else PINF
    if dc[0] == "inf":
        return c
    exact = da[2] * db[2] + dc[2]
    if exact != 0:
        return round_to_f64(exact, mode)
    # an exact zero: sum of zeros keeps a common sign; otherwise +0, or -0 under rm
    prod_zero = da[2] == 0 or db[2] == 0
    if prod_zero and dc[2] == 0 and pneg == dc[1]:
        return NEG0 if pneg else 0
    return NEG0 if mode == "rm" else 0


def oracle_mma(A, B, C, mode):
    M, K = A.shape
    N = B.shape[1]
    D = np.zeros((M, N), np.uint64)
    for m in range(M):
        for n in range(N):
            acc = int(C[m, n])
            for k in range(K):
                acc = oracle_fma(int(A[m, k]), int(B[k, n]), acc, mode)
            D[m, n] = acc
    return D


def test_oracle_rounds_doubles_to_themselves():
    rng = random.Random(1)
    for _ in range(500):
        u = rng.getrandbits(64)
        d = decode(u)
        if d[0] == "num" and d[2] != 0:
            for mode in MODES:
                assert round_to_f64(d[2], mode) == u
    third = Fraction(1, 3)  # 0x3FD5555555555555 rounds down, so rz = rm = rn
    assert round_to_f64(third, "rn") == bits_of(1 / 3)
    assert round_to_f64(third, "rp") == bits_of(1 / 3) + 1


# ---- vectors -------------------------------------------------------------------------------
def f64(sign, biased_exp, frac):
    return (sign << 63) | (biased_exp << 52) | frac


def rand_double(rng, lo=1, hi=2046):
    return f64(rng.getrandbits(1), rng.randint(lo, hi), rng.getrandbits(52))


def odd_sig(rng, bits):
    """A double whose significand is an odd integer of exactly ``bits`` bits."""
    s = rng.getrandbits(bits - 1) | (1 << (bits - 1)) | 1
    return float(s) * 2.0 ** rng.randint(-40, 40)


def vectors(seed: int):
    """(a, b, c) triples that reach every path of an fma."""
    rng = random.Random(seed)
    out = []
    add = out.append
    specials = [
        0,
        NEG0,
        PINF,
        NINF,
        NAN,
        0x7FF0_0000_0000_0001,
        0xFFF8_0000_0000_0000,
        ONE,
        ONE | NEG0,
        1,
        NEG0 | 1,
        MAXF,
        MAXF | NEG0,
        0x0010_0000_0000_0000,
        0x000F_FFFF_FFFF_FFFF,
    ]
    for a in specials:  # every special against every special
        for b in specials:
            add((a, b, specials[rng.randrange(len(specials))]))
            add((a, b, rand_double(rng)))
    for _ in range(300):  # random raw bits: every exponent, NaN and Inf included
        add((rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(64)))
    for _ in range(300):  # magnitudes near each other: cancellation, carries
        ea, eb = rng.randint(600, 1400), rng.randint(1015, 1030)
        ec = ea + eb - 1023 + rng.randint(-2, 2)
        add((rand_double(rng, ea, ea), rand_double(rng, eb, eb), rand_double(rng, ec, ec)))
    for _ in range(200):  # huge and tiny exponent differences either way
        a, b = rand_double(rng, 900, 1100), rand_double(rng, 900, 1100)
        add((a, b, rand_double(rng, 1, 60)))
        add((rand_double(rng, 1, 60), rand_double(rng, 900, 1100), rand_double(rng, 900, 2046)))
        add((a, b, rand_double(rng, 1100, 2046)))
    for _ in range(200):  # subnormal operands and results
        sub = f64(rng.getrandbits(1), 0, rng.getrandbits(52))
        add((sub, rand_double(rng, 1000, 1100), f64(rng.getrandbits(1), 0, rng.getrandbits(52))))
        add((sub, rand_double(rng, 900, 1023), 0))
        add((rand_double(rng, 1, 500), rand_double(rng, 1, 560), rand_double(rng, 0, 3)))
    for _ in range(200):  # exact cancellation: c = -fl(a*b) leaves the product's error
        a, b = bits_of(rng.uniform(-4, 4)), bits_of(rng.uniform(-4, 4))
        add(
            (
                a,
                b,
                bits_of(
                    -(
                        struct.unpack("<d", struct.pack("<Q", a))[0]
                        * struct.unpack("<d", struct.pack("<Q", b))[0]
                    )
                ),
            )
        )
        x, y = odd_sig(rng, 20), odd_sig(rng, 20)  # a*b exact: the sum is an exact zero
        add((bits_of(x), bits_of(y), bits_of(-x * y)))
        add((bits_of(-x), bits_of(y), bits_of(x * y)))
    for _ in range(200):  # cancellation across a binade: a*b just below or above -c
        x = rng.uniform(1, 2) * 2.0 ** rng.randint(-30, 30)
        for y in np.nextafter(1 / x, [0.0, 1e300, 1e300]) * [1, 1, 1 + 2**-52]:
            add((bits_of(x), bits_of(float(y)), bits_of(-1.0)))
        k, j = rng.randint(1, 2**20), rng.randint(1, 2**20)
        add((bits_of(1 - k * 2.0**-53), bits_of(-(1 - j * 2.0**-53)), ONE))
    for k in range(1, 9):  # (1 - k u)(1 - j u) - 1: the guard bits below a 53-bit cancellation
        for j in range(1, 9):
            s = 2.0 ** (k - j)
            add((bits_of(s * (1 - k * 2.0**-53)), bits_of(1 - j * 2.0**-53), bits_of(-s)))
            add((bits_of(-s * (2 - k * 2.0**-52)), bits_of(1 - j * 2.0**-53), bits_of(2 * s)))
    for _ in range(300):  # halfway cases: 54-bit products (27 x 27 odd bits), ties in rn
        x, y = odd_sig(rng, 27), odd_sig(rng, 27)
        add((bits_of(x), bits_of(y), 0))
        add((bits_of(x), bits_of(-y), bits_of(float(2 ** rng.randint(-60, 60)))))
        c = rand_double(rng, 1000, 1046)  # c plus half an ulp of c (times an odd number)
        e = ((c >> 52) & 0x7FF) - 1023 - 53
        add((bits_of(float(rng.choice([1, 3, 5, -1, -3]))), bits_of(2.0**e), c))
    for _ in range(100):  # overflow and near-overflow, each sign
        big = rand_double(rng, 1530, 2046)
        add((big, rand_double(rng, 1000, 1100), rand_double(rng, 1, 2046)))
        add((MAXF, bits_of(1.0 + 2.0**-52 * rng.randint(0, 3)), rng.choice([MAXF, NEG0 | MAXF])))
        add((big, rand_double(rng, 1020, 1030), big ^ NEG0))  # huge product minus huge c
    return out


def _run(triples, mode):
    a, b, c = (np.array([t[i] for t in triples], np.uint64) for i in range(3))
    return np.asarray(jax.jit(_float64.fma_bits, static_argnums=3)(a, b, c, mode))


@pytest.mark.parametrize("mode", MODES)
def test_fma_matches_exact_oracle(mode):
    triples = vectors(seed=7)
    got = _run(triples, mode)
    bad = [
        (hex(a), hex(b), hex(c), hex(int(g)), hex(oracle_fma(a, b, c, mode)))
        for (a, b, c), g in zip(triples, got, strict=True)
        if int(g) != oracle_fma(a, b, c, mode)
    ]
    assert not bad, f"{len(bad)} of {len(triples)} differ (a, b, c, got, want): {bad[:5]}"


@pytest.mark.parametrize("mode", MODES)
def test_signed_zero_rules(mode):
    n0 = NEG0
    rm0 = n0 if mode == "rm" else 0
    cases = {  # (a, b, c) -> result
        (0, ONE, 0): 0,
        (n0, ONE, n0): n0,  # -0 + -0 = -0 in every mode
        (0, ONE | n0, n0): n0,  # (+0)(-1) + (-0)
        (0, ONE | n0, 0): rm0,  # -0 + +0
        (0, ONE, n0): rm0,
        (ONE, ONE, ONE | n0): rm0,  # 1 - 1, exact
        (ONE, ONE | n0, ONE): rm0,
        (n0, n0, 0): 0,
        (n0, n0, n0): rm0,
        (0, ONE, ONE): ONE,
    }
    got = _run(list(cases), mode)
    assert [hex(int(g)) for g in got] == [hex(v) for v in cases.values()]


def test_specials():
    snan, qnan = 0x7FF0_0000_0000_0001, 0xFFF8_0000_0000_1234
    cases = {
        (PINF, 0, ONE): INVALID,
        (0, NINF, ONE): INVALID,
        (PINF, ONE, NINF): INVALID,
        (PINF, ONE, PINF): PINF,
        (NINF, ONE, MAXF): NINF,
        (ONE, ONE, NINF): NINF,
        (snan, ONE, ONE): snan | QUIET,  # a signalling NaN comes out quieted
        (ONE, ONE, qnan): qnan,
        (snan, qnan ^ NEG0, qnan): qnan ^ NEG0,  # B's NaN first
        (snan, ONE, qnan): qnan,  # then C's
        (PINF, 0, snan): snan | QUIET,  # a NaN operand beats the invalid product
        (MAXF, MAXF, NINF): NINF,  # the finite product's overflow does not matter
    }
    for mode in MODES:
        got = _run(list(cases), mode)
        assert [hex(int(g)) for g in got] == [hex(v) for v in cases.values()], mode


def test_overflow_by_mode():
    pos, neg = (MAXF, bits_of(2.0), 0), (MAXF | NEG0, bits_of(2.0), 0)
    want = {
        "rn": (PINF, NINF),
        "rz": (MAXF, MAXF | NEG0),
        "rp": (PINF, MAXF | NEG0),
        "rm": (MAXF, NINF),
    }
    for mode, (p, n) in want.items():
        assert [int(x) for x in _run([pos, neg], mode)] == [p, n], mode


def test_tie_goes_to_even():
    # 1 + 2**-53 is halfway between 1 and 1 + 2**-52: rn keeps 1, rp goes up
    t = [(bits_of(2.0**-53), ONE, ONE), (bits_of(3 * 2.0**-53), ONE, ONE)]
    assert [int(x) for x in _run(t, "rn")] == [ONE, ONE + 2]
    assert [int(x) for x in _run(t, "rp")] == [ONE + 1, ONE + 2]
    assert [int(x) for x in _run(t, "rz")] == [ONE, ONE + 1]


def test_needs_x64():
    ins = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", arch="sm_90")
    with jax.enable_x64(False):
        A = np.zeros((8, 4), np.uint32)
        with pytest.raises(ValueError, match="jax_enable_x64"):
            _float64.mma_bits(ins, A, A.T, np.zeros((8, 8), np.uint32))


# ---- hardware vectors ----------------------------------------------------------------------
#: (mode, A row, B column, C, D) of ``mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64.{mode}``
#: as an H100 (sm_90, driver 580) computed them: one chain per mode and kind of result
#: (+-0, subnormal, overflow, NaN, a result that differs from rn), and chains with three or
#: more NaN operands of random payloads. Picked from 409,600 output registers of the ``.f64``
#: shapes and modes, all of which ``_float64`` reproduces (its module docstring).
HW_CHAINS = [
    (
        "rn",
        (0xC13A0116AB0C1681, 0x7FF0000000000000, 0x3F053409BAF3897A, 0x3ED91486EAC1C14F),
        (0x400A1515964A870C, 0x8001DB53FB0323A1, 0x3F7BB4A0E786AB37, 0x3FE143E2BDD7D19B),
        0x3F94A814964DDB77,
        0xFFF0000000000000,
    ),
    (
        "rn",
        (0x8000000000000001, 0x0000000000000003, 0x0000000000000001, 0x3FF0000000000000),
        (0x8000000000000000, 0x0000000000000003, 0x0000000000000003, 0x8000000000000000),
        0x0000000000000000,
        0x0000000000000000,
    ),
    (
        "rn",
        (0x8000000000000001, 0x0000000000000003, 0x0000000000000001, 0x3FF0000000000000),
        (0x8000000000000000, 0x8000000000000001, 0x0000000000000000, 0x0000000000000001),
        0x0000000000000000,
        0x0000000000000001,
    ),
    (
        "rn",
        (0x3FEB20FE1A4A17E1, 0x40443AB40E45AEA5, 0x3E16C50C41F3CA1D, 0xC1548EEF94BDAEFD),
        (0x3E970EB107E53DFC, 0xBFD9342328BEAE8E, 0x7FFFFFFFFFFFFFFF, 0x40065AD942A119EF),
        0xBE938C2B273FD33B,
        0x7FFFFFFFFFFFFFFF,
    ),
    (
        "rz",
        (0x4036C5F6C3E86854, 0xBF20D65955487E6B, 0x3EB009F7219DFEE5, 0xBEB731A1E4E7EB65),
        (0xC0828474E3AEDFE2, 0x8000000000000000, 0x401CBF09B68B9D4B, 0x419A5CC267AD14DF),
        0x0000000000000000,
        0xC0CAA7AB6BD88695,
    ),
    (
        "rz",
        (0x4036C5F6C3E86854, 0xBF20D65955487E6B, 0x3EB009F7219DFEE5, 0xBEB731A1E4E7EB65),
        (0xBE9B7750EB0D84EB, 0x7FF0000000000000, 0x3F20E79E95B0BE51, 0xBFF9EB93F5FD5CF5),
        0x3E7BFF5CAE209092,
        0xFFF0000000000000,
    ),
    (
        "rz",
        (0xBE40831C04CEE06B, 0x0000000000000000, 0x41AA9EF7A2F74201, 0xBE773F248C017389),
        (0xBE9B7750EB0D84EB, 0x7FF0000000000000, 0x3F20E79E95B0BE51, 0xBFF9EB93F5FD5CF5),
        0xC0EA88E3FD567E1A,
        0xFFF8000000000000,
    ),
    (
        "rz",
        (0x8000000000000000, 0x3FF0000000000000, 0x0000000000000003, 0x0000000000000003),
        (0xBFF0000000000000, 0x0000000000000001, 0x0000000000000001, 0x0000000000000000),
        0x8000000000000001,
        0x0000000000000000,
    ),
    (
        "rz",
        (0x8000000000000000, 0x3FF0000000000000, 0x0000000000000003, 0x0000000000000003),
        (0x0000000000000001, 0x0000000000000001, 0x8000000000000001, 0x3FF0000000000000),
        0x8000000000000001,
        0x0000000000000003,
    ),
    (
        "rm",
        (0xC18C7C10DD6FBCB8, 0xBEE726C86092EEFC, 0x405872668B9C2224, 0x3E2A4DA0C479EA2A),
        (0xBFBC0A94B0814744, 0x3E3DD270C31571FC, 0x40FC440E8652E768, 0x3E8F835C741FAD50),
        0x40FB3548E8524153,
        0x417124BFB7C3316D,
    ),
    (
        "rm",
        (0x3E20E37BB78F3830, 0x40B067A166D6CA04, 0x3F893C7E3C6B9A84, 0x7FF0000000000000),
        (0xBFBC0A94B0814744, 0x3E3DD270C31571FC, 0x40FC440E8652E768, 0x3E8F835C741FAD50),
        0x0000000000000001,
        0x7FF0000000000000,
    ),
    (
        "rm",
        (0x7FFFFFFFFFFFFFFF, 0x4085CAA8F9854F27, 0x000DE773DF1E842B, 0x410C1FC4FC2AF185),
        (0xC0AD631D0C66A07D, 0xC0C34D76C951062C, 0xBE4C3FF10B3FCCA0, 0xC14D4BE8145A7760),
        0xC05866FB9480E539,
        0x7FFFFFFFFFFFFFFF,
    ),
    (
        "rm",
        (0x0000000000000003, 0x8000000000000001, 0x0000000000000001, 0x0000000000000000),
        (0x0000000000000000, 0x0000000000000003, 0x0000000000000000, 0x8000000000000000),
        0x8000000000000000,
        0x8000000000000001,
    ),
    (
        "rm",
        (0x0000000000000001, 0xBFF0000000000000, 0x8000000000000000, 0x3FF0000000000000),
        (0x0000000000000001, 0x0000000000000003, 0x8000000000000001, 0x0000000000000003),
        0x0000000000000000,
        0x8000000000000000,
    ),
    (
        "rp",
        (0xBED74143D306BE0F, 0x3F69307A42BABCE0, 0x40B5EE263231D79B, 0x3F878E93DD592110),
        (0xC1A1E40E0ACDA43B, 0xC07D1A5B44B53994, 0x40B82C9898264708, 0xBEF2F67DD6436153),
        0x3F3D74B2CB148BA8,
        0x41809146A30059A0,
    ),
    (
        "rp",
        (0x800F3E13EBD4D7C3, 0x3E8C3B8548FD552C, 0x80053AA70F3EC10A, 0xC1718A54C20A9764),
        (0xBFF6880695E87DAA, 0xBF2000907AB2195E, 0x4173311735BAD42E, 0x00021FE3F1BA2B55),
        0x7FFFFFFFFFFFFFFF,
        0x7FFFFFFFFFFFFFFF,
    ),
    (
        "rp",
        (0x465E8086F37CA0BB, 0xC71EFE1ECD58A0E1, 0xFA163F78544C7F88, 0x4046F468A1E24E2D),
        (0xB24D7E69DD6C8AFB, 0xC56B62AB2E1C270D, 0xCF08B6EDC847D92C, 0x350BD9FFA5B2F7A2),
        0xBCAE9B08729B0A88,
        0x7FF0000000000000,
    ),
    (
        "rp",
        (0xBFF0000000000000, 0x8000000000000000, 0x0000000000000000, 0x0000000000000000),
        (0x0000000000000003, 0x8000000000000000, 0xBFF0000000000000, 0x3FF0000000000000),
        0x0000000000000003,
        0x0000000000000000,
    ),
    (
        "rp",
        (0xBFF0000000000000, 0x8000000000000000, 0x0000000000000000, 0x0000000000000000),
        (0x0000000000000001, 0x8000000000000000, 0x8000000000000001, 0xBFF0000000000000),
        0x8000000000000000,
        0x8000000000000001,
    ),
    (
        "rn",
        (0x3FD392453EB13B90, 0x7FFDECE3AD3C2D6D, 0x4070822E6C031199, 0x7FFC0AF73B8FAA18),
        (0x7FF1E9A1663849DB, 0x3FA694198DC40C8B, 0xFFFCD42DF030D6D3, 0xFFF0000000000000),
        0x3F98EE5EFBC6476C,
        0xFFFCD42DF030D6D3,
    ),
    (
        "rn",
        (0x3FD392453EB13B90, 0x7FFDECE3AD3C2D6D, 0x4070822E6C031199, 0x7FFC0AF73B8FAA18),
        (0xBF809848DE0E2877, 0xBF80081A45027989, 0xFFF149F7AC0D5BC9, 0x4027CFA2BC3985F1),
        0x402C2C95BF9C48B1,
        0xFFF949F7AC0D5BC9,
    ),
    (
        "rz",
        (0x0000000000000000, 0xFFF0000000000000, 0x3FBABED1368A34B0, 0x7FFA88F15CED4AAD),
        (0xFFFF8C8B38BAA6B9, 0xFFF31AC1C5A12495, 0xFFF2223D9BC67BA7, 0x4003CC36BC2F58A9),
        0x7FFB02341EAE8609,
        0xFFFA223D9BC67BA7,
    ),
    (
        "rz",
        (0x0000000000000000, 0xFFF0000000000000, 0x3FBABED1368A34B0, 0x7FFA88F15CED4AAD),
        (0x8000000000000000, 0xFFF2A808B154F38F, 0xC015E9117718956E, 0xFFFE34861307037E),
        0xC06E45FD181DAD5A,
        0xFFFE34861307037E,
    ),
]


@pytest.mark.parametrize("mode", MODES)
def test_hardware_chains(mode):
    chains = [h[1:] for h in HW_CHAINS if h[0] == mode]
    n = len(chains)
    A, B, C = (
        np.zeros((n, 8, 4), np.uint64),
        np.zeros((n, 4, 8), np.uint64),
        np.zeros((n, 8, 8), np.uint64),
    )
    for i, (a, b, c, _) in enumerate(chains):
        A[i, 0], B[i, :, 0], C[i, 0, 0] = a, b, c
    ins = jaxmma.instruction(
        f"mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64.{mode}", arch="sm_90"
    )
    got = np.asarray(_float64.mma_bits(ins, A, B, C))[:, 0, 0]
    want = [d for *_, d in chains]
    assert [hex(int(g)) for g in got] == [hex(d) for d in want]
    for a, b, c, d in chains:  # the oracle agrees with the hardware
        assert (
            oracle_mma(
                np.array([a], np.uint64),
                np.array(b, np.uint64)[:, None],
                np.array([[c]], np.uint64),
                mode,
            )[0, 0]
            == d
        )


# ---- whole instructions --------------------------------------------------------------------
F64_FORMS = [f for f in spec.FORMS if f.atype == "f64" and f.opcode in ("mma", "wmma.mma")]


def _text(form, mode):
    head = "mma.sync.aligned" if form.opcode == "mma" else "wmma.mma.sync.aligned"
    return f"{head}.{form.shape}.row.col.f64.f64.f64.f64.{mode}"


def random_matrix(rng, shape):
    """Doubles of mixed magnitudes and signs, with zeros, subnormals and a few specials."""
    pool = [0, NEG0, 1, PINF, NAN, 0xFFF0_0000_0000_0BAD, 0x7FF8_0000_0000_0001]
    flat = []
    for _ in range(int(np.prod(shape))):
        r = rng.random()
        if r < 0.03:
            flat.append(rng.choice(pool))
        elif r < 0.1:
            flat.append(f64(rng.getrandbits(1), 0, rng.getrandbits(52)))
        else:
            flat.append(rand_double(rng, 1023 - 30, 1023 + 30))
    return np.array(flat, np.uint64).reshape(shape)


@pytest.mark.parametrize("form", F64_FORMS, ids=lambda f: f"{f.opcode}.{f.shape}")
def test_mma_bits_matches_fma_chain(form):
    rng = random.Random(form.shape)
    M, N, K = form.m, form.n, form.k
    for mode in MODES:
        ins = jaxmma.instruction(_text(form, mode), arch="sm_90")
        assert ins.rounding == mode
        A, B, C = random_matrix(rng, (M, K)), random_matrix(rng, (K, N)), random_matrix(rng, (M, N))
        got = np.asarray(_float64.mma_bits(ins, A, B, C))
        np.testing.assert_array_equal(got, oracle_mma(A, B, C, mode), err_msg=ins.text)


def test_default_rounding_is_rn():
    ins = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", arch="sm_90")
    rng = random.Random(3)
    A, B, C = random_matrix(rng, (8, 4)), random_matrix(rng, (4, 8)), random_matrix(rng, (8, 8))
    np.testing.assert_array_equal(
        np.asarray(_float64.mma_bits(ins, A, B, C)), oracle_mma(A, B, C, "rn")
    )


def test_k_order_matters():
    # ((1e300*... chain: fma(1, 2**-60, 1) rounds away the tiny term before the -1 comes
    ins = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64.rn", arch="sm_90")
    A = np.zeros((8, 4), np.uint64)
    B = np.zeros((4, 8), np.uint64)
    A[0] = [ONE, ONE, 0, 0]
    B[:, 0] = [bits_of(2.0**-60), ONE | NEG0, 0, 0]
    C = np.zeros((8, 8), np.uint64)
    C[0, 0] = ONE
    assert int(_float64.mma_bits(ins, A, B, C)[0, 0]) == 0  # (1 + 2**-60 -> 1) - 1 = +0
    B[:, 0] = [ONE | NEG0, bits_of(2.0**-60), 0, 0]
    assert int(_float64.mma_bits(ins, A, B, C)[0, 0]) == bits_of(2.0**-60)


def test_batch_broadcast_and_vmap():
    ins = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64.rm", arch="sm_90")
    rng = random.Random(5)
    A = np.stack([random_matrix(rng, (8, 4)) for _ in range(3)])
    B = random_matrix(rng, (4, 8))
    C = random_matrix(rng, (8, 8))
    got = np.asarray(_float64.mma_bits(ins, A, B[None], C))
    want = np.stack([oracle_mma(a, B, C, "rm") for a in A])
    np.testing.assert_array_equal(got, want)
    vm = jax.vmap(lambda a: _float64.mma_bits(ins, a, B, C))(A)
    np.testing.assert_array_equal(np.asarray(vm), want)


# ---- the public API --------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["m8n8k4", "m16n8k8"])
def test_public_api(shape):
    rng = random.Random(shape)
    text = f"mma.sync.aligned.{shape}.row.col.f64.f64.f64.f64.rp"
    ins = jaxmma.instruction(text, arch="sm_90")
    M, N, K = ins.m, ins.n, ins.k
    A, B, C = random_matrix(rng, (M, K)), random_matrix(rng, (K, N)), random_matrix(rng, (M, N))
    want = oracle_mma(A, B, C, "rp")
    D = ins.mma(A, B, C)  # raw bits in, float64 out
    assert D.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(jax.lax.bitcast_convert_type(D, jnp.uint64)), want)
    D = ins.mma(*(jax.lax.bitcast_convert_type(jnp.asarray(x), jnp.float64) for x in (A, B, C)))
    np.testing.assert_array_equal(np.asarray(jax.lax.bitcast_convert_type(D, jnp.uint64)), want)
    a, b, c = ins.fragment("a", A), ins.fragment("b", B), ins.fragment("c", C)
    assert a.dtype == jnp.uint64 and a.shape == (32, ins.nregs["a"])
    for fn in (ins, jax.jit(ins)):
        d = fn(a, b, c)
        np.testing.assert_array_equal(np.asarray(ins.unfragment("d", d)), want)
    d = jax.vmap(ins)(a[None], b[None], c[None])
    np.testing.assert_array_equal(np.asarray(ins.unfragment("d", d[0])), want)
