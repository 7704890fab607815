"""Tests of jaxmma.bits._packing: register packing and kind::f8f6f4 containers."""

from __future__ import annotations

import doctest

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmma import bits as P

WIDTHS = (1, 2, 4, 8, 16, 32)


@pytest.fixture(autouse=True)
def _strict():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


def ref_pack(elems: np.ndarray, bits: int) -> np.ndarray:
    """Reference: Python integers, one register at a time."""
    per = 32 // bits
    flat = elems.reshape(-1, elems.shape[-1]).tolist()
    out = [
        [
            sum((row[i * per + j] % 2**bits) << (j * bits) for j in range(per))
            for i in range(len(row) // per)
        ]
        for row in flat
    ]
    return np.array(out, np.uint32).reshape(*elems.shape[:-1], -1)


@pytest.mark.parametrize("bits", WIDTHS)
def test_pack_unpack(bits):
    rng = np.random.default_rng(bits)
    n = 2 * 32 // bits
    elems = rng.integers(0, 2**bits, (3, 2, n), dtype=np.uint64).astype(np.uint32)
    regs = P.pack(elems, bits)
    assert regs.dtype == jnp.uint32 and regs.shape == (3, 2, 2)
    np.testing.assert_array_equal(regs, ref_pack(elems, bits))
    back = P.unpack(regs, bits)
    assert back.dtype == jnp.uint32 and back.shape == elems.shape
    np.testing.assert_array_equal(back, elems)
    # Bits above the element width are ignored.
    if bits < 32:
        noisy = elems | np.uint32(0xFFFFFFFF ^ (2**bits - 1))
        np.testing.assert_array_equal(P.pack(noisy, bits), regs)
    words = rng.integers(0, 2**32, (4, 3), dtype=np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(P.pack(P.unpack(words, bits), bits), words)


def test_pack_order_is_low_first():
    assert int(P.pack(jnp.arange(1, 9, dtype=jnp.uint32), 4)[0]) == 0x87654321
    assert int(P.pack(np.array([0xAB, 0xCD, 0xEF, 0x01], np.uint32), 8)[0]) == 0x01EFCDAB
    assert int(P.pack(np.array([0x1234, 0xABCD], np.uint32), 16)[0]) == 0xABCD1234
    bits = np.zeros(32, np.uint32)
    bits[[0, 5, 31]] = 1
    assert int(P.pack(bits, 1)[0]) == (1 | 1 << 5 | 1 << 31)
    np.testing.assert_array_equal(P.unpack(np.array([0xE4], np.uint32), 2)[:4], [0, 1, 2, 3])


def test_mxf4_is_plain_nibble_packing():
    e2m1 = np.arange(16, dtype=np.uint32)
    regs = P.pack(e2m1, 4)
    np.testing.assert_array_equal(regs, [0x76543210, 0xFEDCBA98])


CONTAINERS = {"e4m3": (8, 0), "e5m2": (8, 0), "e3m2": (6, 0), "e2m3": (6, 0), "e2m1": (4, 2)}


@pytest.mark.parametrize("fmt", sorted(CONTAINERS))
def test_containers(fmt):
    width, offset = CONTAINERS[fmt]
    e = np.arange(2**width, dtype=np.uint32)
    c = np.asarray(P.to_container(e, fmt))
    np.testing.assert_array_equal(c, e << offset)
    assert c.max() < 256
    # Padding bits are zero on the way in and ignored on the way out, for every byte.
    pad = 0xFF ^ ((2**width - 1) << offset)
    assert not np.any(c & pad)
    byte = np.arange(256, dtype=np.uint32)
    np.testing.assert_array_equal(P.from_container(byte, fmt), (byte >> offset) % 2**width)
    np.testing.assert_array_equal(P.from_container(c | np.uint32(pad), fmt), e)
    np.testing.assert_array_equal(P.from_container(c + np.uint32(0x1200), fmt), e)


def test_f8f6f4_register():
    # Four e2m1 elements in the containers of one kind::f8f6f4 register: 0x3C = 0xF << 2.
    regs = P.pack(P.to_container(np.array([0xF, 0x1, 0x0, 0x8], np.uint32), "e2m1"), 8)
    assert int(regs[0]) == 0x2000043C  # bytes 0x3C, 0x04, 0x00, 0x20, low byte first
    np.testing.assert_array_equal(P.from_container(P.unpack(regs, 8), "e2m1"), [0xF, 1, 0, 8])


def test_jit_and_vmap():
    rng = np.random.default_rng(0)
    elems = rng.integers(0, 16, (5, 32, 8), dtype=np.uint64).astype(np.uint32)
    want = P.pack(elems, 4)
    np.testing.assert_array_equal(jax.jit(P.pack, static_argnums=1)(elems, 4), want)
    np.testing.assert_array_equal(jax.vmap(lambda e: P.pack(e, 4))(elems), want)
    np.testing.assert_array_equal(jax.jit(P.unpack, static_argnums=1)(want, 4), elems)
    f = jax.jit(lambda b: P.from_container(P.to_container(b, "e2m1"), "e2m1"))
    np.testing.assert_array_equal(f(elems), elems)


def test_errors():
    with pytest.raises(ValueError, match=r"bits_per_elem: expected one of \[1, 2, 4, 8, 16, 32\]"):
        P.pack(np.zeros(8, np.uint32), 6)
    with pytest.raises(ValueError, match="bits_per_elem"):
        P.unpack(np.zeros(1, np.uint32), 3)
    with pytest.raises(ValueError, match=r"elems: expected a last axis .* multiple of 8"):
        P.pack(np.zeros(7, np.uint32), 4)
    with pytest.raises(TypeError, match="elems: expected an unsigned integer dtype.*float32"):
        P.pack(np.zeros(8, np.float32), 4)
    with pytest.raises(ValueError, match=r"fmt: expected one of \['e2m1'"):
        P.to_container(np.zeros(4, np.uint32), "bf16")
    with pytest.raises(ValueError, match="fmt"):
        P.from_container(np.zeros(4, np.uint32), "e9m9")


def test_doctests():
    assert doctest.testmod(P).failed == 0


def test_public_container_functions_take_the_format_first():
    from jaxmma import formats

    bits = np.array([0xF, 0x1, 0x0, 0x8], np.uint32)
    c = formats.to_container("e2m1", bits)
    np.testing.assert_array_equal(np.asarray(c), [0x3C, 0x04, 0x00, 0x20])
    np.testing.assert_array_equal(np.asarray(formats.from_container("e2m1", c)), bits)
    with pytest.warns(DeprecationWarning, match=r"to_container\(fmt, bits\)"):
        old = formats.to_container(bits, "e2m1")
    np.testing.assert_array_equal(np.asarray(old), np.asarray(c))
    with pytest.warns(DeprecationWarning, match=r"from_container\(fmt, bits\)"):
        np.testing.assert_array_equal(np.asarray(formats.from_container(c, "e2m1")), bits)
