"""The native executor: which forms and devices it takes, its errors, and its kernel in
Pallas interpret mode against the emulation (on sums that are exact in any order, the
only case where the host's own dot gives the model's bits; the GPU check of every bit is
benchmarks/native_gpu.py)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma import gemm
from jaxmma.gemm import _executors, _native, _options, _pipeline

WGMMA_BF16 = "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"
WGMMA_F16 = "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
WGMMA_E4M3 = "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"
WGMMA_E5M2_E4M3 = "wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e4m3"
MMA_E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
MMA_E5M2 = "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32"
WGMMA_TF32 = "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"
MMA_TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


@pytest.mark.parametrize(
    "text, arch, covered",
    [
        (WGMMA_BF16, "sm_90a", True),
        (WGMMA_F16, "sm_90a", True),
        (MMA_BF16, "sm_90", True),
        ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "sm_90", True),
        (MMA_BF16, "sm_80", False),  # other numerics than sm_90's
        ("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32", "sm_90", False),  # block of 8
        ("wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16", "sm_90a", False),  # f16 acc
        (WGMMA_E4M3, "sm_90a", True),
        ("wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e4m3", "sm_90a", True),  # mixed
        ("wgmma.mma_async.sync.aligned.m64n64k32.f16.e4m3.e4m3", "sm_90a", False),  # f16 acc
        (MMA_E4M3, "sm_90", True),  # two f16 MMAs and an FADD per step
        ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_90", True),
        ("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32", "sm_90", False),  # 8 + 8
        (MMA_E4M3, "sm_89", False),  # Ada's fp8 numerics
        (WGMMA_TF32, "sm_90a", True),
        (MMA_TF32, "sm_90", True),
        ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", "sm_90", False),  # block of 4
        ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", "sm_90", False),
        ("mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32", "sm_90", False),
    ],
)
def test_which_forms_run_natively(text, arch, covered):
    reason = _native.why_not(jaxmma.instruction(text, arch=arch))
    assert (reason is None) == covered, reason
    if not covered:
        assert isinstance(reason, str) and len(reason) > 20


def test_auto_emulates_off_an_sm90_gpu():
    if jax.default_backend() == "gpu":
        pytest.skip("the host has a GPU")
    ins = jaxmma.instruction(WGMMA_BF16, arch="sm_90a")
    assert "not a GPU" in _native.why_not_here(ins)
    for executor in ("auto", "emulate"):
        assert gemm.config(ins, executor=executor).native is False
    assert "not a GPU" in _native.device_reason()


@pytest.mark.parametrize("jit", [False, True])
def test_native_refuses_where_it_cannot_give_the_bits(jit):
    A = jnp.ones((16, 32), jnp.float8_e4m3fn)
    B = jnp.ones((32, 8), jnp.float8_e4m3fn)
    text = "wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3"

    def f(a, b):
        return jaxmma.matmul(a, b, instruction=text, arch="sm_90a", executor="native")

    with pytest.raises(ValueError, match=r"executor='native'.*e4m3.*accumulators \.f16"):
        (jax.jit(f) if jit else f)(A, B)


def test_native_names_the_device_it_lacks():
    if jax.default_backend() == "gpu":
        pytest.skip("the host has a GPU")
    A = jnp.ones((16, 32), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"executor='native'.*e4m3.*not a GPU"):
        jaxmma.matmul(A, A.T, instruction=WGMMA_E4M3, arch="sm_90a", executor="native")


def test_mma_sync_fp8_steps_feed_each_f16_mma_its_own_columns():
    # the compiler's two f16 MMAs per k32 step take k % 4 in {0, 1}, then {2, 3}
    perm = _native._interleave(64, 32)
    first = [k for k in range(32) if k % 4 < 2]
    assert perm[:16].tolist() == first
    assert perm[16:32].tolist() == [k for k in range(32) if k % 4 >= 2]
    assert perm[32:48].tolist() == [32 + k for k in first]
    assert sorted(perm.tolist()) == list(range(64))


@pytest.mark.parametrize("bad", ["gpu", "", None, 1])
def test_unknown_executor_is_refused(bad):
    A = jnp.ones((16, 16), jnp.bfloat16)
    with pytest.raises(ValueError, match="executor: expected one of auto, native, emulate"):
        jaxmma.matmul(A, A, instruction=MMA_BF16, arch="sm_90", executor=bad)


def test_dot_general_passes_the_executor_on():
    x = jnp.ones((3, 32), jnp.bfloat16)
    with pytest.raises(ValueError, match="executor"):
        jaxmma.dot_general(
            x, x.T, (((1,), (0,)), ((), ())), instruction=MMA_BF16, arch="sm_90", executor="x"
        )


def _bits16(x):
    return jax.lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)


def _bits(x):
    if x.dtype.itemsize == 4:
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    u = jnp.uint8 if x.dtype.itemsize == 1 else jnp.uint16
    return jax.lax.bitcast_convert_type(x, u).astype(jnp.uint32)


@pytest.mark.parametrize(
    "text, arch, P, shapes",
    [
        (WGMMA_BF16, "sm_90a", None, ((2, 70, 200), (2, 200, 50))),
        (WGMMA_BF16, "sm_90a", None, ((24, 48), (48, 40))),  # K shorter than one K tile
        (WGMMA_F16, "sm_90a", 3, ((40, 272), (272, 24))),
        (MMA_BF16, "sm_90", 2, ((1, 33, 48), (3, 48, 65))),
        (MMA_BF16, "sm_90", 1, ((20, 256), (256, 40))),  # four groups per iteration
        (MMA_BF16, "sm_90", 20, ((20, 700), (700, 8))),  # long groups: an inner loop
        (WGMMA_E4M3, "sm_90a", None, ((2, 40, 200), (200, 72))),
        (WGMMA_E5M2_E4M3, "sm_90a", 4, ((40, 600), (600, 24))),
        (MMA_E4M3, "sm_90", None, ((33, 200), (200, 40))),
        (MMA_E5M2, "sm_90", 3, ((2, 20, 300), (2, 300, 17))),
        (WGMMA_TF32, "sm_90a", None, ((40, 100), (100, 36))),
        (MMA_TF32, "sm_90", 2, ((20, 90), (90, 40))),
    ],
)
def test_kernel_interpreted_matches_the_emulation_on_exact_sums(text, arch, P, shapes):
    rng = np.random.default_rng(3)
    ins = jaxmma.instruction(text, arch=arch)
    (sa, sb) = shapes
    A = jnp.asarray(rng.integers(-4, 5, sa), _native._DTYPES[ins.atype])
    B = jnp.asarray(rng.integers(-4, 5, sb), _native._DTYPES[ins.btype])
    if ins.atype == "tf32":  # low register bits the instruction ignores
        A = jax.lax.bitcast_convert_type(_bits(A) | 0x1FFF, jnp.float32)
    lead = np.broadcast_shapes(sa[:-2], sb[:-2])
    C = jnp.asarray(rng.integers(-9, 10, lead + (sa[-2], sb[-1])), jnp.float32)
    C = C.at[..., 0, 0].set(-0.0)
    cfg = gemm.config(text, arch, P)
    got = _native.gemm_bits(
        cfg, _bits(A), _bits(B), jax.lax.bitcast_convert_type(C, jnp.uint32), interpret=True
    )
    want = jaxmma.matmul(A, B, C, instruction=text, arch=arch, promote_every=P, executor="emulate")
    np.testing.assert_array_equal(
        np.asarray(got), np.asarray(jax.lax.bitcast_convert_type(want, jnp.uint32))
    )
    assert float(jnp.max(jnp.abs(want))) > 50  # the sums are not trivial


def _dot_order(sch, P):
    """The schedule's dots as (first step, steps, group) in the order the kernel runs
    them, written out from its fields."""
    out, step = [], 0
    if P is None:
        for _ in range(sch.loop):
            out.append((step, sch.most, 0))
            step += sch.most
        for n in sch.tail:
            out.append((step, n, 0))
            step += n
        return out
    g = 0
    for _ in range(sch.loop):
        for _ in range(sch.per_iter):
            for n in [sch.most] * sch.inner + list(sch.group):
                out.append((step, n, g))
                step += n
            g += 1
    for n in sch.tail:
        out.append((step, n, g))
        step += n
    return out


@pytest.mark.parametrize(
    "steps, P",
    [(256, None), (13, None), (1, None), (256, 4), (12, 4), (10, 4), (8, 3), (16, 1),
     (257, 2), (44, 20), (5, 9), (100, 7)],
)  # fmt: skip
def test_the_schedule_runs_each_step_once_in_increasing_k(steps, P):
    most = 4
    sch = _native.schedule(steps, P, 16, most * 16)
    order = _dot_order(sch, P)
    assert [s for s, _, _ in order] == list(np.cumsum([0] + [n for _, n, _ in order])[:-1])
    assert sum(n for _, n, _ in order) == steps  # no extra all-zero step
    assert all(n in (1, 2, 4) for _, n, _ in order)  # power-of-two block shapes
    if P is not None:  # groups of min(P, steps) steps, the last one shorter
        Pe = min(P, steps)
        assert [g for _, _, g in order] == [s // Pe for s, _, _ in order]
        assert all(s // Pe == (s + n - 1) // Pe for s, n, _ in order)


@pytest.mark.parametrize(
    "P, options",
    [
        (2, dict(split_k=4, split_rule="cutlass", k_tile=32, split_reduce="halving")),
        pytest.param(
            None,
            dict(epilogue="f32", alpha=0.5, beta=-2.0, scale_a="block", scale_b="block"),
            marks=pytest.mark.full,  # about 40 s on 2 cores
        ),
    ],
)
def test_kernel_options_chain_through_the_native_kernel(P, options, monkeypatch):
    # the library options run around the chain (split slices, epilogue, scales), so the
    # native kernel serves them as it serves a plain GEMM: interpreted, exact sums
    rng = np.random.default_rng(5)
    A = jnp.asarray(rng.integers(-4, 5, (2, 24, 300)), jnp.bfloat16)
    B = jnp.asarray(rng.integers(-4, 5, (300, 40)), jnp.bfloat16)
    C = jnp.asarray(rng.integers(-9, 10, (24, 40)), jnp.float32).at[0, 0].set(-0.0)
    kw = dict(options)
    if kw.pop("scale_a", None):
        kw.pop("scale_b")
        sa = jnp.asarray(np.exp2(rng.integers(-3, 4, (24, 3))), jnp.float32)
        sb = jnp.asarray(np.exp2(rng.integers(-3, 4, (3, 1))), jnp.float32)
    else:
        sa = sb = None
    ins = jaxmma.instruction(MMA_BF16, arch="sm_90")
    opts = _options.kernel_options(ins, **kw)
    cfg = dataclasses.replace(gemm.config(MMA_BF16, "sm_90", P), native=True)
    calls = []

    def counted(ex):
        class Counted(type(ex)):
            def chain(self, *args):
                calls.append(self.name)
                return super().chain(*args)

        return Counted()

    monkeypatch.setattr(_executors, "EXECUTORS", tuple(map(counted, _executors.EXECUTORS)))
    _pipeline._forward_jit.clear_cache()  # traced again, through the counting executors
    got = _pipeline.matmul(cfg, opts, A, B, C, sa, sb)
    ran = list(calls)
    want = jaxmma.matmul(
        A, B, C, instruction=MMA_BF16, arch="sm_90", promote_every=P, executor="emulate",
        scale_a=sa, scale_b=sb, **kw,
    )  # fmt: skip
    if sa is None:
        assert ran and set(ran) == {"native"}  # every chain ran on the native kernel
    else:
        assert not ran  # the block recipe: groups and scales in one kernel (block_bits)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
    assert float(jnp.max(jnp.abs(want))) > 50


@pytest.mark.parametrize("text, arch", [(WGMMA_E4M3, "sm_90a"), (MMA_E4M3, "sm_90")])
def test_block_recipe_in_one_kernel_matches_the_emulation(text, arch):
    # DeepSeek-V3 block scales: per 128-wide group a chain from +0, FMUL of the scales,
    # one FFMA into the total (K = 300 pads the last group, batch dimensions broadcast)
    rng = np.random.default_rng(5)
    A = jnp.asarray(rng.integers(-4, 5, (2, 40, 300)), jnp.float8_e4m3fn)
    B = jnp.asarray(rng.integers(-4, 5, (300, 136)), jnp.float8_e4m3fn)
    sa = jnp.asarray(np.exp2(rng.integers(-9, 9, (2, 40, 3))) * 1.25, jnp.float32)
    sb = jnp.asarray(np.exp2(rng.integers(-9, 9, (3, 2))) * 0.75, jnp.float32)
    got = _native.block_bits(gemm.config(text, arch), _bits(A), _bits(B), sa, sb, interpret=True)
    want = jaxmma.matmul(
        A, B, instruction=text, arch=arch, scale_a=sa, scale_b=sb, executor="emulate"
    )
    np.testing.assert_array_equal(
        np.asarray(got), np.asarray(jax.lax.bitcast_convert_type(want, jnp.uint32))
    )
    # the scale products are rounded: one separate multiply and add per group differs
    assert len(np.unique(np.asarray(got))) > 1000


@pytest.mark.parametrize(
    "text, arch, P, kind, with_c",
    [
        (WGMMA_E4M3, "sm_90a", None, "tensor", False),
        (WGMMA_E5M2_E4M3, "sm_90a", 4, "row", True),  # C in the epilogue, bf16 out
        (MMA_E4M3, "sm_90", None, "row", False),
    ],
)
def test_scale_recipes_multiply_in_the_kernel_as_the_emulation_after_it(
    text, arch, P, kind, with_c
):
    # per-tensor (one FMUL by f32(sa * sb)) and row-wise (B's factor, then A's) applied in
    # the kernel: scales that round, reach subnormals and overflow, and NaN / Inf operands
    rng = np.random.default_rng(11)
    A = jnp.asarray(rng.integers(-4, 5, (2, 40, 200)), jnp.float8_e4m3fn)
    A = A.at[0, 1, 3].set(jnp.nan).at[1, 2, 5].set(-448.0)
    B = jnp.asarray(rng.integers(-4, 5, (200, 72)), jnp.float8_e4m3fn)
    if kind == "tensor":
        sa, sb = jnp.float32(2.0**-70 * 1.3), jnp.float32(2.0**-71 * 0.7)
    else:
        e = rng.integers(-140, 120, (40, 1))
        sa = jnp.asarray(np.exp2(e.astype(np.float64)) * 1.37, jnp.float32)
        sb = jnp.asarray(np.exp2(rng.integers(-20, 20, (1, 72)).astype(float)) * 0.91, jnp.float32)
    C = jnp.asarray(rng.integers(-9, 10, (40, 72)), jnp.float32).at[0, 0].set(-0.0)
    C = C.at[3, 4].set(jnp.inf) if with_c else None
    kw = dict(epilogue="f32", beta=0.5, out_dtype=jnp.bfloat16) if with_c else {}
    ins = jaxmma.instruction(text, arch=arch)
    opts = _options.kernel_options(ins, **kw)
    cfg = dataclasses.replace(gemm.config(text, arch, P), native=True)
    got = _pipeline.matmul(cfg, opts, A, B, C, sa, sb)
    want = jaxmma.matmul(
        A, B, C, instruction=text, arch=arch, promote_every=P, executor="emulate",
        scale_a=sa, scale_b=sb, **kw,
    )  # fmt: skip
    u = np.uint16 if with_c else np.uint32
    g, w = np.asarray(got).view(u), np.asarray(want).view(u)
    np.testing.assert_array_equal(g, w)
    w = np.asarray(want, np.float32)
    assert np.isnan(w).any() and (w == 0).any()
    tiny = (w != 0) & (np.abs(w) < np.finfo(np.float32).tiny)
    assert tiny.any() or kind == "tensor" or with_c  # subnormal results of the row factors
