"""The fused-block models against probe vectors of the published studies, derived by hand.

Each expected value below is worked out on paper from the model of docs/numerics.md (F, L,
e_zero, output rounding per architecture), not computed by the code under test.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma

F16_F32 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
F16_F16 = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"


def run(text, arch, a_row, b_col, c, *, model=None, dtype=np.float16, cdtype=np.float32):
    """D[0, 0] of A @ B + C where row 0 of A and column 0 of B are given (rest zero)."""
    ins = jaxmma.instruction(text, arch=arch)
    A = np.zeros((ins.m, ins.k), dtype)
    B = np.zeros((ins.k, ins.n), dtype)
    C = np.zeros((ins.m, ins.n), cdtype)
    A[0, : len(a_row)] = a_row
    B[: len(b_col), 0] = b_col
    C[0, 0] = c
    D = np.asarray(ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C), model=model))
    return D[0, 0]


def bits32(x):
    return int(np.float32(x).view(np.uint32))


def test_subnormal_inputs_are_exact():
    # a = 2^-24 (smallest f16 subnormal), b = 4 -> 2^-22, nothing else (Fasi et al.)
    d = run(F16_F32, "sm_90", [2.0**-24], [4.0], 0.0)
    assert bits32(d) == bits32(2.0**-22)


def test_f32_output_truncates():
    # 1*2 + 1*2^-23 + 1*2^-24 = 2 + 3*2^-24: within F=25 bits of 2^1, the sum is exact;
    # f32 near 2 has ulp 2^-22, 3*2^-24 = 0.75 ulp: truncation gives 2.0 (RN would round up)
    d = run(F16_F32, "sm_90", [1.0, 1.0, 1.0], [2.0, 2.0**-23, 2.0**-24], 0.0)
    assert bits32(d) == bits32(2.0)
    e = run(F16_F32, "sm_90", [1.0, 1.0, 1.0], [2.0, 2.0**-23, 2.0**-24], 0.0, model="exact")
    assert bits32(e) == bits32(2.0 + 2.0**-22)


@pytest.mark.parametrize("arch,kept", [("sm_90", True), ("sm_80", False)])
def test_alignment_keeps_F_fractional_bits(arch, kept):
    # C = 1 (e_max = 0); eight products 2^-13 * 2^-12 = 2^-25 each. sm_90 keeps F = 25 bits
    # below 2^0, so each survives: 1 + 8 * 2^-25 = 1 + 2^-22. sm_80 keeps F = 24: each is
    # truncated to 0 and D = 1. (sm_80 has L = 8: one block holds the eight products.)
    d = run(F16_F32, arch, [2.0**-13] * 8, [2.0**-12] * 8, 1.0)
    assert bits32(d) == bits32(1.0 + 2.0**-22 if kept else 1.0)


def test_products_below_the_window_vanish_but_exact_keeps_them():
    # eight products 2^-13 * 2^-13 = 2^-26 with C = 1: each is below 2^-25, truncated (sm_90),
    # D = 1. Exact: 1 + 8 * 2^-26 = 1 + 2^-23, representable.
    d = run(F16_F32, "sm_90", [2.0**-13] * 8, [2.0**-13] * 8, 1.0)
    assert bits32(d) == bits32(1.0)
    e = run(F16_F32, "sm_90", [2.0**-13] * 8, [2.0**-13] * 8, 1.0, model="exact")
    assert bits32(e) == bits32(1.0 + 2.0**-23)


def test_block_chaining_rounds_between_blocks():
    # k = 0: 1*1; k = 1: 2^-12*2^-12 = 2^-24; k = 8: 1*1... no: use two tiny products in two
    # blocks of sm_80 (L = 8): block 1 = 1 + 2^-24 -> f32 truncation -> 1; block 2 adds
    # another 2^-24 -> 1 again. sm_90 (one block of 16): 1 + 2^-23 exactly.
    a = [1.0, 2.0**-12] + [0.0] * 6 + [2.0**-12]
    b = [1.0, 2.0**-12] + [0.0] * 6 + [2.0**-12]
    assert bits32(run(F16_F32, "sm_80", a, b, 0.0)) == bits32(1.0)
    assert bits32(run(F16_F32, "sm_90", a, b, 0.0)) == bits32(1.0 + 2.0**-23)


def test_carry_out_of_the_sum():
    # {1, 1.5, 1.75, 1.875} and C = 1.875: the sum 8 carries three bits past the inputs
    d = run(F16_F32, "sm_90", [1.0, 1.5, 1.75, 1.875], [1.0] * 4, 1.875)
    assert bits32(d) == bits32(8.0)


def test_f16_output_zero_exponent_drops_tiny_products():
    # f16 output: a zero term counts with e_zero = -21 on sm_90. A single product
    # 2^-24 * 2^-24 = 2^-48 is below 2^(-21-25): D = +0. With f32 output e_zero = -133 and
    # the product survives (2^-48 is a normal f32).
    ins = F16_F16
    d = run(ins, "sm_90", [2.0**-24], [2.0**-24], 0.0, cdtype=np.float16)
    assert int(np.float16(d).view(np.uint16)) == 0
    d32 = run(F16_F32, "sm_90", [2.0**-24], [2.0**-24], 0.0)
    assert bits32(d32) == bits32(2.0**-48)


def test_f16_output_rounds_to_nearest_even():
    # 1 + 2^-11 (a tie between 1 and 1 + 2^-10 in f16) -> 1 (even); 1 + 3*2^-11 -> 1 + 2^-9
    d = run(F16_F16, "sm_90", [1.0, 2.0**-11], [1.0, 1.0], 0.0, cdtype=np.float16)
    assert float(d) == 1.0
    d = run(F16_F16, "sm_90", [1.0, 2.0**-11, 2.0**-10], [1.0, 1.0, 1.0], 0.0, cdtype=np.float16)
    assert float(d) == 1.0 + 2.0**-9


def test_special_values():
    inf, nan = np.inf, np.nan
    # Inf - Inf -> canonical NaN; NaN -> canonical NaN; Inf propagates with its sign
    assert bits32(run(F16_F32, "sm_90", [inf, 1.0], [1.0, -inf], 0.0)) == 0x7FFFFFFF
    assert bits32(run(F16_F32, "sm_90", [nan], [1.0], 0.0)) == 0x7FFFFFFF
    assert bits32(run(F16_F32, "sm_90", [inf], [0.0], 0.0)) == 0x7FFFFFFF  # Inf * 0
    assert bits32(run(F16_F32, "sm_90", [-inf], [2.0], 5.0)) == 0xFF800000
    c_nan = np.float32(np.uint32(0x7FC12345).view(np.float32))
    assert bits32(run(F16_F32, "sm_90", [1.0], [1.0], c_nan)) == 0x7FFFFFFF
    # an all-zero sum is +0, even from -0 terms and C = -0
    assert bits32(run(F16_F32, "sm_90", [-0.0], [1.0], -0.0)) == 0
    # f16 products (< 2^32) vanish below the window of C = max f32: D = C
    big = np.float32(np.finfo(np.float32).max)
    assert bits32(run(F16_F32, "sm_90", [65504.0], [65504.0], big)) == bits32(big)
    # bf16: 2^127 * 2 + 2^127 * 2 = 2^129 overflows f32 -> +Inf
    bf = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    d = run(bf, "sm_90", [2.0**127] * 2, [2.0, 2.0], 0.0, dtype=jnp.bfloat16)
    assert bits32(d) == 0x7F800000


def test_register_and_matrix_level_agree_under_jit_and_vmap():
    ins = jaxmma.instruction("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", arch="sm_90")
    rng = np.random.default_rng(5)
    A = rng.integers(0, 2**32, (7, 16, 8), dtype=np.uint64).astype(np.uint32)
    B = rng.integers(0, 2**32, (7, 8, 8), dtype=np.uint64).astype(np.uint32)
    C = rng.integers(0, 2**32, (7, 16, 8), dtype=np.uint64).astype(np.uint32)
    D = np.asarray(ins.mma(A, B, C)).view(np.uint32)
    a, b, c = (ins.fragment(o, M) for o, M in (("a", A), ("b", B), ("c", C)))
    d = jax.jit(ins)(a, b, c)
    np.testing.assert_array_equal(np.asarray(ins.unfragment("d", d)), D)
    dv = jax.vmap(ins)(a, b, c)
    np.testing.assert_array_equal(np.asarray(dv), np.asarray(d))
