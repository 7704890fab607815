"""``tcgen05.mma``'s ``scale-input-d`` and ``disable-output-lane`` (PTX ISA 9.7.16.10.9.1).

The expected values never come from the code under test: ``scale_input_d=s`` is compared
with the plain instruction on ``C * 2**-s`` computed exactly in NumPy (where that is an
f32/f16 value), or with NumPy's exact arithmetic where it is not; the rows a mask
disables come from the layout rules written out by loops here, and must hold C's raw
bits, the other rows the plain instruction's raw bits.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma

HEAD = "tcgen05.mma.cta_group::1"
F16_F32 = f"{HEAD}.kind::f16.m128n16k16.f32.bf16.bf16"


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def _operands(ins, seed, c_dtype=np.float32, c_exp=(-20, 20)):
    """Random A, B in the instruction's element dtype and a C with specials."""
    rng = np.random.default_rng(seed)
    M, N, K = ins.m, ins.n, ins.k
    adt = {"bf16": jnp.bfloat16, "f16": jnp.float16, "tf32": jnp.float32}[ins.atype]
    A = jnp.asarray(rng.standard_normal((M, K)), adt)
    B = jnp.asarray(rng.standard_normal((K, N)), adt)
    lo, hi = c_exp
    sign = np.where(rng.random((M, N)) < 0.5, -1.0, 1.0)
    C = (sign * (1 + rng.random((M, N))) * 2.0 ** rng.integers(lo, hi, (M, N))).astype(c_dtype)
    C[0, :4] = [np.inf, -np.inf, 0.0, -0.0]
    C[1, 0] = np.nan
    return A, B, C


# ---- scale-input-d ------------------------------------------------------------------
@pytest.mark.every_case  # cheap; each case is another rule
@pytest.mark.parametrize(
    "text,c_dtype",
    [
        (F16_F32, np.float32),
        (f"{HEAD}.kind::f16.m64n8k16.f16.f16.f16", np.float16),
        (f"{HEAD}.kind::tf32.m128n8k8.f32.tf32.tf32", np.float32),
    ],
)
def test_scale_input_d_is_the_plain_instruction_on_the_scaled_c(text, c_dtype):
    ins = jaxmma.instruction(text)
    run = jax.jit(ins.mma, static_argnames="scale_input_d")
    c_exp = (1, 14) if c_dtype == np.float16 else (-8, 8)  # C * 2**-15 stays normal
    A, B, C = _operands(ins, seed=1, c_dtype=c_dtype, c_exp=c_exp)
    for s in (1, 7, 15):
        scaled = (C.astype(np.float64) * 2.0**-s).astype(c_dtype)  # exact: normal range
        assert np.array_equal(
            scaled.astype(np.float64), C.astype(np.float64) * 2.0**-s, equal_nan=True
        )
        want = _bits(run(A, B, jnp.asarray(scaled)))
        got = _bits(run(A, B, jnp.asarray(C), scale_input_d=s))
        assert np.array_equal(got, want), (s, np.argwhere(got != want)[:3])
    assert np.array_equal(_bits(run(A, B, jnp.asarray(C), scale_input_d=0)), _bits(run(A, B, C)))


def test_scale_input_d_keeps_c_exact_below_the_normal_range():
    """Zero products: D is C * 2**-s truncated once to f32 (the model keeps the scaled C
    exact). A C scaled into f32 first (ldexp, to nearest) would differ in the last bit."""
    ins = jaxmma.instruction(f"{HEAD}.kind::f16.m64n8k16.f32.f16.f16")
    rng = np.random.default_rng(3)
    sig = rng.integers(2**23, 2**24, (64, 8)) | 0xFF  # low bits set: rounding shows
    sign = np.where(rng.random((64, 8)) < 0.5, -1.0, 1.0)
    exps = rng.integers(-126, -110, (64, 8))
    C = (sign * sig * 2.0 ** (exps - 23)).astype(np.float32)
    A = jnp.zeros((64, 16), jnp.float16)
    B = jnp.ones((16, 8), jnp.float16)
    s = 15
    exact = C.astype(np.float64) * 2.0**-s
    want = (np.trunc(exact / 2.0**-149) * 2.0**-149).astype(np.float32)  # toward zero
    got = jax.jit(functools.partial(ins.mma, scale_input_d=s))(A, B, C)
    assert np.array_equal(_bits(got), _bits(want))
    assert np.any(_bits(want) != _bits(np.ldexp(C, -s)))  # the test tells the two apart


