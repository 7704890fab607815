"""wmma.load / wmma.store / wmma.mma: layouts, round trips, errors, jit and vmap.

The sm_90 fragment layouts themselves are checked bit for bit against the GPU in
test_golden.py; here, properties that hold independently of those vectors.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _suite import params

import jaxmma

RNG = np.random.default_rng(11)


def _image(nbytes, batch=()):
    return jnp.asarray(RNG.integers(0, 256, batch + (nbytes,), dtype=np.uint8))


@pytest.mark.parametrize(
    "layout,shape,typ",
    # the quick run: each shape and type with one layout (the other one the next day)
    params(
        [
            (lay, s, t)
            for s, t in [
                ("m16n16k16", "f32"),
                ("m32n8k16", "f16"),
                ("m8n32k16", "s32"),
                ("m8n8k4", "f64"),
            ]
            for lay in ("row", "col")
        ],
        lambda x: x[1:],
        salt="wmma",
        ids=lambda x: f"{x[1]}-{x[2]}-{x[0]}",
    ),
)
def test_store_then_load_round_trips(layout, shape, typ):
    ld = jaxmma.instruction(f"wmma.load.c.sync.aligned.{layout}.{shape}.{typ}", arch="sm_90")
    st = jaxmma.instruction(f"wmma.store.d.sync.aligned.{layout}.{shape}.{typ}", arch="sm_90")
    ctx = jax.enable_x64(True) if typ == "f64" else _Null()
    with ctx:
        (op,) = ld.operands
        dt = np.uint64 if op.reg_bits == 64 else np.uint32
        regs = jnp.asarray(RNG.integers(0, 2**31, (3, 32, op.nregs)).astype(dt))
        if op.elem_bits == 16:  # f16 accumulators: two per register, any bits
            regs = jnp.asarray(
                RNG.integers(0, 2**32, (3, 32, op.nregs), dtype=np.uint64).astype(np.uint32)
            )
        line = {
            "m16n16k16": 16,
            "m32n8k16": 8 if layout == "row" else 32,
            "m8n32k16": 32 if layout == "row" else 8,
            "m8n8k4": 8,
        }[shape]
        stride = line + 16
        mem = _image(8192, (3,))
        out = st(mem, regs, addr=64, stride=stride)
        np.testing.assert_array_equal(np.asarray(ld(out, addr=64, stride=stride)), np.asarray(regs))
        np.testing.assert_array_equal(np.asarray(jax.jit(ld)(out, 64, stride)), np.asarray(regs))


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_f16_a_fragment_repeats_the_mma_fragment():
    """m16n16k16 .f16 A: registers 4-7 repeat 0-3, which hold the m16n8k16 A fragment."""
    ld = jaxmma.instruction("wmma.load.a.sync.aligned.row.m16n16k16.f16", arch="sm_90")
    mma = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    M = RNG.integers(0, 2**16, (16, 16), dtype=np.uint16)
    regs = np.asarray(ld(jnp.asarray(M.view(np.uint8).reshape(-1))))
    np.testing.assert_array_equal(regs[:, 4:], regs[:, :4])
    np.testing.assert_array_equal(
        regs[:, :4], np.asarray(mma.fragment("a", jnp.asarray(M, jnp.uint32)))
    )


def test_mma_matches_matrix_level():
    ins = jaxmma.instruction(
        "wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32", arch="sm_90"
    )
    la = jaxmma.instruction("wmma.load.a.sync.aligned.row.m16n16k16.bf16", arch="sm_90")
    lb = jaxmma.instruction("wmma.load.b.sync.aligned.col.m16n16k16.bf16", arch="sm_90")
    lc = jaxmma.instruction("wmma.load.c.sync.aligned.row.m16n16k16.f32", arch="sm_90")
    A = jnp.asarray(RNG.standard_normal((16, 16)), jnp.bfloat16)
    B = jnp.asarray(RNG.standard_normal((16, 16)), jnp.bfloat16)
    C = jnp.asarray(RNG.standard_normal((16, 16)), jnp.float32)
    a = la(jax.lax.bitcast_convert_type(A, jnp.uint8).reshape(-1))
    b = lb(jax.lax.bitcast_convert_type(B.T, jnp.uint8).reshape(-1))
    c = lc(jax.lax.bitcast_convert_type(C, jnp.uint8).reshape(-1))
    d = jax.vmap(ins)(a[None], b[None], c[None])[0]
    st = jaxmma.instruction("wmma.store.d.sync.aligned.row.m16n16k16.f32", arch="sm_90")
    D = jax.lax.bitcast_convert_type(
        st(jnp.zeros(1024, jnp.uint8), d).reshape(16, 16, 4), jnp.float32
    )
    want = ins.mma(A, B, C)
    np.testing.assert_array_equal(np.asarray(D).view(np.uint32), np.asarray(want).view(np.uint32))


def test_memory_errors():
    ld = jaxmma.instruction("wmma.load.a.sync.aligned.row.m16n16k16.f16", arch="sm_90")
    mem = jnp.zeros(2048, jnp.uint8)
    with pytest.raises(ValueError, match="below the default 16"):
        ld(mem, stride=8)
    with pytest.raises(ValueError, match="16-byte aligned"):
        ld(mem, addr=8)
    with pytest.raises(ValueError, match="outside the 2048-byte image"):
        ld(mem, addr=2048 - 256, stride=64)
    with pytest.raises(TypeError, match="uint8"):
        ld(mem.astype(jnp.int32))
