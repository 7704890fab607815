"""jaxmma.layouts: the public per-lane maps and block-scale geometry."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma import layouts

BF16 = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")


def test_mma_m16n8k16_a_and_c_match_the_spec_formulas():
    """9.7.14.5.8: a_i of lane l: row g (+8 for i % 4 >= 2), col 2t + (i % 2) (+8 for i >= 4);
    c_i: row g (+8 for i >= 2), col 2t + (i % 2); g = l // 4, t = l % 4."""
    a, c = layouts.operand_map(BF16, "a"), layouts.operand_map(BF16, "c")
    assert a.row.shape == (32, 4, 2) and c.row.shape == (32, 4, 1)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(8):
            r, j = divmod(i, 2)
            assert a.row[lane, r, j] == g + 8 * ((i % 4) >= 2)
            assert a.col[lane, r, j] == 2 * t + (i % 2) + 8 * (i >= 4)
        for i in range(4):
            assert c.row[lane, i, 0] == g + 8 * (i >= 2)
            assert c.col[lane, i, 0] == 2 * t + (i % 2)
    assert not a.row.flags.writeable


@pytest.mark.parametrize(
    "text",
    [
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
        "mma.sync.aligned.m8n8k4.row.col.f16.f16.f16.f16",
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    ],
)
@pytest.mark.parametrize("operand", ["a", "b", "c", "d"])
def test_map_is_what_fragment_gathers(text, operand):
    """A matrix whose elements hold their own (masked) flat index, gathered by
    ``ins.fragment``, puts at (lane, reg, j) the element the map names."""
    ins = jaxmma.instruction(text)
    m = layouts.operand_map(ins, operand)
    flat = (m.mat * m.shape[-2] + m.row) * m.shape[-1] + m.col
    mask = (1 << m.elem_bits) - 1 if m.elem_bits < 32 else 0xFFFFFFFF
    M = (np.arange(np.prod(m.shape), dtype=np.uint32) & np.uint32(mask)).reshape(m.shape)
    regs = np.asarray(ins.fragment(operand, jnp.asarray(M)))
    per = m.row.shape[-1]
    elems = np.stack([(regs >> (m.elem_bits * j)) & mask for j in range(per)], -1)
    np.testing.assert_array_equal(elems, flat.astype(np.uint32) & np.uint32(mask))


def test_movement_and_wmma_maps():
    ld = layouts.operand_map(jaxmma.instruction("ldmatrix.sync.aligned.m8n8.x4.shared.b16"), "r")
    assert ld.shape == (4, 8, 8) and ld.addr_lane.shape == (4, 8)
    # 9.7.14.5.15: lane l register i holds row l // 4, elements 2 (l % 4) + j of matrix i
    lanes = np.arange(32)
    np.testing.assert_array_equal(ld.mat[:, :, 0], np.broadcast_to(np.arange(4), (32, 4)))
    np.testing.assert_array_equal(ld.row[:, 0, 0], lanes // 4)
    np.testing.assert_array_equal(ld.col[:, 0, 1], 2 * (lanes % 4) + 1)
    w = layouts.operand_map(
        jaxmma.instruction("wmma.load.a.sync.aligned.row.m16n16k16.f16", arch="sm_90"), "d"
    )
    assert w.row.shape == (32, 8, 2) and w.shape == (16, 16)


def test_block_scale_geometry():
    ins = jaxmma.instruction(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3"
    )
    assert layouts.num_blocks(ins) == 4
    assert layouts.block_size(ins) == 16
    assert layouts.scale_shapes(ins) == ((16, 4), (4, 8))


def test_errors():
    with pytest.raises(ValueError, match="operand='e' is not a register operand"):
        layouts.operand_map(BF16, "e")
    with pytest.raises(TypeError, match="ins: expected a jaxmma.Instruction"):
        layouts.operand_map("mma", "a")
    with pytest.raises(ValueError, match="ins: expected a .block_scale"):
        layouts.block_size(BF16)


#: the quick run keeps every case of this file (tests/conftest.py)
pytestmark = pytest.mark.every_case