def test_scale_input_d_truncates_the_scaled_c_with_the_products():
    """One product 1.0 and C * 2**-s: terms below 2**-25 (F = 25) are cut, then the sum
    is truncated to f32 (NumPy's exact arithmetic on float64)."""
    ins = jaxmma.instruction(f"{HEAD}.kind::f16.m64n8k16.f32.bf16.bf16")
    rng = np.random.default_rng(4)
    A = jnp.zeros((64, 16), jnp.bfloat16).at[:, 0].set(1)
    B = jnp.zeros((16, 8), jnp.bfloat16).at[0].set(1)
    C = (rng.random((64, 8)) * 2.0 ** rng.integers(-12, 0, (64, 8))).astype(np.float32)
    for s in (3, 9):
        c = C.astype(np.float64) * 2.0**-s
        total = 1.0 + np.floor(c / 2.0**-25) * 2.0**-25  # C's bits under 2**-25 cut
        want = (np.floor(total / 2.0**-23) * 2.0**-23).astype(np.float32)  # RZ to f32
        got = ins.mma(A, B, C, scale_input_d=s)
        assert np.array_equal(_bits(got), _bits(want)), s


@pytest.mark.full  # the sparse form takes scale_input_d as the dense ones above do
def test_scale_input_d_sparse():
    ins = jaxmma.instruction("tcgen05.mma.sp.cta_group::1.kind::f16.m128n8k32.f32.bf16.bf16")
    rng = np.random.default_rng(5)
    A = rng.standard_normal((128, 32)) * np.tile([1, 0, 1, 0], 8)
    A = jnp.asarray(A, jnp.bfloat16)
    B = jnp.asarray(rng.standard_normal((32, 8)), jnp.bfloat16)
    C = (rng.standard_normal((128, 8)) * 4).astype(np.float32)
    want = ins.mma(A, B, jnp.asarray(C * np.float32(2.0**-5)))
    assert np.array_equal(_bits(ins.mma(A, B, C, scale_input_d=5)), _bits(want))
    want = ins.mma(A, B, jnp.asarray(C * np.float32(2.0**-5)), model="exact")
    got = ins.mma(A, B, C, scale_input_d=5, model="exact")
    assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.every_case  # cheap; each case is another rule
@pytest.mark.parametrize(
    "value,text,err,needle",
    [
        (16, F16_F32, ValueError, r"scale_input_d: expected an int 0\.\.15, got 16"),
        (-1, F16_F32, ValueError, r"scale_input_d: expected an int 0\.\.15, got -1"),
        (2.0, F16_F32, ValueError, r"scale_input_d: expected an int 0\.\.15, got 2\.0"),
        (True, F16_F32, ValueError, "scale_input_d: expected an int"),
        (3, f"{HEAD}.kind::f8f6f4.m128n8k32.f32.e4m3.e4m3", ValueError, "f8f6f4.*f16 and"),
        (1, f"{HEAD}.kind::i8.m128n16k32.s32.s8.s8", ValueError, "scale_input_d: 1 is not"),
        (
            2,
            f"{HEAD}.kind::mxf8f6f4.block_scale.block32.m128n8k32.f32.e4m3.e4m3.ue8m0",
            ValueError,
            "mxf8f6f4",
        ),
        (jnp.int32(3), F16_F32, TypeError, "scale_input_d: expected a Python int"),
    ],
)
def test_scale_input_d_errors(value, text, err, needle):
    ins = jaxmma.instruction(text)
    A = jnp.zeros((ins.m, ins.k), jnp.uint32)
    B = jnp.zeros((ins.k, ins.n), jnp.uint32)
    C = jnp.zeros((ins.m, ins.n), jnp.uint32)
    kw = {}
    if ins.stype:
        kw = {
            "scale_a": jnp.zeros((ins.m, 1), jnp.uint8),
            "scale_b": jnp.zeros((1, ins.n), jnp.uint8),
        }
    with pytest.raises(err, match=needle):
        ins.mma(A, B, C, scale_input_d=value, **kw)


