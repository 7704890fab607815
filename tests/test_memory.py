"""Memory images: addresses outside the image never wrap, never redirect (operands._memory)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _suite import params
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxmma

LD = jaxmma.instruction("ldmatrix.sync.aligned.m8n8.x1.shared.b16")
ST = jaxmma.instruction("stmatrix.sync.aligned.m8n8.x1.shared.b16")
WLD = jaxmma.instruction("wmma.load.a.sync.aligned.row.m16n16k16.f16", arch="sm_90")
WST = jaxmma.instruction("wmma.store.d.sync.aligned.row.m16n16k16.f32", arch="sm_90")
NBYTES = 256


def _image(n=NBYTES):
    return jnp.asarray((np.arange(n) * 7 + 1) % 251 + 1, jnp.uint8)  # no zero byte


# Addresses that overflow an int32 bit offset (>= 2**28), reach the sign bit, or sit just
# past the end: every one lies outside the image.
FAR = [NBYTES, NBYTES + 16, 2**28, 2**28 + 16, 2**29, 2**31, 2**31 + 16, 2**32 - 16]


@pytest.mark.parametrize("addr", FAR)
def test_ldmatrix_traced_far_address_reads_zero(addr):
    addrs = jnp.full((32,), addr, jnp.uint32)
    got = jax.jit(LD)(_image(), addrs)
    np.testing.assert_array_equal(np.asarray(got), 0)


@pytest.mark.parametrize("addr", FAR)
def test_ldmatrix_eager_far_address_raises(addr):
    with pytest.raises(ValueError, match="addrs: lane .* outside the 256-byte"):
        LD(_image(), jnp.full((32,), addr, jnp.uint32))


def test_ldmatrix_traced_mixed_rows():
    """In-range rows read their bytes, far rows read zero (not the start of the image)."""
    addrs = np.full(32, 2**29, np.uint32)
    addrs[:4] = [0, 16, 32, 48]
    got = np.asarray(jax.jit(LD)(_image(), jnp.asarray(addrs)))
    want = np.asarray(LD(_image(), jnp.asarray(np.where(np.arange(32) < 4, addrs, 64))))
    rows = np.arange(32) // 4  # lane l of x1 holds row l // 4
    np.testing.assert_array_equal(got[rows < 4], want[rows < 4])
    np.testing.assert_array_equal(got[rows >= 4], 0)


@pytest.mark.parametrize("addr", FAR)
def test_stmatrix_traced_far_address_drops(addr):
    image = _image()
    regs = jnp.full((32, 1), 0xDEADBEEF, jnp.uint32)
    out = jax.jit(ST)(image, jnp.full((32,), addr, jnp.uint32), regs)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(image))


@pytest.mark.parametrize("addr", [-16, -(2**31), 2048, 2**31 - 16])
def test_wmma_store_traced_outside_drops(addr):
    mem = _image(2048)
    regs = jnp.full((32, 8), 0x01020304, jnp.uint32)
    out = jax.jit(WST)(mem, regs, jnp.int32(addr))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(mem))


@pytest.mark.parametrize("addr", [-16, -1024, 2048, 2**40])
def test_wmma_store_eager_outside_raises(addr):
    with pytest.raises(ValueError, match="addr"):
        WST(_image(2048), jnp.zeros((32, 8), jnp.uint32), addr)


@pytest.mark.parametrize("addr", [-16, -(2**31), 2**28, 2**31 - 16])
def test_wmma_load_traced_outside_reads_zero(addr):
    got = jax.jit(WLD)(_image(1024), jnp.int32(addr))
    np.testing.assert_array_equal(np.asarray(got), 0)


@pytest.mark.parametrize("stride", [-16, 2**27, 2**30])
def test_wmma_load_traced_far_stride(stride):
    """Row 0 is read; rows pushed outside by a huge or negative stride read zero."""
    mem = _image(1024)
    got = np.asarray(jax.jit(WLD)(mem, 0, jnp.int32(stride)))
    rows = jaxmma.instructions._wmma.layout("m16n16k16", "a", "f16", 8).row  # noqa: SLF001
    halves = np.stack([got & 0xFFFF, got >> 16], -1).reshape(32, 16)
    ref = np.asarray(WLD(mem)).astype(np.uint32)
    ref_h = np.stack([ref & 0xFFFF, ref >> 16], -1).reshape(32, 16)
    np.testing.assert_array_equal(halves[rows == 0], ref_h[rows == 0])
    np.testing.assert_array_equal(halves[rows > 0], 0)


def test_checked_mode_traced():
    addrs = jnp.full((32,), 2**29, jnp.uint32)
    ld = jax.jit(lambda s, a: LD(s, a, check=True))
    with pytest.raises(jax.errors.JaxRuntimeError, match="addrs: an address lies outside"):
        ld(_image(), addrs)
        jax.effects_barrier()  # a GPU reports host-callback errors here
    ok = jnp.asarray(np.arange(32) % 8 * 16, jnp.uint32)
    np.testing.assert_array_equal(np.asarray(ld(_image(), ok)), np.asarray(LD(_image(), ok)))
    wld = jax.jit(lambda m, a: WLD(m, a, check=True))
    with pytest.raises(jax.errors.JaxRuntimeError, match="addr/stride"):
        wld(_image(1024), jnp.int32(-16))
        jax.effects_barrier()  # a GPU reports host-callback errors here


def test_checked_mode_under_plain_jit_needs_no_wrapper():
    jax.jit(lambda s, a: LD(s, a, check=True))(_image(), jnp.zeros(32, jnp.uint32))


def _width(ins):
    """The text without its element type, and the type's width: the quick run checks one
    form of each (``.s8``/``.u8``, ``.f16``/``.bf16``, ... share their addressing)."""
    head, typ = ins.text.rsplit(".", 1)
    return head, {"u8": 8, "s8": 8, "bf16": 16, "f16": 16, "s4": 4, "u4": 4}.get(typ, typ)


@pytest.mark.parametrize("ins", params(jaxmma.all_instructions("wmma.load"), _width, ids=str))
def test_every_wmma_load_with_default_stride(ins):
    """Default strides are accepted (also the 8-byte rows of m32n8k16/m8n32k16 .u8/.s8)."""
    if "f64" in ins.text:
        pytest.skip("needs x64 (tested in test_wmma)")
    (n,) = ins.nregs.values()
    regs = ins(_image(4096))
    assert regs.shape == (32, n) and int(jnp.sum(regs != 0)) > 0


@pytest.mark.parametrize("ins", params(jaxmma.all_instructions("wmma.store"), _width, ids=str))
def test_every_wmma_store_with_default_stride(ins):
    if "f64" in ins.text:
        pytest.skip("needs x64 (tested in test_wmma)")
    (n,) = ins.nregs.values()
    out = ins(jnp.zeros(4096, jnp.uint8), jnp.ones((32, n), jnp.uint32))
    assert out.shape == (4096,) and int(jnp.sum(out != 0)) > 0


def test_image_limits():
    with pytest.raises(TypeError, match="smem: expected a uint8"):
        LD(jnp.zeros(256, jnp.int8), jnp.zeros(32, jnp.uint32))
    with pytest.raises(ValueError, match="smem: expected shape"):
        LD(jnp.zeros((), jnp.uint8), jnp.zeros(32, jnp.uint32))


# ------------------------------------------------------------------------------ property
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, (512 - 16) // 16), min_size=8, max_size=8), st.booleans())
def test_stmatrix_writes_only_addressed_rows(rows, traced):
    """Bytes outside the 8 addressed 16-byte rows keep their canary value."""
    image = jnp.full((512,), 0xA5, jnp.uint8)
    addrs = np.zeros(32, np.uint32)
    addrs[:8] = np.asarray(rows) * 16
    regs = jnp.asarray(np.arange(32, dtype=np.uint32) * 0x01010101 ^ 0x5A5A5A5A)[:, None]
    fn = jax.jit(ST) if traced else ST
    out = np.asarray(fn(image, jnp.asarray(addrs), regs))
    touched = np.zeros(512, bool)
    for r in rows:
        touched[r * 16 : r * 16 + 16] = True
    assert (out[~touched] == 0xA5).all()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, (4096 - 1024) // 16), st.sampled_from([None, 16, 24, 40]), st.booleans())
def test_wmma_store_writes_only_its_matrix(block, stride, traced):
    """A 16x16 f32 store at addr with stride s touches rows [addr + i*s*4, +64) only."""
    addr = block * 16
    s = 16 if stride is None else stride
    if addr + (15 * s + 16) * 4 > 4096:
        addr = 0
    image = jnp.full((4096,), 0xA5, jnp.uint8)
    regs = jnp.full((32, 8), 0x5A5A5A5A, jnp.uint32)
    fn = jax.jit(WST, static_argnums=3) if traced else WST
    out = np.asarray(fn(image, regs, addr, stride))
    touched = np.zeros(4096, bool)
    for i in range(16):
        touched[addr + i * s * 4 : addr + i * s * 4 + 64] = True
    assert (out[~touched] == 0xA5).all()
    assert (out[touched] == 0x5A).all()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, (512 - 16) // 16), min_size=8, max_size=8))
def test_ldmatrix_reads_only_addressed_rows(rows):
    """Poisoning every byte outside the addressed rows does not change what is read."""
    base = np.asarray(_image(512))
    addrs = np.zeros(32, np.uint32)
    addrs[:8] = np.asarray(rows) * 16
    touched = np.zeros(512, bool)
    for r in rows:
        touched[r * 16 : r * 16 + 16] = True
    poisoned = np.where(touched, base, 0xEE).astype(np.uint8)
    a = jnp.asarray(addrs)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(LD)(jnp.asarray(base), a)), np.asarray(LD(jnp.asarray(poisoned), a))
    )
