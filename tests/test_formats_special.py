"""``bits.special_bits`` (the bits of a zero, an infinity or a NaN, from the format table
alone) against ``bits.encode`` on the same float32 inputs, for every float format, every
rounding mode and both saturation settings."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxmma import bits

VALUES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], np.float32)
FLOATS = sorted(n for n, f in bits.FORMATS.items() if f.kind == "float" and f.bits < 64)


def test_inputs_are_the_specials():
    raw = VALUES.view(np.uint32)
    assert [hex(int(r)) for r in raw] == [
        "0x0", "0x80000000", "0x7f800000", "0xff800000", "0x7fc00000", "0xffc00000"
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", FLOATS)
@pytest.mark.parametrize("saturate", [False, True])
def test_special_bits_are_encode_bits(fmt, saturate):
    want = {}
    for rounding in bits.ROUNDINGS:
        extra = {}
        if rounding == "stochastic":
            extra["random_bits"] = jnp.full(VALUES.shape, 0x9E3779B9, jnp.uint32)
        got = np.asarray(
            bits.encode(fmt, jnp.asarray(VALUES), rounding=rounding, saturate=saturate, **extra)
        )
        want[rounding] = [int(g) for g in got]
    assert all(w == want["rn"] for w in want.values()), want  # no rounding mode matters
    mine = [bits.special_bits(fmt, float(v), saturate=saturate) for v in VALUES]
    assert mine == want["rn"]


def test_special_bits_refuses_other_values_and_formats():
    with pytest.raises(ValueError, match="value"):
        bits.special_bits("e4m3", 1.0)
    with pytest.raises(ValueError, match="fmt"):
        bits.special_bits("s32", 0.0)
