"""Wide-integer engine against exact Python integer arithmetic."""

import random
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
import pytest
from _suite import params

from jaxmma import bits

FORMATS = {"f32": (23, 8, 127), "f16": (10, 5, 15), "bf16": (7, 8, 127)}


def oracle_round(value: Fraction, man, ebits, bias, mode):
    """Round an exact rational into a binary format; overflow -> Inf; zero -> +0."""
    if value == 0:
        return 0
    neg = value < 0
    mag = abs(value)
    emin = 1 - bias
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    while Fraction(2) ** e > mag:
        e -= 1
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    lsb = max(e, emin) - man
    scaled = mag / Fraction(2) ** lsb
    q = scaled.numerator // scaled.denominator
    rem = scaled - q
    if mode == "rn":
        up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and q % 2 == 1)
    elif mode == "rna":
        up = rem >= Fraction(1, 2)
    elif mode == "rz":
        up = False
    elif mode == "rp":
        up = (not neg) and rem > 0
    else:
        up = neg and rem > 0
    q += int(up)
    if q == 2 ** (man + 1):
        q //= 2
        lsb += 1
    if q == 0:
        return 0
    if q >= 2**man:
        biased = lsb + man + bias
        if biased >= 2**ebits - 1:
            field = (2**ebits - 1) << man
        else:
            field = (biased << man) | (q - 2**man)
    else:
        field = q
    return field | (int(neg) << (man + ebits))


@pytest.mark.parametrize(
    "mode,fmt",
    # the quick run: every mode, each with one format (another one the next day)
    params(
        [(m, f) for f in FORMATS for m in ("rn", "rna", "rz", "rp", "rm")],
        lambda mf: mf[0],
        salt="wide",
        ids=lambda mf: f"{mf[0]}-{mf[1]}",
    ),
)
def test_round_to_float_matches_exact_oracle(fmt, mode):
    rng = random.Random(hash((fmt, mode)) & 0xFFFF)
    man, ebits, bias = FORMATS[fmt]
    nl = 4
    mags, units, negs, want = [], [], [], []
    for _ in range(400):
        nbits = rng.choice([1, 5, man, man + 1, man + 2, man + 3, 40, 63])
        m = rng.getrandbits(nbits)
        if rng.random() < 0.3:  # exact ties and near-ties
            m = (rng.getrandbits(man + 1) << 3) | rng.choice([0b100, 0b011, 0b101])
        unit = rng.randint(-bias - man - 45, 2**ebits - bias - 30)
        neg = rng.random() < 0.5
        mags.append([(m >> (16 * i)) & 0xFFFF for i in range(nl)])
        units.append(unit)
        negs.append(neg)
        want.append(
            oracle_round(
                (-1 if neg else 1) * Fraction(m) * Fraction(2) ** unit, man, ebits, bias, mode
            )
        )
    got = bits.round_to_float(
        jnp.array(negs),
        jnp.array(mags, jnp.uint32),
        jnp.array(units, jnp.int32),
        bits.FloatFormat(man, ebits, bias),
        mode,
    )
    np.testing.assert_array_equal(np.asarray(got), np.array(want, np.uint32))


def test_signed_sum_and_align_exact():
    rng = random.Random(7)
    T, nl = 9, 5
    sig = [[rng.getrandbits(24) for _ in range(T)] for _ in range(200)]
    shift = [[rng.randint(-30, 40) for _ in range(T)] for _ in range(200)]
    sign = [[rng.random() < 0.5 for _ in range(T)] for _ in range(200)]
    limbs, lost = bits.align(jnp.array(sig, jnp.uint32), jnp.array(shift, jnp.int32), nl)
    neg, mag = bits.signed_sum(jnp.array(sign), limbs)
    neg, mag, lost = np.asarray(neg), np.asarray(mag).astype(object), np.asarray(lost)
    for r in range(200):
        total = 0
        for t in range(T):
            v = sig[r][t] << shift[r][t] if shift[r][t] >= 0 else sig[r][t] >> -shift[r][t]
            assert lost[r, t] == (shift[r][t] < 0 and sig[r][t] % (1 << -shift[r][t]) != 0)
            total += -v if sign[r][t] else v
        got = sum(int(mag[r, i]) << (16 * i) for i in range(mag.shape[1]))
        assert got == abs(total)
        assert bool(neg[r]) == (total < 0)
