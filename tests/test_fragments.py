"""fragment / unfragment round trips for every operand of every mma form; jit and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _suite import full_sweep, params
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxmma
from jaxmma import operands

FORMS = [
    i
    for i in jaxmma.all_instructions(opcode="mma")
    if i.alayout == "row"
    and i.blayout == "col"
    and not i.satfinite
    and i.rounding in (None, "rn")
    and i.bitop != "and"
]


def _regs(ins, operand, rng, batch=()):
    lay = operands.fragment_layout(ins, operand)
    if lay.elem_bits == 64:
        x = rng.integers(0, 2**63, batch + (32, lay.nregs), dtype=np.uint64)
    else:
        x = rng.integers(0, 2**32, batch + (32, lay.nregs), dtype=np.uint64).astype(np.uint32)
    return x


def _layouts(ins):
    """Forms with equal keys share their fragment layouts: the quick run checks one each."""
    lays = [operands.fragment_layout(ins, op) for op in "abcd"]
    scale_vec = ins.form.scale_vec if ins.stype else None
    return ins.shape, ins.sparse, ins.kind, scale_vec, [(x.elem_bits, x.nregs) for x in lays]


@pytest.mark.parametrize("ins", params(FORMS, _layouts, ids=lambda i: i.text))
@settings(max_examples=3 if full_sweep() else 1, deadline=None)  # one per quick run
@given(seed=st.integers(0, 2**32 - 1))
def test_round_trips(ins, seed):
    rng = np.random.default_rng(seed)
    ops = ("a", "b", "c", "d")
    for operand in ops:
        if ins.atype == "f64" and not jax.config.jax_enable_x64:
            ctx = jax.enable_x64(True)
        else:
            ctx = _null()
        with ctx:
            regs = jnp.asarray(_regs(ins, operand, rng, (2,)))
            M = ins.unfragment(operand, regs)
            assert M.shape == (2,) + operands.matrix_shape(ins, operand)
            np.testing.assert_array_equal(np.asarray(ins.fragment(operand, M)), np.asarray(regs))
            # every register bit lands in exactly one matrix element
            lay = operands.fragment_layout(ins, operand)
            assert M.size * lay.elem_bits == regs.size * (64 if lay.elem_bits == 64 else 32)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize(
    "text",
    [
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "mma.sync.aligned.m8n8k4.col.row.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k64.row.col.s32.s4.u4.s32",
        "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.xor.popc",
    ],
)
def test_fragment_under_jit_and_vmap(text):
    ins = jaxmma.instruction(text, arch="sm_90")
    rng = np.random.default_rng(1)
    regs = jnp.asarray(_regs(ins, "a", rng, (3,)))
    M = ins.unfragment("a", regs)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(ins.unfragment, static_argnums=0)("a", regs)), np.asarray(M)
    )
    np.testing.assert_array_equal(
        np.asarray(jax.vmap(lambda r: ins.fragment("a", ins.unfragment("a", r)))(regs)),
        np.asarray(regs),
    )


def test_fragment_errors():
    ins = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
    with pytest.raises(ValueError, match="operand must be one of"):
        ins.fragment("e", jnp.zeros((16, 16), jnp.uint32))
    with pytest.raises(ValueError, match=r"trailing shape \(16, 16\)"):
        ins.fragment("a", jnp.zeros((16, 8), jnp.uint32))
    with pytest.raises(TypeError, match="uint32"):
        ins.unfragment("a", jnp.zeros((32, 4), jnp.int32))
    with pytest.raises(ValueError, match=r"\[\.\.\., 32, 4\]"):
        ins.unfragment("a", jnp.zeros((32, 3), jnp.uint32))
    mv = jaxmma.instruction("movmatrix.sync.aligned.m8n8.trans.b16")
    with pytest.raises(ValueError, match="apply to mma forms"):
        mv.fragment("a", jnp.zeros((8, 8), jnp.uint32))
