"""``jaxmma.GemmOptions``: the options object gives the keyword call's bits, is a ``jit``
static argument, and is validated when built, each error naming the field."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
ARCH = "sm_90"


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def _operands(K=64, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((16, K)).astype(np.float32)
    B = rng.standard_normal((K, 8)).astype(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    return A, B, C


#: (instruction, keywords): a plain chain, promotion, split-K with a reduce order, an
#: epilogue with a 16-bit output, tf32 inputs rounded to nearest under the CUTLASS rule
FORMS = [
    (BF16, {}),
    (BF16, dict(promote_every=2)),
    (BF16, dict(split_k=2, split_reduce="halving", epilogue="f32", alpha=0.5, beta=-1.5)),
    (BF16, dict(epilogue="rounded", out_dtype=jnp.bfloat16)),
    (TF32, dict(input_rounding="rn", split_k=2, k_tile=16, split_rule="cutlass")),
]


@pytest.mark.parametrize(("text", "kw"), FORMS)
def test_options_give_the_keyword_bits(text, kw):
    A, B, C = _operands()
    want = jaxmma.matmul(A, B, C, instruction=text, arch=ARCH, **kw)
    opts = jaxmma.GemmOptions(text, arch=ARCH, **kw)
    got = jaxmma.matmul(A, B, C, options=opts)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_options_under_jit_as_a_static_argument():
    A, B, _ = _operands(K=32)
    opts = jaxmma.GemmOptions(TF32, arch=ARCH, input_rounding="rna", split_k=2)
    f = jax.jit(lambda a, b, o: jaxmma.matmul(a, b, options=o), static_argnums=2)
    want = jaxmma.matmul(A, B, instruction=TF32, arch=ARCH, input_rounding="rna", split_k=2)
    np.testing.assert_array_equal(_bits(f(A, B, opts)), _bits(want))
    # an equal object built anew hits the same compilation
    f(A, B, jaxmma.GemmOptions(TF32, arch=ARCH, input_rounding="rna", split_k=2))
    assert f._cache_size() == 1


def test_dot_general_takes_options():
    A, B, _ = _operands(K=32)
    x, w = A.reshape(2, 8, 32), B
    dn = (((2,), (0,)), ((), ()))
    opts = jaxmma.GemmOptions(TF32, arch=ARCH, input_rounding="rna", split_k=2)
    want = jaxmma.dot_general(x, w, dn, instruction=TF32, arch=ARCH, rounding="rna", split_k=2)
    got = jaxmma.dot_general(x, w, dn, options=opts)
    assert got.shape == (2, 8, 8)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_hash_equality_and_replace():
    a = jaxmma.GemmOptions(BF16, arch=ARCH, split_k=2)
    b = jaxmma.GemmOptions(instruction=BF16, arch=ARCH, split_k=2)
    assert a == b and hash(a) == hash(b)
    c = dataclasses.replace(a, split_k=3)
    assert c != a and c.split_k == 3 and a.split_k == 2
    assert dataclasses.replace(c, split_k=2) == a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.split_k = 4
    with pytest.raises(TypeError):  # keyword-only after the instruction
        jaxmma.GemmOptions(BF16, ARCH)
    # replace validates as construction does
    with pytest.raises(ValueError, match="split_reduce"):
        dataclasses.replace(c, split_reduce="halving")


def test_a_keyword_beside_options():
    A, B, _ = _operands(K=32)
    opts = jaxmma.GemmOptions(TF32, arch=ARCH, input_rounding="rna", split_k=2)
    with pytest.raises(ValueError, match=r"options, split_k: options.split_k=2 and split_k=4"):
        jaxmma.matmul(A, B, options=opts, split_k=4)
    with pytest.raises(ValueError, match=r"options, arch: .*'sm_90'.*'sm_80'"):
        jaxmma.matmul(A, B, options=opts, arch="sm_80")
    with pytest.raises(ValueError, match=r"options, rounding: options.input_rounding='rna'"):
        jaxmma.matmul(A, B, options=opts, rounding="rz")
    with pytest.raises(ValueError, match=r"options, instruction"):
        jaxmma.dot_general(A, B, (((1,), (0,)), ((), ())), options=opts, instruction=BF16)
    # agreeing keywords and keywords at their defaults are no conflict: the same bits
    same = jaxmma.matmul(A, B, options=opts, split_k=2, arch=ARCH, executor="auto")
    np.testing.assert_array_equal(_bits(same), _bits(jaxmma.matmul(A, B, options=opts)))


def test_options_or_instruction_is_required():
    A, B, _ = _operands()
    with pytest.raises(TypeError, match="instruction: required"):
        jaxmma.matmul(A, B)
    with pytest.raises(TypeError, match="options: expected None or a jaxmma.GemmOptions"):
        jaxmma.matmul(A, B, options={"instruction": BF16})


@pytest.mark.parametrize(
    ("kw", "error", "field"),
    [
        (dict(arch="sm_70"), ValueError, "arch"),
        (dict(promote_every=0), ValueError, "promote_every"),
        (dict(executor="fast"), ValueError, "executor"),
        (dict(grad_instruction="mma.sync"), ValueError, "grad_instruction"),
        (dict(split_k=2.0), TypeError, "split_k"),
        (dict(k_tile=12), ValueError, "k_tile"),
        (dict(split_rule="cudnn"), ValueError, "split_rule"),
        (dict(split_k=2, split_reduce=((0, 1), 2)), ValueError, "split_reduce"),
        (dict(input_rounding="rm"), ValueError, "input_rounding"),
        (dict(epilogue="bias"), ValueError, "epilogue"),
        (dict(alpha=2.0), ValueError, "alpha"),
        (dict(out_dtype=jnp.int8), ValueError, "out_dtype"),
        (dict(convert_inputs="f32"), ValueError, "convert_inputs"),
        (dict(quantize=abs), ValueError, "quantize"),
        (dict(check=True), ValueError, "check"),
        (dict(split_reduce=[0]), ValueError, "split_reduce"),
    ],
)
@pytest.mark.every_case
def test_an_invalid_field_is_refused_at_construction(kw, error, field):
    kw = {"arch": ARCH, **kw}
    with pytest.raises(error, match=rf"^{field}\b"):
        jaxmma.GemmOptions(BF16, **kw)


@pytest.mark.parametrize(
    ("text", "kw", "match"),
    [
        ("mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32", dict(split_k=2),
         "^split_k=2: not modelled for sparse"),
        (BF16, dict(grad_instruction=BF16, out_dtype=jnp.bfloat16),
         "^grad_instruction: not combined with kernel options"),
    ],
)  # fmt: skip
def test_a_combination_is_refused_by_one_rule(text, kw, match):
    # the same rule at construction and at the call, before any array is looked at
    with pytest.raises(ValueError, match=match):
        jaxmma.GemmOptions(text, arch=ARCH, **kw)
    with pytest.raises(ValueError, match=match):
        jaxmma.matmul(np.zeros((16, 32), np.int64), None, instruction=text, arch=ARCH, **kw)


def test_an_invalid_instruction_and_an_unhashable_field():
    with pytest.raises(ValueError, match="^instruction"):
        jaxmma.GemmOptions("ldmatrix.sync.aligned.m8n8.x1.shared.b16", arch=ARCH)
    with pytest.raises(TypeError, match="^instruction"):
        jaxmma.GemmOptions(16)
    mx = (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
        ".f32.e4m3.e4m3.f32.ue8m0"
    )

    class Unhashable:
        __hash__ = None

        def __call__(self, x, axis=-1):
            return jaxmma.quant.quantize_mx(x, "e4m3", axis=axis)

    with pytest.raises(TypeError, match="^quantize: expected a hashable value"):
        jaxmma.GemmOptions(mx, arch="sm_120a", quantize=Unhashable())