def test_scale_input_d_needs_the_sm_100_family():
    A = jnp.zeros((128, 16), jnp.bfloat16)
    B = jnp.zeros((16, 16), jnp.bfloat16)
    C = jnp.ones((128, 16), jnp.float32)
    ok = jaxmma.instruction(F16_F32, arch="sm_103a")
    assert float(ok.mma(A, B, C, scale_input_d=1)[0, 0]) == 0.5
    ins = jaxmma.instruction(F16_F32, arch="sm_110a")
    ins.mma(A, B, C, scale_input_d=0)
    with pytest.raises(ValueError, match="scale_input_d: 1 needs sm_100a .* not sm_110a"):
        ins.mma(A, B, C, scale_input_d=1)


def test_scale_input_d_traced_is_refused():
    ins = jaxmma.instruction(F16_F32)
    A, B, C = _operands(ins, seed=6)
    with pytest.raises(TypeError, match="scale_input_d: .*static_argnames"):
        jax.jit(ins.mma)(A, B, C, scale_input_d=2)
    with pytest.raises(TypeError, match="scale_input_d"):
        jax.jit(lambda s: ins.mma(A, B, C, scale_input_d=s))(2)


def test_scale_input_d_vmap_and_grad():
    ins = jaxmma.instruction(F16_F32)
    A, B, C = _operands(ins, seed=7, c_exp=(-4, 4))
    C = np.nan_to_num(C, posinf=1.0, neginf=-1.0)
    Cs = np.stack([C, -C, 2 * C])
    f = functools.partial(ins.mma, scale_input_d=4)
    mapped = jax.jit(jax.vmap(f, in_axes=(None, None, 0)))(A, B, Cs)
    for i in range(3):
        assert np.array_equal(_bits(mapped[i]), _bits(f(A, B, Cs[i])))
    gA, gC = jax.grad(lambda a, c: jnp.sum(f(a, B, c)), argnums=(0, 1))(A, jnp.asarray(C))
    assert np.array_equal(np.asarray(gC), np.full(C.shape, 2.0**-4, np.float32))
    want_a = np.ones((128, 16), np.float32) @ np.asarray(B, np.float32).T  # unchanged
    assert np.array_equal(
        np.asarray(gA, np.float32), want_a.astype(jnp.bfloat16).astype(np.float32)
    )


# ---- disable-output-lane --------------------------------------------------------------
def _lanes_of_rows(m, d_lane):
    """Row -> Tensor Memory lane, written out from the layouts (Layout D; Layout F:
    16 rows in each 32-lane slab, from lane d_lane of the slab)."""
    lanes = []
    if m == 128:
        for r in range(128):
            lanes.append(r)
    else:
        for slab in range(4):
            for i in range(16):
                lanes.append(32 * slab + d_lane + i)
    return lanes


