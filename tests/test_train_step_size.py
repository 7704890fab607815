"""The program of a jitted training step on block-scaled GEMMs stays near bf16's.

A small MLP's ``value_and_grad`` + SGD step, every matmul through ``jaxmma.matmul`` on
float inputs (quantized inside, straight-through backward): the optimized HLO of the
NVFP4, MXFP4 and MXFP8 steps may hold at most ``FACTOR`` times the instructions of the
bf16 step. Counted, not timed: the quantizer once traced as a 34-56 step bit loop, or
fused into every reader of its output, made the NVFP4 step 65x bf16's program
(380,071 against 5,831 lines) and its compile 74x.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma

BF16 = ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90")
BLOCK_SCALED = {
    "nvfp4": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3",
    "mxfp4": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X"
    ".f32.e2m1.e2m1.f32.ue8m0",
    "mxfp8": "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e4m3.e4m3.f32.ue8m0",
}
#: the most instructions a block-scaled step may have, as a multiple of the bf16 step's
#: (2026-11-24: NVFP4 3.5x, whose sums still run on the general multi-limb engine; MXFP4
#: and MXFP8 below 3x)
FACTOR = 4.0


def _instructions(text, arch):
    def loss(params, x, y):
        (w1, w2) = params
        h = jax.nn.relu(jaxmma.matmul(x, w1, instruction=text, arch=arch))
        logits = jaxmma.matmul(h, w2, instruction=text, arch=arch)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), value

    g = np.random.default_rng(0)
    params = (
        jnp.asarray(g.standard_normal((64, 64)), jnp.float32),
        jnp.asarray(g.standard_normal((64, 16)), jnp.float32),
    )
    x = jnp.asarray(g.standard_normal((32, 64)), jnp.float32)
    y = jnp.asarray(g.integers(0, 16, 32), jnp.int32)
    hlo = jax.jit(step).lower(params, x, y).compile().as_text()
    return sum(1 for line in hlo.splitlines() if " = " in line)


@pytest.fixture(scope="module")
def bf16_instructions():
    return _instructions(*BF16)


@pytest.mark.parametrize("family", sorted(BLOCK_SCALED))
def test_block_scaled_step_program_stays_near_bf16(family, bf16_instructions):
    n = _instructions(BLOCK_SCALED[family], "sm_120a")
    assert bf16_instructions > 500  # the count is of a real program
    assert n <= FACTOR * bf16_instructions, (
        f"{family}: {n} HLO instructions, bf16 {bf16_instructions}: "
        f"{n / bf16_instructions:.1f}x, allowed {FACTOR}x"
    )
