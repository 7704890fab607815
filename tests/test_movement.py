"""ldmatrix / stmatrix / movmatrix against an oracle written from docs/layouts.md."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma

RNG = np.random.default_rng(2024)


def _addresses(rows, row_bytes, nbytes, batch=()):
    """Distinct, 16-byte aligned, non-overlapping row addresses for 32 lanes."""
    slots = nbytes // max(row_bytes, 16)
    out = np.empty(batch + (32,), np.uint32)
    for idx in np.ndindex(*batch):
        pick = RNG.choice(slots, size=32, replace=False)
        out[idx] = pick * max(row_bytes, 16)
    return out


def oracle_ldmatrix_m8n8(smem, addrs, num, trans):
    """Matrix i row r starts at addrs[8i + r]; lane l reg i half h = M_i[l>>2][2(l&3)+h]
    (with .trans: M_i[2(l&3)+h][l>>2]); 16-bit little-endian elements."""
    regs = np.zeros((32, num), np.uint32)
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        for i in range(num):
            word = 0
            for h in range(2):
                r, c = (2 * q + h, g) if trans else (g, 2 * q + h)
                a = int(addrs[8 * i + r]) + 2 * c
                word |= (int(smem[a]) | int(smem[a + 1]) << 8) << (16 * h)
            regs[lane, i] = word
    return regs


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_m8n8_matches_layout_notes(num, trans):
    text = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"
    ins = jaxmma.instruction(text, arch="sm_90")
    smem = RNG.integers(0, 256, (4, 1024), dtype=np.uint8)
    addrs = _addresses(8, 16, 1024, (4,))
    got = np.asarray(ins(jnp.asarray(smem), jnp.asarray(addrs)))
    for w in range(4):
        np.testing.assert_array_equal(got[w], oracle_ldmatrix_m8n8(smem[w], addrs[w], num, trans))


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_m8n8_is_the_inverse_of_ldmatrix(num, trans):
    t = ".trans" if trans else ""
    st = jaxmma.instruction(f"stmatrix.sync.aligned.m8n8.x{num}{t}.shared.b16", arch="sm_90")
    ld = jaxmma.instruction(f"ldmatrix.sync.aligned.m8n8.x{num}{t}.shared.b16", arch="sm_90")
    regs = jnp.asarray(RNG.integers(0, 2**32, (3, 32, num), dtype=np.uint64), jnp.uint32)
    addrs = jnp.asarray(_addresses(8, 16, 2048, (3,)))
    image = jnp.asarray(RNG.integers(0, 256, (3, 2048), dtype=np.uint8))
    out = st(image, addrs, regs)
    np.testing.assert_array_equal(np.asarray(ld(out, addrs)), np.asarray(regs))
    # bytes outside the stored rows are untouched
    touched = np.zeros((3, 2048), bool)
    for w in range(3):
        for i in range(num):
            for r in range(8):
                a = int(addrs[w, 8 * i + r])
                touched[w, a : a + 16] = True
    np.testing.assert_array_equal(np.asarray(out)[~touched], np.asarray(image)[~touched])


def test_movmatrix_transposes():
    """Input lane 4r + c/2 half c%2 holds M[r][c]; output lane l half h holds M[2q+h][l>>2]."""
    ins = jaxmma.instruction("movmatrix.sync.aligned.m8n8.trans.b16", arch="sm_90")
    M = RNG.integers(0, 2**16, (5, 8, 8), dtype=np.uint32)
    a = np.zeros((5, 32), np.uint32)
    for r in range(8):
        for c in range(8):
            a[:, 4 * r + c // 2] |= M[:, r, c] << (16 * (c % 2))
    want = np.zeros((5, 32), np.uint32)
    for lane in range(32):
        for h in range(2):
            want[:, lane] |= M[:, 2 * (lane & 3) + h, lane >> 2] << (16 * h)
    np.testing.assert_array_equal(np.asarray(ins(jnp.asarray(a))), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(ins)(jnp.asarray(a))), want)
    np.testing.assert_array_equal(np.asarray(jax.vmap(ins)(jnp.asarray(a))), want)


def test_ldmatrix_jit_and_vmap_give_the_same_bits():
    ins = jaxmma.instruction("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", arch="sm_90")
    smem = jnp.asarray(RNG.integers(0, 256, (6, 1024), dtype=np.uint8))
    addrs = jnp.asarray(_addresses(8, 16, 1024, (6,)))
    eager = np.asarray(ins(smem, addrs))
    np.testing.assert_array_equal(np.asarray(jax.jit(ins)(smem, addrs)), eager)
    np.testing.assert_array_equal(np.asarray(jax.vmap(ins)(smem, addrs)), eager)


def test_movement_errors():
    ld = jaxmma.instruction("ldmatrix.sync.aligned.m8n8.x1.shared.b16", arch="sm_90")
    smem = jnp.zeros((256,), jnp.uint8)
    ok = jnp.arange(32, dtype=jnp.uint32) * 0 + 16
    with pytest.raises(ValueError, match="multiple of 16"):
        ld(smem, ok + 4)
    with pytest.raises(ValueError, match="outside the 256-byte"):
        ld(smem, ok + 240 + 16)
    with pytest.raises(TypeError, match="uint8"):
        ld(smem.astype(jnp.int32), ok)
    with pytest.raises(TypeError, match="uint32"):
        ld(smem, ok.astype(jnp.int32))
    with pytest.raises(ValueError, match=r"\[\.\.\., 32\]"):
        ld(smem, ok[:16])
    mv = jaxmma.instruction("movmatrix.sync.aligned.m8n8.trans.b16", arch="sm_90")
    with pytest.raises(TypeError, match="uint32"):
        mv(jnp.zeros((32,), jnp.int32))
    with pytest.raises(ValueError, match="no matrix product"):
        mv.mma(1, 2, 3)