def _disabled(words, m, d_lane=0):
    return np.array(
        [(int(words[lane // 32]) >> (lane % 32)) & 1 for lane in _lanes_of_rows(m, d_lane)], bool
    )


def _check_rows(got, plain, C, rows):
    got, plain, C = _bits(got), _bits(plain), _bits(C)
    assert np.array_equal(got[rows], C[rows])
    assert np.array_equal(got[~rows], plain[~rows])


def _c_with_payloads(C):
    bits = C.view(np.uint32).copy()
    bits[2, :3] = [0x7FC00123, 0xFFBADBAD, 0x80000000]  # NaN payloads, -0
    return bits.view(np.float32)


@pytest.mark.every_case  # cheap; each case is another rule
@pytest.mark.parametrize(
    "text,d_lane",
    [
        (F16_F32, 0),
        (f"{HEAD}.kind::f16.m64n16k16.f32.bf16.bf16", 0),
        (f"{HEAD}.kind::f16.m64n16k16.f32.bf16.bf16", 16),
    ],
)
def test_disabled_rows_keep_c_bits(text, d_lane):
    ins = jaxmma.instruction(text)
    A, B, C = _operands(ins, seed=8)
    C = _c_with_payloads(C)
    rng = np.random.default_rng(9)
    words = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    words[0] |= 0b111  # rows 0-2 (C's specials) disabled
    run = jax.jit(ins.mma, static_argnames="d_lane")
    plain = run(A, B, C)
    got = run(A, B, C, disable_output_lane=words, d_lane=d_lane)
    rows = _disabled(words, ins.m, d_lane)
    assert 0 < rows.sum() < ins.m
    _check_rows(got, plain, C, rows)
    got = ins.mma(A, B, C, disable_output_lane=[int(w) for w in words], d_lane=d_lane)  # eager
    _check_rows(got, plain, C, rows)


def test_m64_lanes_outside_d_change_nothing():
    ins = jaxmma.instruction(f"{HEAD}.kind::f16.m64n16k16.f32.bf16.bf16")
    A, B, C = _operands(ins, seed=10)
    plain = _bits(ins.mma(A, B, C))
    upper = [0xFFFF0000] * 4  # lanes 16-31 of every slab: not D's with d_lane = 0
    assert np.array_equal(_bits(ins.mma(A, B, C, disable_output_lane=upper)), plain)
    lower = [0x0000FFFF] * 4
    assert np.array_equal(_bits(ins.mma(A, B, C, disable_output_lane=lower, d_lane=16)), plain)
    assert np.array_equal(_bits(ins.mma(A, B, C, disable_output_lane=upper, d_lane=16)), _bits(C))


def test_disabled_rows_without_input_d_and_i8_and_sparse():
    ins = jaxmma.instruction(F16_F32)
    A, B, C = _operands(ins, seed=11)
    words = np.array([0, 0xF0F0F0F0, 0, 1], np.uint32)
    rows = _disabled(words, 128)
    got = ins.mma(A, B, C, enable_input_d=False, disable_output_lane=words)
    _check_rows(got, ins.mma(A, B, C, enable_input_d=False), C, rows)

    i8 = jaxmma.instruction(f"{HEAD}.kind::i8.m128n16k32.s32.s8.u8.satfinite")
    rng = np.random.default_rng(12)
    Ai = jnp.asarray(rng.integers(-128, 128, (128, 32)), jnp.int8)
    Bi = jnp.asarray(rng.integers(0, 256, (32, 16)), jnp.uint8)
    Ci = jnp.asarray(rng.integers(-(2**31), 2**31, (128, 16)), jnp.int32)
    got = i8.mma(Ai, Bi, Ci, disable_output_lane=words)
    _check_rows(got, i8.mma(Ai, Bi, Ci), Ci, rows)

    sp = jaxmma.instruction("tcgen05.mma.sp.cta_group::1.kind::f16.m128n16k32.f32.bf16.bf16")
    As = jnp.asarray(rng.standard_normal((128, 32)) * np.tile([0, 1, 1, 0], 8), jnp.bfloat16)
    Bs = jnp.asarray(rng.standard_normal((32, 16)), jnp.bfloat16)
    got = sp.mma(As, Bs, C, disable_output_lane=words, scale_input_d=2)
    _check_rows(got, sp.mma(As, Bs, C, scale_input_d=2), C, rows)


def test_disable_output_lane_jit_vmap_grad():
    ins = jaxmma.instruction(F16_F32)
    A, B, C = _operands(ins, seed=13, c_exp=(-4, 4))
    C = np.nan_to_num(C, posinf=1.0, neginf=-1.0)
    masks = np.array([[1, 0, 0, 0], [0, 2**31, 0, 0], [0xFFFFFFFF, 0, 0, 0x80000001]], np.uint32)
    plain = ins.mma(A, B, C)
    mapped = jax.jit(jax.vmap(lambda m: ins.mma(A, B, C, disable_output_lane=m)))(masks)
    for i in range(3):
        _check_rows(mapped[i], plain, C, _disabled(masks[i], 128))

    m = masks[2]
    rows = _disabled(m, 128)

    def loss(a, c):
        return jnp.sum(ins.mma(a, B, c, disable_output_lane=m, scale_input_d=3))

    gA, gC = jax.jit(jax.grad(loss, argnums=(0, 1)))(A, jnp.asarray(C))
    want_c = np.where(rows[:, None], 1.0, 2.0**-3) * np.ones(C.shape)
    assert np.array_equal(np.asarray(gC), want_c.astype(np.float32))
    ga = np.asarray(gA, np.float32)
    assert np.all(ga[rows] == 0) and np.all(ga[~rows] != 0)


@pytest.mark.every_case  # cheap; each case is another rule
@pytest.mark.parametrize(
    "text,mask,kw,err,needle",
    [
        (F16_F32, [0, 0, 0], {}, ValueError, r"disable_output_lane: expected 4 words"),
        (F16_F32, np.zeros(4, np.float32), {}, TypeError, "disable_output_lane: expected 4"),
        (F16_F32, np.zeros(4, bool), {}, TypeError, "disable_output_lane"),
        (F16_F32, [0, 0, 0, 2**32], {}, ValueError, "disable_output_lane: words are 32-bit"),
        (F16_F32, np.array([0, -1, 0, 0], np.int64), {}, ValueError, "words are 32-bit"),
        (F16_F32, [0, 0, 0, 0], {"d_lane": 16}, ValueError, "d_lane: expected 0 for M = 128"),
        (F16_F32, None, {"d_lane": 16}, ValueError, "d_lane: .*without disable_output_lane"),
        (
            f"{HEAD}.kind::f16.m64n8k16.f32.bf16.bf16",
            [0] * 4,
            {"d_lane": 8},
            ValueError,
            "d_lane: expected 0 or 16",
        ),
        (
            "tcgen05.mma.cta_group::2.kind::f16.m256n16k16.f32.bf16.bf16",
            [0] * 8,
            {},
            ValueError,
            r"disable_output_lane: \.cta_group::2 .* not emulated",
        ),
        (
            f"{HEAD}.kind::mxf8f6f4.block_scale.block32.m128n8k32.f32.e4m3.e4m3.ue8m0",
            [0] * 4,
            {},
            ValueError,
            "disable_output_lane: not an operand of .kind::mxf8f6f4",
        ),
    ],
)
def test_disable_output_lane_errors(text, mask, kw, err, needle):
    ins = jaxmma.instruction(text)
    A = jnp.zeros((ins.m, ins.k), jnp.uint32)
    B = jnp.zeros((ins.k, ins.n), jnp.uint32)
    C = jnp.zeros((ins.m, ins.n), jnp.uint32)
    if ins.stype:
        kw = {**kw, "scale_a": jnp.zeros((ins.m, 1), jnp.uint8)}
        kw["scale_b"] = jnp.zeros((1, ins.n), jnp.uint8)
    with pytest.raises(err, match=needle):
        ins.mma(A, B, C, disable_output_lane=mask, **kw)


def test_disable_output_lane_needs_the_instructions_m():
    ins = jaxmma.instruction(F16_F32)
    A = jnp.zeros((64, 16), jnp.bfloat16)
    B = jnp.zeros((16, 16), jnp.bfloat16)
    C = jnp.zeros((64, 16), jnp.float32)
    ins.mma(A, B, C)  # any M without a mask
    with pytest.raises(ValueError, match="disable_output_lane: .*128 rows.*M = 64"):
        ins.mma(A, B, C, disable_output_lane=[1, 0, 0, 0])
